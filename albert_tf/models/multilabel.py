"""Multi-label classification: one independent yes/no per label, each with its own threshold."""

import keras
from keras import ops

from albert_tf.models.classifier import pool
from albert_tf.models.task_base import AlbertTask
from albert_tf.models.task_heads import (
    backbone_inputs, check_backbone, check_label_names, check_positive, check_weights, head_dropout, output_dense,
    weighted_mean,
)
from albert_tf.pooling import resolve_pooling
from input_pipeline import features

# A label's threshold where none was tuned: the sigmoid's midpoint.
DEFAULT_THRESHOLD = 0.5


def check_thresholds(thresholds, num_labels):
    """A list of `num_labels` floats strictly inside (0, 1); None gives `DEFAULT_THRESHOLD` for every label."""
    if thresholds is None:
        return [DEFAULT_THRESHOLD] * num_labels
    values = list(thresholds)
    if len(values) != num_labels or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0.0 < t < 1.0 for t in values):
        raise ValueError(f"`thresholds` must be {num_labels} numbers in (0, 1), one per label. "
                         f"Received: thresholds={thresholds!r}")
    return [float(t) for t in values]


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMultiLabelClassifier(AlbertTask):
    """ALBERT with one sigmoid output per label: any number of labels may apply to a text.

    The head is `AlbertClassifier`'s (pooled vector -> dropout -> dense), read
    through independent sigmoids and trained with binary cross-entropy on
    every label, as HF transformers' `problem_type="multi_label_classification"`.
    A label is predicted when its probability is at or above its threshold;
    the thresholds live in the config, so every loader and export of a saved
    model applies the same ones.

    Args:
        backbone: an `AlbertBackbone`.
        num_labels: int, the number of labels.
        label_names: optional list of `num_labels` strings.
        thresholds: optional list of `num_labels` floats in (0, 1), each
            label's decision threshold (default 0.5 each).
        positive_weights: optional list of `num_labels` positive floats: the
            weight of a positive target in each label's loss (Keras' and
            PyTorch's `pos_weight`); None weighs positives and negatives alike.
        dropout: float, dropout before the head; None takes `classifier_dropout`.
        pooling: "cls", "mean" or "auto" (see `AlbertClassifier`).
        preprocessor: optional `AlbertPreprocessor` (see `AlbertClassifier`).

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq).
    Outputs (dict): logits: float32 (batch, num_labels), one per label.
    Labels for `fit`: float 0/1 targets (batch, num_labels).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "multilabel"

    def __init__(self, backbone, num_labels, label_names=None, thresholds=None, positive_weights=None,
                 dropout=None, pooling="auto", preprocessor=None, **kwargs):
        check_backbone(backbone)
        check_positive("num_labels", num_labels)
        label_names = check_label_names(label_names, num_labels, "num_labels")
        thresholds = check_thresholds(thresholds, num_labels)
        positive_weights = check_weights("positive_weights", positive_weights, num_labels)
        pooling = resolve_pooling(pooling, backbone.config.hidden_size)

        # === Layers ===
        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(num_labels, backbone, "classifier")

        # === Functional graph ===
        inputs = backbone_inputs()
        pooled = pool(backbone(inputs), inputs[features.PADDING_MASK], pooling)  # (batch, H)
        logits = head(dropout_layer(pooled))  # (batch, num_labels)
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        self.num_labels = num_labels
        self.positive_weights = positive_weights
        self.dropout = rate
        self.pooling = pooling
        self.head = head
        self.binary_accuracy = keras.metrics.BinaryAccuracy(name="binary_accuracy", threshold=0.0)
        self._init_task(
            backbone, label_names, [self.binary_accuracy], preprocessor, num_labels=num_labels,
            thresholds=thresholds, positive_weights=positive_weights, dropout=dropout, pooling=pooling,
        )

    @property
    def thresholds(self):
        """Each label's decision threshold, in label order."""
        return list(self._task_config["thresholds"])

    @thresholds.setter
    def thresholds(self, thresholds):
        self._task_config["thresholds"] = check_thresholds(thresholds, self.num_labels)

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        return weighted_mean(binary_cross_entropy(y, y_pred["logits"], self.positive_weights), sample_weight)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        # Logits against 0: the same decision as probabilities against 0.5.
        self.binary_accuracy.update_state(ops.cast(y, "float32"), y_pred["logits"], sample_weight=sample_weight)


def binary_cross_entropy(targets, logits, positive_weights=None):
    """Per-example binary cross-entropy, averaged over the labels.

    With positive weights p (one per label), a label's loss is
    -(p * y * log(sigmoid(z)) + (1 - y) * log(1 - sigmoid(z))), PyTorch's
    `BCEWithLogitsLoss(pos_weight=p)`; computed from the logits in the stable
    form softplus(-z) = -log(sigmoid(z)), so no probability rounds to 0 or 1.

    Args:
        targets: float 0/1 (batch, labels).
        logits: float32 (batch, labels).
        positive_weights: None, or a list of `labels` floats.

    Returns:
        float32 (batch,).
    """
    targets = ops.cast(targets, "float32")
    logits = ops.cast(logits, "float32")
    positive_term = targets * ops.softplus(-logits)  # y * -log(sigmoid(z))
    if positive_weights is not None:
        positive_term = positive_term * ops.convert_to_tensor(positive_weights, "float32")
    negative_term = (1.0 - targets) * ops.softplus(logits)  # (1 - y) * -log(1 - sigmoid(z))
    return ops.mean(positive_term + negative_term, axis=-1)
