"""`FinetuneConfig`: every setting of a fine-tuning run, written next to its checkpoint."""

import dataclasses

from input_pipeline.config_base import JsonConfig, check_bool, check_fraction, check_non_negative, check_positive
from input_pipeline.config_base import check_positive_int, doc


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(JsonConfig):
    """Settings of one fine-tuning run.

    Defaults follow the original ALBERT GLUE recipe where it has one (AdamW,
    10% warmup then linear decay, weight decay 0.01, batch 32, 3 epochs).
    Each field's meaning is its `help` below (also the command line's help).
    """

    task: str = doc(dataclasses.MISSING, "A name from albert_tf.tasks.TASKS.")
    max_seq_length: int = doc(128, "Longest input in pieces (batches are padded only to their longest).")
    batch_size: int = doc(32, "Examples per training batch.")
    eval_batch_size: int = doc(64, "Examples per evaluation batch.")
    epochs: int = doc(3, "Passes over the training data; evaluation after each.")
    learning_rate: float = doc(2e-5, "Peak rate of the warmup + linear decay schedule.")
    warmup_fraction: float = doc(0.1, "Fraction of all steps spent warming up.")
    weight_decay: float = doc(0.01, "AdamW decay; LayerNorm and bias variables are excluded.")
    dropout: float | None = doc(None, "Dropout before the head (default: the model config's).")
    seed: int = doc(0, "Weight init of the head, shuffling and dropout.")
    truncate: bool = doc(False, "Cut texts longer than max-seq-length (counted) instead of failing.")
    skip_invalid: bool = doc(False, "Skip bad rows (counted, first reason shown) instead of failing on the first.")
    bucket: bool = doc(True, "Batch training examples of similar length together.")
    text_column: str = doc("text", "Text column of classification/regression tables (CSV/TSV/JSONL).")
    text_pair_column: str | None = doc(None, "Second text column of classification/regression tables.")
    label_column: str = doc("label", "Label column of classification/regression tables.")
    label_names: tuple | None = doc(None, "The label (or tag) set, in class-id order (default: sorted labels "
                                    "of the training file).", flag="labels")
    doc_stride: int = doc(128, "SQuAD: stride between the windows of a long context.")
    max_query_length: int = doc(64, "SQuAD: question pieces kept.")
    n_best_size: int = doc(20, "SQuAD: candidate spans kept per question.")
    max_answer_length: int = doc(30, "SQuAD: longest answer, in pieces.")
    null_score_diff_threshold: float = doc(0.0, "SQuAD v2: answer \"\" when the null score exceeds the best "
                                           "span's by more than this.")

    def __post_init__(self):
        from albert_tf.tasks.registry import TASKS

        if self.task not in TASKS:
            raise ValueError(f"Unknown task {self.task!r}. Valid tasks: {sorted(TASKS)}")
        for name in ("max_seq_length", "batch_size", "eval_batch_size", "epochs", "doc_stride",
                     "max_query_length", "n_best_size", "max_answer_length"):
            check_positive_int(name, getattr(self, name))
        check_fraction("warmup_fraction", self.warmup_fraction)
        check_positive("learning_rate", self.learning_rate)
        check_non_negative("weight_decay", self.weight_decay)
        if self.dropout is not None:
            check_fraction("dropout", self.dropout, high_open=True)
        for name in ("truncate", "skip_invalid", "bucket"):
            check_bool(name, getattr(self, name))

    @property
    def on_error(self):
        return "skip" if self.skip_invalid else "raise"
