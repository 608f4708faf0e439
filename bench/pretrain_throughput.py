"""Pretraining throughput of ALBERT-base through the real training loop, at seq 128 and 512.

Runs `albert_tf.training.Trainer` (LAMB, clipping, float32, default strategy)
for a few steps on synthetic batches and reports sequences/s and achieved
FLOP/s against this machine's measured float32 matmul rate (a large
`tf.matmul`). The first step (tracing) is excluded.

FLOPs per step are counted analytically, multiply-add = 2 FLOPs, backward =
2 x forward: 6 x [tokens x (E*H + L*(4H^2 + 2H*I) + 2*L*S*H) + predictions x (H*E + E*V)].
ALBERT shares one block over L layers, so compute is that of BERT-base while
the parameters are 12M.

    python bench/pretrain_throughput.py [--steps 4] [--write bench/results/pretrain_throughput.md]
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from benchlib.output import emit_table

# (seq, batch, masked predictions per sequence)
SHAPES = ((128, 16, 20), (512, 4, 76))


def matmul_flops_per_second(n=2048, repeats=5):
    import tensorflow as tf

    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    tf.matmul(a, b).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times)


def step_flops(config, seq, batch, predictions):
    E, H, I, L, V = (config.embedding_size, config.hidden_size, config.intermediate_size,
                     config.num_hidden_layers, config.vocab_size)
    tokens = seq * batch
    forward = 2 * (tokens * (E * H + L * (4 * H * H + 2 * H * I) + 2 * L * seq * H)
                   + batch * predictions * (H * E + E * V))
    return 3 * forward


def synthetic_dataset_fn(config, seq, predictions):
    import tensorflow as tf

    from input_pipeline import features

    def dataset_fn(global_batch_size, input_context, start_step):
        rng = np.random.default_rng(0)
        batch = input_context.get_per_replica_batch_size(global_batch_size)
        inputs = {
            features.TOKEN_IDS: rng.integers(5, config.vocab_size, (batch, seq)).astype("int32"),
            features.SEGMENT_IDS: (np.arange(seq) >= seq // 2).astype("int32")[None].repeat(batch, 0),
            features.PADDING_MASK: np.ones((batch, seq), "int32"),
            features.MASK_POSITIONS: np.sort(rng.choice(seq, (batch, predictions)), -1).astype("int32"),
        }
        labels = {
            features.MASK_IDS: rng.integers(5, config.vocab_size, (batch, predictions)).astype("int32"),
            features.MASK_WEIGHTS: np.ones((batch, predictions), "float32"),
            features.SENTENCE_ORDER_LABEL: rng.integers(0, 2, batch).astype("int32"),
        }
        return tf.data.Dataset.from_tensors((inputs, labels)).repeat()

    return dataset_fn


def measure(seq, batch, predictions, steps):
    from albert_tf import AlbertConfig
    from albert_tf.training import Trainer, TrainerConfig, read_log

    config = AlbertConfig.from_preset("base")
    trainer_config = TrainerConfig(global_batch_size=batch, num_steps=steps + 1, warmup_steps=0,
                                   learning_rate=1e-4, log_every=1, checkpoint_every=10**6)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(config, trainer_config, run_dir, synthetic_dataset_fn(config, seq, predictions),
                          print_fn=lambda *_: None)
        trainer.train()
        records = read_log(run_dir)[1:]  # step 1 includes tracing
    seconds = statistics.median(batch / r["examples_per_second"] for r in records)
    return seconds, step_flops(config, seq, batch, predictions)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="Timed steps per shape (after one warmup step).")
    parser.add_argument("--write", help="Also write the Markdown table to this file.")
    args = parser.parse_args()

    peak = matmul_flops_per_second()
    rows = []
    for seq, batch, predictions in SHAPES:
        seconds, flops = measure(seq, batch, predictions, args.steps)
        rows.append((seq, batch, seconds, batch / seconds, flops / seconds))
    lines = [
        f"ALBERT-base pretraining step (LAMB, float32, default strategy), {os.cpu_count()} CPU cores; "
        f"float32 matmul peak measured: {peak / 1e9:.1f} GFLOP/s",
        "",
        "| seq | batch | s/step | sequences/s | achieved GFLOP/s | % of matmul peak |",
        "|-----|-------|--------|-------------|------------------|------------------|",
    ]
    for seq, batch, seconds, sequences, flops in rows:
        lines.append(f"| {seq} | {batch} | {seconds:.2f} | {sequences:.2f} | {flops / 1e9:.1f} | "
                     f"{100 * flops / peak:.0f}% |")
    table = "\n".join(lines)
    emit_table(table, args.write)


if __name__ == "__main__":
    main()
