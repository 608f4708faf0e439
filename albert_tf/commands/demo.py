"""`albert-tf demo`: tokenizer, pretraining and held-out evaluation on real text, in one command.

Runs in a few minutes on 2 CPU cores; rerun the same command to resume. The
model, training and data flags are those of `albert-tf pretrain` with the
demo's defaults; --vocab-size is also the tokenizer's size, and --seed also
seeds the tokenizer.
"""

import dataclasses
import shlex

from albert_tf.apps.demo_config import DEMO_DATA, DEMO_MODEL, DEMO_TRAINER, DemoConfig, demo_config
from albert_tf.commands.flags import (
    add_command, add_config_flags, add_jit_compile_aliases, config_flag, config_kwargs,
)
from albert_tf.config import AlbertConfig
from albert_tf.training.config import TrainerConfig
from input_pipeline import PretrainingDataConfig
from albert_tf.utils.errors import RunStopped

# The library configs' fields the demo lets a flag change, each group with the demo's defaults.
_GROUPS = (
    ("model", AlbertConfig, DEMO_MODEL, ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                                         "num_attention_heads", "intermediate_size")),
    ("data", PretrainingDataConfig, DEMO_DATA, ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob")),
    ("trainer", TrainerConfig, DEMO_TRAINER, ("global_batch_size", "num_steps", "learning_rate", "warmup_fraction",
                                              "optimizer", "word_embedding_lr_scale", "mixed_precision", "compile_step",
                                              "steps_per_loop",
                                              "checkpoint_every", "keep_checkpoints", "log_every", "seed")),
)
_DEMO_FIELDS = tuple(DemoConfig().own_fields())
# SIGTERM stops it between stages and pretraining loops, keeping what it finished (`run_demo`).
STOPS_ON_SIGTERM = True


def add_parser(subparsers):
    parser = add_command(subparsers, "demo", description=__doc__)
    parser.add_argument("--out", required=True, metavar="RUN_DIR", help="Run directory; the same command resumes it.")
    for group, config_cls, defaults, names in _GROUPS:
        add_config_flags(parser.add_argument_group(group), config_cls, names=names,
                         defaults={name: getattr(defaults, name) for name in names})
    add_jit_compile_aliases(parser)
    add_config_flags(parser.add_argument_group("demo"), DemoConfig, names=_DEMO_FIELDS)
    return parser


def run(args):
    # Deferred for start-up: the demo imports TensorFlow, and the flags are read (their errors reported) before.
    from albert_tf.apps.demo import run_demo

    try:
        run_demo(args.out, config_from_args(args), stop_requested=args.stop_requested)
    except RunStopped as stop:
        # The same stop, with the command line that resumes it (only this module knows the flags).
        if stop.then is None:
            stop.then = f"Rerun the same command to {'resume' if stop.saved else 'start again'}: {_command_line(args)}"
        raise
    return 0


def config_from_args(args):
    """The `DemoConfig` of parsed `args`: the demo's defaults, changed by the flags given."""
    changes = {group: config_kwargs(config_cls, args, names=names) for group, config_cls, _, names in _GROUPS}
    return demo_config(**changes, **config_kwargs(DemoConfig, args, names=_DEMO_FIELDS))


def _command_line(args):
    """`albert-tf demo --out RUN_DIR` and every flag of `args` that differs from its default."""
    words = ["albert-tf", "demo", "--out", args.out]
    for config_cls, defaults, names in [group[1:] for group in _GROUPS] + [(DemoConfig, DemoConfig(), _DEMO_FIELDS)]:
        flags = {field.name: config_flag(field) for field in dataclasses.fields(config_cls)}
        for name in names:
            value = getattr(args, name)
            if value == getattr(defaults, name):
                continue
            if isinstance(value, bool):
                words.append(f"--{flags[name]}" if value else f"--no-{flags[name]}")
            else:
                words += [f"--{flags[name]}", str(value)]
    return shlex.join(words)
