"""`albert-tf demo`: tokenizer, pretraining and held-out evaluation on real text, in one command."""

import argparse
import dataclasses

from albert_tf.apps.demo import DemoConfig, run_demo


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "demo",
        help="Train a tokenizer and a small ALBERT on IMDB reviews, evaluate held-out MLM/SOP accuracy.",
        description="Runs in a few minutes on 2 CPU cores; rerun the same command to resume.",
    )
    parser.add_argument("--out", required=True, metavar="RUN_DIR")
    for field in dataclasses.fields(DemoConfig):
        flag, help_text = "--" + field.name.replace("_", "-"), f"(default: {field.default})"
        if isinstance(field.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help=help_text)
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default, help=help_text)
    return parser


def run(args):
    values = {field.name: getattr(args, field.name) for field in dataclasses.fields(DemoConfig)}
    run_demo(args.out, DemoConfig(**values))
