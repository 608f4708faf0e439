"""`AlbertPretrainer`: the backbone with its masked-LM and sentence-order heads."""

import keras
from keras import ops

from albert_tf.layers import MaskedLMHead, SentenceOrderHead
from albert_tf.models.task_base import AlbertTask
from albert_tf.models.task_heads import check_backbone, check_no_label_names
from input_pipeline import features


# The original's MLM denominator: sum(w) + 1e-5, so a batch without masks gives 0, not NaN.
MLM_EPSILON = 1e-5
SUM_NAMES = ("mlm_ce", "mlm_correct", "mlm_weight", "sop_ce", "sop_correct", "sop_examples")


def pretraining_sums(labels, outputs):
    """Sums over a batch from which the pretraining losses and accuracies follow.

    Sums, not means, so a caller can add them over micro-batches and replicas
    and normalise once by the global totals (see `losses_from_sums`).

    Args:
        labels: dict with mask_ids (batch, P), mask_weights (batch, P) and
            sentence_order_label (batch,).
        outputs: dict with mlm_logits (batch, P, V) and sop_logits (batch, 2).

    Returns:
        dict of float32 scalars named `SUM_NAMES`: mlm_ce = sum(w * ce),
        mlm_correct = sum(w * [argmax == id]), mlm_weight = sum(w),
        sop_ce = sum(ce), sop_correct, sop_examples = batch.
    """
    weights = ops.cast(labels[features.MASK_WEIGHTS], "float32")
    mask_ids = ops.cast(labels[features.MASK_IDS], "int32")
    order = ops.cast(labels[features.SENTENCE_ORDER_LABEL], "int32")
    # float32 cross-entropy even under mixed precision: a bfloat16 log-softmax
    # over the vocabulary loses the small differences the loss is made of.
    mlm_logits = ops.cast(outputs["mlm_logits"], "float32")
    sop_logits = ops.cast(outputs["sop_logits"], "float32")
    mlm_ce = keras.losses.sparse_categorical_crossentropy(mask_ids, mlm_logits, from_logits=True)  # (batch, P)
    sop_ce = keras.losses.sparse_categorical_crossentropy(order, sop_logits, from_logits=True)  # (batch,)
    mlm_hit = ops.cast(ops.equal(ops.cast(ops.argmax(mlm_logits, -1), "int32"), mask_ids), "float32")
    sop_hit = ops.cast(ops.equal(ops.cast(ops.argmax(sop_logits, -1), "int32"), order), "float32")
    return {
        "mlm_ce": ops.sum(weights * mlm_ce),
        "mlm_correct": ops.sum(weights * mlm_hit),
        "mlm_weight": ops.sum(weights),
        "sop_ce": ops.sum(sop_ce),
        "sop_correct": ops.sum(sop_hit),
        "sop_examples": ops.cast(ops.shape(order)[0], "float32"),
    }


def metrics_from_sums(sums):
    """Accuracies and mean losses of `pretraining_sums` added over batches (Python floats).

    Returns:
        dict: mlm_accuracy and mlm_loss over the real masked positions (0.0
        where there are none), sop_accuracy and sop_loss over the examples.
    """
    masked = max(sums["mlm_weight"], 1.0)
    return {
        "mlm_accuracy": sums["mlm_correct"] / masked,
        "mlm_loss": sums["mlm_ce"] / masked,
        "sop_accuracy": sums["sop_correct"] / sums["sop_examples"],
        "sop_loss": sums["sop_ce"] / sums["sop_examples"],
    }


def losses_from_sums(sums, total_weight, total_examples):
    """(mlm_loss, sop_loss) of `sums`' share of a mean over `total_*`.

    With the batch's own totals this is the batch mean; with the totals of a
    whole step (all micro-batches, all replicas) it is this batch's share of
    the step's mean, so the shares' gradients add up to the mean's.

    Args:
        sums: `pretraining_sums` of a batch (or their sum over batches).
        total_weight: float32 scalar, sum of the mask weights of the mean.
        total_examples: float32 scalar, number of examples of the mean.

    Returns:
        (mlm_loss, sop_loss), float32 scalars: sum(w * ce) / (total_weight +
        MLM_EPSILON) and sum(sop_ce) / total_examples, as the original
        `run_pretraining.py`.
    """
    return sums["mlm_ce"] / (total_weight + MLM_EPSILON), sums["sop_ce"] / total_examples


def pretraining_losses(labels, outputs):
    """(mlm_loss, sop_loss), float32 scalars: the batch means (see `losses_from_sums`)."""
    sums = pretraining_sums(labels, outputs)
    return losses_from_sums(sums, sums["mlm_weight"], sums["sop_examples"])


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

    loads_pretraining_heads = True

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "pretrainer"

    def __init__(self, backbone, label_names=None, **kwargs):
        check_backbone(backbone)
        check_no_label_names("AlbertPretrainer", label_names, "it predicts tokens and order")
        c = backbone.config

        # === Layers ===
        mlm_head = MaskedLMHead(
            word_embeddings=backbone.word_embeddings,
            activation=c.hidden_act,
            initializer_range=c.initializer_range,
            layer_norm_eps=c.layer_norm_eps,
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )
        sop_head = SentenceOrderHead(initializer_range=c.initializer_range, dtype=backbone.dtype_policy, name="sop_head")

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
