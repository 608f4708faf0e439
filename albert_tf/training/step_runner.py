"""`StepRunner`: the pretraining step and its graph loop, under every `tf.distribute` strategy.

What Orbit's `StandardTrainer.train_step` is to its `Controller`: this module
runs steps and reads their metrics; `albert_tf.training.trainer.Trainer`
decides when (checkpoints, progress lines, evaluations, stops).

Keras 3's `model.fit` cannot run under `MultiWorkerMirroredStrategy`, and under
`MirroredStrategy` it clips each replica's gradient before the all-reduce. This
step runs the same under the default, mirrored, multi-worker and TPU
strategies:

  1. Each replica reads its share of the step's k micro-batches.
  2. The step's global totals (masked-token weight, examples) are all-reduced
     first, so every replica normalizes its loss by the GLOBAL counts:
     MLM = sum_local(w * ce) / sum_global(w), SOP = sum_local(ce) / n_global.
     Summing the replicas' gradients then gives exactly the gradient of the
     single-device loss over the whole global batch (the original's
     "weighted mean over real masked positions"), whatever the split.
  3. Gradients are summed over micro-batches (one `GradientAccumulator`,
     per replica) and all-reduced once, then clipped to `clip_norm` by the
     global norm of the all-reduced gradient, then applied.
  4. `compile_step="whole"` makes 2. and 3. one XLA program per replica
     (what a TPU runs anyway); "forward" compiles the forward and backward
     pass of each micro-batch only.

One call into TensorFlow runs a loop of up to `steps_per_loop` steps (a
graph loop over the distributed iterator). The metrics stay on the device:
each step's are all-reduced over the replicas and added to the loop's sums
(loop variables), and the loop returns the sums in one tensor, so the host
reads them once per loop, not once per step. A non-finite loss stops the
graph loop after the step that made it.

An evaluation reads a fixed number of held-out batches in one graph loop
under the same strategy, its MLM and SOP sums all-reduced and read once.
"""

import keras
import numpy as np
import tensorflow as tf

from albert_tf.accumulation import GradientAccumulator
from albert_tf.distribute import skip_optimizer_all_reduce
from albert_tf.models import AlbertBackbone, AlbertPretrainer
from albert_tf.models.pretrainer import SUM_NAMES, losses_from_sums, metrics_from_sums, pretraining_sums
from albert_tf.optimizers import build_optimizer
from albert_tf.training.progress import METRICS
from input_pipeline import features

# The held-out metrics, in train_log.jsonl and TensorBoard under these names.
EVAL_METRICS = ("eval_mlm_loss", "eval_mlm_accuracy", "eval_sop_loss", "eval_sop_accuracy")
# `variable.path` of the V x E table (not its LoRA factors).
WORD_EMBEDDING_TABLE = r"word_embeddings/embeddings$"


def trainer_optimizer(config, clip_in_optimizer=False, loss_scale=False):
    """`albert_tf.optimizers.build_optimizer` with the settings of a `TrainerConfig`.

    Args:
        config: a `TrainerConfig`.
        clip_in_optimizer: let Keras clip (for `model.fit`). `StepRunner`
            clips the all-reduced gradient itself and leaves it off.
        loss_scale: wrap in dynamic loss scaling, for a model under
            "mixed_float16". The caller says so from the precision it
            resolved: `config.mixed_precision` may still read "auto".

    Returns:
        A Keras optimizer.
    """
    return build_optimizer(
        config.optimizer, learning_rate=config.learning_rate, warmup_steps=config.num_warmup_steps,
        total_steps=config.num_steps, weight_decay=config.weight_decay,
        clip_norm=config.clip_norm if clip_in_optimizer else 0.0, loss_scale=loss_scale,
        learning_rate_multipliers=(
            {WORD_EMBEDDING_TABLE: config.word_embedding_lr_scale} if config.word_embedding_lr_scale != 1.0 else None
        ),
    )


def build_pretrainer(model_config, mixed_precision="float32", remat=False):
    """An `AlbertPretrainer` under the dtype policy `mixed_precision`.

    Under a mixed policy the weights stay float32 and the matmuls run in
    bfloat16/float16; LayerNorm (Keras upcasts it), the attention softmax,
    the logits and the losses are float32 (see the layers and heads).
    `remat` recomputes the shared blocks' activations in the backward pass.
    """
    policy = None if mixed_precision == "float32" else mixed_precision
    return AlbertPretrainer(AlbertBackbone(model_config, dtype=policy, remat=remat))


class StepRunner:
    """An `AlbertPretrainer`, its optimizer and step counter, and the compiled loop that trains them.

    Builds the model and optimizer under `strategy.scope()` (seeded with
    `config.seed`), mirrored on every replica. Checkpoints nothing and logs
    nothing: `run_loop` runs steps and returns their metrics.

    Args:
        model_config: the `AlbertConfig` to train.
        config: a `TrainerConfig`; its `micro_batch_size` must split evenly
            over the replicas.
        strategy: the `tf.distribute.Strategy` to run under.
        precision: the resolved `albert_tf.precision.PrecisionChoice`: the
            model's dtype policy, the optimizer's loss scaling, and what XLA
            compiles (`compile_step`).

    Attributes:
        model: the `AlbertPretrainer`.
        optimizer: its Keras optimizer (LAMB or AdamW).
        step_variable: int64 optimizer steps done, one per `_distributed_step`.
    """

    def __init__(self, model_config, config, strategy, precision):
        self.config = config
        self.strategy = strategy
        self.compile_step = precision.compile_step
        with strategy.scope():
            keras.utils.set_random_seed(config.seed)
            self.model = build_pretrainer(model_config, precision.precision, config.remat)
            self.optimizer = trainer_optimizer(config, loss_scale=precision.precision == "mixed_float16")
            self.optimizer.build(self.model.trainable_variables)
            skip_optimizer_all_reduce(self.optimizer)
            self.step_variable = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            # k = 1 needs no sums: the one micro-batch's gradient is the step's.
            self._accumulator = (
                GradientAccumulator(self.model.trainable_variables) if config.accumulation_steps > 1 else None
            )
        # "forward" holds no collectives, so it compiles the same under every
        # strategy; "whole" compiles the replica step with its all-reduce.
        self._forward_backward = (
            tf.function(self._micro_step, jit_compile=True) if self.compile_step == "forward" else self._micro_step
        )
        self._replica_fn = (
            tf.function(self._replica_step, jit_compile=True) if self.compile_step == "whole" else self._replica_step
        )
        self._train_loop = tf.function(self._loop)
        # Compiled inside the replica function, as "forward" is: XLA cannot compile a replica
        # function of several CPU/GPU replicas (it reads the other devices' variables).
        self._eval_sums = (
            tf.function(self._eval_batch_sums, jit_compile=True) if self.compile_step != "none" else self._eval_batch_sums
        )
        self._eval_loop_fn = tf.function(self._eval_loop)
        self._weights_finite = tf.function(
            lambda: tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in self.model.trainable_variables])
        )

    def run_loop(self, iterator, num_steps):
        """Runs up to `num_steps` optimizer steps in one call (fewer only after a non-finite loss).

        Returns:
            (steps done, {metric: mean over them}, {metric: last step's value}).
        """
        # The one read of the loop: [steps done, metric sums, last step's metrics].
        values = self._train_loop(iterator, tf.constant(num_steps, tf.int64)).numpy().tolist()
        done, sums, last = int(values[0]), values[1 : 1 + len(METRICS)], values[1 + len(METRICS) :]
        return done, {name: total / done for name, total in zip(METRICS, sums)}, dict(zip(METRICS, last))

    def evaluate(self, dataset, num_batches):
        """The held-out metrics of the current weights over the first `num_batches` batches of `dataset`.

        Args:
            dataset: a distributed dataset of `(inputs, labels)` micro-batches.
            num_batches: batches to read; a new iterator starts `dataset`
                over, so every evaluation reads the same batches.

        Returns:
            dict of floats named `EVAL_METRICS`: MLM loss and accuracy over
            the real masked positions, SOP loss and accuracy over the examples.
        """
        values = self._eval_loop_fn(iter(dataset), tf.constant(num_batches, tf.int64))
        metrics = metrics_from_sums(dict(zip(SUM_NAMES, values.numpy().tolist())))
        return {name: metrics[name.removeprefix("eval_")] for name in EVAL_METRICS}

    def weights_finite(self):
        """Whether every trainable weight is finite (no NaN or infinity)."""
        return bool(self._weights_finite())

    def step_graph(self, iterator):
        """The traced graph of one training loop over `iterator` (a `tf.Graph`; the steps are a while loop in it)."""
        return self._train_loop.get_concrete_function(iterator, tf.TensorSpec([], tf.int64)).graph

    def set_word_embeddings(self, word_embeddings_init):
        """Replaces the (V, E) word-embedding table with `word_embeddings_init(table)` (NumPy in, NumPy out)."""
        table = self.model.backbone.word_embeddings.embeddings
        new = np.asarray(word_embeddings_init(np.asarray(table.numpy())), np.float32)
        if new.shape != tuple(table.shape):
            raise ValueError(
                "`word_embeddings_init` must return a table of the model's shape. "
                f"Received: shape={new.shape}, expected {tuple(table.shape)}"
            )
        table.assign(new)

    # ------------------------------------------------------------------ step
    def _loop(self, iterator, num_steps):
        """Up to `num_steps` optimizer steps in one graph loop; stops after a non-finite loss.

        Args:
            iterator: the distributed dataset's iterator.
            num_steps: int64 scalar tensor (a tensor, so every loop length
                shares one trace).

        Returns:
            float32 (1 + 2 * len(METRICS),): the steps done, the sums of each
            `METRICS` entry over them, and the last step's values.
        """
        done = tf.constant(0, tf.int64)
        sums = tf.zeros([len(METRICS)])
        last = tf.zeros([len(METRICS)])
        for _ in tf.range(num_steps):
            metrics = self._distributed_step(iterator)
            last = tf.stack([metrics[name] for name in METRICS])
            sums += last
            done += 1
            if not tf.math.is_finite(metrics["loss"]):
                break
        return tf.concat([[tf.cast(done, tf.float32)], sums, last], axis=0)

    def _distributed_step(self, iterator):
        """One optimizer step: k micro-batches from `iterator`, one update."""
        # The only host work of a step: the input pipeline's get-next, outside strategy.run.
        micro_batches = [next(iterator) for _ in range(self.config.accumulation_steps)]
        per_replica = self.strategy.run(self._replica_fn, args=(micro_batches,))
        metrics = {
            # grad_norm is the same on every replica; the rest are shares of global means.
            name: self.strategy.reduce(
                tf.distribute.ReduceOp.MEAN if name == "grad_norm" else tf.distribute.ReduceOp.SUM,
                value, axis=None,
            )
            for name, value in per_replica.items()
        }
        # After the step's batches arrived, as the update is: an input error (a damaged record) then leaves the
        # count at the last step the weights took, which the trainer checkpoints.
        with tf.control_dependencies([metrics["loss"]]):
            self.step_variable.assign_add(1)
        return metrics

    def _replica_step(self, micro_batches):
        """Runs on each replica. Returns this replica's shares of the step's metrics."""
        context = tf.distribute.get_replica_context()
        # A static batch size (`dataset_fn` promises it): with an unknown one
        # the cross-entropy adds a host-side shape Assert, and TPUs need static shapes.
        batch = self.config.micro_batch_size // self.strategy.num_replicas_in_sync
        micro_batches = tf.nest.map_structure(lambda t: tf.ensure_shape(t, [batch, *t.shape[1:]]), micro_batches)
        local_weight = tf.add_n([tf.reduce_sum(labels[features.MASK_WEIGHTS]) for _, labels in micro_batches])
        local_examples = tf.add_n([
            tf.cast(tf.shape(labels[features.SENTENCE_ORDER_LABEL])[0], tf.float32) for _, labels in micro_batches
        ])
        total_weight, total_examples = context.all_reduce(
            tf.distribute.ReduceOp.SUM, [local_weight, local_examples]
        )
        variables = self.model.trainable_variables

        if self._accumulator is None:
            gradients, sums = self._forward_backward(*micro_batches[0], total_weight, total_examples)
        else:
            # Stacked (k, per-replica batch, ...) so that a graph loop, not k
            # unrolled copies of the model, walks the micro-batches.
            stacked = tf.nest.map_structure(lambda *parts: tf.stack(parts), *micro_batches)
            sums = dict.fromkeys(SUM_NAMES, tf.constant(0.0))
            for index in tf.range(self.config.accumulation_steps):
                inputs, labels = tf.nest.map_structure(lambda t: tf.gather(t, index), stacked)
                micro_gradients, micro_sums = self._forward_backward(inputs, labels, total_weight, total_examples)
                self._accumulator.accumulate(micro_gradients)
                sums = {name: sums[name] + micro_sums[name] for name in SUM_NAMES}
            # Each micro-batch loss is already a share of the step's global
            # mean, so the plain sum (num_micro_batches=1) is the gradient.
            gradients = self._accumulator.gradients(1)
            self._accumulator.reset()

        # The one all-reduce of the step; clipping then sees the global gradient.
        gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, [tf.convert_to_tensor(g) for g in gradients])
        # Under float16 the gradients are still multiplied by the loss scale:
        # clipping g * s to clip_norm * s is clipping g to clip_norm, and the
        # LossScaleOptimizer unscales (or skips an overflowed step) in apply().
        scale = getattr(self.optimizer, "dynamic_scale", None)
        scale = tf.constant(1.0) if scale is None else tf.cast(scale, tf.float32)
        if self.config.clip_norm > 0:
            gradients, norm = tf.clip_by_global_norm(gradients, self.config.clip_norm * scale)
        else:
            norm = tf.linalg.global_norm(gradients)
        self.optimizer.apply(gradients, variables)

        mlm_loss, sop_loss = losses_from_sums(sums, total_weight, total_examples)
        return {
            "loss": mlm_loss + sop_loss,
            "mlm_loss": mlm_loss,
            "sop_loss": sop_loss,
            "mlm_accuracy": sums["mlm_correct"] / tf.maximum(total_weight, 1.0),
            "sop_accuracy": sums["sop_correct"] / total_examples,
            "grad_norm": norm / scale,
        }

    def _micro_step(self, inputs, labels, total_weight, total_examples):
        """Forward and backward on one per-replica micro-batch.

        The loss is this micro-batch's share of the step's global mean loss,
        so gradients add up over micro-batches and replicas.

        Returns:
            (gradients, sums): gradients of the (loss-scaled) share, and
            float32 sums over the micro-batch (see `pretraining_sums`).
        """
        with tf.GradientTape() as tape:
            outputs = self.model(inputs, training=True)
            sums = pretraining_sums(labels, outputs)
            mlm_loss, sop_loss = losses_from_sums(sums, total_weight, total_examples)
            loss = mlm_loss + sop_loss
            scaled_loss = self.optimizer.scale_loss(loss)
        return tape.gradient(scaled_loss, self.model.trainable_variables), sums

    # ------------------------------------------------------------- evaluation
    def _eval_loop(self, iterator, num_batches):
        """float32 (len(SUM_NAMES),): `pretraining_sums` over `num_batches` batches, summed over the replicas."""
        totals = tf.zeros([len(SUM_NAMES)])
        for _ in tf.range(num_batches):
            per_replica = self.strategy.run(self._eval_replica_step, args=(next(iterator),))
            totals += self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return totals

    def _eval_replica_step(self, batch):
        """This replica's `pretraining_sums` of one eval batch, stacked in `SUM_NAMES` order."""
        per_replica = self.config.micro_batch_size // self.strategy.num_replicas_in_sync
        inputs, labels = tf.nest.map_structure(lambda t: tf.ensure_shape(t, [per_replica, *t.shape[1:]]), batch)
        return self._eval_sums(inputs, labels)

    def _eval_batch_sums(self, inputs, labels):
        sums = pretraining_sums(labels, self.model(inputs, training=False))
        return tf.stack([sums[name] for name in SUM_NAMES])
