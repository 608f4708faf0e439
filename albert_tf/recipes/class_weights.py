"""`--class-weights`: how much each class (or each label's positives) counts in the loss.

"balanced" follows scikit-learn's `class_weight="balanced"` for single-label
classification, n_examples / (n_classes * n_examples_of_class), and PyTorch's
`pos_weight` advice for multi-label, n_negatives / n_positives per label. A
FILE is a JSON object of label name -> positive weight; labels it leaves out
weigh 1.
"""

import json

import numpy as np

from albert_tf.utils import files
from albert_tf.utils.errors import UserError

BALANCED = "balanced"


def resolve_class_weights(spec, labels, label_names, multilabel):
    """The weights `spec` ("balanced" or a JSON file) gives, one per label, in label order.

    Args:
        spec: "balanced" or the path of a JSON object {label: weight}.
        labels: the training labels: class ids, or multi-hot vectors when `multilabel`.
        label_names: the label names, in class-id order.
        multilabel: whether the weights are each label's positive weight.

    Raises:
        UserError: an unreadable or malformed file, an unknown label, a weight
            that is not a positive number, or "balanced" with a class that has
            no training example (or, multi-label, a label on every example).
    """
    if spec == BALANCED:
        return _balanced(labels, label_names, multilabel)
    try:
        table = json.loads(files.read_text(spec))
    except json.JSONDecodeError as e:
        raise UserError(f"--class-weights {spec}: not valid JSON: {e}") from e
    if not isinstance(table, dict):
        raise UserError(f"--class-weights {spec}: must hold a JSON object of label -> weight. "
                        f"Received: {type(table).__name__}")
    unknown = [name for name in table if name not in label_names]
    if unknown:
        raise UserError(f"--class-weights {spec}: label(s) {unknown} are not among the labels {list(label_names)}")
    bad = {name: w for name, w in table.items()
           if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0}
    if bad:
        raise UserError(f"--class-weights {spec}: weights must be positive numbers. Received: {bad}")
    return [float(table.get(name, 1.0)) for name in label_names]


def _balanced(labels, label_names, multilabel):
    if multilabel:
        positives = np.sum(np.asarray(labels, "float64"), axis=0)
        negatives = len(labels) - positives
        empty = [name for name, p, n in zip(label_names, positives, negatives) if not p or not n]
        if empty:
            raise UserError(f"--class-weights balanced: label(s) {empty} are on no training example or on every "
                            "one; their positives have no balanced weight. Give weights in a JSON file.")
        return [float(n / p) for n, p in zip(negatives, positives)]
    counts = np.bincount(np.asarray(labels, "int64"), minlength=len(label_names))
    empty = [name for name, c in zip(label_names, counts) if not c]
    if empty:
        raise UserError(f"--class-weights balanced: class(es) {empty} have no training example.")
    return [float(len(labels) / (len(label_names) * c)) for c in counts]
