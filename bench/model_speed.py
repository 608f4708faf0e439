"""Times ALBERT-base on this machine's CPU: albert-tf vs keras-hub vs HF transformers, in each precision.

Two figures, measured in one run so the peers share the machine's state:
  * one pretraining step (forward, MLM + SOP loss, backward, Adam update),
    batch 8, seq 128, 20 masked positions;
  * batch-1 inference of the backbone at seq 128.

Every implementation gets the same shapes, the same optimizer (Adam, so the
comparison is about the model, not LAMB) and the same thread count, in
float32 and in bfloat16: albert-tf and keras-hub under the mixed_bfloat16
policy, each with and without XLA (TensorFlow's oneDNN kernels use a CPU's
bfloat16 units, its XLA CPU backend does not), HF transformers under
`torch.autocast("cpu", dtype=torch.bfloat16)`. The bfloat16 rows are timed
by default where the CPU has bfloat16 units (avx512_bf16 or amx_bf16);
`--bf16` times them elsewhere too. Each implementation lives in its own
process for the whole run, and the processes are timed in turns for
`--rounds` rounds, so a change in the machine's load hits every row. The
table gives each row's median; its ratio to the fastest peer at the same
precision and its speed-up over its own implementation's fastest float32
row (median and range over the rounds: a stable ratio has a narrow range);
and its share of the machine's matmul ceiling (bench/ceilings.py) at the
row's precision.

albert-tf's inference without XLA runs as `albert-tf predict` runs it:
through `albert_tf.FrozenForward`, its weights frozen into the graph as
constants (traced for the batch's exact shape). A note under the table gives
the same rows with the weights as variables, a plain Keras call in a
tf.function.

    pip install -e .[bench]
    python bench/model_speed.py [--steps 10] [--inference-steps 30] [--rounds 5] [--bf16] [--clock cpu]
        [--write bench/results/model_speed.md]
"""

import argparse
import importlib
import importlib.util
import os
import statistics

from albert_tf.precision import bf16_units, choose_precision
from benchlib.flops import albert_flops
from benchlib.machine import ceiling_share, machine_line, measure_ceilings
from benchlib.output import emit_table
from benchlib.synthetic import pretraining_arrays
from benchlib.timing import CLOCKS, alternate, ratio_stats, serve, timed

BATCH, SEQ, PREDICTIONS = 8, 128, 20
# The model sizes the rows build, in AlbertConfig's field names: ALBERT-base, which the tables time, and a
# tiny model for quick runs of the scripts built on these rows (bench/hlo_compare.py).
SIZES = {
    "base": dict(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(vocab_size=1000, embedding_size=32, hidden_size=128, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=512),
}


def first_row(arrays):
    return {k: arrays[k][:1] for k in ("token_ids", "segment_ids", "padding_mask")}


def measurements(train_step, infer_step, warmup, steps, **more_inference):
    """{"train": (train_step, n), "infer": (infer_step, n), **more_inference}: each step and how often a round runs it.

    `steps` is (training steps, inference calls) timed per round. The steps
    have run `warmup` times when this returns.
    """
    train_steps, inference_calls = steps
    inference = {"infer": infer_step, **more_inference}
    for _ in range(warmup):
        train_step()
        for step in inference.values():
            step()
    return {"train": (train_step, train_steps), **{name: (step, inference_calls) for name, step in inference.items()}}


def bench_albert_tf(arrays, warmup, steps, jit, precision="float32", sizes=SIZES["base"]):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig, AlbertPretrainer, FrozenForward
    from input_pipeline import features

    policy = None if precision == "float32" else precision
    model = AlbertPretrainer(AlbertBackbone(AlbertConfig.from_preset("base", **sizes), dtype=policy))
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit)
    x, y = features.split_pretraining_example(arrays)
    backbone = model.backbone
    infer_fn = tf.function(lambda inputs: backbone(inputs, training=False), jit_compile=jit)
    one = {k: tf.constant(v) for k, v in first_row(arrays).items()}
    variables = lambda: infer_fn(one)["sequence_output"].numpy()  # noqa: E731
    train = lambda: model.train_on_batch(x, y)  # noqa: E731
    if jit:
        return measurements(train, variables, warmup, steps)
    # Frozen after the warm-up's training steps would change nothing: inference reads the weights as they are.
    frozen, one_row = FrozenForward(backbone), first_row(arrays)
    return measurements(train, lambda: frozen(one_row)["sequence_output"], warmup, steps,
                        infer_variables=variables)


def bench_keras_hub(arrays, warmup, steps, jit, precision="float32", sizes=SIZES["base"]):
    import keras
    import keras_hub
    import tensorflow as tf

    # The policy of every layer keras-hub builds, its MLM head's included (one row per process).
    keras.mixed_precision.set_global_policy(precision)
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=sizes["vocab_size"], num_layers=sizes["num_hidden_layers"],
        num_heads=sizes["num_attention_heads"], embedding_dim=sizes["embedding_size"],
        hidden_dim=sizes["hidden_size"], intermediate_dim=sizes["intermediate_size"], dropout=0.0,
        max_sequence_length=512,
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


def bench_hf(arrays, warmup, steps, precision="float32"):
    import contextlib

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

    def autocast():
        # PyTorch's mixed precision: float32 weights, matmuls in bfloat16; the
        # backward pass runs outside, in the dtypes the forward pass chose.
        if precision == "float32":
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=torch.bfloat16)

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = model(
                input_ids=t["token_ids"], token_type_ids=t["segment_ids"],
                attention_mask=t["padding_mask"], labels=labels,
                sentence_order_label=t["sentence_order_label"],
            )
        out.loss.backward()
        optimizer.step()

    def infer_step():
        model.eval()
        with torch.inference_mode(), autocast():
            model.albert(input_ids=one["token_ids"], token_type_ids=one["segment_ids"],
                         attention_mask=one["padding_mask"])

    return measurements(train_step, infer_step, warmup, steps)


class Row:
    """One implementation in one precision with one compiler: a row of the table.

    Attributes:
        implementation: "albert-tf", "keras-hub" or "hf" (speed-ups compare rows of one implementation).
        name: the table's name of the implementation.
        precision: "fp32" or "bf16", the ceiling the row is measured against.
        compiler: how the step runs, as the table prints it.
        peer: whether albert-tf is compared with it.
        bench: (arrays, warmup, (train steps, inference calls)) -> `measurements`.
    """

    def __init__(self, implementation, name, precision, compiler, peer, bench):
        self.implementation, self.name, self.precision = implementation, name, precision
        self.compiler, self.peer, self.bench = compiler, peer, bench


TF_GRAPH, TF_XLA, TORCH_EAGER = "tf.function (oneDNN)", "tf.function + XLA", "PyTorch eager (oneDNN)"
KERAS_POLICY = {"fp32": "float32", "bf16": "mixed_bfloat16"}


def keras_rows(implementation, name, peer, bench):
    """The four rows of a Keras implementation: float32 and mixed_bfloat16, each without and with XLA."""
    rows = {}
    for precision, suffix in (("fp32", ""), ("bf16", "-bf16")):
        for jit, compiler in ((False, TF_GRAPH), (True, TF_XLA)):
            policy = KERAS_POLICY[precision]
            rows[implementation + suffix + ("-xla" if jit else "")] = Row(
                implementation, name if precision == "fp32" else f"{name}, {policy}", precision, compiler, peer,
                lambda a, w, n, jit=jit, policy=policy: bench(a, w, n, jit, policy),
            )
    return rows


IMPLEMENTATIONS = {
    **keras_rows("albert-tf", "albert-tf (Keras 3, TF backend)", False, bench_albert_tf),
    **keras_rows("keras-hub", "keras-hub AlbertBackbone + MLM head", True, bench_keras_hub),
    "hf": Row("hf", "HF transformers (PyTorch)", "fp32", TORCH_EAGER, True, bench_hf),
    "hf-bf16": Row("hf", "HF transformers (PyTorch), torch.autocast bfloat16", "bf16", TORCH_EAGER, True,
                   lambda a, w, n: bench_hf(a, w, n, "bfloat16")),
}
# ALBERT-base's hidden size, which the precision rule reads to pick the default row.
HIDDEN_SIZE = 768


def default_rows(flags, onednn=True):
    """{"train": row, "infer": row}: what the commands run by default for ALBERT-base on a CPU with `flags`.

    The precision is albert_tf.precision's rule. Training (`pretrain`, `finetune`, `demo`, `bench`) compiles
    its float32 step with XLA; `predict` runs the forward pass with the weights frozen, without XLA, where
    TensorFlow runs oneDNN (`onednn`), and compiled by XLA where it runs Eigen (AVX2-only CPUs).
    """
    choice = choose_precision("predict", "auto", HIDDEN_SIZE, device="cpu", flags=frozenset(flags), onednn=onednn)
    if choice.precision == "mixed_bfloat16":
        return {"train": "albert-tf-bf16", "infer": "albert-tf-bf16"}
    return {"train": "albert-tf-xla", "infer": "albert-tf-xla" if choice.compile_step == "forward" else "albert-tf"}


def marked_name(row, key, defaults):
    """The row's name, marked where it is what a command runs by default (`default_rows`)."""
    uses = [use for use, measurement in (("training", "train"), ("inference", "infer")) if defaults[measurement] == key]
    if not uses:
        return row.name
    return f"{row.name} (**default**)" if len(uses) == 2 else f"{row.name} (**default** for {uses[0]})"


def speedup_stats(results, key, own_fp32, measurement):
    """Median over rounds of the fastest of `own_fp32`'s time / `key`'s time, and the (min, max).

    The fastest is the row with the lowest median over all rounds; > 1 means `key` is faster.
    """
    fastest, ratio, (low, high) = ratio_stats(results, key, own_fp32, measurement)
    return fastest, 1 / ratio, (1 / high, 1 / low)


def _variables_share(results, key):
    """Median over rounds of variable time / frozen time (> 1: freezing is faster)."""
    return statistics.median(r["infer_variables"] / r["infer"] for r in results[key])


def run_worker(key, warmup, steps, inference_steps, clock="wall"):
    """The child process of one implementation (see `benchlib.timing.Worker`); `clock` names a `CLOCKS` entry."""
    import tensorflow as tf
    import torch

    threads = os.cpu_count()
    torch.set_num_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    arrays = pretraining_arrays(BATCH, SEQ, PREDICTIONS, 30000)
    timed_steps = IMPLEMENTATIONS[key].bench(arrays, warmup, (steps, inference_steps))
    serve({name: lambda step=step, n=n: timed(step, 0, n, CLOCKS[clock]) for name, (step, n) in timed_steps.items()})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per round")
    parser.add_argument("--inference-steps", type=int, help="timed inference calls per round (default: 3x --steps)")
    parser.add_argument("--rounds", type=int, default=5, help="turns of timing every implementation")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bf16", action="store_true",
                        help="time the bfloat16 rows even where the CPU has no bfloat16 units")
    parser.add_argument("--only", nargs="+", choices=list(IMPLEMENTATIONS), help="rows to time")
    parser.add_argument("--worker", choices=list(IMPLEMENTATIONS), help=argparse.SUPPRESS)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="cpu: CPU time of all the process's threads, which swings less than wall time with "
                             "other processes' load on a shared machine")
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    inference_steps = args.inference_steps or 3 * args.steps
    if args.worker:
        return run_worker(args.worker, args.warmup, args.steps, inference_steps, args.clock)
    keras_hub_installed = importlib.util.find_spec("keras_hub") is not None
    if not keras_hub_installed and any(IMPLEMENTATIONS[k].implementation == "keras-hub" for k in args.only or ()):
        parser.error("--only names keras-hub rows, but keras-hub is not installed (pip install -e .[bench])")

    ceilings = measure_ceilings()
    flags = ceilings["flags"]
    bf16 = args.bf16 or bool(bf16_units(flags))
    keys = args.only or [k for k, row in IMPLEMENTATIONS.items() if bf16 or row.precision == "fp32"]
    if not keras_hub_installed and not args.only:
        keys = [k for k in keys if IMPLEMENTATIONS[k].implementation != "keras-hub"]
        print("keras-hub is not installed: its rows are left out (pip install -e .[bench] installs it).")
    results = alternate(__file__, keys, args.rounds, ["--steps", str(args.steps), "--inference-steps",
                                                      str(inference_steps), "--warmup", str(args.warmup),
                                                      "--clock", args.clock])

    import tensorflow as tf
    import torch
    import transformers

    keras_hub_version = importlib.import_module("keras_hub").__version__ if keras_hub_installed else "not installed"
    flops = {
        "train": albert_flops(768, 12, 3072, 128, 30000, BATCH, SEQ, PREDICTIONS, train=True),
        "infer": albert_flops(768, 12, 3072, 128, 30000, 1, SEQ),
    }
    defaults = default_rows(flags, ceilings.get("onednn", True))
    rows = {key: IMPLEMENTATIONS[key] for key in keys}
    table = [
        f"ALBERT-base; {machine_line(ceilings)}",
        f"Median of {args.steps} steps (inference {inference_steps}) per round, {args.rounds} rounds in turns, "
        f"{'CPU time of all threads' if args.clock == 'cpu' else 'wall time'}. "
        f"TensorFlow {tf.__version__}, keras-hub {keras_hub_version}, transformers "
        f"{transformers.__version__}, torch {torch.__version__}. Vs fastest peer: time / the time of the "
        "fastest of keras-hub and HF transformers at the row's precision; speed-up: the time of the "
        "implementation's fastest fp32 row / time (both median over rounds, [min, max]); ceiling: model "
        "matmul FLOPs / time / the row precision's ceiling. albert-tf's inference without XLA runs as "
        "`predict` runs it: weights frozen into the graph (`albert_tf.FrozenForward`).",
        "Marked **default**: what the commands run for ALBERT-base on this CPU ("
        + ("it has bfloat16 units and H 768 >= 512: mixed_bfloat16 without XLA)."
           if defaults["train"] == "albert-tf-bf16" else
           "no bfloat16 units: float32; training steps compiled by XLA, `predict` "
           + ("compiled by XLA too, as TensorFlow runs no oneDNN here)." if defaults["infer"] == "albert-tf-xla"
              else "with its weights frozen, without XLA)."))
        + ("" if set(defaults.values()) <= set(rows) else " Not every such row was timed."),
        "",
        f"| implementation | precision | compiler | train step b{BATCH} x s{SEQ} (ms) | vs fastest peer | "
        f"speed-up over own fp32 | ceiling | inference b1 x s{SEQ} (ms) | vs fastest peer | "
        "speed-up over own fp32 | ceiling |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fastest_peers = {}
    for key, row in rows.items():
        name = marked_name(row, key, defaults)
        cells = [name, row.precision, row.compiler]
        peers = [k for k, r in rows.items() if r.peer and r.precision == row.precision]
        own_fp32 = [k for k, r in rows.items() if r.implementation == row.implementation and r.precision == "fp32"]
        for measurement in ("train", "infer"):
            ms = statistics.median(r[measurement] for r in results[key])
            cells.append(f"{ms:.1f}")
            if peers:
                fastest, ratio, (low, high) = ratio_stats(results, key, peers, measurement)
                fastest_peers[(row.precision, measurement)] = fastest
                cells.append(f"{ratio:.2f} [{low:.2f}, {high:.2f}]")
            else:
                cells.append("")
            if own_fp32:
                _, speedup, (low, high) = speedup_stats(results, key, own_fp32, measurement)
                cells.append(f"{speedup:.2f} [{low:.2f}, {high:.2f}]")
            else:
                cells.append("")
            cells.append(ceiling_share(flops[measurement] / (ms / 1000), row.precision, ceilings))
        table.append("| " + " | ".join(cells) + " |")
    variable_rows = [key for key in rows if "infer_variables" in results[key][0]]
    if variable_rows:
        table += ["", "albert-tf inference with its weights as variables (a Keras call in a tf.function) instead "
                  "of frozen: " + "; ".join(
                      f"{rows[key].precision} {statistics.median(r['infer_variables'] for r in results[key]):.1f} ms "
                      f"({_variables_share(results, key):.2f}x the frozen time)" for key in variable_rows) + "."]
    if fastest_peers:
        table += ["", "Fastest peer: " + "; ".join(
            f"{precision} {measurement} {IMPLEMENTATIONS[key].name} ({IMPLEMENTATIONS[key].compiler})"
            for (precision, measurement), key in sorted(fastest_peers.items())
        ) + "."]
    text = "\n".join(table)
    print()
    emit_table(text, args.write)


if __name__ == "__main__":
    main()
