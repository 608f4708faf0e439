"""`FinetuneConfig`: every setting of a fine-tuning run, written next to its checkpoint."""

import dataclasses
import json

# The original's GLUE rate for ALBERT-base (H 768); the paper used 1e-5 to 5e-5
# up to xxlarge.
_BASE_LEARNING_RATE = 2e-5
_BASE_HIDDEN_SIZE = 768
_NARROW_EXPONENT = 2.0


def default_learning_rate(hidden_size):
    """The fine-tuning rate used when none is given: 2e-5 * max(1, 768 / H) ** 2.

    2e-5 is the original recipe for H >= 768 (base to xxlarge). Narrower
    models need far larger steps: on a 5-class topic task a demo-sized model
    (H 128) did not move in 3 epochs at 2e-5, stayed near chance from random
    init at 1e-4, and learned at 1e-3 (issue 13). Adam moves every weight by
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
        raise ValueError(f"`hidden_size` must be a positive integer. Received: hidden_size={hidden_size!r}")
    return _BASE_LEARNING_RATE * max(1.0, _BASE_HIDDEN_SIZE / hidden_size) ** _NARROW_EXPONENT


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
        learning_rate: peak rate of the warmup + linear decay schedule;
            None picks `default_learning_rate(hidden_size)` for the model
            (see `resolved`).
        warmup_fraction: fraction of all steps spent warming up.
        weight_decay: AdamW decay; LayerNorm and bias variables are excluded.
        dropout: dropout before the head; None keeps the model config's.
        pooling: what a sentence-level head reads: "cls" (the pooler on
            [CLS], the original) or "mean" (mean of the token states).
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
    learning_rate: float | None = None
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    dropout: float | None = None
    pooling: str = "cls"
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
        if self.learning_rate is not None and not (
            isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0
        ):
            raise ValueError(f"`learning_rate` must be positive or None. Received: {self.learning_rate!r}")
        from albert_tf.models.classifier import check_pooling

        check_pooling(self.pooling)

    def resolved(self, model_config):
        """This config with `learning_rate` fixed for `model_config` (an `AlbertConfig`)."""
        if self.learning_rate is not None:
            return self
        return self.replace(learning_rate=default_learning_rate(model_config.hidden_size))

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
