"""`FinetuneConfig`: every setting of a fine-tuning run, written next to its checkpoint."""

import dataclasses

from albert_tf.pooling import POOLINGS, resolve_pooling
from albert_tf.precision import MIXED_PRECISION_HELP, PRECISIONS
from albert_tf.recipes.names import MULTILABEL_TASK, SENTENCE_TASK_NAMES, TASK_NAMES, WEIGHTED_TASK_NAMES
from albert_tf.utils.config_base import JsonConfig, check_bool, check_fraction, check_non_negative, check_positive
from albert_tf.utils.config_base import check_choice, check_positive_int, doc
from albert_tf.utils.errors import UserError
from input_pipeline.finetuning.squad import MAX_ANSWER_TOKENS, MAX_QUESTION_TOKENS
from input_pipeline.packing import TRUNCATE_FROM

# The original's GLUE rate for ALBERT-base (H 768); the paper used 1e-5 to 5e-5
# up to xxlarge.
_BASE_LEARNING_RATE = 2e-5
_BASE_HIDDEN_SIZE = 768
_NARROW_EXPONENT = 2.0
# LoRA's default rate is this many times the full fine-tuning one. Only the
# factors (which start at B = 0) and the head train, and they need larger
# steps: the LoRA paper used 4e-4 to 5e-4 for RoBERTa-base where full
# fine-tuning takes 1e-5 to 3e-5. On the demo model (H 128, rank 8) 10x
# (7.2e-3) beat 3x and 28x (bench/results/lora_random_embeddings.md,
# the previous demo recipe; not re-swept with the word-embedding factors).
LORA_LEARNING_RATE_FACTOR = 10.0


def default_learning_rate(hidden_size):
    """The fine-tuning rate used when none is given: 2e-5 * max(1, 768 / H) ** 2.

    2e-5 is the original recipe for H >= 768 (base to xxlarge). Narrower
    models need far larger steps: on a 5-class topic task a demo-sized model
    (H 128) did not move in 3 epochs at 2e-5, stayed near chance from random
    init at 1e-4, and learned at 1e-3. Adam moves every weight by
    about the rate whatever its scale, and the effect on an H x H layer's
    output grows with H (the muP argument for rate ~ 1/H), so narrow models
    take larger rates. The exponent 2 is empirical, not that theory's 1: it
    brings H 128 to 7.2e-4, next to the rate that worked, and gives 1.8e-4
    for H 256 and 4.5e-5 for H 512.

    Args:
        hidden_size: the backbone's H.

    Returns:
        float, the peak learning rate.
    """
    if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
        raise UserError(f"`hidden_size` must be a positive integer. Received: hidden_size={hidden_size!r}")
    return _BASE_LEARNING_RATE * max(1.0, _BASE_HIDDEN_SIZE / hidden_size) ** _NARROW_EXPONENT


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(JsonConfig):
    """Settings of one fine-tuning run.

    Defaults follow the original ALBERT GLUE recipe where it has one (AdamW,
    10% warmup then linear decay, weight decay 0.01, batch 32, 3 epochs).
    Each field's meaning is its `help` below (also the command line's help).
    """

    task: str = doc(dataclasses.MISSING, "A name from albert_tf.recipes.RECIPES.")
    max_seq_length: int = doc(128, "Longest input in pieces (batches are padded only to their longest, unless "
                              "fixed-shapes).")
    batch_size: int = doc(32, "Examples per training batch.")
    eval_batch_size: int = doc(64, "Examples per evaluation batch.")
    epochs: int = doc(3, "Passes over the training data; evaluation after each.")
    learning_rate: float | None = doc(None, "Peak rate of the warmup + linear decay schedule (default: "
                                      "2e-5 * max(1, 768 / hidden_size) ** 2, by model width; see resolved).")
    warmup_fraction: float = doc(0.1, "Fraction of all steps spent warming up.")
    weight_decay: float = doc(0.01, "AdamW decay; LayerNorm and bias variables are excluded.")
    dropout: float | None = doc(None, "Dropout before the head (default: the model config's).")
    pooling: str = doc("auto", "What a sentence-level head reads: cls (the pooler on [CLS], the original), mean "
                       "(the mean token state) or auto (cls from H 768 up, mean below; see resolved).",
                       choices=POOLINGS)
    lora_rank: int = doc(0, "Train only rank-R LoRA factors on the attention projections (with the head and the "
                         "word-embedding table's factors, --lora-embedding-rank), the rest of the backbone frozen; "
                         "0 trains every weight. The default learning rate is then 10x the width rule's.")
    lora_embedding_rank: int = doc(2, "With --lora-rank: rank of a LoRA update of the word-embedding table "
                                   "(0: the table stays frozen). Rank 2 brought rank-8 LoRA from 3.1 to 0.2 points "
                                   "below full fine-tuning on the demo model (bench/results/lora.md).")
    mixed_precision: str = doc("auto", MIXED_PRECISION_HELP, choices=PRECISIONS)
    seed: int = doc(0, "Weight init of the head, shuffling and dropout.")
    truncate: bool = doc(False, "Cut texts longer than max-seq-length (counted) instead of failing.")
    truncate_from: str = doc("end", "Which pieces truncation drops (here and in the exported serve_text): end "
                             "(BERT's), start (keeps a text's end) or middle (keeps its first quarter and its "
                             "end: head + tail). Classification and regression tasks.", choices=TRUNCATE_FROM)
    max_windows: int = doc(1, "Classification/regression of single texts: read a text longer than max-seq-length "
                           "as up to this many near-equal windows; each window trains with the text's label and a "
                           "prediction averages its windows' logits (also in the exported serve_text). Beyond "
                           "that, --truncate cuts (by --truncate-from). 1: one window.")
    skip_invalid: bool = doc(False, "Skip bad rows (counted, first reason shown) instead of failing on the first.")
    bucket: bool = doc(True, "Batch training examples of similar length together (not with fixed-shapes: every "
                       "batch is then max-seq-length long).")
    fixed_shapes: bool | None = doc(None, "Give every batch the static shape (batch, max-seq-length) that TPUs and "
                                    "XLA need: the partial last training batch is dropped; the last evaluation and "
                                    "prediction batch is filled with padding rows whose outputs are discarded, so "
                                    "every example is scored. Default: on under a --strategy other than default "
                                    "(where replicas then also get equal shares), off otherwise.")
    text_column: str = doc("text", "Text column of classification/regression tables (CSV/TSV/JSONL).")
    text_pair_column: str | None = doc(None, "Second text column of classification/regression tables.")
    label_column: str = doc("label", "Label column of classification/regression tables.")
    label_names: tuple | None = doc(None, "The label (or tag) set, in class-id order (default: sorted labels "
                                    "of the training file).", flag="labels")
    label_separator: str | None = doc(None, "multilabel: the separator of the labels in a CSV/TSV label cell "
                                      "(e.g. \"|\"); JSON Lines hold a JSON list instead.")
    label_columns: tuple | None = doc(None, "multilabel: one 0/1 column per label, named by its label, instead of "
                                     "--label-column.")
    allow_empty_labels: bool = doc(False, "multilabel: accept rows with no label (otherwise such a row is an "
                                   "error, as it is often a parsing slip).")
    threshold: float | None = doc(None, "multilabel: one decision threshold in (0, 1) for every label, instead of "
                                  "each label's tuned on --eval to maximize its F1.")
    class_weights: str | None = doc(None, "classification, multilabel: weigh each class (multilabel: each label's "
                                    "positives) in the loss: balanced (n / (classes * n_class); multilabel "
                                    "negatives / positives) or a JSON file of label -> weight.")
    metric: str | None = doc(None, "The evaluation metric that picks the best epoch (default: the task's first: "
                             "accuracy, micro_f1 for multilabel, ...).")
    doc_stride: int = doc(128, "SQuAD: stride between the windows of a long context.")
    max_query_length: int = doc(MAX_QUESTION_TOKENS, "SQuAD: question pieces kept.")
    n_best_size: int = doc(20, "SQuAD: candidate spans kept per question.")
    max_answer_length: int = doc(MAX_ANSWER_TOKENS, "SQuAD: longest answer, in pieces.")
    null_score_diff_threshold: float = doc(0.0, "SQuAD v2: answer \"\" when the null score exceeds the best "
                                           "span's by more than this.")

    def __post_init__(self):
        if self.task not in TASK_NAMES:
            raise UserError(f"Unknown task {self.task!r}. Valid tasks: {sorted(TASK_NAMES)}")
        for name in ("max_seq_length", "batch_size", "eval_batch_size", "epochs", "doc_stride", "max_windows",
                     "max_query_length", "n_best_size", "max_answer_length"):
            check_positive_int(name, getattr(self, name))
        check_fraction("warmup_fraction", self.warmup_fraction)
        if self.learning_rate is not None:
            check_positive("learning_rate", self.learning_rate)
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("truncate_from", self.truncate_from, TRUNCATE_FROM)
        check_choice("mixed_precision", self.mixed_precision, PRECISIONS)
        if self.truncate_from != "end" and self.task not in SENTENCE_TASK_NAMES:
            raise UserError(f"`truncate_from` applies to classification and regression tasks; {self.task} "
                             f"cuts its inputs its own way. Received: truncate_from={self.truncate_from!r}")
        if self.max_windows != 1 and self.task not in SENTENCE_TASK_NAMES:
            raise UserError(f"`max_windows` applies to classification and regression tasks; {self.task} "
                             f"cuts its inputs its own way. Received: max_windows={self.max_windows!r}")
        self._check_label_settings()
        for name in ("lora_rank", "lora_embedding_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserError(f"`{name}` must be a non-negative integer (0: off). Received: {name}={value!r}")
        check_non_negative("weight_decay", self.weight_decay)
        if self.dropout is not None:
            check_fraction("dropout", self.dropout, high_open=True)
        for name in ("truncate", "skip_invalid", "bucket"):
            check_bool(name, getattr(self, name))
        if self.fixed_shapes is not None:
            check_bool("fixed_shapes", self.fixed_shapes)

    def _check_label_settings(self):
        """The multilabel and class-weight settings suit the task."""
        multilabel = {"label_separator": self.label_separator, "label_columns": self.label_columns,
                      "allow_empty_labels": self.allow_empty_labels or None, "threshold": self.threshold}
        given = [name for name, value in multilabel.items() if value is not None]
        if given and self.task != MULTILABEL_TASK:
            raise UserError(f"`{given[0]}` applies to --task {MULTILABEL_TASK}. Received: task={self.task!r}")
        if self.threshold is not None and (isinstance(self.threshold, bool) or not 0.0 < self.threshold < 1.0):
            raise UserError(f"`threshold` must be in (0, 1), exclusive. Received: threshold={self.threshold!r}")
        if self.class_weights is not None and self.task not in WEIGHTED_TASK_NAMES:
            raise UserError(f"`class_weights` applies to {' and '.join(WEIGHTED_TASK_NAMES)} tasks. "
                            f"Received: task={self.task!r}")
        if self.task == MULTILABEL_TASK and self.fixed_shapes:
            raise UserError(f"--task {MULTILABEL_TASK} trains with batches padded to their own longest: "
                            "`fixed_shapes` (and so --strategy other than default) is not supported.")

    def resolved(self, model_config, distributed=False):
        """This config with `learning_rate`, `pooling` and `fixed_shapes` fixed.

        Args:
            model_config: the backbone's `AlbertConfig`.
            distributed: whether training runs under a tf.distribute strategy
                other than the default one; `fixed_shapes=None` follows it.
        """
        fixed_shapes = distributed if self.fixed_shapes is None else self.fixed_shapes
        pooling = resolve_pooling(self.pooling, model_config.hidden_size)
        rate = self.learning_rate
        if rate is None:
            rate = default_learning_rate(model_config.hidden_size)
            if self.lora_rank:
                rate *= LORA_LEARNING_RATE_FACTOR
        return dataclasses.replace(self, learning_rate=rate, pooling=pooling, fixed_shapes=fixed_shapes)

    @property
    def pad_to(self):
        """The fixed length of every batch (`max_seq_length` with `fixed_shapes`), else None."""
        return self.max_seq_length if self.fixed_shapes else None

    @property
    def on_error(self):
        return "skip" if self.skip_invalid else "raise"
