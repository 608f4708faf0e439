"""`AlbertPretrainer`: the backbone with its masked-LM and sentence-order heads."""

import keras
from keras import ops

from albert_tf.layers import MaskedLMHead, SentenceOrderHead
from albert_tf.models.task import AlbertTask, check_backbone, check_no_label_names
from input_pipeline import features


def pretraining_losses(labels, outputs):
    """The two pretraining losses, as the original `run_pretraining.py` computes them.

    Args:
        labels: dict with mask_ids (batch, P), mask_weights (batch, P) and
            sentence_order_label (batch,).
        outputs: dict with mlm_logits (batch, P, V) and sop_logits (batch, 2).

    Returns:
        (mlm_loss, sop_loss), float32 scalars. The MLM loss is the mean
        cross-entropy over real masked positions: sum(w * ce) / (sum(w) + 1e-5).
    """
    weights = ops.cast(labels[features.MASK_WEIGHTS], "float32")
    mlm_ce = keras.losses.sparse_categorical_crossentropy(
        labels[features.MASK_IDS], outputs["mlm_logits"], from_logits=True
    )  # (batch, P)
    mlm_loss = ops.sum(mlm_ce * weights) / (ops.sum(weights) + 1e-5)
    sop_ce = keras.losses.sparse_categorical_crossentropy(
        labels[features.SENTENCE_ORDER_LABEL], outputs["sop_logits"], from_logits=True
    )  # (batch,)
    return mlm_loss, ops.mean(sop_ce)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertPretrainer(AlbertTask):
    """ALBERT with the MLM head (tied to the word embeddings) and the SOP head.

    Trains in a plain Keras workflow: `compile(optimizer=...)` then
    `fit(dataset)`, where the dataset yields `(inputs, labels)` as
    `input_pipeline.features.split_pretraining_example` makes them. The loss is
    MLM + SOP; the metrics are both losses and both accuracies.

    Args:
        backbone: an `AlbertBackbone`.
        label_names: must be None (kept for the task-model config contract).

    Inputs (dict):
        token_ids, segment_ids, padding_mask: int32 (batch, seq).
        mask_positions: int32 (batch, P).

    Outputs (dict):
        mlm_logits: float32 (batch, P, V).
        sop_logits: float32 (batch, 2).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "pretrainer"

    def __init__(self, backbone, label_names=None, **kwargs):
        check_backbone(backbone)
        check_no_label_names("AlbertPretrainer", label_names, "it predicts tokens and order")
        c = backbone.config

        # === Layers ===
        mlm_head = MaskedLMHead(
            backbone.word_embeddings, c.hidden_act, c.initializer_range, c.layer_norm_eps,
            dtype=backbone.dtype_policy, name="mlm_head",
        )
        sop_head = SentenceOrderHead(
            c.initializer_range, dtype=backbone.dtype_policy, name="sop_head"
        )

        # === Functional graph ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in features.PRETRAINING_INPUTS
        }
        encoded = backbone({name: inputs[name] for name in features.BACKBONE_INPUTS})
        outputs = {
            "mlm_logits": mlm_head(encoded["sequence_output"], inputs[features.MASK_POSITIONS]),
            "sop_logits": sop_head(encoded["pooled_output"]),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Handles and metrics ===
        self.mlm_head = mlm_head
        self.sop_head = sop_head
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.sop_loss_tracker = keras.metrics.Mean(name="sop_loss")
        self.mlm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")
        self.sop_accuracy = keras.metrics.SparseCategoricalAccuracy(name="sop_accuracy")
        self._init_task(
            backbone,
            None,
            [self.mlm_loss_tracker, self.sop_loss_tracker, self.mlm_accuracy, self.sop_accuracy],
        )

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        _check_labels(y)
        mlm_loss, sop_loss = pretraining_losses(y, y_pred)
        return mlm_loss + sop_loss

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        mlm_loss, sop_loss = pretraining_losses(y, y_pred)
        self.mlm_loss_tracker.update_state(mlm_loss)
        self.sop_loss_tracker.update_state(sop_loss)
        self.mlm_accuracy.update_state(
            y[features.MASK_IDS], y_pred["mlm_logits"], sample_weight=y[features.MASK_WEIGHTS]
        )
        self.sop_accuracy.update_state(y[features.SENTENCE_ORDER_LABEL], y_pred["sop_logits"])


def _check_labels(y):
    if not isinstance(y, dict) or not all(k in y for k in features.PRETRAINING_LABELS):
        raise ValueError(
            f"AlbertPretrainer needs labels {features.PRETRAINING_LABELS} as a dict. "
            f"Received: {sorted(y) if isinstance(y, dict) else type(y).__name__}"
        )
