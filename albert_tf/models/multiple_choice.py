"""Multiple choice (RACE style): score each (context, question + option) pair."""

import keras
from keras import ops

from albert_tf.models.task_base import AlbertTask
from albert_tf.models.task_heads import (
    backbone_inputs, check_backbone, check_no_label_names, head_dropout, output_dense, weighted_mean,
)
from input_pipeline import features


@keras.saving.register_keras_serializable(package="albert_tf")
class FoldChoices(keras.layers.Layer):
    """(batch, num_choices, seq) -> (batch * num_choices, seq), for the backbone."""

    def call(self, x):
        return ops.reshape(x, (-1, ops.shape(x)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])


@keras.saving.register_keras_serializable(package="albert_tf")
class UnfoldChoices(keras.layers.Layer):
    """Scores (batch * num_choices, 1) -> (batch, num_choices), num_choices read from `like`."""

    def call(self, scores, like):
        return ops.reshape(scores, (-1, ops.shape(like)[1]))

    def compute_output_shape(self, scores_shape, like_shape):
        return (like_shape[0], like_shape[1])


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMultipleChoice(AlbertTask):
    """ALBERT scoring each choice with one logit from the pooled output.

    Each choice is encoded alone as `[CLS] context [SEP] question + option [SEP]`;
    pooled_output -> dropout -> dense(1) gives its score, and a softmax over a
    question's choices gives the answer, as the original `run_race.py`.
    Any number of choices works; it is read from the inputs' second axis.

    Args:
        backbone: an `AlbertBackbone`.
        label_names: always None (choice ids are positions); accepted so every
            task model has the same config key.
        dropout: float, dropout before the head; None takes `classifier_dropout`.
        preprocessor: optional `AlbertPreprocessor`; with it `fit`,
            `evaluate` and `predict` also take raw strings: a tuple (contexts (batch,), choices
            (batch, num_choices)), each choice the question + option, packed
            `[CLS] context [SEP] choice [SEP]` as the `serve_text` signature.

    Inputs (dict): token_ids, segment_ids, padding_mask: int32
        (batch, num_choices, seq).
    Outputs (dict): logits: float32 (batch, num_choices).
    Labels for `fit`: int index of the right choice (batch,).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "multiple_choice"

    def __init__(self, backbone, label_names=None, dropout=None, preprocessor=None, **kwargs):
        check_backbone(backbone)
        check_no_label_names("AlbertMultipleChoice", label_names, "choices have no labels")

        dropout_layer, rate = head_dropout(backbone, dropout)
        head = output_dense(1, backbone, "choice_scorer")
        fold, unfold = FoldChoices(name="fold_choices"), UnfoldChoices(name="unfold_choices")

        inputs = backbone_inputs(shape=(None, None))
        folded = {name: fold(inputs[name]) for name in features.BACKBONE_INPUTS}
        pooled = backbone(folded)["pooled_output"]  # (batch * num_choices, H)
        scores = head(dropout_layer(pooled))  # (batch * num_choices, 1)
        logits = unfold(scores, inputs[features.TOKEN_IDS])  # (batch, num_choices)
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        self.dropout = rate
        self.head = head
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self._init_task(backbone, None, [self.accuracy], preprocessor, dropout=dropout)

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        ce = keras.losses.sparse_categorical_crossentropy(y, y_pred["logits"], from_logits=True)
        return weighted_mean(ce, sample_weight)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        self.accuracy.update_state(y, y_pred["logits"], sample_weight=sample_weight)
