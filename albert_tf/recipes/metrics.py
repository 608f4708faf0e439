"""Evaluation metrics of the GLUE-style tasks, on NumPy arrays of whole eval sets.

Computed once over the full set rather than averaged over batches, since
F1, Matthews correlation and the correlations do not decompose by batch.
"""

import numpy as np


def accuracy(labels, predictions):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions)) if labels.size else 0.0


def f1(labels, predictions, positive=1):
    """Binary F1 of class `positive` (MRPC, QQP)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews_corrcoef(labels, predictions):
    """Matthews correlation (CoLA), multiclass form; 0 when undefined."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.union1d(labels, predictions)
    confusion = np.array([[np.sum((labels == t) & (predictions == p)) for p in classes] for t in classes],
                         dtype="float64")
    samples = confusion.sum()
    correct = np.trace(confusion)
    true_counts, predicted_counts = confusion.sum(1), confusion.sum(0)
    numerator = correct * samples - true_counts @ predicted_counts
    denominator = np.sqrt((samples**2 - predicted_counts @ predicted_counts)
                          * (samples**2 - true_counts @ true_counts))
    return float(numerator / denominator) if denominator else 0.0


def pearson(labels, predictions):
    x, y = np.asarray(labels, "float64"), np.asarray(predictions, "float64")
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator else 0.0


def average_ranks(values):
    """Ranks from 1, ties sharing their average rank (as scipy's `rankdata`)."""
    _, group, counts = np.unique(np.asarray(values, "float64"), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # each group's last rank
    return (last - (counts - 1) / 2.0)[group.reshape(-1)]


def spearman(labels, predictions):
    return pearson(average_ranks(labels), average_ranks(predictions))


METRICS = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_corrcoef": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def compute(names, labels, predictions):
    """{name: value} for each metric in `names`."""
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"Unknown metrics {unknown}. Valid metrics: {sorted(METRICS)}")
    return {name: METRICS[name](labels, predictions) for name in names}
