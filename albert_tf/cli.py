"""The `albert-tf` command line: turns flags into configs and calls the library.

Each subcommand lives in its own module under `albert_tf.commands` with two
functions, `add_parser(subparsers)` and `run(args)`.

Expected user errors (a missing or unreadable file, a wrong format, a bad
flag value) print one line naming the problem and exit 2; Ctrl-C exits 130.
TensorFlow's C++ and CUDA start-up messages are off unless `--verbose`.
"""

import argparse
import importlib
import json
import os
import sys

from albert_tf import __version__

COMMAND_MODULES = (
    "albert_tf.commands.convert",
    "albert_tf.commands.train_tokenizer",
    "albert_tf.commands.create_data",
    "albert_tf.commands.pretrain",
    "albert_tf.commands.demo",
    "albert_tf.commands.export",
    "albert_tf.commands.serve",
    "albert_tf.commands.finetune",
    "albert_tf.commands.predict",
)
EXIT_USER_ERROR = 2
# The shell's code for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def build_parser():
    from albert_tf.commands.flags import HelpFormatter

    parser = argparse.ArgumentParser(
        prog="albert-tf", description="ALBERT in TensorFlow 2 / Keras 3.", formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"albert-tf {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="Show TensorFlow's C++ and CUDA start-up messages.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    return parser


def quiet_tensorflow():
    """Imports TensorFlow with its C++ logging off and its start-up lines dropped.

    TF_CPP_MIN_LOG_LEVEL silences TensorFlow's own C++ log; the CUDA stub's
    "Could not find cuda drivers" and absl's pre-init banner go straight to
    file descriptor 2 while the shared libraries load, so stderr is pointed at
    /dev/null for the import only. An import error is re-raised afterwards,
    with stderr back.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (its libraries log on load too)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    tf.get_logger().setLevel("ERROR")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # Only the flags before the command are albert-tf's own (finetune has a --verbose too).
    own_flags = argv[: next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))]
    if "--verbose" not in own_flags:
        quiet_tensorflow()
    args = build_parser().parse_args(argv)
    prefix = f"albert-tf {args.command}: error:"
    try:
        return args._run(args) or 0
    except KeyboardInterrupt:
        print(f"\nalbert-tf {args.command}: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except FileNotFoundError as e:
        print(f"{prefix} {e.filename}: no such file or directory", file=sys.stderr)
        return EXIT_USER_ERROR
    except IsADirectoryError as e:
        print(f"{prefix} {e.filename}: is a directory, expected a file", file=sys.stderr)
        return EXIT_USER_ERROR
    except PermissionError as e:
        print(f"{prefix} {e.filename}: permission denied", file=sys.stderr)
        return EXIT_USER_ERROR
    except UnicodeDecodeError as e:
        print(f"{prefix} a file is not UTF-8 text ({e.reason} at byte {e.start})", file=sys.stderr)
        return EXIT_USER_ERROR
    except json.JSONDecodeError as e:
        print(f"{prefix} invalid JSON: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except ValueError as e:
        # Bad input: say what was wrong, on one line, without a traceback.
        print(f"{prefix} {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
