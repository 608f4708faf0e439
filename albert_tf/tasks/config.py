"""`FinetuneConfig`: every setting of a fine-tuning run, written next to its checkpoint."""

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """Settings of one fine-tuning run.

    Defaults follow the original ALBERT GLUE recipe where it has one (AdamW,
    10% warmup then linear decay, weight decay 0.01, batch 32, 3 epochs).

    Attributes:
        task: a name from `albert_tf.tasks.TASKS`.
        max_seq_length: longest input in pieces (per batch, inputs are padded
            only to the batch's longest; this is the cap).
        batch_size, eval_batch_size: examples per training / evaluation batch.
        epochs: passes over the training data; evaluation after each.
        learning_rate: peak rate of the warmup + linear decay schedule.
        warmup_fraction: fraction of all steps spent warming up.
        weight_decay: AdamW decay; LayerNorm and bias variables are excluded.
        dropout: dropout before the head; None keeps the model config's.
        seed: weight init of the head, shuffling and dropout.
        truncate: cut texts longer than `max_seq_length` (counted and
            reported) instead of failing on them.
        skip_invalid: skip bad rows (counted and reported, with the first
            reason) instead of failing on the first.
        bucket: batch training examples of similar length together.
        text_column, text_pair_column, label_column: column names for the
            generic "classification" / "regression" tasks (CSV/TSV/JSONL).
        label_names: the label set of "classification" / "tagging"; None
            takes the sorted labels of the training file.
        doc_stride, max_query_length: SQuAD windows.
        n_best_size, max_answer_length, null_score_diff_threshold: SQuAD
            post-processing (the threshold only for v2.0).
    """

    task: str
    max_seq_length: int = 128
    batch_size: int = 32
    eval_batch_size: int = 64
    epochs: int = 3
    learning_rate: float = 2e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    dropout: float | None = None
    seed: int = 0
    truncate: bool = False
    skip_invalid: bool = False
    bucket: bool = True
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    label_names: tuple | None = None
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0

    def __post_init__(self):
        from albert_tf.tasks.registry import TASKS

        if self.task not in TASKS:
            raise ValueError(f"Unknown task {self.task!r}. Valid tasks: {sorted(TASKS)}")
        for name in ("max_seq_length", "batch_size", "eval_batch_size", "epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        if not 0.0 <= self.warmup_fraction <= 1.0:
            raise ValueError(f"`warmup_fraction` must be in [0, 1]. Received: {self.warmup_fraction}")
        if self.learning_rate <= 0:
            raise ValueError(f"`learning_rate` must be positive. Received: {self.learning_rate}")

    @property
    def on_error(self):
        return "skip" if self.skip_invalid else "raise"

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        out = dataclasses.asdict(self)
        out["label_names"] = None if self.label_names is None else list(self.label_names)
        return out

    @classmethod
    def from_dict(cls, values):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(f"Unknown fine-tuning config keys {unknown}. Valid keys: {sorted(fields)}")
        values = dict(values)
        if values.get("label_names") is not None:
            values["label_names"] = tuple(values["label_names"])
        return cls(**values)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2)
