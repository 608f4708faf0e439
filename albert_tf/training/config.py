"""`TrainerConfig`: how a pretraining run optimizes, checkpoints and reports."""

import dataclasses
import json
import math
import os

OPTIMIZERS = ("lamb", "adamw")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Optimization, precision and bookkeeping of a pretraining run.

    Defaults are the paper's recipe (batch 4096, LAMB at 0.00176, 125k steps,
    3,125 warmup steps, clipping to global norm 1.0).

    Attributes:
        global_batch_size: examples per optimizer step, summed over replicas
            and micro-batches. Losses are averaged over exactly these examples.
        num_steps: optimizer steps of the whole run (also where the learning
            rate reaches 0).
        learning_rate: peak learning rate.
        warmup_steps: linear warmup steps; then linear decay to 0 at
            `num_steps` (`albert_tf.schedules.WarmupLinearDecay`).
        optimizer: "lamb" (ALBERT's, for pretraining) or "adamw".
        weight_decay: decay rate; LayerNorm and bias variables are excluded.
        clip_norm: clip the all-reduced gradient to this global norm; 0 turns
            clipping off.
        accumulation_steps: k. Each optimizer step consumes k micro-batches of
            `global_batch_size / k` examples, so a large batch fits small
            hardware; the update equals one step on the whole batch.
        mixed_precision: "float32", "mixed_bfloat16" (TPU, CPU) or
            "mixed_float16" (GPU, with dynamic loss scaling).
        jit_compile: compile each micro-batch's forward and backward pass
            with XLA (about 1.8x faster for the demo's model on 2 CPU
            cores). Off by default: XLA's kernels round differently, so
            runs with and without it agree only to float tolerance.
        remat: recompute each shared block's activations in the backward
            pass instead of keeping them (`AlbertBackbone(remat=True)`):
            less memory per example for about a third more compute; the
            updates are the same. Needs a model without dropout.
        checkpoint_every: steps between checkpoints (one is always written
            at the last step).
        keep_checkpoints: checkpoints kept on disk.
        log_every: steps between progress lines and TensorBoard points.
        seed: seed of the weight initialization (the data has its own).
    """

    global_batch_size: int = 4096
    num_steps: int = 125_000
    learning_rate: float = 0.00176
    warmup_steps: int = 3125
    optimizer: str = "lamb"
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    accumulation_steps: int = 1
    mixed_precision: str = "float32"
    jit_compile: bool = False
    remat: bool = False
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    log_every: int = 100
    seed: int = 0

    def __post_init__(self):
        for name in ("global_batch_size", "num_steps", "accumulation_steps", "checkpoint_every",
                     "keep_checkpoints", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or not (
            0 <= self.warmup_steps <= self.num_steps
        ):
            raise ValueError(
                "`warmup_steps` must be an integer in [0, num_steps]. Received: "
                f"warmup_steps={self.warmup_steps!r}, num_steps={self.num_steps}"
            )
        if self.global_batch_size % self.accumulation_steps:
            raise ValueError(
                "`accumulation_steps` must divide `global_batch_size`. Received: "
                f"accumulation_steps={self.accumulation_steps}, global_batch_size={self.global_batch_size}"
            )
        for name in ("learning_rate", "weight_decay", "clip_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"`{name}` must be a finite non-negative number. Received: {name}={value!r}")
        for name in ("jit_compile", "remat"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False. Received: {name}={getattr(self, name)!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"`optimizer` must be one of {OPTIMIZERS}. Received: optimizer={self.optimizer!r}")
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(
                f"`mixed_precision` must be one of {PRECISIONS}. Received: mixed_precision={self.mixed_precision!r}"
            )

    @property
    def micro_batch_size(self):
        """Examples per micro-batch, summed over replicas."""
        return self.global_batch_size // self.accumulation_steps

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"Unknown TrainerConfig keys {unknown}. Valid keys: {sorted(names)}")
        return cls(**values)

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")

    @classmethod
    def load(cls, path):
        if not os.path.isfile(path):
            raise ValueError(f"No trainer config at {path!r}.")
        with open(path) as f:
            return cls.from_dict(json.load(f))
