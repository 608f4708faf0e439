"""Gradient accumulation over micro-batches for the custom training loop."""

import tensorflow as tf


class GradientAccumulator:
    """Sums gradients of several micro-batches to emulate one large batch.

    Create it under the same `strategy.scope()` as the model. Each replica
    keeps its own sums (sync-on-read variables), so `accumulate()` inside
    `strategy.run` never talks across devices; the one all-reduce happens
    when the optimizer applies `gradients()`. With per-micro-batch losses that
    are means over the micro-batch, `gradients(k)` after k micro-batches of
    equal size equals the gradient of the mean loss over all of them.

    Args:
        variables: list of trainable variables (e.g.
            `model.trainable_variables`); one zero-initialized float32
            accumulator is made per variable, with the same shape.

    Example:

        accumulator = GradientAccumulator(model.trainable_variables)
        for micro_batch in micro_batches:            # inside strategy.run
            accumulator.accumulate(tape.gradient(loss, variables))
        optimizer.apply(accumulator.gradients(len(micro_batches)), variables)
        accumulator.reset()
    """

    def __init__(self, variables):
        self._accumulators = [
            tf.Variable(
                # float32 sums even for float16 gradients: many small
                # micro-batch contributions would lose bits in half precision.
                tf.zeros(variable.shape, dtype="float32"),
                trainable=False,
                name="accumulated_gradient",
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
            )
            for variable in variables
        ]

    @property
    def variables(self):
        """The accumulator variables, one per tracked variable."""
        return list(self._accumulators)

    def accumulate(self, gradients):
        """Adds one micro-batch's gradients to the running sums.

        Args:
            gradients: list aligned with the constructor's `variables`; a
                `None` entry (variable unused by the loss) adds nothing.
        """
        if len(gradients) != len(self._accumulators):
            raise ValueError(
                "`gradients` must have one entry per accumulated variable "
                f"({len(self._accumulators)}). Received: "
                f"len(gradients)={len(gradients)}"
            )
        for accumulator, gradient in zip(self._accumulators, gradients):
            if gradient is None:
                continue
            # IndexedSlices from embedding lookups are densified: the sum is
            # dense anyway once two micro-batches touch different rows.
            gradient = tf.convert_to_tensor(gradient)
            accumulator.assign_add(tf.cast(gradient, "float32"))

    def gradients(self, num_micro_batches):
        """Returns the accumulated gradients averaged over micro-batches.

        Args:
            num_micro_batches: int >= 1, how many `accumulate()` calls since
                the last `reset()`.

        Returns:
            List of float32 tensors, one per variable, each shaped like it.
            Call it in the replica context (inside `strategy.run`): there it
            reads this replica's sums, which the optimizer then all-reduces.
        """
        if (
            not isinstance(num_micro_batches, int)
            or isinstance(num_micro_batches, bool)
            or num_micro_batches < 1
        ):
            raise ValueError(
                "`num_micro_batches` must be a positive integer. Received: "
                f"num_micro_batches={num_micro_batches!r}"
            )
        return [
            accumulator.read_value() / num_micro_batches
            for accumulator in self._accumulators
        ]

    def reset(self):
        """Sets every accumulator back to zero."""
        for accumulator in self._accumulators:
            accumulator.assign(tf.zeros(accumulator.shape, "float32"))
