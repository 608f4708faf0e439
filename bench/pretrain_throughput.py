"""Pretraining throughput by XLA compilation and steps per loop, for the demo's model and ALBERT-base.

Runs `albert_tf.training.Trainer`'s own loop (`run_loop`: up to N steps in one
call into TensorFlow, metrics read once) on synthetic batches, and reports
examples/s for each setting:

  - compile_step none, 1 step per call: the plain step (the former `pretrain` default)
  - compile_step forward, 1 step per call: XLA on the forward and backward pass
    (the former demo default)
  - compile_step whole, 1 / 10 / 100 steps per loop: the replica's whole step
    (forward, backward, all-reduce, clipping, LAMB) as one XLA program
  - compile_step forward, 100 steps per loop

Each compile_step first runs one untimed step (tracing and XLA compilation);
then each round times max(steps per loop, --steps) steps of every setting in
turn, and the best round of each setting is reported (other processes on a
shared machine only ever slow a round down).

    python bench/pretrain_throughput.py [--steps 30] [--rounds 3] [--write bench/results/pretrain_throughput.md]
"""

import argparse
import datetime
import os
import subprocess
import tempfile
import time

import numpy as np

from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table

SETTINGS = (("none", 1), ("forward", 1), ("whole", 1), ("whole", 10), ("whole", 100), ("forward", 100))
# (name, batch, seq, masked predictions per sequence). ALBERT-base at a small
# batch and length so that all settings fit a few minutes on 2 cores.
MODELS = (("demo", 16, 64, 10), ("base", 2, 32, 5))


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
    from albert_tf.apps.demo import DEMO_MODEL, DEMO_TRAINER
    from albert_tf.training import TrainerConfig

    if name == "demo":
        return DEMO_MODEL, DEMO_TRAINER.replace(global_batch_size=batch, num_steps=10**6)
    config = AlbertConfig.from_preset("base", max_position_embeddings=max(seq, 512))
    return config, TrainerConfig(global_batch_size=batch, num_steps=10**6)


def measure(name, batch, seq, predictions, min_steps, rounds):
    """{(compile_step, steps per loop): best examples/s of `rounds`}, settings interleaved in each round.

    One trainer per compile_step, warmed up by one untimed step (tracing and
    compilation); a round times every setting once, so load from other
    processes on the machine falls on all settings alike.
    """
    from albert_tf.training import Trainer

    model_config, trainer_config = model_and_trainer_config(name, batch, seq)
    dataset_fn = synthetic_dataset_fn(model_config.vocab_size, seq, predictions)
    best = {}
    with tempfile.TemporaryDirectory() as root:
        loops = {}
        for compile_step in dict.fromkeys(step for step, _ in SETTINGS):
            trainer = Trainer(model_config, trainer_config.replace(compile_step=compile_step),
                              os.path.join(root, compile_step), dataset_fn, print_fn=lambda *_: None)
            loops[compile_step] = (trainer, trainer.input_iterator(0))
            trainer.run_loop(loops[compile_step][1], 1)
        for _ in range(rounds):
            for compile_step, steps_per_loop in SETTINGS:
                trainer, iterator = loops[compile_step]
                calls = -(-max(steps_per_loop, min_steps) // steps_per_loop)
                start = time.perf_counter()
                for _ in range(calls):
                    trainer.run_loop(iterator, steps_per_loop)
                rate = batch * calls * steps_per_loop / (time.perf_counter() - start)
                best[(compile_step, steps_per_loop)] = max(rate, best.get((compile_step, steps_per_loop), 0.0))
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="Fewest timed steps per setting.")
    parser.add_argument("--rounds", type=int, default=3, help="Timed rounds over all settings; the best is kept.")
    parser.add_argument("--write", help="Also write the Markdown table to this file.")
    args = parser.parse_args()

    results = {}
    for name, batch, seq, predictions in MODELS:
        for setting, rate in measure(name, batch, seq, predictions, args.steps, args.rounds).items():
            results[(name, setting)] = rate
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    shapes = "; ".join(f"{name}: batch {batch}, seq {seq}, {predictions} masked" for name, batch, seq, predictions in MODELS)
    lines = [
        f"Pretraining examples/s (LAMB, float32, default strategy), {cpu_name()}, {os.cpu_count()} cores; "
        f"flags: {' '.join(cpu_flags()) or 'none'}.",
        f"Shapes: {shapes}. Timed: max(steps per loop, {args.steps}) steps after one untimed step; best of "
        f"{args.rounds} rounds, each over every setting.",
        f"Command: python bench/pretrain_throughput.py --steps {args.steps} --rounds {args.rounds}; "
        f"{datetime.date.today().isoformat()}, commit {commit or 'unknown'}.",
        "",
        "| compile_step | steps per loop | " + " | ".join(f"{name} ex/s" for name, *_ in MODELS) + " |",
        "|---|---|" + "---|" * len(MODELS),
    ]
    for setting in SETTINGS:
        cells = " | ".join(f"{results[(name, setting)]:.1f}" for name, *_ in MODELS)
        lines.append(f"| {setting[0]} | {setting[1]} | {cells} |")
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
