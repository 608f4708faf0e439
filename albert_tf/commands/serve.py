"""`albert-tf serve`: answer TF-Serving's REST API locally from an exported SavedModel.

    albert-tf serve saved_models/NAME --port 8501
    albert-tf serve --model runs/sst2 --port 8501
    curl -d '{"signature_name": "serve_text", "instances": ["a fine film"]}' \\
        http://localhost:8501/v1/models/NAME:predict

BASE_PATH is a TF-Serving base path (versions 1/, 2/, ...), or an albert-tf
model or run directory or a HuggingFace directory, which is exported to a temporary SavedModel first
(with its tokenizer's text signatures, and the fine-tuning run's --max-seq-length as
the longest text; 128 or the model's max_position_embeddings for other models). For trying request formats without
Docker; production serving is TF-Serving (see docs/deployment.md).
"""

import argparse
import contextlib
import errno
import os
import socket
import tempfile
import threading

from albert_tf.commands.export_loading import load_model_to_export
from albert_tf.commands.flags import add_command
from albert_tf.export.options import default_max_length
from albert_tf.export.batching_parameters import DEFAULT_MAX_BATCH_SIZE, BatchingParameters, parse_batching_parameters
from albert_tf.export.serving.server import DEFAULT_MAX_BODY_BYTES
from albert_tf.hub import resolve
from albert_tf.model_dirs import find_model_dir, find_tokenizer
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import BATCHING_PARAMETERS_FILE, WARMUP_FILE, run_dir_of
from albert_tf.utils.preemption import sigterm_requests_stop


def add_parser(subparsers):
    parser = add_command(subparsers, "serve", description=__doc__)
    parser.add_argument("model_base_path", metavar="BASE_PATH", nargs="?",
                        help="Directory with versions 1/, 2/, ..., or a model or run directory.")
    parser.add_argument("--model", metavar="DIR", help="Same as BASE_PATH.")
    parser.add_argument("--model-name", help="Name in request paths (default: the directory's name).")
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind.")
    parser.add_argument("--port", type=int, default=8501, help="Port (8501 is TF-Serving's REST port; 0: any free).")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="Largest request body.")
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE, help="Most rows per request (with --enable-batching, at most the batching "
                        "parameters' max_batch_size, as TF-Serving allows).")
    parser.add_argument("--enable-model-warmup", action=argparse.BooleanOptionalAction, default=True,
                        help=f"Replay the version's {WARMUP_FILE} before serving, "
                             "as TF-Serving's --enable_model_warmup does.")
    parser.add_argument("--enable-batching", action="store_true",
                        help="Run concurrent requests batched, as TF-Serving's --enable_batching does.")
    parser.add_argument("--batching-parameters-file", metavar="FILE",
                        help=f"TF-Serving's batching parameters (text proto), e.g. the {BATCHING_PARAMETERS_FILE} "
                             "`export` writes beside the versions; default: TF-Serving's defaults.")
    return parser


def run(args):
    if (args.model is None) == (args.model_base_path is None):
        raise UserError("Give what to serve once: BASE_PATH or --model DIR.")
    batching = _batching_parameters(args)
    # Before loading or exporting the model (seconds): a taken port is known at once.
    _check_address(args.host, args.port)
    source = resolve(args.model or args.model_base_path)
    path = files.normpath(source.path)
    if files.isfile(path):
        raise UserError(f"{path}: is a file, expected a directory of SavedModel versions (1/, 2/, ...) or a model "
                        "or run directory.")
    name = os.path.basename(run_dir_of(path) or path)
    if source.repo is not None:
        # The repository's name (hf: ORG/NAME) or the variation (kaggle), not the download's directory name.
        name = source.repo.split("/")[1 if source.hub == "hf" else 3]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = find_model_dir(path)
        if model_dir is not None:
            path = _export(model_dir, os.path.join(tmp, name))
        return _serve(path, args.model_name or name, args, batching)


def _export(model_dir, base_path):
    """`model_dir` exported as `export` writes it (LoRA merged), with the fine-tuning run's text settings."""
    from albert_tf.export import export_saved_model

    tokenizer = find_tokenizer(model_dir, required=False)
    model, run = load_model_to_export(model_dir)
    export_saved_model(model, base_path, tokenizer=tokenizer, max_length=default_max_length(run, model),
                       truncate_from=run.truncate_from, max_windows=run.max_windows)
    return base_path


def _batching_parameters(args):
    """The `BatchingParameters` the flags ask for, or None without --enable-batching."""
    if args.batching_parameters_file and not args.enable_batching:
        raise UserError("--batching-parameters-file applies with --enable-batching; add it.")
    if not args.enable_batching:
        return None
    if not args.batching_parameters_file:
        return BatchingParameters()
    path = args.batching_parameters_file
    if not files.isfile(path):
        raise UserError(f"--batching-parameters-file {path}: no such file.")
    return parse_batching_parameters(files.read_text(path), f"--batching-parameters-file {path}")


def _serve(base_path, name, args, batching=None):
    # Deferred for start-up: the model imports TensorFlow, and the flags are read (their errors reported) before.
    from albert_tf.export.serving import ModelServer, ServingModel

    model = ServingModel(base_path, name, args.max_batch_size, warmup=args.enable_model_warmup, batching=batching)
    with _address_errors(args.host, args.port):
        server = ModelServer(model, args.host, args.port, args.max_body_bytes, log_requests=True)
    print(f"Serving {model.name} version {model.version} at {server.url} "
          f"(signatures: {', '.join(sorted(model.signatures))}; {model.warmup_requests} warmup requests replayed"
          f"{', through the batcher' if model.batching is not None and model.warmup_requests else ''}); Ctrl-C stops.",
          flush=True)
    # SIGTERM (what Docker, Kubernetes and systemd send) stops it as Ctrl-C does: the caller's temporary export
    # is removed on the way out either way.
    with sigterm_requests_stop() as stop:
        finished = threading.Event()

        def shut_down_on_sigterm():
            stop.wait()
            if not finished.is_set():
                server.shutdown()  # serve_forever returns within its poll interval

        threading.Thread(target=shut_down_on_sigterm, name="albert-tf-sigterm", daemon=True).start()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            finished.set()
            stop.set()
            server.server_close()
            model.close()
    return 0



@contextlib.contextmanager
def _address_errors(host, port):
    """Turns a failed bind of HOST:PORT into a ValueError naming --port or --host."""
    try:
        yield
    except OSError as error:
        address = f"{host}:{port}"
        if error.errno == errno.EADDRINUSE:
            raise UserError(f"--port {port}: {address} is already in use; pick another port "
                             f"(e.g. --port {port + 1}), or --port 0 for any free one.") from None
        if error.errno == errno.EACCES:
            raise UserError(f"--port {port}: binding {address} needs privileges (ports below 1024); "
                             "pick a port of 1024 or above.") from None
        if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:
            raise UserError(f"--host {host}: not an address of this machine ({error.strerror}).") from None
        raise


def _check_address(host, port):
    """Binds HOST:PORT as the server will (address reuse on, as http.server sets it), then lets it go."""
    with _address_errors(host, port):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
