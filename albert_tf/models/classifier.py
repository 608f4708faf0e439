"""Sentence (and sentence-pair) classification and regression, GLUE style."""

import keras
from keras import ops

from albert_tf.models.task import (
    AlbertTask, backbone_inputs, check_backbone, check_label_names, check_positive,
    head_dropout, output_dense, weighted_mean,
)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifier(AlbertTask):
    """ALBERT with a classification head on the pooled [CLS] output.

    pooled_output -> dropout -> dense(num_classes), as the original
    `run_classifier.py`. Single sentences use segment 0 only; pairs are
    `[CLS] A [SEP] B [SEP]` with segment 1 for B.

    Args:
        backbone: an `AlbertBackbone`.
        num_classes: int, number of labels.
        label_names: optional list of `num_classes` strings, the name of each
            class id (kept in the config so exports can map ids to labels).
        dropout: float, dropout before the head; None takes the backbone
            config's `classifier_dropout`.

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq).
    Outputs (dict): logits: float32 (batch, num_classes).
    Labels for `fit`: int class ids (batch,).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "classifier"

    def __init__(self, backbone, num_classes, label_names=None, dropout=None, **kwargs):
        check_backbone(backbone)
        check_positive("num_classes", num_classes)
        label_names = check_label_names(label_names, num_classes, "num_classes")

        # === Layers ===
        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(num_classes, backbone, "classifier")

        # === Functional graph ===
        inputs = backbone_inputs()
        pooled = backbone(inputs)["pooled_output"]  # (batch, H)
        logits = head(dropout_layer(pooled))  # (batch, num_classes)
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        self.num_classes = num_classes
        self.dropout = rate
        self.head = head
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self._init_task(
            backbone, label_names, [self.accuracy], num_classes=num_classes, dropout=dropout
        )

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        ce = keras.losses.sparse_categorical_crossentropy(y, y_pred["logits"], from_logits=True)
        return weighted_mean(ce, sample_weight)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        self.accuracy.update_state(y, y_pred["logits"], sample_weight=sample_weight)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertRegressor(AlbertTask):
    """ALBERT with a one-unit regression head on the pooled output (STS-B style).

    Same head as `AlbertClassifier` with one unit, trained with mean squared
    error, as the original `run_classifier.py` does for STS-B.

    Args:
        backbone: an `AlbertBackbone`.
        label_names: optional list of one string, the name of the predicted score.
        dropout: float, dropout before the head; None takes `classifier_dropout`.

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq).
    Outputs (dict): predictions: float32 (batch,) — one score per example,
        no trailing axis.
    Labels for `fit`: float scores (batch,).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "regressor"

    def __init__(self, backbone, label_names=None, dropout=None, **kwargs):
        check_backbone(backbone)
        label_names = check_label_names(label_names, 1, "outputs")

        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(1, backbone, "regressor")

        inputs = backbone_inputs()
        pooled = backbone(inputs)["pooled_output"]  # (batch, H)
        predictions = ops.squeeze(head(dropout_layer(pooled)), axis=-1)  # (batch,)
        super().__init__(inputs=inputs, outputs={"predictions": predictions}, **kwargs)

        self.dropout = rate
        self.head = head
        self.mean_squared_error = keras.metrics.MeanSquaredError(name="mse")
        self._init_task(backbone, label_names, [self.mean_squared_error], dropout=dropout)

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        error = ops.square(ops.cast(y, "float32") - y_pred["predictions"])
        return weighted_mean(error, sample_weight)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        self.mean_squared_error.update_state(
            ops.cast(y, "float32"), y_pred["predictions"], sample_weight=sample_weight
        )
