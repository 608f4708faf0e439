"""Latency at batch 1 (or --batch) and seq 128 of ALBERT-base, as exported vs its peers, on this machine's CPU.

Rows: albert-tf Keras (tf.function, with and without XLA; and under
mixed_bfloat16 without XLA where the CPU has bf16 units, which TensorFlow's
oneDNN kernels use and XLA's CPU backend does not), the exported
SavedModel (`serving_default`, weights frozen to constants, in the forms TensorFlow's
graph optimizer fuses best; float32, and where the
CPU has bf16 units the `export --mixed-precision mixed_bfloat16` form, loaded with
`tf.saved_model.load` and called through its signature as TF-Serving runs
it; two float32 forms `export` does not write, to compare: weights as
variables, and the forward pass compiled by XLA), TFLite float32 / float16 / dynamic-range int8 (and full int8, int8-mixed
and 16x8 with --tokenizer: they calibrate on real text), TFLite float32 on one
thread (as TF-Serving's `--prefer_tflite_model` runs each request), HF transformers
AlbertModel (PyTorch) and keras-hub AlbertBackbone (with and without XLA). Random
weights, every one moved off its initial value as training moves it: a graph
with the weights frozen in drops an all-zero bias (the initializer's), and
with it the fusion of the FFN's matmul, bias and GELU into one op, so an
untrained model would time a graph no trained one runs. Every row runs in its own
subprocess (no shared thread pools), with the same thread count per op
(TensorFlow's rows keep its default inter-op pool, as TF-Serving does), and the
rows are timed in turns for `--rounds` rounds (benchlib.timing.alternate), so
the ratios to the fastest float peer hold under a changing load. The table
prints the CPU flags, the measured matmul ceilings (bench/ceilings.py) and
each row's share of the ceiling of the precision its matmuls run in, and
dynamic-range int8 TFLite against float32 TFLite and the fastest float peer.

    python bench/export_latency.py [--steps 30] [--rounds 3] [--batch 1] [--threads N] [--tokenizer DIR]
"""

import os
import statistics
import sys
import tempfile
import time


from albert_tf.precision import bf16_units
from benchlib.flops import albert_flops
from benchlib.machine import ceiling_share, cpu_flags, machine_line, measure_ceilings
from benchlib.synthetic import backbone_arrays, move_off_initial_values
from benchlib.rows import row_parser, serve_row, tensorflow_threads, tflite_signature, time_rows
from benchlib.timing import ratio_stats

SEQ = 128
ROWS = {
    "keras": "albert-tf Keras (tf.function)",
    "keras-xla": "albert-tf Keras (tf.function, XLA)",
    "keras-bf16": "albert-tf Keras mixed_bfloat16 (tf.function)",
    "keras-bf16-frozen": "albert-tf Keras mixed_bfloat16, weights frozen to constants",
    "saved_model": "albert-tf SavedModel serving_default (weights as constants)",
    "saved_model-bf16": "albert-tf SavedModel bf16 serving_default (weights as constants)",
    "saved_model-variables": "albert-tf SavedModel float32 serving_default, weights as variables",
    "saved_model-xla": "albert-tf SavedModel float32 serving_default, forward compiled by XLA (`export --xla`)",
    "tflite-none": "albert-tf TFLite float32",
    "tflite-session": "albert-tf TFLite float32, one thread (TF-Serving's `--prefer_tflite_model`)",
    "tflite-float16": "albert-tf TFLite float16 weights",
    "tflite-dynamic": "albert-tf TFLite dynamic-range int8",
    "tflite-int8": "albert-tf TFLite full int8",
    "tflite-int8-mixed": "albert-tf TFLite int8-mixed (float LayerNorm/softmax/GELU)",
    "tflite-16x8": "albert-tf TFLite 16x8 (int16 activations)",
    "hf": "HF transformers AlbertModel (PyTorch)",
    "keras-hub": "keras-hub AlbertBackbone (tf.function)",
    "keras-hub-xla": "keras-hub AlbertBackbone (tf.function, XLA)",
}
# The float32 rows: the ratios are to the fastest of them.
FLOAT_PEERS = ("keras", "keras-xla", "saved_model", "saved_model-variables", "saved_model-xla", "tflite-none",
               "tflite-session", "hf", "keras-hub", "keras-hub-xla")
# TF-Serving's TfLiteSession (`--prefer_tflite_model`, a model.tflite beside saved_model.pb) builds each
# interpreter with one thread and XNNPACK, the builtin resolver's default delegate, and answers concurrent
# requests from a pool of them (`--num_tflite_pools`, one per CPU by default): a request runs on one core.
TFLITE_SESSION_THREADS = 1
# Float32 SavedModels in other forms than export's default: Keras' call on variables (to compare), and the
# forward pass compiled by XLA (`export --xla`, opt-in: a server needs --xla_cpu_compilation_enabled=true).
SERVING_FORMS = ("saved_model-variables", "saved_model-xla")
# Rows a CPU without bf16 units would only run emulated (not timed there).
BF16_ROWS = ("keras-bf16", "keras-bf16-frozen", "saved_model-bf16")
# The precision each row's matmuls run in, for its ceiling share. float16
# weights are dequantized to float32; dynamic range multiplies int8 weights
# by activations quantized on the fly.
CALIBRATED = ("tflite-int8", "tflite-int8-mixed", "tflite-16x8")
PRECISION = {key: "int8" if key in ("tflite-dynamic",) + CALIBRATED else "bf16" if key in BF16_ROWS else "fp32"
             for key in ROWS}


def export_serving_form(model, base_dir, form):
    """Writes `model` as version 1 of a float32 SavedModel whose serving_default runs the forward pass as `form`.

    "saved_model-variables": Keras' own call of the model on its weights as variables (what float32
    `export` wrote before it froze them and traced them in `optimizer_forms`), only the id signature, as
    `export_saved_model` builds it around that forward pass; "saved_model-xla": what `export --xla` writes.
    """
    import tensorflow as tf

    from albert_tf.export import export_saved_model
    from albert_tf.export import signatures as signatures_lib

    if form == "saved_model-xla":
        export_saved_model(model, base_dir, max_length=SEQ, version=1, xla=True)
        return
    interface = signatures_lib.describe_model(model)
    module = tf.Module()
    module.model_variables = [v.value for v in model.variables]
    signatures = signatures_lib.build_signatures(model, interface, None, SEQ)
    tf.saved_model.save(module, os.path.join(base_dir, "1"), signatures=signatures)


def prepare(workdir, tokenizer_dir, bf16=False, forms=(), batch=1):
    """Builds ALBERT-base once and writes the SavedModels (bf16 too with `bf16`, and the `SERVING_FORMS` named
    in `forms`) and the TFLite models (for `batch` rows: a TFLite model's shapes are fixed)."""
    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.export import export_saved_model, export_tflite
    from input_pipeline import AlbertTokenizer

    model = AlbertBackbone(AlbertConfig.from_preset("base"))
    move_off_initial_values(model)
    model.save_pretrained(os.path.join(workdir, "model"))
    export_saved_model(model, os.path.join(workdir, "saved_model"), max_length=SEQ)
    if bf16:
        export_saved_model(model, os.path.join(workdir, "saved_model-bf16"), max_length=SEQ, precision="mixed_bfloat16")
    for form in forms:
        export_serving_form(model, os.path.join(workdir, form), form)
    modes = ["none", "float16", "dynamic"] + ([k[len("tflite-"):] for k in CALIBRATED] if tokenizer_dir else [])
    tokenizer = AlbertTokenizer.load(tokenizer_dir) if tokenizer_dir else None
    texts = None
    if tokenizer is not None:
        from input_pipeline import movie_reviews

        texts = [t for t, _ in movie_reviews.imdb_reviews("pretrain")[:200]]
    sizes = {}
    for mode in modes:
        path = export_tflite(
            model, os.path.join(workdir, f"tflite-{mode}"), tokenizer=tokenizer, max_length=SEQ,
            quantize=mode, representative_texts=texts, batch_size=batch,
        )
        sizes[f"tflite-{mode}"] = os.path.getsize(path) / 2**20
    return sizes


def runner(key, workdir, threads, batch=1):
    """A zero-argument function that runs row `key` once on `batch` rows."""
    tf = tensorflow_threads(threads)
    x = backbone_arrays(batch, SEQ)
    if key in ("keras", "keras-xla", "keras-bf16", "keras-bf16-frozen"):
        from albert_tf.models.pretrained import with_dtype_policy
        from albert_tf.loading import load_pretrained

        model = load_pretrained(os.path.join(workdir, "model"))
        if key.startswith("keras-bf16"):
            # The same weights under the policy (float32 variables, bf16 matmuls), as `predict` rebuilds it.
            model = with_dtype_policy(model, "mixed_bfloat16")
        if key == "keras-bf16-frozen":
            # What `predict` runs: the graph optimizer folds the weights' casts to bfloat16 away, and
            # oneDNN may keep its own layout of constant weights across calls.
            from albert_tf import FrozenForward

            frozen = FrozenForward(model)
            return lambda: frozen(x)["pooled_output"]
        fn = tf.function(lambda batch: model(batch, training=False), jit_compile=key == "keras-xla")
        batch = {k: tf.constant(v) for k, v in x.items()}
        return lambda: fn(batch)["pooled_output"].numpy()
    if key in ("saved_model", "saved_model-bf16") + SERVING_FORMS:
        from albert_tf.export import load_saved_model, version_dirs

        base = os.path.join(workdir, key)
        signature = load_saved_model(os.path.join(base, str(version_dirs(base)[-1]))).signatures["serving_default"]
        batch = {k: tf.constant(v) for k, v in x.items()}
        return lambda: signature(**batch)["pooled_output"].numpy()
    if key == "tflite-session":
        signature = tflite_signature(os.path.join(workdir, "tflite-none", "model.tflite"), TFLITE_SESSION_THREADS)
        return lambda: signature(**x)
    if key.startswith("tflite-"):
        signature = tflite_signature(os.path.join(workdir, key, "model.tflite"), threads)
        return lambda: signature(**x)
    if key == "hf":
        import torch
        from transformers import AlbertConfig, AlbertModel

        torch.set_num_threads(threads)
        # HF's AlbertConfig defaults are xxlarge: spell out base.
        config = AlbertConfig(
            vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
            num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new",
        )
        model = AlbertModel(config).eval()
        batch = {
            "input_ids": torch.tensor(x["token_ids"], dtype=torch.long),
            "token_type_ids": torch.tensor(x["segment_ids"], dtype=torch.long),
            "attention_mask": torch.tensor(x["padding_mask"], dtype=torch.long),
        }

        def run():
            with torch.inference_mode():
                return model(**batch).pooler_output

        return run
    if key in ("keras-hub", "keras-hub-xla"):
        import keras_hub

        model = keras_hub.models.AlbertBackbone(
            vocabulary_size=30000, num_layers=12, num_heads=12, embedding_dim=128, hidden_dim=768,
            intermediate_dim=3072, dropout=0.0, max_sequence_length=512,
        )
        fn = tf.function(lambda batch: model(batch, training=False), jit_compile=key == "keras-hub-xla")
        return lambda: fn(x)["pooled_output"].numpy()
    raise ValueError(f"Unknown row {key!r}. Valid: {sorted(ROWS)}")


def main():
    parser = row_parser(__doc__, ROWS, rounds=3, warmup=5, steps_help="timed runs per round")
    parser.add_argument("--tokenizer", help="A 30000-piece tokenizer dir: adds the calibrated rows "
                        "(int8, int8-mixed, 16x8; calibrated on IMDB text).")
    args = parser.parse_args()
    if args.worker:
        return serve_row(runner, args)

    ceilings = measure_ceilings()
    with tempfile.TemporaryDirectory() as workdir:
        has_bf16 = bool(bf16_units(cpu_flags()))
        start = time.time()
        sizes = prepare(workdir, args.tokenizer, bf16=has_bf16 and (not args.only or "saved_model-bf16" in args.only),
                        forms=[k for k in SERVING_FORMS if not args.only or k in args.only], batch=args.batch)
        print(f"Exported ALBERT-base in {time.time() - start:.0f}s", file=sys.stderr)
        keys = [k for k in (args.only or ROWS)
                if (k not in CALIBRATED or args.tokenizer) and (k not in BF16_ROWS or has_bf16)]
        results = time_rows(__file__, keys, args, workdir)

    peers = [k for k in keys if k in FLOAT_PEERS]
    flops = albert_flops(768, 12, 3072, 128, 30000, args.batch, SEQ)
    print(f"\nALBERT-base, batch {args.batch}, seq {SEQ}, {args.threads} threads, median of {args.steps} runs per round, "
          f"{args.rounds} rounds in turns. {machine_line(ceilings)}\n")
    print("| runtime | latency (ms) | vs fastest float peer [min, max] | ceiling share | model file (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for key in keys:
        ms = statistics.median(r["ms"] for r in results[key])
        vs = ""
        if peers:
            fastest, ratio, (low, high) = ratio_stats(results, key, peers, "ms")
            vs = f"{ratio:.2f} [{low:.2f}, {high:.2f}]"
        share = ceiling_share(flops / (ms / 1000), PRECISION[key], ceilings)
        size = f"{sizes[key]:.1f}" if key in sizes else ""
        print(f"| {ROWS[key]} | {ms:.1f} | {vs} | {share} ({PRECISION[key]}) | {size} |")
    if peers:
        print(f"\nFastest float peer: {ROWS[fastest]}.")
    if "tflite-dynamic" in keys:
        for name, against in (("float32 TFLite", ["tflite-none"]), ("the fastest float peer", peers)):
            if against and all(k in keys for k in against):
                fastest, ratio, (low, high) = ratio_stats(results, "tflite-dynamic", against, "ms")
                print(f"Dynamic-range int8 TFLite against {name} ({ROWS[fastest]}): {ratio:.2f}x its time "
                      f"[{low:.2f}, {high:.2f}], {1 / ratio:.2f}x as fast.")


if __name__ == "__main__":
    main()
