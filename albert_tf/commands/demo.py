"""`albert-tf demo`: tokenizer, pretraining and held-out evaluation on real text, in one command.

Runs in a few minutes on 2 CPU cores; rerun the same command to resume.
"""

from albert_tf.apps.demo import DemoConfig, run_demo
from albert_tf.commands.flags import add_command, add_config_flags, config_kwargs


def add_parser(subparsers):
    parser = add_command(subparsers, "demo", description=__doc__)
    parser.add_argument("--out", required=True, metavar="RUN_DIR", help="Run directory; the same command resumes it.")
    add_config_flags(parser, DemoConfig)
    return parser


def run(args):
    run_demo(args.out, DemoConfig(**config_kwargs(DemoConfig, args)))
