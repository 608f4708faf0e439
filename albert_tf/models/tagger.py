"""Token classification (tagging): one label per word piece."""

import keras
from keras import ops

from albert_tf.models.task_base import AlbertTask
from albert_tf.models.task_heads import (
    backbone_inputs, check_backbone, check_label_names, check_positive, head_dropout, output_dense,
)
from input_pipeline import features
from input_pipeline.features import IGNORE_LABEL


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTagger(AlbertTask):
    """ALBERT with a per-piece classification head on the sequence output.

    sequence_output -> dropout -> dense(num_labels). A word's tag is predicted
    at its first piece (the featurizer labels only that piece).

    Args:
        backbone: an `AlbertBackbone`.
        num_labels: int, number of tags.
        label_names: optional list of `num_labels` tag names (e.g. "B-PER").
        dropout: float, dropout before the head; None takes `classifier_dropout`.
        preprocessor: optional `AlbertPreprocessor`; with it `predict` takes
            raw strings (batch,) and returns logits over the packed pieces
            (`preprocessor(texts)` gives those pieces). `fit` and `evaluate`
            take token ids only: see `text_labels_reason`.

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq).
    Outputs (dict): logits: float32 (batch, seq, num_labels).
    Labels for `fit`: int tag ids (batch, seq), `IGNORE_LABEL` where no tag.
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "tagger"
    text_labels_reason = (
        "its labels are one tag per word piece, a layout raw strings do not have; tokenize and "
        "label with the featurizer (`albert-tf finetune` data) and fit on token ids."
    )

    def __init__(self, backbone, num_labels, label_names=None, dropout=None, preprocessor=None,
                 **kwargs):
        check_backbone(backbone)
        check_positive("num_labels", num_labels)
        label_names = check_label_names(label_names, num_labels, "num_labels")

        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(num_labels, backbone, "tagger")

        inputs = backbone_inputs()
        sequence = backbone(inputs)["sequence_output"]  # (batch, seq, H)
        logits = head(dropout_layer(sequence))  # (batch, seq, num_labels)
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        self.num_labels = num_labels
        self.dropout = rate
        self.head = head
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self._init_task(
            backbone, label_names, [self.accuracy], preprocessor, num_labels=num_labels,
            dropout=dropout,
        )

    def _labels_and_weights(self, y, x, sample_weight):
        """Ignored positions get label 0 and weight 0. Returns: (labels, weights), (batch, seq)."""
        y = ops.cast(y, "int32")
        weights = ops.cast(ops.not_equal(y, IGNORE_LABEL), "float32")
        if x is not None:
            weights = weights * ops.cast(x[features.PADDING_MASK], "float32")
        if sample_weight is not None:
            weights = weights * ops.expand_dims(ops.cast(sample_weight, "float32"), -1)
        return ops.where(ops.equal(y, IGNORE_LABEL), 0, y), weights

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        labels, weights = self._labels_and_weights(y, x, sample_weight)
        ce = keras.losses.sparse_categorical_crossentropy(
            labels, y_pred["logits"], from_logits=True
        )  # (batch, seq)
        # Mean over tagged pieces, so long and short batches weigh each tag alike.
        return ops.sum(ce * weights) / ops.maximum(ops.sum(weights), 1.0)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        labels, weights = self._labels_and_weights(y, x, sample_weight)
        self.accuracy.update_state(labels, y_pred["logits"], sample_weight=weights)
