"""`albert-tf serve`: answer TF-Serving's REST API locally from an exported SavedModel.

    albert-tf serve saved_models/NAME --port 8501
    curl -d '{"signature_name": "serve_text", "instances": ["a fine film"]}' \\
        http://localhost:8501/v1/models/NAME:predict

For trying request formats without Docker; production serving is TF-Serving
(see docs/deployment.md).
"""

import argparse

from albert_tf.export.serving import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BODY_BYTES, ModelServer, ServingModel


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "serve",
        help="Serve a SavedModel over TF-Serving's REST API (local testing).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model_base_path", metavar="BASE_PATH", help="Directory with versions 1/, 2/, ...")
    parser.add_argument("--model-name", help="Name in request paths (default: the directory's name).")
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind (default 127.0.0.1).")
    parser.add_argument("--port", type=int, default=8501, help="Port (default 8501, TF-Serving's REST port; 0: any free).")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE)
    return parser


def run(args):
    model = ServingModel(args.model_base_path, args.model_name, args.max_batch_size)
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
