"""Multi-label metrics and per-label thresholds, on NumPy arrays of whole evaluation sets.

`targets` are 0/1 (examples, labels); `probabilities` the model's sigmoid
outputs, same shape. A label is predicted where its probability is at or above
its threshold.
"""

import numpy as np

from albert_tf.recipes.metrics import average_ranks

# Tuned thresholds stay this far inside (0, 1), where every threshold must be.
_THRESHOLD_MARGIN = 1e-6


def f1_counts(tp, fp, fn):
    """F1 from counts (scalars or arrays); 0 where there is no true positive."""
    tp, fp, fn = (np.asarray(x, "float64") for x in (tp, fp, fn))
    denominator = 2 * tp + fp + fn
    return np.where(tp > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def auc(targets, scores):
    """ROC AUC of one label (Mann-Whitney U, tied scores sharing their average rank); None without both classes."""
    targets, scores = np.asarray(targets) > 0.5, np.asarray(scores, "float64")
    positives, negatives = int(targets.sum()), int((~targets).sum())
    if not positives or not negatives:
        return None
    ranks = average_ranks(scores)  # ties share their average rank
    return float((ranks[targets].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def tune_thresholds(targets, probabilities, default=0.5):
    """Each label's threshold that maximizes its F1 on these examples; `default` where it has no positive.

    The candidates are the midpoints between neighbouring distinct
    probabilities (and half the lowest, which predicts every example): a
    threshold between two scores generalizes better than one on a score.
    Of equal F1s the highest threshold wins.

    Returns:
        list of floats in (0, 1), one per label.
    """
    targets, probabilities = np.asarray(targets) > 0.5, np.asarray(probabilities, "float64")
    thresholds = []
    for label in range(targets.shape[1]):
        y, p = targets[:, label], probabilities[:, label]
        if not y.any():
            thresholds.append(float(default))
            continue
        order = np.argsort(-p, kind="mergesort")
        y, p = y[order], p[order]
        tp, fp = np.cumsum(y), np.cumsum(~y)
        # Cut only after the last of equal scores: a threshold cannot split them.
        ends = np.flatnonzero(np.append(p[1:] != p[:-1], True))
        f1 = f1_counts(tp[ends], fp[ends], y.sum() - tp[ends])
        best = ends[int(np.argmax(f1))]
        threshold = (p[best] + p[best + 1]) / 2 if best + 1 < len(p) else p[best] / 2
        thresholds.append(float(np.clip(threshold, _THRESHOLD_MARGIN, 1 - _THRESHOLD_MARGIN)))
    return thresholds


def decide(probabilities, thresholds):
    """0/1 decisions (examples, labels): probability at or above its label's threshold."""
    return np.asarray(probabilities) >= np.asarray(thresholds)[None, :]


def scores(targets, probabilities, thresholds, label_names):
    """The multi-label metrics at `thresholds`.

    Returns:
        dict: micro_f1 (F1 of all labels' decisions pooled), macro_f1 (the mean
        of the labels' F1s), exact_match (share of examples with every label
        right), per_label {name: precision, recall, f1, auc}.
    """
    targets = np.asarray(targets) > 0.5
    predicted = decide(probabilities, thresholds)
    tp = (predicted & targets).sum(0)
    fp = (predicted & ~targets).sum(0)
    fn = (~predicted & targets).sum(0)
    per_label = {}
    for i, name in enumerate(label_names):
        per_label[name] = {
            "precision": float(tp[i] / (tp[i] + fp[i])) if tp[i] + fp[i] else 0.0,
            "recall": float(tp[i] / (tp[i] + fn[i])) if tp[i] + fn[i] else 0.0,
            "f1": float(f1_counts(tp[i], fp[i], fn[i])),
            "auc": auc(targets[:, i], np.asarray(probabilities)[:, i]),
        }
    return {
        "micro_f1": float(f1_counts(tp.sum(), fp.sum(), fn.sum())),
        "macro_f1": float(np.mean(f1_counts(tp, fp, fn))),
        "exact_match": float(np.mean(np.all(predicted == targets, axis=1))) if len(targets) else 0.0,
        "per_label": per_label,
    }
