"""Times ALBERT-base on this machine's CPU: albert-tf vs keras-hub vs HF transformers.

Two figures, measured in one run so the peers share the machine's state:
  * one pretraining step (forward, MLM + SOP loss, backward, Adam update),
    batch 8, seq 128, 20 masked positions;
  * batch-1 inference of the backbone at seq 128.

Every implementation gets the same shapes, the same optimizer (Adam, so the
comparison is about the model, not LAMB) and the same thread count. Keras
models run through their compiled functions, with and without XLA. Each
implementation lives in its own process for the whole run, and the
processes are timed in turns for `--rounds` rounds, so a change in the
machine's load hits every row; the table gives each row's median, its ratio
to the fastest peer (median and range over the rounds: a stable ratio has a
narrow range), and its share of the machine's matmul ceiling
(bench/ceilings.py) at the row's precision. `--bf16` adds albert-tf rows in
mixed_bfloat16 (measure them where the CPU has avx512_bf16 or amx_bf16).

    pip install -e .[bench]
    python bench/model_speed.py [--steps 10] [--rounds 5] [--bf16] [--write bench/results/model_speed.md]
"""

import argparse
import os
import statistics

import numpy as np

from benchlib.flops import albert_flops
from benchlib.machine import machine_line, measure_ceilings
from benchlib.output import emit_table
from benchlib.timing import alternate, ratio_stats, serve, timed

BATCH, SEQ, PREDICTIONS = 8, 128, 20


def pretraining_arrays(vocab, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(5, vocab, (BATCH, SEQ)).astype("int32"),
        "segment_ids": (np.arange(SEQ) >= SEQ // 2).astype("int32")[None].repeat(BATCH, 0),
        "padding_mask": np.ones((BATCH, SEQ), "int32"),
        "mask_positions": np.sort(rng.choice(np.arange(1, SEQ), (BATCH, PREDICTIONS)), -1).astype("int32"),
        "mask_ids": rng.integers(5, vocab, (BATCH, PREDICTIONS)).astype("int32"),
        "mask_weights": np.ones((BATCH, PREDICTIONS), "float32"),
        "sentence_order_label": rng.integers(0, 2, (BATCH,)).astype("int32"),
    }


def first_row(arrays):
    return {k: arrays[k][:1] for k in ("token_ids", "segment_ids", "padding_mask")}


def measurements(train_step, infer_step, warmup, steps):
    """{"train": ..., "infer": ...}: each times its step (median ms) when called."""
    for _ in range(warmup):
        train_step()
        infer_step()
    return {"train": lambda: timed(train_step, 0, steps), "infer": lambda: timed(infer_step, 0, steps * 3)}


def bench_albert_tf(arrays, warmup, steps, jit, precision="float32"):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig, AlbertPretrainer
    from input_pipeline import features

    policy = None if precision == "float32" else precision
    model = AlbertPretrainer(AlbertBackbone(AlbertConfig.from_preset("base"), dtype=policy))
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit)
    x, y = features.split_pretraining_example(arrays)
    backbone = model.backbone
    infer_fn = tf.function(lambda inputs: backbone(inputs, training=False), jit_compile=jit)
    one = {k: tf.constant(v) for k, v in first_row(arrays).items()}
    return measurements(
        lambda: model.train_on_batch(x, y), lambda: infer_fn(one)["sequence_output"].numpy(), warmup, steps
    )


def bench_keras_hub(arrays, warmup, steps, jit):
    import keras
    import keras_hub
    import tensorflow as tf

    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=30000, num_layers=12, num_heads=12, embedding_dim=128, hidden_dim=768,
        intermediate_dim=3072, dropout=0.0, max_sequence_length=512,
    )
    model = keras_hub.models.AlbertMaskedLM(backbone, preprocessor=None)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[],
        jit_compile=jit,
    )
    x = {k: arrays[k] for k in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
    infer_fn = tf.function(lambda inputs: backbone(inputs, training=False), jit_compile=jit)
    one = {k: tf.constant(v) for k, v in first_row(arrays).items()}
    # keras-hub has no SOP head: its step does MLM only, slightly less work.
    return measurements(
        lambda: model.train_on_batch(x, arrays["mask_ids"], sample_weight=arrays["mask_weights"]),
        lambda: infer_fn(one)["sequence_output"].numpy(), warmup, steps,
    )


def bench_hf(arrays, warmup, steps):
    import torch
    import transformers

    # HF's AlbertConfig() defaults to xxlarge: spell out base v2.
    config = transformers.AlbertConfig(
        vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
        num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
    )
    model = transformers.AlbertForPreTraining(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    t = {k: torch.from_numpy(v.astype("int64")) for k, v in arrays.items() if k != "mask_weights"}
    # HF computes the MLM loss over every position labelled != -100.
    labels = torch.full((BATCH, SEQ), -100, dtype=torch.long)
    labels.scatter_(1, t["mask_positions"], t["mask_ids"])
    one = {k: torch.from_numpy(v.astype("int64")) for k, v in first_row(arrays).items()}

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        out = model(
            input_ids=t["token_ids"], token_type_ids=t["segment_ids"],
            attention_mask=t["padding_mask"], labels=labels,
            sentence_order_label=t["sentence_order_label"],
        )
        out.loss.backward()
        optimizer.step()

    def infer_step():
        model.eval()
        with torch.inference_mode():
            model.albert(input_ids=one["token_ids"], token_type_ids=one["segment_ids"],
                         attention_mask=one["padding_mask"])

    return measurements(train_step, infer_step, warmup, steps)


# key -> (table name, precision, is a peer, bench function)
IMPLEMENTATIONS = {
    "albert-tf": ("albert-tf (Keras 3, TF backend)", "fp32", False,
                  lambda a, w, n: bench_albert_tf(a, w, n, False)),
    "albert-tf-xla": ("albert-tf (Keras 3, TF backend, XLA)", "fp32", False,
                      lambda a, w, n: bench_albert_tf(a, w, n, True)),
    "albert-tf-bf16-xla": ("albert-tf mixed_bfloat16, XLA", "bf16", False,
                           lambda a, w, n: bench_albert_tf(a, w, n, True, "mixed_bfloat16")),
    "keras-hub": ("keras-hub AlbertBackbone + MLM head", "fp32", True,
                  lambda a, w, n: bench_keras_hub(a, w, n, False)),
    "keras-hub-xla": ("keras-hub AlbertBackbone + MLM head, XLA", "fp32", True,
                      lambda a, w, n: bench_keras_hub(a, w, n, True)),
    "hf": ("HF transformers (PyTorch)", "fp32", True, bench_hf),
}


def run_worker(key, warmup, steps):
    """The child process of one implementation (see `benchlib.timing.Worker`)."""
    import tensorflow as tf
    import torch

    threads = os.cpu_count()
    torch.set_num_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    serve(IMPLEMENTATIONS[key][3](pretraining_arrays(30000), warmup, steps))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed iterations per round (inference: 3x)")
    parser.add_argument("--rounds", type=int, default=5, help="turns of timing every implementation")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="add albert-tf in mixed_bfloat16 (XLA)")
    parser.add_argument("--only", nargs="+", choices=sorted(IMPLEMENTATIONS), help="implementations to time")
    parser.add_argument("--worker", choices=sorted(IMPLEMENTATIONS), help=argparse.SUPPRESS)
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    if args.worker:
        return run_worker(args.worker, args.warmup, args.steps)

    ceilings = measure_ceilings()
    keys = args.only or [k for k in IMPLEMENTATIONS if args.bf16 or k != "albert-tf-bf16-xla"]
    results = alternate(__file__, keys, args.rounds, ["--steps", str(args.steps), "--warmup", str(args.warmup)])
    peers = [k for k in keys if IMPLEMENTATIONS[k][2]]

    import tensorflow as tf
    import torch
    import transformers
    import keras_hub

    flops = {
        "train": albert_flops(768, 12, 3072, 128, 30000, BATCH, SEQ, PREDICTIONS, train=True),
        "infer": albert_flops(768, 12, 3072, 128, 30000, 1, SEQ),
    }
    table = [
        f"ALBERT-base; {machine_line(ceilings)}",
        f"Median of {args.steps} steps (inference {3 * args.steps}) per round, {args.rounds} rounds in turns. "
        f"TensorFlow {tf.__version__}, keras-hub {keras_hub.__version__}, transformers "
        f"{transformers.__version__}, torch {torch.__version__}. Ratio: time / the fastest peer's time "
        "(median over rounds, [min, max]); ceiling: model matmul FLOPs / time / the row precision's ceiling.",
        "",
        f"| implementation | precision | train step b{BATCH} x s{SEQ} (ms) | vs fastest peer | ceiling | "
        f"inference b1 x s{SEQ} (ms) | vs fastest peer | ceiling |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        name, precision = IMPLEMENTATIONS[key][:2]
        cells = [name, precision]
        for measurement in ("train", "infer"):
            ms = statistics.median(r[measurement] for r in results[key])
            cells.append(f"{ms:.1f}")
            if peers:
                fastest, ratio, (low, high) = ratio_stats(results, key, peers, measurement)
                cells.append(f"{ratio:.2f} [{low:.2f}, {high:.2f}]")
            else:
                cells.append("")
            cells.append(f"{flops[measurement] / (ms / 1000) / (ceilings[precision] * 1e9):.0%}")
        table.append("| " + " | ".join(cells) + " |")
    if peers:
        table += ["", "Fastest peer: " + ", ".join(
            f"{m} {IMPLEMENTATIONS[ratio_stats(results, keys[0], peers, m)[0]][0]}" for m in ("train", "infer")
        ) + "."]
    text = "\n".join(table)
    print()
    emit_table(text, args.write)


if __name__ == "__main__":
    main()
