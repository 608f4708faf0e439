"""Bug or recipe? Pretraining curves of albert-tf against HF transformers (PyTorch).

Both sides start from the same weights (ours -> HF through
`albert_tf.convert.hf.to_hf`), read the same batches (drawn once from our
dynamic-masking pipeline on IMDB text and kept as numpy), compute the same
loss (MLM: sum(w * ce) / (sum(w) + 1e-5) over the masked slots, SOP: mean
CE), clip to global norm 1.0, and run the same optimizer on the same
warmup-linear-decay schedule, with dropout 0. The PyTorch side transcribes
the optimizer formulas here, independently of `albert_tf.optimizers`:

- AdamW as Keras computes it: decay `w -= lr * wd * w` first (LayerNorm and
  bias variables excluded), then `w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m /
  (sqrt(v) + eps)`. `torch.optim.AdamW` puts eps inside the bias correction
  (`sqrt(v / (1 - b2^t)) + eps`), a different optimizer for small v;
  `--torch-adamw` runs it too, to show how much that alone moves the curve.
- LAMB as the original `lamb_optimizer.py`: no bias correction, decay inside
  the trust ratio, LayerNorm/bias excluded from both.

On our side the same start runs through `Trainer` (the strategy.run loop,
with and without XLA, with 2-way gradient accumulation) and through
`model.fit`. A pair of runs whose only difference is float rounding (XLA on
vs off) gives the noise floor that the other differences are compared with.

    python bench/reference_curve.py --write bench/results/reference_curve.md \\
        --plot docs/images/reference_curve.png
"""

import argparse
import os
import tempfile
import time

import numpy as np

from benchlib.output import emit_table, pyplot, save_figure

_FIELDS = ("token_ids", "segment_ids", "padding_mask", "mask_positions", "mask_ids", "mask_weights",
           "sentence_order_label")


# ----------------------------------------------------------------------------- data and model
def make_batches(args):
    """`args.steps` batches of flat numpy features from our pipeline, and the vocabulary size."""
    from input_pipeline import AlbertTokenizer, PretrainingDataConfig, TokenizedCorpus, movie_reviews, make_pretraining_dataset

    documents = movie_reviews.imdb_documents("pretrain", limit=args.documents)
    sentences = (s for document in documents[: args.documents // 2] for s in document)
    tokenizer = AlbertTokenizer.train(sentences, args.vocab_size, seed=0)
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    data_config = PretrainingDataConfig(max_seq_length=args.seq, max_predictions_per_seq=args.max_predictions)
    dataset = make_pretraining_dataset(corpus, args.batch_size, seed=0, config=data_config, flat=True)
    batches = [{k: np.asarray(v) for k, v in b.items()} for b in dataset.take(args.steps).as_numpy_iterator()]
    return batches, tokenizer.vocab_size


def model_config(args, vocab_size):
    from albert_tf import AlbertConfig

    return AlbertConfig(
        vocab_size=vocab_size, embedding_size=args.embedding_size, hidden_size=args.hidden_size,
        num_hidden_layers=args.num_layers, num_attention_heads=args.num_heads,
        intermediate_size=args.intermediate_size, max_position_embeddings=args.seq,
        hidden_dropout=0.0, attention_dropout=0.0,
    )


def split(batch):
    from input_pipeline import features

    return features.split_pretraining_example(batch)


def initial_model(config, batch):
    """Our pretrainer with seeded weights, built on one batch."""
    import keras

    from albert_tf.training import build_pretrainer

    keras.utils.set_random_seed(0)
    model = build_pretrainer(config)
    model(split(batch)[0])
    return model


# ----------------------------------------------------------------------------- albert-tf
def trainer_config(args, optimizer, **changes):
    from albert_tf.training import TrainerConfig

    return TrainerConfig(
        global_batch_size=args.batch_size, num_steps=args.steps, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, optimizer=optimizer, weight_decay=args.weight_decay,
        clip_norm=1.0, checkpoint_every=args.steps, log_every=1, **changes,
    )


def run_trainer(args, config, weights, batches, optimizer, compile_step="none", accumulation_steps=1):
    """Per-step (loss, mlm_loss, sop_loss) of `Trainer` from `weights` on `batches`."""
    import tensorflow as tf

    from albert_tf.training import Trainer, read_log

    k = accumulation_steps
    # Micro-batch j of step i is the j-th k-th of batch i: the same examples per step.
    micro = [{name: b[name][j::k] for name in _FIELDS} for b in batches for j in range(k)]

    def dataset_fn(micro_batch_size, input_context, start_step):
        if micro_batch_size != args.batch_size // k:
            raise ValueError(f"Expected micro-batches of {args.batch_size // k}. Received: {micro_batch_size}")
        columns = {name: np.stack([m[name] for m in micro[start_step:]]) for name in _FIELDS}
        return tf.data.Dataset.from_tensor_slices(columns).map(split)

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(
            config, trainer_config(args, optimizer, compile_step=compile_step, accumulation_steps=k),
            run_dir, dataset_fn, print_fn=lambda *a: None,
        )
        trainer.runner.model.set_weights(weights)
        trainer.train()
        records = read_log(run_dir)
    return np.array([[r["loss"], r["mlm_loss"], r["sop_loss"]] for r in records])


def run_fit(args, config, weights, batches, optimizer):
    """The same through `compile` + `fit` (one step per epoch, so each epoch's logs are one step)."""
    import keras
    import tensorflow as tf

    from albert_tf.training import build_pretrainer, trainer_optimizer

    model = build_pretrainer(config)
    model(split(batches[0])[0])
    model.set_weights(weights)
    model.compile(optimizer=trainer_optimizer(trainer_config(args, optimizer), clip_in_optimizer=True))
    columns = {name: np.stack([b[name] for b in batches]) for name in _FIELDS}
    dataset = tf.data.Dataset.from_tensor_slices(columns).map(split)
    rows = []
    callback = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: rows.append([logs["loss"], logs["mlm_loss"], logs["sop_loss"]])
    )
    model.fit(dataset, epochs=args.steps, steps_per_epoch=1, verbose=0, callbacks=[callback])
    return np.array(rows)


# ----------------------------------------------------------------------------- HF transformers
def schedule(args, iteration):
    """WarmupLinearDecay at Keras' `iterations` (0 for the first update), written out again."""
    if args.warmup_steps and iteration < args.warmup_steps:
        return args.learning_rate * iteration / args.warmup_steps
    return args.learning_rate * (1.0 - min(iteration, args.steps) / args.steps)


def excluded_from_decay(name):
    """HF parameter names of LayerNorm and bias variables (the recipe's exclusions)."""
    return "LayerNorm" in name or "layer_norm" in name or name.endswith("bias")


def run_hf(args, hf_dir, batches, optimizer):
    """Per-step (loss, mlm_loss, sop_loss) of HF's AlbertForPreTraining from `hf_dir`.

    optimizer: "adamw" (Keras' formula), "torch_adamw" (torch.optim.AdamW) or "lamb".
    """
    import torch
    import transformers

    torch.manual_seed(0)
    # HF's SOP head has a dropout (classifier_dropout_prob) that the original's has not.
    model = transformers.AlbertForPreTraining.from_pretrained(hf_dir, classifier_dropout_prob=0.0).train()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    decay = [not excluded_from_decay(n) for n, _ in named]
    b1, b2, eps = 0.9, 0.999, 1e-6
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    torch_adamw = None
    if optimizer == "torch_adamw":
        torch_adamw = torch.optim.AdamW(
            [{"params": [p for p, d in zip(params, decay) if d], "weight_decay": args.weight_decay},
             {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0}],
            lr=0.0, betas=(b1, b2), eps=eps,
        )
    rows = []
    for iteration, batch in enumerate(batches):
        t = {k: torch.tensor(batch[k]).long() for k in ("token_ids", "segment_ids", "padding_mask",
                                                              "mask_positions", "mask_ids", "sentence_order_label")}
        weights = torch.from_numpy(batch["mask_weights"]).float()
        out = model(input_ids=t["token_ids"], token_type_ids=t["segment_ids"], attention_mask=t["padding_mask"])
        logits = out.prediction_logits  # (batch, seq, V)
        gathered = torch.gather(
            logits, 1, t["mask_positions"].unsqueeze(-1).expand(-1, -1, logits.shape[-1])
        )  # (batch, P, V)
        ce = torch.nn.functional.cross_entropy(gathered.transpose(1, 2), t["mask_ids"], reduction="none")
        mlm = (ce * weights).sum() / (weights.sum() + 1e-5)
        sop = torch.nn.functional.cross_entropy(out.sop_logits, t["sentence_order_label"])
        loss = mlm + sop
        model.zero_grad()
        loss.backward()
        rows.append([loss.item(), mlm.item(), sop.item()])

        lr = schedule(args, iteration)
        with torch.no_grad():
            grads = [p.grad for p in params]
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).float()
            scale = 1.0 / torch.clamp(norm, min=1.0)  # clip to global norm 1.0, as tf.clip_by_global_norm
            grads = [g * scale for g in grads]
            if torch_adamw is not None:
                for p, g in zip(params, grads):
                    p.grad = g
                for group in torch_adamw.param_groups:
                    group["lr"] = lr
                torch_adamw.step()
                continue
            step = iteration + 1
            for i, (p, g) in enumerate(zip(params, grads)):
                if optimizer == "adamw":
                    if decay[i]:
                        p.sub_(p * args.weight_decay * lr)
                    m[i].add_((g - m[i]) * (1 - b1))
                    v[i].add_((g * g - v[i]) * (1 - b2))
                    alpha = lr * np.sqrt(1 - b2**step) / (1 - b1**step)
                    p.sub_(m[i] * alpha / (v[i].sqrt() + eps))
                else:  # the original LAMB
                    m[i].mul_(b1).add_(g * (1 - b1))
                    v[i].mul_(b2).add_(g * g * (1 - b2))
                    update = m[i] / (v[i].sqrt() + eps)
                    if decay[i]:
                        update = update + args.weight_decay * p
                        w_norm, u_norm = p.norm(), update.norm()
                        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                        update = ratio * update
                    p.sub_(lr * update)
    return np.array(rows)


def check_start(model, hf_dir, batch):
    """Max |ours - HF| of the step-0 losses; the converted start must be the same model."""
    import keras

    from albert_tf.models.pretrainer import pretraining_losses

    inputs, labels = split(batch)
    ours = [float(x) for x in pretraining_losses(labels, model(inputs))]
    args = argparse.Namespace(warmup_steps=1, learning_rate=0.0, steps=1, weight_decay=0.0)
    hf = run_hf(args, hf_dir, [batch], "adamw")[0, 1:]
    keras.utils.clear_session()
    return float(np.max(np.abs(np.array(ours) - hf)))


# ----------------------------------------------------------------------------- report
def table(curves, reference, every):
    names = list(curves)
    lines = ["| step | " + " | ".join(f"{n} loss" for n in names) + " |", "|---:|" + "---:|" * len(names)]
    steps = len(curves[reference])
    for s in [1] + list(range(every, steps + 1, every)):
        lines.append(f"| {s} | " + " | ".join(f"{curves[n][s - 1, 0]:.5f}" for n in names) + " |")
    return "\n".join(lines)


def differences(curves, pairs):
    lines = ["| pair | max abs diff, loss (all steps) | at step | mean abs diff, MLM | mean abs diff, SOP |"
             " max abs diff, first 25 steps |", "|---|---:|---:|---:|---:|---:|"]
    for a, b in pairs:
        d = np.abs(curves[a] - curves[b])
        lines.append(f"| {a} vs {b} | {d[:, 0].max():.2e} | {int(d[:, 0].argmax()) + 1} | "
                     f"{d[:, 1].mean():.2e} | {d[:, 2].mean():.2e} | {d[:25, 0].max():.2e} |")
    return "\n".join(lines)


def plot(curves, path):
    plt = pyplot()
    figure, (loss_axes, diff_axes) = plt.subplots(1, 2, figsize=(11, 4))
    for name, curve in curves.items():
        loss_axes.plot(np.arange(1, len(curve) + 1), curve[:, 0], label=name, linewidth=1)
    loss_axes.set_xlabel("step")
    loss_axes.set_title("training loss (MLM + SOP), same batches and start")
    loss_axes.legend(fontsize=7)
    for name, curve in curves.items():
        reference = curves["HF lamb" if "lamb" in name else "HF adamw"]
        if curve is reference:
            continue
        diff = np.abs(curve[:, 0] - reference[:, 0])
        diff_axes.semilogy(np.arange(1, len(curve) + 1), np.maximum(diff, 1e-9), label=f"|{name} - HF|", linewidth=1)
    diff_axes.set_xlabel("step")
    diff_axes.set_title("absolute loss difference to HF (same optimizer)")
    diff_axes.legend(fontsize=7)
    save_figure(figure, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--max-predictions", type=int, default=10)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--embedding-size", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--intermediate-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=30)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--every", type=int, default=25, help="Table rows every this many steps.")
    parser.add_argument("--write", help="Also write the tables to this Markdown file.")
    parser.add_argument("--plot", help="Write the curves to this PNG.")
    parser.add_argument("--torch-adamw", action="store_true",
                        help="Also run torch.optim.AdamW (eps inside the bias correction) against Keras' AdamW.")
    parser.add_argument("--cache", help="Keep each run's curve here as .npy and reuse it (same flags only).")
    args = parser.parse_args()

    import tensorflow as tf
    import torch
    import transformers

    from albert_tf.convert.hf import to_hf

    # One thread: on a loaded machine torch's spinning OpenMP threads made a
    # 300-step run 20x slower than the same run with TensorFlow.
    torch.set_num_threads(1)
    start = time.perf_counter()
    batches, vocab_size = make_batches(args)
    config = model_config(args, vocab_size)
    model = initial_model(config, batches[0])
    weights = model.get_weights()
    hf_dir = tempfile.mkdtemp()
    os.rmdir(hf_dir)
    to_hf(model, hf_dir)
    start_diff = check_start(model, hf_dir, batches[0])
    print(f"step-0 losses, ours vs HF: max abs diff {start_diff:.1e}")

    runs = {
        "HF adamw": lambda: run_hf(args, hf_dir, batches, "adamw"),
        "Trainer adamw": lambda: run_trainer(args, config, weights, batches, "adamw"),
        "Trainer adamw XLA": lambda: run_trainer(args, config, weights, batches, "adamw", compile_step="forward"),
        "Trainer adamw accum 2": lambda: run_trainer(args, config, weights, batches, "adamw", accumulation_steps=2),
        "fit adamw": lambda: run_fit(args, config, weights, batches, "adamw"),
        "HF lamb": lambda: run_hf(args, hf_dir, batches, "lamb"),
        "Trainer lamb": lambda: run_trainer(args, config, weights, batches, "lamb"),
    }
    if args.torch_adamw:
        runs["HF torch.optim.AdamW"] = lambda: run_hf(args, hf_dir, batches, "torch_adamw")
    curves = {}
    for name, run in runs.items():
        mark = time.perf_counter()
        cached = os.path.join(args.cache, name.replace(" ", "_") + ".npy") if args.cache else None
        if cached and os.path.isfile(cached):
            curves[name] = np.load(cached)
        else:
            curves[name] = run()
            if cached:
                os.makedirs(args.cache, exist_ok=True)
                np.save(cached, curves[name])
        print(f"{name}: {time.perf_counter() - mark:.0f}s, final loss {curves[name][-1, 0]:.5f}", flush=True)
    pairs = [
        ("Trainer adamw", "Trainer adamw XLA"),
        ("Trainer adamw", "HF adamw"),
        ("Trainer adamw XLA", "HF adamw"),
        ("Trainer adamw accum 2", "HF adamw"),
        ("fit adamw", "HF adamw"),
        ("Trainer adamw", "fit adamw"),
        ("Trainer lamb", "HF lamb"),
    ] + ([("HF torch.optim.AdamW", "HF adamw")] if args.torch_adamw else [])
    text = "\n\n".join([
        f"Same start (converted with `to_hf`), same {args.steps} batches of {args.batch_size} x {args.seq} "
        f"(IMDB, dynamic masking, {args.max_predictions} masked slots), dropout 0. Model E {args.embedding_size}, "
        f"H {args.hidden_size}, {args.num_layers} layers sharing one block, {args.num_heads} heads, FFN "
        f"{args.intermediate_size}, V {vocab_size}. Peak lr {args.learning_rate}, {args.warmup_steps} warmup steps "
        f"then linear decay to 0 at step {args.steps}, weight decay {args.weight_decay} (LayerNorm/bias excluded), "
        f"clip to global norm 1.0, eps 1e-6. TensorFlow {tf.__version__}, transformers {transformers.__version__}, "
        f"torch {torch.__version__}, float32 on CPU. Step-0 losses ours vs HF: max abs diff {start_diff:.1e}. "
        f"Total {time.perf_counter() - start:.0f}s.",
        "Loss (MLM + SOP) at the step, computed before that step's update:",
        table(curves, "HF adamw", args.every),
        "Differences (XLA on vs off is rounding only: the float-noise floor of a 300-step run):",
        differences(curves, pairs),
    ])
    emit_table(text, args.write)
    if args.plot:
        plot(curves, args.plot)


if __name__ == "__main__":
    main()
