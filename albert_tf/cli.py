"""The `albert-tf` command line: turns flags into configs and calls the library.

Each subcommand lives in its own module under `albert_tf.commands` with two
functions, `add_parser(subparsers)` and `run(args)`.
"""

import argparse
import importlib
import sys

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


def build_parser():
    parser = argparse.ArgumentParser(
        prog="albert-tf", description="ALBERT in TensorFlow 2 / Keras 3."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args._run(args) or 0
    except ValueError as e:
        # Bad input: say what was wrong, without a traceback.
        print(f"albert-tf {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
