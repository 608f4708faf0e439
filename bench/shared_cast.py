"""What casting ALBERT's shared weights at every use costs under mixed_bfloat16 (TensorFlow, no XLA).

Keras keeps a mixed policy's variables in float32 and casts one to bfloat16
at each read, so the one shared block of ALBERT-base, applied 12 times, has
its ~7M weights cast 12 times per forward pass (and 12 casts of their
gradients backward). "cast once" wraps every call of the backbone in
`albert_tf.layers.cast_once.cast_weights_once`; "per use" is the backbone
with Keras' own call. `AlbertBackbone` itself casts once in inference calls
and per use in training (where one cast would sum the L gradients of a
shared weight in bfloat16), the choice this table informs. Two figures, each implementation in its own process, timed in
turns (benchlib.timing.alternate):
  * one pretraining step of ALBERT-base (forward, MLM + SOP loss, backward,
    Adam), batch 8, seq 128, 20 masked positions;
  * batch-1 inference of the backbone at seq 128.
The table also counts the Cast ops that read a variable in the traced
inference graph: what each path casts per forward pass.

`--clock cpu` times CPU time (all threads of the process) instead of wall
time: on a machine shared with other work it swings far less.

    python bench/shared_cast.py [--steps 4] [--rounds 3] [--clock cpu] [--write bench/results/shared_cast.md]
"""

import argparse
import datetime
import os
import statistics
import subprocess
import sys

from benchlib.machine import machine_line, measure_ceilings
from benchlib.output import emit_table
from benchlib.synthetic import pretraining_arrays
from benchlib.timing import CLOCKS, alternate, ratio_stats, serve, timed

BATCH, SEQ, PREDICTIONS, VOCAB = 8, 128, 20, 30000
PATHS = {"per-use": "cast at every use (Keras' own call; albert-tf in training)",
         "cast-once": "cast once per call (albert-tf in inference)"}


def variable_casts(concrete_function):
    """Cast ops in a traced graph whose input is a variable read (ReadVariableOp)."""
    return sum(
        1 for op in concrete_function.graph.get_operations()
        if op.type == "Cast" and op.inputs[0].op.type == "ReadVariableOp"
    )


def bench_path(key, warmup, steps, clock):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig, AlbertPretrainer
    from input_pipeline import features

    from albert_tf.layers.cast_once import cast_weights_once

    class PerUseBackbone(AlbertBackbone):
        """The backbone with Keras' own functional call: each read of a weight casts it."""

        def call(self, inputs, training=None, mask=None, **kwargs):
            return super(AlbertBackbone, self).call(inputs, training=training, mask=mask, **kwargs)

    class CastOnceBackbone(AlbertBackbone):
        """The backbone with every call, training too, reading each weight's one cast."""

        def call(self, inputs, training=None, mask=None, **kwargs):
            with cast_weights_once(self.compute_dtype):
                return super(AlbertBackbone, self).call(inputs, training=training, mask=mask, **kwargs)

    backbone_class = PerUseBackbone if key == "per-use" else CastOnceBackbone
    model = AlbertPretrainer(backbone_class(AlbertConfig.from_preset("base"), dtype="mixed_bfloat16"))
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=False)
    arrays = pretraining_arrays(BATCH, SEQ, PREDICTIONS, VOCAB)
    x, y = features.split_pretraining_example(arrays)
    backbone = model.backbone
    infer_fn = tf.function(lambda inputs: backbone(inputs, training=False))
    one = {k: tf.constant(arrays[k][:1]) for k in features.BACKBONE_INPUTS}
    casts = variable_casts(infer_fn.get_concrete_function(one))

    def train_step():
        model.train_on_batch(x, y)

    def infer_step():
        infer_fn(one)["sequence_output"].numpy()

    for _ in range(warmup):
        train_step()
        infer_step()
    return {
        "train": lambda: timed(train_step, 0, steps, clock),
        "infer": lambda: timed(infer_step, 0, steps * 3, clock),
        "casts": lambda: casts,
    }




def run_worker(key, warmup, steps, clock):
    """The child process of one path (see `benchlib.timing.Worker`)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(os.cpu_count())
    serve(bench_path(key, warmup, steps, CLOCKS[clock]))


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed training steps per round (inference: 3x)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of timing both paths")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or CPU time of the timed process (steadier on a shared machine)")
    parser.add_argument("--worker", choices=sorted(PATHS), help=argparse.SUPPRESS)
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    if args.worker:
        return run_worker(args.worker, args.warmup, args.steps, args.clock)

    ceilings = measure_ceilings()
    keys = list(PATHS)
    results = alternate(__file__, keys, args.rounds,
                        ["--steps", str(args.steps), "--warmup", str(args.warmup), "--clock", args.clock])

    import tensorflow as tf
    import keras

    command = "python bench/shared_cast.py " + " ".join(sys.argv[1:])
    table = [
        f"ALBERT-base, mixed_bfloat16, TensorFlow without XLA; {machine_line(ceilings)}",
        f"Command: `{command.strip()}`; {datetime.date.today().isoformat()}, commit {commit()}. "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}. Median of {args.steps} steps (inference "
        f"{3 * args.steps}) per round, {args.rounds} rounds in turns, {args.clock} time; ratio: time / the "
        "cast-once time (median over rounds, [min, max]). Weight casts: Cast ops reading a variable in the traced "
        "inference graph.",
        "",
        f"| weights | weight casts per forward | train step b{BATCH} x s{SEQ} ({args.clock}, ms) | vs cast once | "
        f"inference b1 x s{SEQ} ({args.clock}, ms) | vs cast once |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        cells = [PATHS[key], str(results[key][0]["casts"])]
        for measurement in ("train", "infer"):
            ms = statistics.median(r[measurement] for r in results[key])
            _, ratio, (low, high) = ratio_stats(results, key, ["cast-once"], measurement)
            cells += [f"{ms:.1f}", f"{ratio:.3f} [{low:.3f}, {high:.3f}]"]
        table.append("| " + " | ".join(cells) + " |")
    print()
    emit_table("\n".join(table), args.write)


if __name__ == "__main__":
    main()
