"""Where the float32 frozen forward pass loses time to TFLite's: its matmuls, and each other kind of op left out.

The graph `export` writes in float32 (ALBERT-base, weights frozen to
constants, `albert_tf.FrozenForward`) against the TFLite float32 model of
the same weights, at batch B x seq 128 with 2 threads, and beside them:

- the matmuls alone, in each runtime: the model's 49 matmuls of one call
  (the embedding projection, then per layer query-key-value (H, 3H), the
  attention output (H, H), the FFN's (H, 4H) with its GELU and (4H, H)),
  each with its bias and the two residual adds, nothing else;
- the frozen forward pass with one kind of op taken out of the graph:
  LayerNorm (the identity), the two attention transposes per layer (a
  reshape to the same shape) or softmax (the identity). Their outputs are
  wrong; they only time what that kind of op costs inside the whole pass,
  where its neighbours and the thread pool are as they are when it runs.

Every row runs in its own process, timed in turns (benchlib.timing.alternate).
bench/serving_ops.py profiles the SavedModel op by op instead; tracing adds
its own cost to every op, which this bench avoids.

    python bench/serving_gaps.py [--batch 1] [--steps 30] [--rounds 5] [--warmup 3]
"""

import contextlib
import os
import statistics
import tempfile

from benchlib.machine import machine_line, measure_ceilings
from benchlib.synthetic import backbone_arrays, move_off_initial_values
from benchlib.rows import row_parser, serve_row, tensorflow_threads, tflite_signature, time_rows
from benchlib.timing import ratio_stats

SEQ = 128
HIDDEN, INTERMEDIATE, EMBEDDING, LAYERS = 768, 3072, 128, 12
ROWS = {
    "frozen": "frozen forward pass (what `export` writes in float32)",
    "tflite": "TFLite float32 (XNNPACK)",
    "matmuls-tf": "its matmuls alone, TensorFlow (oneDNN)",
    "matmuls-tflite": "its matmuls alone, TFLite (XNNPACK)",
    "frozen-no-layernorm": "frozen forward pass, LayerNorm left out",
    "frozen-no-transpose": "frozen forward pass, attention transposes left out",
    "frozen-no-softmax": "frozen forward pass, softmax left out",
}
LEFT_OUT = {"frozen-no-layernorm": "layernorm", "frozen-no-transpose": "transpose", "frozen-no-softmax": "softmax"}


@contextlib.contextmanager
def left_out(kind):
    """While tracing: the graph without `kind` of op (None: the graph as it is). Timing only; outputs are wrong."""
    import keras

    import albert_tf.inference as inference
    import albert_tf.layers.attention as attention

    class Ops:
        """keras.ops, but for the one kind of op taken out."""

        def __getattr__(self, name):
            return getattr(keras.ops, name)

        def transpose(self, x, axes):
            if kind != "transpose":
                return keras.ops.transpose(x, axes)
            shape = keras.ops.shape(x)
            return keras.ops.reshape(x, [shape[a] for a in axes])

        def softmax(self, x, axis=-1):
            return x if kind == "softmax" else keras.ops.softmax(x, axis=axis)

    saved = attention.ops, inference.layer_norm_as_fused_batch_norm
    attention.ops = Ops()
    if kind == "layernorm":
        inference.layer_norm_as_fused_batch_norm = lambda layer, x: x
    try:
        yield
    finally:
        attention.ops, inference.layer_norm_as_fused_batch_norm = saved


def matmul_chain(batch):
    """A function of (batch * SEQ, EMBEDDING) rows running the forward pass's matmuls, biases and residual adds.

    Built from Keras Dense layers and frozen to constants as the model's are, so
    TensorFlow's graph optimizer fuses each matmul with its bias (and GELU) as in
    the model's graph.
    """
    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    gelu = lambda x: keras.ops.gelu(x, approximate=True)  # noqa: E731 (ALBERT's gelu_new)
    projection, qkv, output, ffn_in, ffn_out = (
        keras.layers.Dense(HIDDEN), keras.layers.Dense(3 * HIDDEN), keras.layers.Dense(HIDDEN),
        keras.layers.Dense(INTERMEDIATE, activation=gelu), keras.layers.Dense(HIDDEN))
    rng = np.random.default_rng(0)
    for layer, n_in in ((projection, EMBEDDING), (qkv, HIDDEN), (output, HIDDEN), (ffn_in, HIDDEN),
                        (ffn_out, INTERMEDIATE)):
        layer.build((None, n_in))
        # Every bias nonzero: a frozen all-zero bias is folded away with its fusion.
        layer.set_weights([rng.normal(0, 0.02, w.shape).astype("float32") for w in layer.get_weights()])

    @tf.function(input_signature=[tf.TensorSpec([batch * SEQ, EMBEDDING], tf.float32)])
    def chain(rows):
        x = projection(rows)
        for _ in range(LAYERS):  # ALBERT shares one layer's weights across all of them
            x = x + output(qkv(x)[:, :HIDDEN])  # the values' share of the query-key-value matmul
            x = x + ffn_out(ffn_in(x))
        return x

    return convert_variables_to_constants_v2(chain.get_concrete_function())


def tflite_runner(model_content, array, threads):
    """Runs a one-input TFLite model (a converted concrete function: no signature) on `array`."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_content, num_threads=threads)
    interpreter.allocate_tensors()
    (given,), (taken,) = interpreter.get_input_details(), interpreter.get_output_details()

    def run():
        interpreter.set_tensor(given["index"], array)
        interpreter.invoke()
        return interpreter.get_tensor(taken["index"])

    return run


def runner(key, workdir, threads, batch):
    """A zero-argument function that runs row `key` once."""
    import numpy as np

    tf = tensorflow_threads(threads)
    if key.startswith("matmuls-"):
        chain = matmul_chain(batch)
        rows = np.random.default_rng(1).normal(0, 1, (batch * SEQ, EMBEDDING)).astype("float32")
        if key == "matmuls-tf":
            return lambda: chain(tf.constant(rows))[0].numpy()
        converter = tf.lite.TFLiteConverter.from_concrete_functions([chain])
        return tflite_runner(converter.convert(), rows, threads)
    x = backbone_arrays(batch, SEQ)
    if key == "tflite":
        signature = tflite_signature(os.path.join(workdir, "tflite", "model.tflite"), threads)
        return lambda: signature(**x)
    from albert_tf import FrozenForward
    from albert_tf.loading import load_pretrained

    forward = FrozenForward(load_pretrained(os.path.join(workdir, "model")))
    with left_out(LEFT_OUT.get(key)):
        forward(x)  # traces here, for these shapes
    return lambda: forward(x)


def prepare(workdir, batch):
    """ALBERT-base with random weights (moved off their initial values) and its TFLite float32 model for `batch`."""
    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.export import export_tflite

    model = AlbertBackbone(AlbertConfig.from_preset("base"))
    move_off_initial_values(model)
    model.save_pretrained(os.path.join(workdir, "model"))
    export_tflite(model, os.path.join(workdir, "tflite"), max_length=SEQ, quantize="none", batch_size=batch)


def main():
    args = row_parser(__doc__, ROWS, rounds=5, warmup=3, steps_help="timed calls per round").parse_args()
    if args.worker:
        return serve_row(runner, args)

    ceilings = measure_ceilings()
    keys = args.only or list(ROWS)
    with tempfile.TemporaryDirectory() as workdir:
        prepare(workdir, args.batch)
        results = time_rows(__file__, keys, args, workdir)
    median = {key: statistics.median(r["ms"] for r in results[key]) for key in keys}
    print(f"\nALBERT-base float32, batch {args.batch}, seq {SEQ}, {args.threads} threads, median of {args.steps} calls "
          f"per round, {args.rounds} rounds in turns. {machine_line(ceilings)}\n")
    print("| what runs | ms | vs TFLite's whole model [min, max] | frozen forward pass's time minus this (ms) |")
    print("|---|---:|---:|---:|")
    for key in keys:
        vs = "" if "tflite" not in keys else "{1:.2f} [{2[0]:.2f}, {2[1]:.2f}]".format(
            *ratio_stats(results, key, ["tflite"], "ms"))
        saved = f"{median['frozen'] - median[key]:.1f}" if "frozen" in keys and key.startswith("frozen-") else ""
        print(f"| {ROWS[key]} | {median[key]:.1f} | {vs} | {saved} |")
    if all(k in keys for k in ("frozen", "tflite", "matmuls-tf", "matmuls-tflite")):
        print(f"\nBeside the matmuls (whole model minus its matmuls alone): TensorFlow "
              f"{median['frozen'] - median['matmuls-tf']:.1f} ms, TFLite {median['tflite'] - median['matmuls-tflite']:.1f} ms.")


if __name__ == "__main__":
    main()
