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

Each setting first runs one untimed step (tracing and XLA compilation), then
max(steps per loop, --steps) timed steps in loops of that length.

    python bench/pretrain_throughput.py [--steps 30] [--write bench/results/pretrain_throughput.md]
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


def measure(name, batch, seq, predictions, compile_step, steps_per_loop, min_steps):
    """Examples/s of `steps_per_loop`-step loops after one untimed step."""
    from albert_tf.training import Trainer

    model_config, trainer_config = model_and_trainer_config(name, batch, seq)
    trainer_config = trainer_config.replace(compile_step=compile_step, steps_per_loop=steps_per_loop)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(model_config, trainer_config, run_dir,
                          synthetic_dataset_fn(model_config.vocab_size, seq, predictions), print_fn=lambda *_: None)
        iterator = trainer.input_iterator(0)
        trainer.run_loop(iterator, 1)
        loops = -(-max(steps_per_loop, min_steps) // steps_per_loop)
        start = time.perf_counter()
        for _ in range(loops):
            trainer.run_loop(iterator, steps_per_loop)
        seconds = time.perf_counter() - start
    return batch * loops * steps_per_loop / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="Fewest timed steps per setting.")
    parser.add_argument("--write", help="Also write the Markdown table to this file.")
    args = parser.parse_args()

    results = {(name, setting): measure(name, batch, seq, predictions, *setting, args.steps)
               for name, batch, seq, predictions in MODELS for setting in SETTINGS}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    shapes = "; ".join(f"{name}: batch {batch}, seq {seq}, {predictions} masked" for name, batch, seq, predictions in MODELS)
    lines = [
        f"Pretraining examples/s (LAMB, float32, default strategy), {cpu_name()}, {os.cpu_count()} cores; "
        f"flags: {' '.join(cpu_flags()) or 'none'}.",
        f"Shapes: {shapes}. Timed: max(steps per loop, {args.steps}) steps after one untimed step.",
        f"Command: python bench/pretrain_throughput.py --steps {args.steps}; "
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
