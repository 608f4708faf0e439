"""Sentence (and sentence-pair) classification and regression, GLUE style."""

import keras
from keras import ops

from input_pipeline import features
from albert_tf.pooling import resolve_pooling
from albert_tf.models.task_base import AlbertTask
from albert_tf.models.task_heads import (
    backbone_inputs, check_backbone, check_label_names, check_positive, check_weights, head_dropout, output_dense,
    weighted_mean,
)


def pool(encoded, padding_mask, pooling):
    """One vector per example for a sentence-level head.

    "cls" is the original's: the pooler (dense + tanh) on the [CLS] position.
    "mean" averages the sequence output over real tokens; it does not depend
    on the pooler, which only SOP trains in pretraining and which a short
    pretraining run can leave nearly constant across inputs.

    Args:
        encoded: the backbone's outputs, sequence_output (batch, seq, H) and
            pooled_output (batch, H).
        padding_mask: int (batch, seq), 1 at real tokens.
        pooling: "cls" or "mean".

    Returns:
        Float tensor (batch, H).
    """
    if pooling == "cls":
        return encoded["pooled_output"]
    # Summed in float32: a bfloat16 sum over hundreds of tokens loses the mean's low bits.
    sequence = ops.cast(encoded["sequence_output"], "float32")
    mask = ops.cast(padding_mask, "float32")  # (batch, seq)
    # Every example has at least [CLS]; the maximum only guards all-padding rows.
    weights = mask / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)  # (batch, seq), rows sum to 1
    # A weighted sum as one batched matmul: quantized TFLite (16x8 in particular)
    # keeps its precision there, where a masked SUM over the sequence lost it.
    return ops.squeeze(ops.matmul(ops.expand_dims(weights, 1), sequence), 1)  # (batch, H)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifier(AlbertTask):
    """ALBERT with a classification head on the pooled [CLS] output (or the mean token).

    pooled_output -> dropout -> dense(num_classes), as the original
    `run_classifier.py`; `pooling="mean"` feeds the mean of the sequence
    output over real tokens instead. Single sentences use segment 0 only;
    pairs are `[CLS] A [SEP] B [SEP]` with segment 1 for B.

    Args:
        backbone: an `AlbertBackbone`.
        num_classes: int, number of labels.
        label_names: optional list of `num_classes` strings, the name of each
            class id (kept in the config so exports can map ids to labels).
        dropout: float, dropout before the head; None takes the backbone
            config's `classifier_dropout`.
        pooling: "cls" (the pooler on [CLS]), "mean" (see `pool`) or
            "auto": "cls" for backbones of H >= 768, "mean" for narrower ones
            (`resolve_pooling`); the config keeps the resolved choice.
        preprocessor: optional `AlbertPreprocessor`; with it `fit`,
            `evaluate` and `predict` also take raw strings: texts (batch,), or pairs as a tuple
            (texts, text_pairs).
        class_weights: optional list of `num_classes` positive floats: an
            example's cross-entropy is multiplied by its true class's weight
            (Keras' `class_weight`), so rare classes count more.

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq).
    Outputs (dict): logits: float32 (batch, num_classes).
    Labels for `fit`: int class ids (batch,).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "classifier"

    def __init__(self, backbone, num_classes, label_names=None, dropout=None, pooling="auto",
                 preprocessor=None, class_weights=None, **kwargs):
        check_backbone(backbone)
        check_positive("num_classes", num_classes)
        label_names = check_label_names(label_names, num_classes, "num_classes")
        class_weights = check_weights("class_weights", class_weights, num_classes)
        pooling = resolve_pooling(pooling, backbone.config.hidden_size)

        # === Layers ===
        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(num_classes, backbone, "classifier")

        # === Functional graph ===
        inputs = backbone_inputs()
        pooled = pool(backbone(inputs), inputs[features.PADDING_MASK], pooling)  # (batch, H)
        logits = head(dropout_layer(pooled))  # (batch, num_classes)
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        self.num_classes = num_classes
        self.class_weights = class_weights
        self.dropout = rate
        self.pooling = pooling
        self.head = head
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self._init_task(
            backbone, label_names, [self.accuracy], preprocessor, num_classes=num_classes,
            dropout=dropout, pooling=pooling, **({"class_weights": class_weights} if class_weights else {}),
        )

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        ce = keras.losses.sparse_categorical_crossentropy(y, y_pred["logits"], from_logits=True)
        if self.class_weights is not None:
            # mean_i(w[y_i] * ce_i): Keras' `class_weight`, as a per-example weight.
            ce = ce * ops.take(ops.convert_to_tensor(self.class_weights, "float32"), ops.cast(y, "int32"))
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
        pooling: "cls" (the pooler on [CLS]), "mean" (see `pool`) or
            "auto": "cls" for backbones of H >= 768, "mean" for narrower ones
            (`resolve_pooling`); the config keeps the resolved choice.
        preprocessor: optional `AlbertPreprocessor`; with it `fit`,
            `evaluate` and `predict` also take raw strings: texts (batch,), or pairs as a tuple
            (texts, text_pairs).

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq).
    Outputs (dict): predictions: float32 (batch,) — one score per example,
        no trailing axis.
    Labels for `fit`: float scores (batch,).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "regressor"

    def __init__(self, backbone, label_names=None, dropout=None, pooling="auto", preprocessor=None,
                 **kwargs):
        check_backbone(backbone)
        label_names = check_label_names(label_names, 1, "outputs")
        pooling = resolve_pooling(pooling, backbone.config.hidden_size)

        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(1, backbone, "regressor")

        inputs = backbone_inputs()
        pooled = pool(backbone(inputs), inputs[features.PADDING_MASK], pooling)  # (batch, H)
        predictions = ops.squeeze(head(dropout_layer(pooled)), axis=-1)  # (batch,)
        super().__init__(inputs=inputs, outputs={"predictions": predictions}, **kwargs)

        self.dropout = rate
        self.pooling = pooling
        self.head = head
        self.mean_squared_error = keras.metrics.MeanSquaredError(name="mse")
        self._init_task(
            backbone, label_names, [self.mean_squared_error], preprocessor, dropout=dropout,
            pooling=pooling,
        )

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        error = ops.square(ops.cast(y, "float32") - y_pred["predictions"])
        return weighted_mean(error, sample_weight)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        self.mean_squared_error.update_state(
            ops.cast(y, "float32"), y_pred["predictions"], sample_weight=sample_weight
        )
