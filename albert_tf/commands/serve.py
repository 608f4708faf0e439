"""`albert-tf serve`: answer TF-Serving's REST API locally from an exported SavedModel.

    albert-tf serve saved_models/NAME --port 8501
    albert-tf serve --model runs/sst2 --port 8501
    curl -d '{"signature_name": "serve_text", "instances": ["a fine film"]}' \\
        http://localhost:8501/v1/models/NAME:predict

BASE_PATH is a TF-Serving base path (versions 1/, 2/, ...), or an albert-tf
model or run directory or a HuggingFace directory, which is exported to a temporary SavedModel first
(with its tokenizer's text signatures). For trying request formats without
Docker; production serving is TF-Serving (see docs/deployment.md).
"""

import os
import tempfile

from albert_tf.commands.flags import add_command
from albert_tf.export.serving import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BODY_BYTES, ModelServer, ServingModel
from albert_tf.model_dirs import BEST_DIR, FINAL_DIR, find_tokenizer, holds_model, resolve_model_dir


def add_parser(subparsers):
    parser = add_command(subparsers, "serve", description=__doc__)
    parser.add_argument("model_base_path", metavar="BASE_PATH", nargs="?",
                        help="Directory with versions 1/, 2/, ..., or a model or run directory.")
    parser.add_argument("--model", metavar="DIR", help="Same as BASE_PATH.")
    parser.add_argument("--model-name", help="Name in request paths (default: the directory's name).")
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind.")
    parser.add_argument("--port", type=int, default=8501, help="Port (8501 is TF-Serving's REST port; 0: any free).")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="Largest request body.")
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE, help="Most rows per request.")
    return parser


def run(args):
    if (args.model is None) == (args.model_base_path is None):
        raise ValueError("Give what to serve once: BASE_PATH or --model DIR.")
    path = os.path.normpath(args.model or args.model_base_path)
    name = os.path.basename(os.path.dirname(path) if os.path.basename(path) in (FINAL_DIR, BEST_DIR) else path)
    with tempfile.TemporaryDirectory() as tmp:
        if holds_model(path):
            path = _export(path, os.path.join(tmp, name))
        return _serve(path, args.model_name or name, args)


def _export(path, base_path):
    from albert_tf.export import export_saved_model
    from albert_tf.saving import load_pretrained
    from albert_tf.tasks.finetune import run_max_windows, run_truncate_from

    model_dir = resolve_model_dir(path)
    tokenizer = find_tokenizer(model_dir, required=False)
    export_saved_model(load_pretrained(model_dir), base_path, tokenizer=tokenizer,
                       truncate_from=run_truncate_from(model_dir), max_windows=run_max_windows(model_dir))
    return base_path


def _serve(base_path, name, args):
    model = ServingModel(base_path, name, args.max_batch_size)
    server = ModelServer(model, args.host, args.port, args.max_body_bytes, log_requests=True)
    print(f"Serving {model.name} version {model.version} at {server.url} "
          f"(signatures: {', '.join(sorted(model.signatures))}); Ctrl-C stops.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
