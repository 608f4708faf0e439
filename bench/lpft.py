"""Head first, then everything (LP-FT): does training the head on frozen features keep pretraining's gain?

For random init and a pretrained model (same config and tokenizer), on one of
bench/transfer.py's tasks and splits: plain fine-tuning (3 epochs, AdamW
7.2e-4 decaying linearly to 0, weight decay 0.01, mean pooling, 128 pieces)
against LP-FT (Kumar et al., 2022): first `--lp-epochs` epochs training only the
head on the frozen backbone (Adam 3e-3, linear decay), then the same 3 epochs
on everything. Best epoch on dev, scored on test. A plain Keras workflow
(`AlbertClassifier` with a preprocessor, `fit` on strings), so no warmup and
not the CLI's exact schedule: compare the rows with each other, not with
bench/results/transfer.md.

    python bench/lpft.py --model runs/demo/final [--task imdb] [--train-limit 2000] [--lp-epochs 5]
"""

import argparse

import numpy as np

from benchlib.output import emit_table
from benchlib.pretrained import load_model
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, split_rows, task_rows

BATCH = 32


def linear_decay(learning_rate, steps):
    import keras

    return keras.optimizers.schedules.PolynomialDecay(learning_rate, steps, 0.0)


def fine_tune(backbone, tokenizer, data, lp_epochs, seed):
    """(head-only test accuracy or None, best dev accuracy, its test accuracy)."""
    import keras

    from albert_tf import AlbertPreprocessor
    from albert_tf.models import AlbertClassifier

    keras.utils.set_random_seed(seed)
    model = AlbertClassifier(backbone, 2, pooling="mean",
                             preprocessor=AlbertPreprocessor(tokenizer, sequence_length=128))
    steps_per_epoch = -(-len(data["train"][0]) // BATCH)
    head_only = None
    if lp_epochs:
        backbone.trainable = False
        model.compile(optimizer=keras.optimizers.Adam(linear_decay(3e-3, steps_per_epoch * lp_epochs)))
        model.fit(*data["train"], batch_size=BATCH, epochs=lp_epochs, verbose=0)
        head_only = model.evaluate(*data["test"], batch_size=64, verbose=0, return_dict=True)["accuracy"]
        backbone.trainable = True
    model.compile(optimizer=keras.optimizers.AdamW(linear_decay(7.2e-4, steps_per_epoch * 3), weight_decay=0.01))
    best_dev, best_test = -1.0, None
    for _ in range(3):
        model.fit(*data["train"], batch_size=BATCH, epochs=1, verbose=0)
        dev = model.evaluate(*data["dev"], batch_size=64, verbose=0, return_dict=True)["accuracy"]
        if dev > best_dev:
            best_dev = dev
            best_test = model.evaluate(*data["test"], batch_size=64, verbose=0, return_dict=True)["accuracy"]
    return head_only, best_dev, best_test


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="A pretrained directory or RUN/checkpoints/ckpt-N.")
    parser.add_argument("--task", choices=("rt", "imdb"), default="imdb")
    parser.add_argument("--train-limit", type=int, default=2000)
    parser.add_argument("--lp-epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED)
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    import keras

    from albert_tf.models import AlbertBackbone

    split = split_rows(task_rows(args.task), args.split_seed, args.train_limit)
    data = {name: (np.array([text for text, _ in rows]), np.array([int(label) for _, label in rows]))
            for name, rows in split.items()}
    lines = [
        f"{args.task}: train {len(split['train'])}, dev {len(split['dev'])}, test {len(split['test'])}; "
        f"LP-FT = {args.lp_epochs} head-only epochs, then 3 epochs on everything.",
        "",
        "| start | schedule | head-only test | dev | test |",
        "|---|---|---:|---:|---:|",
    ]
    for lp_epochs in (0, args.lp_epochs):
        for name in ("random init", "pretrained"):
            backbone, tokenizer, _ = load_model(args.model)
            if name == "random init":
                keras.utils.set_random_seed(args.seed)
                backbone = AlbertBackbone(backbone.config)
            head_only, dev, test = fine_tune(backbone, tokenizer, data, lp_epochs, args.seed)
            schedule = "LP-FT" if lp_epochs else "fine-tune"
            head = "" if head_only is None else f"{head_only:.4f}"
            lines.append(f"| {name} | {schedule} | {head} | {dev:.4f} | {test:.4f} |")
            print(lines[-1], flush=True)
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
