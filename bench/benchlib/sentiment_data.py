"""The two sentiment tasks the transfer benchmarks fine-tune on, their seeded splits, and their CSV files."""

import csv

import numpy as np

# The split every transfer benchmark uses unless told otherwise; its results keep their place on disk.
DEFAULT_SPLIT_SEED = 20200209


def task_rows(task):
    """[(text, label 0/1)] of "rt" (Rotten Tomatoes sentences) or "imdb" (the held-out reviews)."""
    from input_pipeline import movie_reviews

    if task == "rt":
        return movie_reviews.rotten_tomatoes_sentences()
    return movie_reviews.imdb_reviews("heldout")


def split_rows(rows, seed, train_limit=None, limit=None):
    """{"test", "dev", "train"}: a seeded 10/10/80 split of `rows`.

    `limit` keeps only that many shuffled rows before splitting; `train_limit`
    keeps only the first rows of the training part (dev and test unchanged).
    """
    order = np.random.default_rng(seed).permutation(len(rows))[:limit]
    n_test = n_dev = len(order) // 10
    parts = {"test": order[:n_test], "dev": order[n_test : n_test + n_dev], "train": order[n_test + n_dev :]}
    parts["train"] = parts["train"][:train_limit]
    return {name: [rows[i] for i in index] for name, index in parts.items()}


def write_csv(path, rows):
    """Writes [(text, label 0/1)] as the CSV `albert-tf finetune` reads (labels negative/positive); returns `path`."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows((text, "positive" if label else "negative") for text, label in rows)
    return path
