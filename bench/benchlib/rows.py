"""What a script that times rows of one model in their own processes shares: its flags, the
worker's side, the parent's turns, and a row's thread and TFLite interpreter set-up.

The script's `main` builds its parser with `row_parser` (adding its own flags), and then:

    args = parser.parse_args()
    if args.worker:
        return serve_row(runner, args)
    ... prepare the models in a temporary `workdir` ...
    results = time_rows(__file__, keys, args, workdir)

`runner(key, workdir, threads, batch)` returns the zero-argument function that runs row `key` once.
"""

import argparse
import os

from benchlib.timing import alternate, serve_calls


def row_parser(description, rows, *, rounds, warmup, steps_help):
    """The flags every such script takes: --steps, --rounds, --warmup, --batch, --threads, --only (of
    `rows`), and the hidden --worker and --workdir its worker processes are started with."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help=steps_help)
    parser.add_argument("--rounds", type=int, default=rounds, help="turns of timing every row")
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--batch", type=int, default=1, help="rows per call (seq 128)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--only", nargs="+", choices=sorted(rows), help="rows to time (default: all)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    return parser


def serve_row(runner, args):
    """The worker's side: builds row `args.worker` and answers the parent's requests (`serve_calls`)."""
    serve_calls(runner(args.worker, args.workdir, args.threads, args.batch), args.warmup, args.steps)


def time_rows(script, keys, args, workdir):
    """The parent's side: `keys` timed in turns, each in a worker of `script` (`alternate`)."""
    return alternate(script, keys, args.rounds, [
        "--workdir", workdir, "--threads", str(args.threads), "--warmup", str(args.warmup),
        "--steps", str(args.steps), "--batch", str(args.batch),
    ])


def tensorflow_threads(threads):
    """Sets `threads` per op for a TensorFlow row and returns `tf`.

    TensorFlow keeps its own default pool for running ops side by side (one
    thread per core), as TF-Serving's default flags and `predict` leave it.
    One thread there ran the SavedModel about 15% slower in most processes on
    a 2-core machine.
    """
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    return tf


def tflite_signature(path, threads):
    """The `serving_default` signature runner of the TFLite model at `path`, on `threads` threads."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path, num_threads=threads).get_signature_runner("serving_default")
