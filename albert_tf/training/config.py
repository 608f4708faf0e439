"""`TrainerConfig`: how a pretraining run optimizes, checkpoints and reports."""

import dataclasses

from albert_tf.precision import COMPILE_STEPS, MIXED_PRECISION_HELP, PRECISIONS
from albert_tf.utils import files
from albert_tf.utils.config_base import (
    JsonConfig, check_bool, check_choice, check_fraction, check_int_in, check_non_negative, check_positive_int, doc,
)
from albert_tf.utils.errors import UserError

OPTIMIZERS = ("lamb", "adamw")
# Word-embedding starts (albert_tf.training.embedding_init); chosen by the commands that hold the text.
EMBEDDING_INITS = ("random", "ppmi-svd")


# The paper's warmup, 3,125 of 125,000 steps, as a share of any run's length.
DEFAULT_WARMUP_FRACTION = 0.025


@dataclasses.dataclass(frozen=True)
class TrainerConfig(JsonConfig):
    """Optimization, precision and bookkeeping of a pretraining run.

    Defaults are the paper's recipe (batch 4096, LAMB at 0.00176, 125k steps,
    2.5% warmup = 3,125 steps, clipping to global norm 1.0). Each field's
    meaning is its `help` below (also the command line's help).
    """

    global_batch_size: int = doc(4096, "Examples per optimizer step, summed over replicas and micro-batches; "
                                 "losses are averaged over exactly these.", flag="batch-size")
    num_steps: int = doc(125_000, "Optimizer steps of the whole run (where the learning rate reaches 0).",
                         flag="steps")
    learning_rate: float = doc(0.00176, "Peak learning rate.")
    warmup_steps: int | None = doc(None, "Linear warmup steps, then linear decay to 0 at the last step "
                                   "(default: warmup_fraction of the steps).")
    warmup_fraction: float = doc(DEFAULT_WARMUP_FRACTION, "Share of the steps spent warming up when "
                                 "warmup_steps is not given (the paper's 3,125/125,000).")
    optimizer: str = doc("lamb", "lamb (ALBERT's, for pretraining) or adamw.", choices=OPTIMIZERS)
    weight_decay: float = doc(0.01, "Decay rate; LayerNorm and bias variables are excluded.")
    word_embedding_lr_scale: float = doc(1.0, "Factor on the learning rate of the V x E word-embedding table (also "
                                         "the tied MLM decoder's weights); below 1 keeps a table started from "
                                         "--embedding-init ppmi-svd nearer its start.")
    clip_norm: float = doc(1.0, "Clip the all-reduced gradient to this global norm; 0 turns clipping off.")
    accumulation_steps: int = doc(1, "k: each step consumes k micro-batches of batch-size/k examples; the "
                                  "update equals one step on the whole batch.")
    # "auto" is resolved with compile_step by `albert_tf.precision.choose_precision`.
    mixed_precision: str = doc("auto", MIXED_PRECISION_HELP, choices=PRECISIONS)
    # Runs with different settings agree only to float tolerance: XLA's
    # kernels round differently. "auto" picks by strategy and precision (`choose_precision`).
    compile_step: str = doc("auto", "What XLA compiles: whole (a replica's forward, backward, all-reduce, "
                            "clipping, accumulation and LAMB update as one program), forward (each micro-batch's "
                            "forward and backward pass only), none, or auto: none for mixed_bfloat16 on a CPU with "
                            "bfloat16 units (XLA's CPU backend does not use them), else whole on a TPU and on one "
                            "device, forward where XLA cannot compile the all-reduce (several CPU/GPU replicas).",
                            choices=COMPILE_STEPS)
    steps_per_loop: int = doc(10, "Optimizer steps per call into TensorFlow (a graph loop "
                              "over the input iterator), with metrics read once per loop; loops end early at "
                              "checkpoints, progress lines and the last step, so results do not depend on it.")
    remat: bool = doc(False, "Recompute each shared block's activations in the backward pass instead of keeping "
                      "them: less memory for about a third more compute, same updates; needs a model without dropout.")
    checkpoint_every: int = doc(1000, "Steps between checkpoints (one is always written at the last step).")
    keep_checkpoints: int = doc(3, "Checkpoints kept on disk.")
    log_every: int = doc(100, "Steps between progress lines and TensorBoard points.")
    # Evaluations land on progress lines, so their numbers share a line, a log record and a TensorBoard step.
    eval_every: int | None = doc(None, "Steps between evaluations on held-out data (--eval-data), a multiple of "
                                 "log_every; one more at the last step. None: no evaluation.")
    eval_steps: int = doc(10, "Batches (of batch-size / accumulation-steps examples) each evaluation reads: the "
                          "same examples every time.")
    seed: int = doc(0, "Seed of the weight initialization (and of the data).")

    def __post_init__(self):
        for name in ("global_batch_size", "num_steps", "accumulation_steps", "checkpoint_every",
                     "keep_checkpoints", "log_every", "steps_per_loop", "eval_steps"):
            check_positive_int(name, getattr(self, name))
        if self.eval_every is not None:
            check_positive_int("eval_every", self.eval_every)
            if self.eval_every % self.log_every:
                raise UserError(
                    "`eval_every` must be a multiple of `log_every` (evaluations are reported on progress lines). "
                    f"Received: eval_every={self.eval_every}, log_every={self.log_every}"
                )
        if self.warmup_steps is not None:
            check_int_in("warmup_steps", self.warmup_steps, 0, self.num_steps, high_name="num_steps")
        check_fraction("warmup_fraction", self.warmup_fraction)
        if self.global_batch_size % self.accumulation_steps:
            raise UserError(
                "`accumulation_steps` must divide `global_batch_size`. Received: "
                f"accumulation_steps={self.accumulation_steps}, global_batch_size={self.global_batch_size}"
            )
        for name in ("learning_rate", "weight_decay", "clip_norm", "word_embedding_lr_scale"):
            check_non_negative(name, getattr(self, name))
        check_choice("compile_step", self.compile_step, COMPILE_STEPS)
        check_bool("remat", self.remat)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("mixed_precision", self.mixed_precision, PRECISIONS)

    @property
    def num_warmup_steps(self):
        """`warmup_steps` when given, else `warmup_fraction` of `num_steps`."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return int(round(self.warmup_fraction * self.num_steps))

    @property
    def micro_batch_size(self):
        """Examples per micro-batch, summed over replicas."""
        return self.global_batch_size // self.accumulation_steps

    @classmethod
    def load(cls, path):
        if not files.isfile(path):
            raise UserError(f"No trainer config at {path!r}.")
        return super().load(path)
