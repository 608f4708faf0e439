"""Extractive question answering (SQuAD v1.1 and v2.0)."""

import keras
from keras import ops

from albert_tf.layers.common import padding_bias
from albert_tf.models.task_base import AlbertTask
from albert_tf.models.task_heads import backbone_inputs, check_backbone, check_no_label_names, output_dense
from input_pipeline import features
from input_pipeline.finetuning.squad import MAX_QUESTION_TOKENS

START_POSITIONS = "start_positions"  # int32 (batch,): first answer piece, 0 = no answer
END_POSITIONS = "end_positions"  # int32 (batch,): last answer piece (inclusive), 0 = no answer


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertQuestionAnswerer(AlbertTask):
    """ALBERT with a span head: a start and an end logit for every piece.

    sequence_output -> dense(2) -> (start, end), as BERT's `run_squad.py`.
    For SQuAD v2.0 the no-answer score is start_logits[:, 0] + end_logits[:, 0]
    (the [CLS] position), and unanswerable training examples point both
    positions at 0. Padding positions get -10000 added, so they never win a
    softmax and carry no loss.

    Args:
        backbone: an `AlbertBackbone`.
        label_names: always None (spans have no label set); accepted so every
            task model has the same config key.
        preprocessor: optional `AlbertPreprocessor` (`max_first_length=MAX_QUESTION_TOKENS`
            packs as the `serve_text` signature); with it `predict` takes a
            tuple (questions, contexts) of raw strings and returns the logits
            over the packed pieces. `fit` and `evaluate` take token ids only:
            see `text_labels_reason`.

    Inputs (dict): token_ids, segment_ids, padding_mask: int32 (batch, seq),
        laid out as `[CLS] question [SEP] context [SEP]`.
    Outputs (dict): start_logits, end_logits: float32 (batch, seq).
    Labels for `fit`: dict with `start_positions`, `end_positions` int32 (batch,).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "question_answering"
    text_labels_reason = (
        "its labels are answer positions in word pieces, found by the SQuAD featurizer "
        "(character spans, document windows); fit on its token ids."
    )

    def __init__(self, backbone, label_names=None, preprocessor=None, **kwargs):
        check_backbone(backbone)
        check_no_label_names("AlbertQuestionAnswerer", label_names, "spans have no labels")

        head = output_dense(2, backbone, "span_head")

        inputs = backbone_inputs()
        sequence = backbone(inputs)["sequence_output"]  # (batch, seq, H)
        logits = head(sequence)  # (batch, seq, 2)
        start_logits, end_logits = ops.split(logits, 2, axis=-1)  # 2 x (batch, seq, 1)
        # The attention's padding bias: finite everywhere, and padding never wins.
        bias = padding_bias(inputs[features.PADDING_MASK])  # (batch, seq)
        outputs = {
            "start_logits": ops.squeeze(start_logits, axis=-1) + bias,  # (batch, seq)
            "end_logits": ops.squeeze(end_logits, axis=-1) + bias,  # (batch, seq)
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        self.head = head
        self.start_accuracy = keras.metrics.SparseCategoricalAccuracy(name="start_accuracy")
        self.end_accuracy = keras.metrics.SparseCategoricalAccuracy(name="end_accuracy")
        self._init_task(backbone, None, [self.start_accuracy, self.end_accuracy], preprocessor)

    def default_preprocessor(self, tokenizer):
        """As the task's, with the question cut first as the `serve_text` signature cuts it."""
        preprocessor = super().default_preprocessor(tokenizer)
        return type(preprocessor).from_config(
            {**preprocessor.get_config(), "max_first_length": MAX_QUESTION_TOKENS}
        )

    def _check_labels(self, y):
        if not isinstance(y, dict) or START_POSITIONS not in y or END_POSITIONS not in y:
            raise ValueError(
                f"AlbertQuestionAnswerer needs labels {{{START_POSITIONS!r}, {END_POSITIONS!r}}} "
                f"as a dict. Received: {sorted(y) if isinstance(y, dict) else type(y).__name__}"
            )

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        self._check_labels(y)
        start = keras.losses.sparse_categorical_crossentropy(
            y[START_POSITIONS], y_pred["start_logits"], from_logits=True
        )
        end = keras.losses.sparse_categorical_crossentropy(
            y[END_POSITIONS], y_pred["end_logits"], from_logits=True
        )
        loss = (start + end) / 2.0  # (batch,)
        if sample_weight is not None:
            loss = loss * ops.cast(sample_weight, "float32")
        return ops.mean(loss)

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        self._check_labels(y)
        self.start_accuracy.update_state(y[START_POSITIONS], y_pred["start_logits"], sample_weight)
        self.end_accuracy.update_state(y[END_POSITIONS], y_pred["end_logits"], sample_weight)
