"""Times ALBERT-base on this machine's CPU: albert-tf vs keras-hub vs HF transformers.

Two figures, measured in one run so the peers share the machine's state:
  * one pretraining step (forward, MLM + SOP loss, backward, Adam update),
    batch 8, seq 128, 20 masked positions;
  * batch-1 inference of the backbone at seq 128.

Every implementation gets the same shapes, the same optimizer (Adam, so the
comparison is about the model, not LAMB) and the same thread count. Keras
models run through their compiled functions, with and without XLA.

    pip install -e .[bench]
    python bench/model_speed.py [--steps 10] [--write bench/results/model_speed.md]
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from bench_utils import emit_table, timed

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


def bench_albert_tf(arrays, warmup, steps, jit):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig, AlbertPretrainer
    from input_pipeline import features

    model = AlbertPretrainer(AlbertBackbone(AlbertConfig.from_preset("base")))
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit)
    x, y = features.split_pretraining_example(arrays)
    train = timed(lambda: model.train_on_batch(x, y), warmup, steps)
    backbone = model.backbone
    infer_fn = tf.function(lambda inputs: backbone(inputs, training=False), jit_compile=jit)
    one = {k: tf.constant(v) for k, v in first_row(arrays).items()}
    infer = timed(lambda: infer_fn(one)["sequence_output"].numpy(), warmup, steps * 3)
    return train, infer


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
    # keras-hub has no SOP head: its step does MLM only, slightly less work.
    train = timed(
        lambda: model.train_on_batch(x, arrays["mask_ids"], sample_weight=arrays["mask_weights"]),
        warmup, steps,
    )
    infer_fn = tf.function(lambda inputs: backbone(inputs, training=False), jit_compile=jit)
    one = {k: tf.constant(v) for k, v in first_row(arrays).items()}
    infer = timed(lambda: infer_fn(one)["sequence_output"].numpy(), warmup, steps * 3)
    return train, infer


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

    def step():
        optimizer.zero_grad(set_to_none=True)
        out = model(
            input_ids=t["token_ids"], token_type_ids=t["segment_ids"],
            attention_mask=t["padding_mask"], labels=labels,
            sentence_order_label=t["sentence_order_label"],
        )
        out.loss.backward()
        optimizer.step()

    model.train()
    train = timed(step, warmup, steps)
    model.eval()
    base = model.albert
    one = {k: torch.from_numpy(v.astype("int64")) for k, v in first_row(arrays).items()}

    def infer_step():
        with torch.inference_mode():
            base(input_ids=one["token_ids"], token_type_ids=one["segment_ids"],
                 attention_mask=one["padding_mask"])

    infer = timed(infer_step, warmup, steps * 3)
    return train, infer


IMPLEMENTATIONS = {
    "albert-tf": ("albert-tf (Keras 3, TF backend)", lambda a, w, n: bench_albert_tf(a, w, n, False)),
    "albert-tf-xla": ("albert-tf (Keras 3, TF backend, XLA)", lambda a, w, n: bench_albert_tf(a, w, n, True)),
    "keras-hub": ("keras-hub AlbertBackbone + MLM head", lambda a, w, n: bench_keras_hub(a, w, n, False)),
    "keras-hub-xla": ("keras-hub AlbertBackbone + MLM head, XLA", lambda a, w, n: bench_keras_hub(a, w, n, True)),
    "hf": ("HF transformers (PyTorch)", bench_hf),
}


def run_one(key, warmup, steps):
    """Measures one implementation in this process and prints a JSON line."""
    import tensorflow as tf
    import torch

    threads = os.cpu_count()
    torch.set_num_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    train, infer = IMPLEMENTATIONS[key][1](pretraining_arrays(30000), warmup, steps)
    print("RESULT " + json.dumps({"train": train, "infer": infer}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed iterations (inference: 3x)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--only", choices=sorted(IMPLEMENTATIONS), help=argparse.SUPPRESS)
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    if args.only:
        return run_one(args.only, args.warmup, args.steps)

    # Each implementation runs in its own process, one after the other, so no
    # framework's thread pools compete with another's.
    rows = []
    for key, (name, _) in IMPLEMENTATIONS.items():
        out = subprocess.run(
            [sys.executable, __file__, "--only", key, "--steps", str(args.steps),
             "--warmup", str(args.warmup)],
            capture_output=True, text=True, check=True,
        ).stdout
        result = json.loads(out.split("RESULT ", 1)[1])
        rows.append((name, result["train"], result["infer"]))
        print(f"{name}: train step {result['train']:.0f} ms, inference {result['infer']:.1f} ms",
              flush=True)

    import tensorflow as tf
    import torch
    import transformers
    import keras_hub

    table = [
        f"ALBERT-base on {os.cpu_count()} CPU cores; median of {args.steps} steps "
        f"(inference {3 * args.steps}). TensorFlow {tf.__version__}, keras-hub "
        f"{keras_hub.__version__}, transformers {transformers.__version__}, torch {torch.__version__}.",
        "",
        f"| implementation | pretraining step, batch {BATCH} x seq {SEQ} (ms) | inference, batch 1 x seq {SEQ} (ms) |",
        "|---|---:|---:|",
    ]
    table += [f"| {name} | {train:.0f} | {infer:.1f} |" for name, train, infer in rows]
    text = "\n".join(table)
    print()
    emit_table(text, args.write)


if __name__ == "__main__":
    main()
