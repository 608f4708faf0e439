"""Learning-rate schedules used to pretrain and fine-tune ALBERT."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="albert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then linear decay to 0, as in ALBERT's `optimization.py`.

    The original builds the rate from two pieces and switches between them:

        decayed = peak * (1 - min(step, total_steps) / total_steps)
        warmup  = peak * step / warmup_steps
        lr      = warmup if step < warmup_steps else decayed

    The decay is `tf.train.polynomial_decay(power=1, end_learning_rate=0)`
    measured over ALL `total_steps` from step 0, not over the steps left after
    warmup. So the rate does not reach `peak` at the end of warmup: it jumps
    from `peak * (warmup_steps - 1) / warmup_steps` to
    `peak * (1 - warmup_steps / total_steps)`. We keep that shape on purpose
    so that runs reproduce the original's recipe (3,125 warmup steps out of
    125,000 makes the jump 2.5% of `peak`). After `total_steps` the rate
    stays at 0, never negative.

    Keras optimizers call the schedule with `optimizer.iterations` before
    incrementing it, so the very first update uses `lr(0) == 0` when
    `warmup_steps > 0`; the original's global step behaved the same way.

    Args:
        peak_learning_rate: float, the rate the warmup ramps towards and the
            decay starts from (the original's `init_lr`; 0.00176 in the
            paper's recipe).
        warmup_steps: int, number of warmup steps. 0 disables warmup.
        total_steps: int, step at which the rate reaches 0 (the original's
            `num_train_steps`). Must be at least `warmup_steps` and positive.

    Call arguments:
        step: scalar integer tensor, the optimizer's iteration count.

    Returns:
        A float32 scalar tensor, the learning rate for `step`.
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps):
        if peak_learning_rate < 0:
            raise ValueError(
                "`peak_learning_rate` must be non-negative. Received: "
                f"peak_learning_rate={peak_learning_rate}"
            )
        if not isinstance(total_steps, int) or total_steps < 1:
            raise ValueError(
                "`total_steps` must be a positive integer. Received: "
                f"total_steps={total_steps!r}"
            )
        if not isinstance(warmup_steps, int) or not (
            0 <= warmup_steps <= total_steps
        ):
            raise ValueError(
                "`warmup_steps` must be an integer in [0, total_steps]. "
                f"Received: warmup_steps={warmup_steps!r}, "
                f"total_steps={total_steps}"
            )
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        # float32 counts steps exactly up to 2**24, far beyond any recipe.
        step = ops.cast(step, "float32")
        peak = ops.cast(self.peak_learning_rate, "float32")
        progress = ops.minimum(step, float(self.total_steps)) / self.total_steps
        decayed = peak * (1.0 - progress)
        if self.warmup_steps == 0:
            return decayed
        warmup = peak * step / float(self.warmup_steps)
        return ops.where(step < float(self.warmup_steps), warmup, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }
