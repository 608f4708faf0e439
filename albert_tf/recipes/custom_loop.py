"""Fine-tuning epochs in a `strategy.run` loop, for the strategies Keras' `fit` does not run under.

Keras 3's `model.fit` does not run under `MultiWorkerMirroredStrategy`.
`CustomLoop` takes the step `fit` takes, with the same compiled task model and
optimizer: the forward pass with training=True, the task model's own loss
(`compute_loss`, which returns this replica's share of the global batch's
mean), the gradients, and `optimizer.apply`, which all-reduces them and then
clips the sum to the global norm (`clip_after_all_reduce`) before AdamW's
update. Every worker ends each step with the same weights.

Input: every worker builds the whole epoch's dataset of global batches (the
same seeded order everywhere: fine-tuning data are in memory, so there are no
files to shard) and keeps the rows of its own replicas. A step then trains on
exactly the global batch one device would, whatever the number of workers.

Evaluation and saving run outside the strategy, on `local_model()`: a copy of
the task model whose variables are plain, local ones. Keras' `predict` under
the strategy would shard and gather the evaluation batches across workers; on
the copy every worker scores every example alone, with no collective, and
all of them get the same scores from the same weights.
"""

import warnings

import keras
import tensorflow as tf

from albert_tf.models.task_base import POOLER_WITHOUT_GRADIENT
from albert_tf.utils.errors import UserError


def needs_custom_loop(strategy):
    """Whether fine-tuning under `strategy` trains with `CustomLoop` instead of `model.fit`."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


class CustomLoop:
    """Trains a compiled task model with `strategy.run`, one epoch per call.

    Args:
        model: a task model compiled with its optimizer, built under
            `strategy.scope()`.
        strategy: the `tf.distribute.Strategy` it was built under.
        global_batch_size: examples per step over all replicas; a multiple
            of `strategy.num_replicas_in_sync`.

    Raises:
        ValueError: `global_batch_size` does not split evenly across the replicas.
    """

    def __init__(self, model, strategy, global_batch_size):
        replicas = strategy.num_replicas_in_sync
        if global_batch_size % replicas:
            raise UserError(
                f"`batch_size` is the global batch and must be a multiple of the {replicas} replicas "
                f"of {type(strategy).__name__}. Received: batch_size={global_batch_size}"
            )
        self.model, self.strategy, self.global_batch_size = model, strategy, global_batch_size
        with strategy.scope():
            # Here, not on the first step: variables are made in the strategy's
            # scope, not inside `strategy.run` (what `fit` does before it trains).
            model.optimizer.build(model.trainable_variables)
        self._step = tf.function(self._distributed_step)
        self._local = None

    def train_epoch(self, dataset_fn, stop=None):
        """One pass over the epoch's global batches, or its first steps up to a stop.

        Args:
            dataset_fn: called with no argument, returns a `tf.data.Dataset`
                of (inputs, labels) global batches of static shape
                (global_batch_size, ...), in the same order on every worker.
            stop: optional `fn() -> bool`, asked after every step on every
                worker (it must agree across them): True ends the pass there.

        Returns:
            (the mean training loss over the steps taken (`fit`'s "loss"), the number of steps).
        """
        batches = self.strategy.distribute_datasets_from_function(
            lambda context: _replica_rows(dataset_fn(), context, self.global_batch_size)
        )
        total, steps = tf.constant(0.0), 0
        with warnings.catch_warnings():
            # Heads that read the sequence output leave the pooler without a gradient, as in `fit`.
            warnings.filterwarnings("ignore", message=POOLER_WITHOUT_GRADIENT)
            for batch in batches:
                total += self._step(batch)
                steps += 1
                if stop is not None and stop():
                    break
        if not steps:
            raise ValueError("The training dataset gave no batch.")
        return float(total) / steps, steps

    def local_model(self):
        """The task model with this worker's copy of the current weights, in plain variables.

        Built once, refreshed on each call. Evaluate and save it: it runs
        outside the strategy and needs no other worker.
        """
        if self._local is None:
            self._local = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(self.model))
        self._local.set_weights(self.model.get_weights())
        return self._local

    def _distributed_step(self, batch):
        """One optimizer step on a distributed (inputs, labels) batch; returns the global batch's mean loss."""
        shares = self.strategy.run(self._replica_step, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None)

    def _replica_step(self, inputs, labels):
        """Keras' `train_step` without its metrics: returns this replica's share of the loss."""
        model = self.model
        with tf.GradientTape() as tape:
            outputs = model(inputs, training=True)
            share = model.compute_loss(x=inputs, y=labels, y_pred=outputs, training=True)
            scaled = model.optimizer.scale_loss(share)
        variables = model.trainable_variables
        model.optimizer.apply(tape.gradient(scaled, variables), variables)
        return share


def _replica_rows(dataset, context, global_batch_size):
    """The rows of each global batch that the replicas of this input pipeline train on.

    Args:
        dataset: global batches, every tensor (global_batch_size, ...).
        context: the `tf.distribute.InputContext` of this worker's pipeline.

    Returns:
        A dataset of per-replica batches (global_batch_size / replicas, ...):
        for each global batch, one for each of this pipeline's replicas in
        turn, which `distribute_datasets_from_function` hands out in that order.
    """
    replicas = context.num_replicas_in_sync
    per_replica = context.get_per_replica_batch_size(global_batch_size)
    local = replicas // context.num_input_pipelines
    first = context.input_pipeline_id * local

    def split(*batch):
        def rows(tensor):
            # (global_batch, ...) -> (replicas, per_replica, ...) -> this pipeline's replicas.
            return tf.reshape(tensor, [replicas, per_replica, *tensor.shape[1:]])[first : first + local]

        return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(rows, batch))

    return dataset.flat_map(split)
