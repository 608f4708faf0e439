"""Keras 3 `Model.quantize("int8")` on ALBERT-base, TensorFlow backend: speed and error vs float32.

Why `AlbertBackbone.quantize` (and every task model's) raises and points to
the TFLite export: this script applies Keras' own int8 quantization anyway
(`keras.Model.quantize(backbone, "int8")`, which bypasses our refusal: int8
kernels with per-channel scales, inputs quantized per token on each call) and
times the backbone's forward pass at seq 128, batch 1 and batch 8, through
`tf.function` with and without XLA, against float32. Random weights (seeded,
the same in every row): speed does not depend on them. Every row runs in its
own process and the rows are timed in turns (benchlib.timing.alternate). The
error column is the int8 model's largest |sequence_output - float32's|,
relative to float32's largest |sequence_output|.

    python bench/keras_quantize.py [--steps 5] [--rounds 2] [--write bench/results/keras_quantize.md]
"""

import argparse
import os
import statistics

import numpy as np

from benchlib.flops import albert_flops
from benchlib.machine import ceiling_share, machine_line, measure_ceilings
from benchlib.output import emit_table
from benchlib.timing import alternate, serve, timed

SEQ = 128
BATCHES = (1, 8)
ROWS = {
    "float": "float32 (tf.function)",
    "float-xla": "float32 (tf.function, XLA)",
    "int8": "Keras int8 (tf.function)",
    "int8-xla": "Keras int8 (tf.function, XLA)",
}


def inputs(batch):
    rng = np.random.default_rng(batch)
    return {
        "token_ids": rng.integers(5, 30000, (batch, SEQ)).astype("int32"),
        "segment_ids": (np.arange(SEQ) >= SEQ // 2).astype("int32")[None].repeat(batch, 0),
        "padding_mask": np.ones((batch, SEQ), "int32"),
    }


def worker(key, threads, warmup, steps):
    """{measurement: zero-argument function} for row `key` (see the module docstring)."""
    import keras
    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(0)
    model = AlbertBackbone(AlbertConfig.from_preset("base"))
    batches = {b: {k: tf.constant(v) for k, v in inputs(b).items()} for b in BATCHES}
    float_outputs = {b: model(x, training=False)["sequence_output"].numpy() for b, x in batches.items()}
    error = 0.0
    if key.startswith("int8"):
        keras.Model.quantize(model, "int8")
        error = max(
            float(np.abs(model(x, training=False)["sequence_output"].numpy() - float_outputs[b]).max()
                  / np.abs(float_outputs[b]).max())
            for b, x in batches.items()
        )
    fn = tf.function(lambda x: model(x, training=False)["sequence_output"], jit_compile=key.endswith("xla"))
    measurements = {"error": lambda: error}
    for b, x in batches.items():
        # Fewer timed calls at batch 8: the slowest row takes seconds per call.
        n = steps if b == 1 else max(1, steps // 4)
        measurements[f"b{b}"] = (lambda x=x, n=n: timed(lambda: fn(x).numpy(), 0, n))
        for _ in range(warmup):
            fn(x).numpy()
    return measurements


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="timed calls per round at batch 1 (batch 8: a quarter)")
    parser.add_argument("--rounds", type=int, default=2, help="turns of timing every row")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve(worker(args.worker, args.threads, args.warmup, args.steps))
        return

    ceilings = measure_ceilings()
    keys = list(ROWS)
    results = alternate(__file__, keys, args.rounds, [
        "--threads", str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
    ])
    ms = {(k, b): statistics.median(r[f"b{b}"] for r in results[k]) for k in keys for b in BATCHES}
    fastest_float = {b: min(ms[("float", b)], ms[("float-xla", b)]) for b in BATCHES}
    lines = [
        f"ALBERT-base backbone forward, seq {SEQ}, {args.threads} threads, TensorFlow backend; median over "
        f"{args.rounds} rounds in turns. {machine_line(ceilings)}",
        "",
        "| model | b1 (ms) | b1 vs fastest float | b8 (ms) | b8 vs fastest float | b8 ceiling share | "
        "max rel. error vs float32 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        precision = "int8" if key.startswith("int8") else "fp32"
        share = ceiling_share(albert_flops(768, 12, 3072, 128, 30000, 8, SEQ) / (ms[(key, 8)] / 1000), precision,
                              ceilings)
        error = results[key][0]["error"]
        lines.append(
            f"| {ROWS[key]} | {ms[(key, 1)]:.1f} | {ms[(key, 1)] / fastest_float[1]:.2f}x | {ms[(key, 8)]:.0f} | "
            f"{ms[(key, 8)] / fastest_float[8]:.2f}x | {share} ({precision}) | "
            f"{'' if precision == 'fp32' else f'{error:.2%}'} |"
        )
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
