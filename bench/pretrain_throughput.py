"""Pretraining throughput by precision, XLA compilation and steps per loop, for the demo's model and ALBERT-base.

Runs `albert_tf.training.Trainer`'s own loop (`run_loop`: up to N steps in one
call into TensorFlow, metrics read once) on synthetic batches, and reports
examples/s for each setting:

  - float32, compile_step none, 1 step per call: the plain step
  - float32, compile_step forward, 1 / 100 steps per loop: XLA on the forward
    and backward pass (the demo's float32 setting)
  - float32, compile_step whole, 1 / 10 / 100 steps per loop: the replica's
    whole step (forward, backward, all-reduce, clipping, LAMB) as one XLA program
  - mixed_bfloat16, compile_step none and whole, 10 steps per loop (the
    default): without XLA, TensorFlow's oneDNN kernels use a CPU's bf16 units
    (avx512_bf16, amx_bf16); XLA's CPU backend does not

ALBERT-base is timed at a small shape with every setting, and at batch 8 x 128
(where bf16 pays) with float32 whole and both bf16 settings, at 1 step per
call and fewer steps. `--models 3 4 5` times 4-layer models of hidden size
256, 512 and 1024 at the demo's shape, float32 whole against bf16 without XLA:
where `auto` starts to pick bf16. The row `pretrain` picks by default on this CPU on one
device is marked: mixed_bfloat16 without XLA where the CPU has bf16 units and
the model's hidden size is at least 512, else float32 with the whole step
compiled, 10 steps per loop.

Each (precision, compile_step) first runs one untimed step (tracing and XLA
compilation); then each round times max(steps per loop, --steps) steps of
every setting in turn, and the best round of each setting is reported (other
processes on a shared machine only ever slow a round down).

    python bench/pretrain_throughput.py [--steps 30] [--large-steps 3] [--rounds 3] \\
        [--write bench/results/pretrain_throughput.md]
    python bench/pretrain_throughput.py --models 3 4 5 --write bench/results/pretrain_widths.md
"""

import argparse
import datetime
import os
import subprocess
import tempfile
import time

import numpy as np

from albert_tf.precision import BF16_CPU_FLAGS, BF16_MIN_HIDDEN_SIZE, resolve_precision
from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table

# (mixed_precision, compile_step, steps per loop).
SETTINGS = (
    ("float32", "none", 1), ("float32", "forward", 1), ("float32", "whole", 1), ("float32", "whole", 10),
    ("float32", "whole", 100), ("float32", "forward", 100),
    ("mixed_bfloat16", "none", 10), ("mixed_bfloat16", "whole", 10),
)
# A batch-8 x 128 step of ALBERT-base takes seconds on 2 cores: the precisions only, one step per call.
LARGE_SETTINGS = (("float32", "whole", 1), ("mixed_bfloat16", "none", 1), ("mixed_bfloat16", "whole", 1))
# The two settings `auto` chooses between on a CPU with bf16 units.
WIDTH_SETTINGS = (("float32", "whole", 10), ("mixed_bfloat16", "none", 10))
# (name, batch, seq, masked predictions per sequence, settings, large). ALBERT-base
# first at a small batch and length so that all settings fit a few minutes on
# 2 cores; large shapes time --large-steps steps instead of --steps.
MODELS = (
    ("demo", 16, 64, 10, SETTINGS, False),
    ("base", 2, 32, 5, SETTINGS, False),
    ("base", 8, 128, 20, LARGE_SETTINGS, True),
    # The width where bfloat16 starts to pay (albert_tf.precision.BF16_MIN_HIDDEN_SIZE):
    # 4-layer models of hidden size H (E 128, H/64 heads, FFN 4H) at the demo's shape.
    # Not timed by default: --models 3 4 5.
    *((f"width-{h}", 16, 64, 10, WIDTH_SETTINGS, False) for h in (256, 512, 1024)),
)
DEFAULT_MODELS = (0, 1, 2)
# What `pretrain` picks by default on one device.
DEFAULT_STEPS_PER_LOOP = 10


def default_setting(hidden_size, flags):
    """(mixed_precision, compile_step) `pretrain` picks on one device of a CPU with these /proc/cpuinfo flags."""
    choice = resolve_precision("auto", "auto", hidden_size, "cpu", flags=frozenset(flags))
    return choice.precision, choice.compile_step


def default_row(settings, hidden_size, flags):
    """The setting of `settings` that `pretrain`'s default is: its steps per loop, else the nearest measured."""
    chosen = [s for s in settings if s[:2] == default_setting(hidden_size, flags)]
    return min(chosen, key=lambda s: abs(s[2] - DEFAULT_STEPS_PER_LOOP)) if chosen else None


def synthetic_dataset_fn(vocab_size, seq, predictions):
    import tensorflow as tf

    from input_pipeline import features

    def dataset_fn(global_batch_size, input_context, start_step):
        rng = np.random.default_rng(0)
        batch = input_context.get_per_replica_batch_size(global_batch_size)
        inputs = {
            features.TOKEN_IDS: rng.integers(5, vocab_size, (batch, seq)).astype("int32"),
            features.SEGMENT_IDS: (np.arange(seq) >= seq // 2).astype("int32")[None].repeat(batch, 0),
            features.PADDING_MASK: np.ones((batch, seq), "int32"),
            features.MASK_POSITIONS: np.sort(rng.choice(seq, (batch, predictions)), -1).astype("int32"),
        }
        labels = {
            features.MASK_IDS: rng.integers(5, vocab_size, (batch, predictions)).astype("int32"),
            features.MASK_WEIGHTS: np.ones((batch, predictions), "float32"),
            features.SENTENCE_ORDER_LABEL: rng.integers(0, 2, batch).astype("int32"),
        }
        return tf.data.Dataset.from_tensors((inputs, labels)).repeat()

    return dataset_fn


def model_and_trainer_config(name, batch, seq):
    from albert_tf import AlbertConfig
    from albert_tf.apps.demo_config import DEMO_MODEL, DEMO_TRAINER
    from albert_tf.training import TrainerConfig

    if name == "demo":
        return DEMO_MODEL, DEMO_TRAINER.replace(global_batch_size=batch, num_steps=10**6)
    if name.startswith("width-"):
        hidden = int(name.removeprefix("width-"))
        config = AlbertConfig(vocab_size=DEMO_MODEL.vocab_size, embedding_size=128, hidden_size=hidden,
                              num_hidden_layers=4, num_attention_heads=hidden // 64, intermediate_size=4 * hidden,
                              max_position_embeddings=max(seq, 512))
        return config, DEMO_TRAINER.replace(global_batch_size=batch, num_steps=10**6)
    config = AlbertConfig.from_preset("base", max_position_embeddings=max(seq, 512))
    return config, TrainerConfig(global_batch_size=batch, num_steps=10**6)


def measure(name, batch, seq, predictions, settings, min_steps, rounds):
    """{(precision, compile_step, steps per loop): best examples/s of `rounds`}, settings interleaved in each round.

    One trainer per (precision, compile_step), warmed up by one untimed step
    (tracing and compilation); a round times every setting once, so load from
    other processes on the machine falls on all settings alike.
    """
    from albert_tf.training import Trainer

    model_config, trainer_config = model_and_trainer_config(name, batch, seq)
    dataset_fn = synthetic_dataset_fn(model_config.vocab_size, seq, predictions)
    best = {}
    with tempfile.TemporaryDirectory() as root:
        loops = {}
        for precision, compile_step in dict.fromkeys(s[:2] for s in settings):
            trainer = Trainer(model_config, trainer_config.replace(mixed_precision=precision, compile_step=compile_step),
                              os.path.join(root, f"{precision}_{compile_step}"), dataset_fn, print_fn=lambda *_: None)
            loops[(precision, compile_step)] = (trainer, trainer.input_iterator(0))
            trainer.runner.run_loop(loops[(precision, compile_step)][1], 1)
        for _ in range(rounds):
            for setting in settings:
                trainer, iterator = loops[setting[:2]]
                steps_per_loop = setting[2]
                calls = -(-max(steps_per_loop, min_steps) // steps_per_loop)
                start = time.perf_counter()
                for _ in range(calls):
                    trainer.runner.run_loop(iterator, steps_per_loop)
                rate = batch * calls * steps_per_loop / (time.perf_counter() - start)
                best[setting] = max(rate, best.get(setting, 0.0))
    return best, model_config.hidden_size


def table(results, flags, args, commit):
    """The Markdown report of `results`: {(model index, setting): examples/s}, with its header."""
    def shape(name, batch, seq, predictions):
        return f"{name}, batch {batch} x seq {seq}, {predictions} masked"

    lines = [
        f"Pretraining examples/s (LAMB, default strategy), {cpu_name()}, {os.cpu_count()} cores; "
        f"flags: {' '.join(flags) or 'none'}.",
        f"Timed: max(steps per loop, {args.steps}) steps ({args.large_steps} for batch 8 x 128) after one untimed "
        f"step; best of {args.rounds} rounds, each over every setting. `default` marks what `pretrain` picks on this "
        f"CPU on one device (mixed_bfloat16 without XLA where the CPU has {' or '.join(BF16_CPU_FLAGS)} and hidden "
        f"size >= {BF16_MIN_HIDDEN_SIZE}, else float32 whole, {DEFAULT_STEPS_PER_LOOP} steps per loop); `vs float32` is "
        "the ratio to the fastest float32 row of the same shape.",
        f"Command: python bench/pretrain_throughput.py --steps {args.steps} --large-steps {args.large_steps} "
        f"--rounds {args.rounds}"
        + ("" if args.models == list(DEFAULT_MODELS) else f" --models {' '.join(map(str, args.models))}")
        + f"; {datetime.date.today().isoformat()}, commit {commit or 'unknown'}.",
        "",
        "| model and shape | precision | compile_step | steps per loop | ex/s | vs float32 | default |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for index in sorted(results):
        name, batch, seq, predictions, settings, _ = MODELS[index]
        rates, hidden_size = results[index]
        float32 = max(rate for setting, rate in rates.items() if setting[0] == "float32")
        chosen = default_row(settings, hidden_size, flags)
        for setting in settings:
            precision, compile_step, steps_per_loop = setting
            lines.append(f"| {shape(name, batch, seq, predictions)} | {precision} | {compile_step} | {steps_per_loop} | "
                         f"{rates[setting]:.1f} | {rates[setting] / float32:.2f} | "
                         f"{'default' if setting == chosen else ''} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="Fewest timed steps per setting.")
    parser.add_argument("--large-steps", type=int, default=3,
                        help="Fewest timed steps per setting of the batch-8 x 128 ALBERT-base shape.")
    parser.add_argument("--rounds", type=int, default=3, help="Timed rounds over all settings; the best is kept.")
    parser.add_argument("--models", type=int, nargs="+", default=list(DEFAULT_MODELS),
                        help="Which shapes to time, by position in: "
                        + "; ".join(f"{i}: {m[0]} batch {m[1]} x {m[2]}" for i, m in enumerate(MODELS)) + ".")
    parser.add_argument("--write", help="Also write the Markdown table to this file.")
    args = parser.parse_args()

    flags = cpu_flags()
    results = {}
    for index in args.models:
        name, batch, seq, predictions, settings, large = MODELS[index]
        steps = args.large_steps if large else args.steps
        results[index] = measure(name, batch, seq, predictions, settings, steps, args.rounds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    emit_table(table(results, flags, args, commit), args.write)


if __name__ == "__main__":
    main()
