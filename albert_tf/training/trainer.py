"""`Trainer`: ALBERT pretraining in a `strategy.run` loop that works under every strategy.

Keras 3's `model.fit` cannot run under `MultiWorkerMirroredStrategy`, and under
`MirroredStrategy` it clips each replica's gradient before the all-reduce. This
loop runs the same step under the default, mirrored, multi-worker and TPU
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
reads them once per loop, not once per step. A loop ends at every
checkpoint, progress line, evaluation and the last step, so checkpoints,
logs, the step count and the learning-rate schedule do not depend on it.

With held-out data (`eval_dataset_fn`) and `config.eval_every`, every
`eval_every` steps and at the last step the model reads the same
`config.eval_steps` batches of it in one graph loop under the same strategy
(MLM and SOP sums all-reduced, read once), and the held-out MLM loss and
accuracies join that step's progress line, log record and TensorBoard point.

Runs are resumable: a `tf.train.Checkpoint` of model, optimizer and step is
written every `checkpoint_every` steps, and a restarted run restores it and
asks the input pipeline to skip the micro-batches already consumed (no lost
or repeated examples). A non-finite loss stops the run with
`TrainingDiverged`: the graph loop stops after the step that made it and
returns, so the host, which reads the metrics at the end of each loop, sees
it there with no step run after it; a checkpoint is only written when every
weight is finite.
Checkpoints and `final/` survive a kill at any moment (see `checkpoints`): a
rerun resumes from the newest readable checkpoint and rebuilds a missing
`final/`. A rerun must train the same model on the same data with the same
optimization; only the fields in `RESUMABLE_CHANGES` may differ.

Run directory layout:
    config.json            the `AlbertConfig`
    training_config.json   the `TrainerConfig` and the caller's run info (data, strategy)
    tokenizer/             the tokenizer, when one is given
    checkpoints/           ckpt-STEP.* (model, optimizer, step) and a copy of config.json
    tensorboard/           summaries of the progress metrics
    train_log.jsonl        the progress records
    final/                 `save_pretrained` of the trained `AlbertPretrainer` with its tokenizer, and the step it holds
"""

import dataclasses
import json
import math
import os

import keras
import numpy as np
import tensorflow as tf

from albert_tf.accumulation import GradientAccumulator
from albert_tf.config import AlbertConfig
from albert_tf.distribute import is_chief, num_workers, skip_optimizer_all_reduce
from albert_tf.model_dirs import ENTRY_FILES, FINAL_DIR, TOKENIZER_DIR, WEIGHTS_FILE
from albert_tf.models import AlbertBackbone, AlbertPretrainer
from albert_tf.models.pretrained import save_pretrained
from albert_tf.models.pretrainer import SUM_NAMES, losses_from_sums, pretraining_sums
from albert_tf.optimizers import build_optimizer
from albert_tf.precision import device_kind, resolve_precision
from albert_tf.schedules import WarmupLinearDecay
from albert_tf.training import checkpoints
from albert_tf.training.config import TrainerConfig
from albert_tf.training.progress import METRICS, ProgressLogger
from input_pipeline import features, files
from input_pipeline.errors import UserError

CONFIG_FILE = "config.json"
TRAINING_CONFIG_FILE = "training_config.json"
CHECKPOINT_DIR = "checkpoints"
# In final/: the step its weights were saved at, so a rerun can tell a current final/ from a stale one.
FINAL_STEP_FILE = "trainer_step.json"
# TrainerConfig fields a resumed run may change: the schedule (extend a run,
# or lower the learning rate after a divergence) and bookkeeping. Anything
# else would continue the checkpoint under a different recipe. "jit_compile"
# is compile_step's name in the training_config.json of older run directories.
# mixed_precision may change too: the weights and optimizer slots are float32
# under every policy, so a checkpoint restores under any of them (older runs
# saved "float32" where the default is now "auto").
RESUMABLE_CHANGES = ("num_steps", "learning_rate", "warmup_steps", "compile_step", "jit_compile", "steps_per_loop",
                     "remat", "mixed_precision", "checkpoint_every", "keep_checkpoints", "log_every", "eval_every",
                     "eval_steps")
# The held-out metrics, in train_log.jsonl and TensorBoard under these names.
EVAL_METRICS = ("eval_mlm_loss", "eval_mlm_accuracy", "eval_sop_loss", "eval_sop_accuracy")


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or infinite; the run stopped."""


class TrainingStopped(Exception):
    """A stop was requested (a preemption's SIGTERM); the run checkpointed at a loop boundary and stopped.

    Attributes:
        step: the step reached and checkpointed.
        num_steps: the run's `num_steps`.
        checkpoint: the path of that checkpoint (what a rerun resumes from).
    """

    def __init__(self, step, num_steps, checkpoint):
        super().__init__(f"stopped at step {step} of {num_steps}; saved {checkpoint}")
        self.step, self.num_steps, self.checkpoint = step, num_steps, checkpoint


# `variable.path` of the V x E table (not its LoRA factors).
WORD_EMBEDDING_TABLE = r"word_embeddings/embeddings$"


def trainer_optimizer(config, clip_in_optimizer=False):
    """`albert_tf.optimizers.build_optimizer` with the settings of a `TrainerConfig`.

    Args:
        config: a `TrainerConfig`.
        clip_in_optimizer: let Keras clip (for `model.fit`). `Trainer` clips
            the all-reduced gradient itself and leaves it off.

    Returns:
        A Keras optimizer, loss-scaled under "mixed_float16".
    """
    return build_optimizer(
        config.optimizer, learning_rate=config.learning_rate, warmup_steps=config.num_warmup_steps,
        total_steps=config.num_steps, weight_decay=config.weight_decay,
        clip_norm=config.clip_norm if clip_in_optimizer else 0.0,
        loss_scale=config.mixed_precision == "mixed_float16",
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


class Trainer:
    """Pretrains an `AlbertPretrainer` under a `tf.distribute` strategy.

    Args:
        model_config: the `AlbertConfig` to train.
        config: a `TrainerConfig`.
        run_dir: the run directory (see the module docstring). Running the
            same command again resumes from its last checkpoint.
        dataset_fn: `dataset_fn(global_batch_size, input_context, start_step)`
            -> `tf.data.Dataset` of `(inputs, labels)` per-replica batches of
            `input_context.get_per_replica_batch_size(global_batch_size)`
            examples, skipping the first `start_step` global batches.
            `global_batch_size` is the micro-batch size summed over replicas.
            See `input_pipeline.pretraining.dataset.pretraining_dataset_fn`.
        strategy: a `tf.distribute.Strategy`; None uses the current one.
        tokenizer: optional `AlbertTokenizer`, saved in RUN_DIR/tokenizer.
        run_info: optional JSON-serializable dict written into
            training_config.json next to the trainer config (data, strategy...).
        word_embeddings_init: optional `fn(random_table) -> table` on (V, E)
            NumPy arrays, applied to the freshly initialized word-embedding
            table of a new run (not on resume: the checkpoint holds the
            table), e.g. `ppmi_svd_init(corpus)` (training/embedding_init.py).
        eval_dataset_fn: optional held-out data, a `dataset_fn` as above
            (called with start_step 0); needs `config.eval_every`. Each
            evaluation reads its first `config.eval_steps` batches, so it
            must give the same batches every time (a fixed seed).
        print_fn: where progress lines and messages go.
    """

    def __init__(self, model_config, config, run_dir, dataset_fn, *, strategy=None, tokenizer=None,
                 run_info=None, word_embeddings_init=None, eval_dataset_fn=None, print_fn=print):
        if not isinstance(model_config, AlbertConfig):
            raise ValueError(f"`model_config` must be an AlbertConfig. Received: {type(model_config).__name__}")
        if not isinstance(config, TrainerConfig):
            raise ValueError(f"`config` must be a TrainerConfig. Received: {type(config).__name__}")
        self.strategy = strategy or tf.distribute.get_strategy()
        replicas = self.strategy.num_replicas_in_sync
        if config.micro_batch_size % replicas:
            raise UserError(
                "The micro-batch (global_batch_size / accumulation_steps) must split evenly over the "
                f"{replicas} replicas. Received: global_batch_size={config.global_batch_size}, "
                f"accumulation_steps={config.accumulation_steps}"
            )
        if (eval_dataset_fn is None) != (config.eval_every is None):
            raise ValueError(
                "`eval_dataset_fn` and `config.eval_every` go together. Received: "
                f"eval_dataset_fn={eval_dataset_fn!r}, eval_every={config.eval_every!r}"
            )
        if tokenizer is not None:
            tokenizer.check_vocab_size(model_config.vocab_size)
        self.model_config = model_config
        self.config = config
        self.run_dir = run_dir
        self._dataset_fn = dataset_fn
        self._print = print_fn
        self._is_chief = is_chief(self.strategy)
        self._tokenizer = tokenizer
        # The precision and XLA setting this run uses ("auto" resolved), recorded in training_config.json.
        self.precision = resolve_run_precision(config, model_config, self.strategy)
        self.compile_step = self.precision.compile_step
        resolved = {"mixed_precision": self.precision.precision, "compile_step": self.compile_step,
                    "reason": self.precision.reason}
        # Made (and its errors raised) before anything is written to RUN_DIR.
        self._eval_dataset = None if eval_dataset_fn is None else self.strategy.distribute_datasets_from_function(
            lambda input_context: eval_dataset_fn(config.micro_batch_size, input_context, 0)
        )
        self._write_run_files(tokenizer, {**(run_info or {}), "resolved": resolved})

        # === Model, optimizer and step, mirrored on every replica ===
        with self.strategy.scope():
            keras.utils.set_random_seed(config.seed)
            self.model = build_pretrainer(model_config, self.precision.precision, config.remat)
            self.optimizer = trainer_optimizer(config)
            self.optimizer.build(self.model.trainable_variables)
            skip_optimizer_all_reduce(self.optimizer)
            self._step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            # k = 1 needs no sums: the one micro-batch's gradient is the step's.
            self._accumulator = (
                GradientAccumulator(self.model.trainable_variables) if config.accumulation_steps > 1 else None
            )
        self._schedule = WarmupLinearDecay(config.learning_rate, config.num_warmup_steps, config.num_steps)
        self._checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self._step)
        self.checkpoint_dir = os.path.join(run_dir, CHECKPOINT_DIR)
        if word_embeddings_init is not None and not checkpoints.checkpoint_steps(self.checkpoint_dir):
            self._set_word_embeddings(word_embeddings_init)
        # "forward" holds no collectives, so it compiles the same under every
        # strategy; "whole" compiles the replica step with its all-reduce.
        self._forward_backward = (
            tf.function(self._micro_step, jit_compile=True) if self.compile_step == "forward" else self._micro_step
        )
        self._replica_fn = (
            tf.function(self._replica_step, jit_compile=True) if self.compile_step == "whole" else self._replica_step
        )
        self._train_loop = tf.function(self._loop)
        if eval_dataset_fn is not None:
            # Compiled inside the replica function, as "forward" is: XLA cannot compile a replica
            # function of several CPU/GPU replicas (it reads the other devices' variables).
            self._eval_sums = tf.function(self._eval_batch_sums, jit_compile=True) if self.compile_step != "none" \
                else self._eval_batch_sums
            self._eval_loop_fn = tf.function(self._eval_loop)
        self._weights_finite = tf.function(
            lambda: tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in self.model.trainable_variables])
        )

    @property
    def step(self):
        """Optimizer steps done so far (restored from the checkpoint on resume)."""
        return int(self._step.numpy())

    def restore(self):
        """Restores the newest readable checkpoint of RUN_DIR, if any.

        Returns:
            The step reached (0 without checkpoints).

        Raises:
            checkpoints.CheckpointUnreadable: checkpoints exist but none restores.
        """
        print_fn = self._print if self._is_chief else (lambda *_: None)
        restored = checkpoints.restore_newest_readable(self._checkpoint, self.checkpoint_dir, print_fn)
        if restored and self._is_chief:
            # The state file may be stale or garbage; TensorFlow's tools read it.
            checkpoints.write_state_file(self.checkpoint_dir, checkpoints.checkpoint_steps(self.checkpoint_dir))
            self._print(f"Resumed from {restored} at step {self.step}.")
        return self.step

    def train(self, stop_requested=None):
        """Trains to `config.num_steps`, resuming from the last checkpoint.

        Args:
            stop_requested: optional `fn() -> bool`, asked after every loop
                (every `steps_per_loop` steps at most): True checkpoints the
                step reached and raises `TrainingStopped`. A preemption
                notice (SIGTERM) sets it; a running loop is never cut, so a
                stop waits for at most one loop. On several workers the run
                stops when any worker's says so, all at the same step.

        Returns:
            dict: the last progress record (step, losses, accuracies, ...).

        Raises:
            TrainingDiverged: the loss or the weights became non-finite. The
                last good checkpoint is kept.
            TrainingStopped: `stop_requested` said so before the last step.
        """
        c = self.config
        start = self.restore()
        final_dir = os.path.join(self.run_dir, FINAL_DIR)
        if start >= c.num_steps:
            self._print(f"The run in {self.run_dir} is complete ({start}/{c.num_steps} steps).")
            if self._is_chief and not _final_holds(final_dir, start):
                self._print(f"{final_dir} is missing, incomplete or older than step {start}; rebuilding it.")
                self._save_final(final_dir)
            return {"step": start}

        iterator = self.input_iterator(start)
        progress = ProgressLogger(
            self.run_dir, c.num_steps, c.global_batch_size, c.log_every, enabled=self._is_chief,
            print_fn=self._print,
        )
        progress.start(start)
        record = {}
        step = start
        try:
            while step < c.num_steps:
                length = loop_length(step, c)
                done, means, record = self.run_loop(iterator, length)
                step += done
                if not math.isfinite(record["loss"]):
                    raise TrainingDiverged(self._divergence_message(
                        step, f"the loss is {record['loss']} (found at the end of the loop of steps "
                              f"{step - done + 1}-{step - done + length}, which stopped there: the metrics are read "
                              "once per loop)"
                    ))
                evaluation = self.evaluate() if self._evaluates_at(step) else None
                # Keras evaluates the schedule at the iteration count before the update.
                progress.update(step, means, float(self._schedule(step - 1)), num_steps=done, evaluation=evaluation)
                saved = None
                if step % c.checkpoint_every == 0 or step == c.num_steps:
                    saved = self._save_checkpoint(step)
                if step < c.num_steps and stop_requested is not None and self._stop_agreed(stop_requested()):
                    raise TrainingStopped(step, c.num_steps, saved or self._save_checkpoint(step))
        finally:
            progress.close()
        if self._is_chief:
            self._save_final(final_dir)
            self._print(f"Saved the pretrained model to {final_dir}")
        return {"step": self.step, **record}

    def input_iterator(self, step):
        """The distributed iterator over the micro-batches of the steps after `step` (none repeated or lost)."""
        consumed = step * self.config.accumulation_steps  # in global micro-batches
        dataset = self.strategy.distribute_datasets_from_function(
            lambda input_context: self._dataset_fn(self.config.micro_batch_size, input_context, consumed)
        )
        return iter(dataset)

    def run_loop(self, iterator, num_steps):
        """Runs up to `num_steps` optimizer steps in one call (fewer only after a non-finite loss).

        Checkpoints nothing and logs nothing: `train` does that between loops.

        Returns:
            (steps done, {metric: mean over them}, {metric: last step's value}).
        """
        # The one read of the loop: [steps done, metric sums, last step's metrics].
        values = self._train_loop(iterator, tf.constant(num_steps, tf.int64)).numpy().tolist()
        done, sums, last = int(values[0]), values[1 : 1 + len(METRICS)], values[1 + len(METRICS) :]
        return done, {name: total / done for name, total in zip(METRICS, sums)}, dict(zip(METRICS, last))

    def evaluate(self):
        """The held-out metrics of the current weights over the first `config.eval_steps` eval batches.

        Returns:
            dict of floats named `EVAL_METRICS`: MLM loss and accuracy over
            the real masked positions, SOP loss and accuracy over the examples.
        """
        if self._eval_dataset is None:
            raise ValueError("`evaluate()` needs held-out data: pass `eval_dataset_fn` to the Trainer.")
        # A new iterator starts the eval data over: every evaluation reads the same batches.
        values = self._eval_loop_fn(iter(self._eval_dataset), tf.constant(self.config.eval_steps, tf.int64))
        sums = dict(zip(SUM_NAMES, values.numpy().tolist()))
        return {
            "eval_mlm_loss": sums["mlm_ce"] / max(sums["mlm_weight"], 1.0),
            "eval_mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_weight"], 1.0),
            "eval_sop_loss": sums["sop_ce"] / sums["sop_examples"],
            "eval_sop_accuracy": sums["sop_correct"] / sums["sop_examples"],
        }

    def _evaluates_at(self, step):
        every = self.config.eval_every
        return every is not None and (step % every == 0 or step == self.config.num_steps)

    def step_graph(self, iterator):
        """The traced graph of one training loop over `iterator` (a `tf.Graph`; the steps are a while loop in it)."""
        return self._train_loop.get_concrete_function(iterator, tf.TensorSpec([], tf.int64)).graph

    def _set_word_embeddings(self, word_embeddings_init):
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
        self._step.assign_add(1)
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

    # ----------------------------------------------------------- bookkeeping
    def _save_checkpoint(self, step):
        if not bool(self._weights_finite()):
            raise TrainingDiverged(self._divergence_message(step, "a weight is NaN or infinite"))
        if self._is_chief:
            path = checkpoints.save_checkpoint(self._checkpoint, self.checkpoint_dir, step, self.config.keep_checkpoints)
            self._print(f"Saved checkpoint {path}")
            return path
        # Every worker must take part in a save (variables may be read with
        # collectives); non-chief workers write to a scratch directory.
        scratch = os.path.join(self.run_dir, f".worker_{self.strategy.cluster_resolver.task_id}")
        self._checkpoint.write(checkpoints.checkpoint_path(scratch, step))
        files.rmtree(scratch, ignore_errors=True)
        return checkpoints.checkpoint_path(self.checkpoint_dir, step)

    def _stop_agreed(self, requested):
        """Whether any worker asked to stop: a SIGTERM may reach one worker, and every worker must save."""
        if num_workers(self.strategy) == 1:
            return requested
        # One scalar all-reduce per loop; every worker reaches this point after the same loops.
        asked = self.strategy.run(lambda: tf.constant(1.0 if requested else 0.0))
        return bool(self.strategy.reduce(tf.distribute.ReduceOp.SUM, asked, axis=None) > 0)

    def _save_final(self, final_dir):
        """`save_pretrained` into a staging directory renamed to `final_dir`: never a partial final/."""
        def write(directory):
            save_pretrained(self.model, directory)
            # The model directory carries its tokenizer, so finetune, export
            # and convert need only RUN_DIR/final.
            if self._tokenizer is not None:
                self._tokenizer.save(os.path.join(directory, TOKENIZER_DIR))
            files.write_text(os.path.join(directory, FINAL_STEP_FILE), json.dumps({"step": self.step}))

        checkpoints.publish_directory(write, final_dir, ENTRY_FILES + (FINAL_STEP_FILE,))

    def _divergence_message(self, step, what):
        steps = checkpoints.checkpoint_steps(self.checkpoint_dir)
        latest = checkpoints.checkpoint_path(self.checkpoint_dir, steps[-1]) if steps else None
        kept = f"The last good checkpoint, {latest}, is kept" if latest else "No checkpoint was written yet"
        return (
            f"Training diverged at step {step}: {what}. {kept}. Lower the learning rate "
            f"(now {self.config.learning_rate}) or lengthen the warmup (now {self.config.num_warmup_steps} steps), "
            + ("then rerun the same command to resume from that checkpoint." if latest
               else "then rerun the same command: it starts again from step 0.")
        )

    def _write_run_files(self, tokenizer, run_info):
        """Writes (or checks, on resume) the run directory's configs and tokenizer.

        Raises:
            ValueError: RUN_DIR holds a run of another model, trainer config
                (outside `RESUMABLE_CHANGES`) or data source, listing every
                differing field with its saved and its new value.
        """
        # JSON round trip: tuples and lists, ints and floats compare as they will be read back.
        training = json.loads(json.dumps({"trainer": self.config.to_dict(), **run_info}))
        self._check_resume(training)
        if not self._is_chief:
            return
        checkpoints.remove_debris(self.run_dir)
        checkpoints.remove_debris(os.path.join(self.run_dir, CHECKPOINT_DIR))
        files.makedirs(os.path.join(self.run_dir, CHECKPOINT_DIR))
        # Atomic writes: other workers read these files while the chief writes them.
        checkpoints.write_atomically(os.path.join(self.run_dir, CONFIG_FILE), self.model_config.to_json())
        # Next to the checkpoints too, so the checkpoint directory alone rebuilds the model.
        checkpoints.write_atomically(
            os.path.join(self.run_dir, CHECKPOINT_DIR, CONFIG_FILE), self.model_config.to_json()
        )
        checkpoints.write_atomically(
            os.path.join(self.run_dir, TRAINING_CONFIG_FILE), json.dumps(training, indent=2, sort_keys=True) + "\n"
        )
        if tokenizer is not None:
            tokenizer.save(os.path.join(self.run_dir, TOKENIZER_DIR))

    def _check_resume(self, training):
        """Compares this run with the one saved in RUN_DIR; see `_write_run_files`."""
        config_path = os.path.join(self.run_dir, CONFIG_FILE)
        differences = {}
        if files.isfile(config_path):
            saved = dataclasses.asdict(AlbertConfig.load(config_path))
            differences["model"] = _differences(saved, dataclasses.asdict(self.model_config), "model.")
        training_path = os.path.join(self.run_dir, TRAINING_CONFIG_FILE)
        if files.isfile(training_path):
            try:
                saved = json.loads(files.read_text(training_path))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise UserError(f"{training_path} is unreadable ({e}); restore it or use a new run directory.") from e
            _check_loss_scaling_kept(saved, training, self.run_dir)
            trainer = _differences(saved.get("trainer", training["trainer"]), training["trainer"], "trainer.")
            changed = [d for d in trainer if d.split(":")[0].removeprefix("trainer.") in RESUMABLE_CHANGES]
            differences["trainer config"] = [d for d in trainer if d not in changed]
            if "data" in saved and "data" in training:
                differences["data source"] = _differences(saved["data"], training["data"], "data.")
            if changed and self._is_chief and not any(differences.values()):
                self._print("Resuming with changed settings: " + "; ".join(changed))
        kinds = [kind for kind, found in differences.items() if found]
        if kinds:
            lines = [line for kind in kinds for line in differences[kind]]
            raise UserError(
                f"{self.run_dir} holds a run of a different {' and '.join(kinds)}; resuming would continue "
                "its checkpoints under another setup. Differences (saved -> this run):\n  "
                + "\n  ".join(lines)
                + f"\nUse a new run directory, or the saved values (only {', '.join(RESUMABLE_CHANGES)} "
                "may change on resume)."
            )


def _check_loss_scaling_kept(saved, training, run_dir):
    """Refuses a resume into or out of mixed_float16, whose optimizer state is checkpointed differently.

    Under mixed_float16 the optimizer is wrapped in Keras' LossScaleOptimizer,
    which checkpoints the inner optimizer's slots under its own names: the
    checkpoint would restore the weights and silently start the slots (LAMB's
    moments) from zero. Between float32 and mixed_bfloat16 nothing differs.
    """
    # Runs written before the resolved precision was recorded named it in the trainer config.
    before = saved.get("resolved", {}).get("mixed_precision", saved.get("trainer", {}).get("mixed_precision"))
    after = training["resolved"]["mixed_precision"]
    if before != after and "mixed_float16" in (before, after):
        raise UserError(
            f"{run_dir} was trained in {before} and this run would resume it in {after}. mixed_float16 keeps "
            "its optimizer state inside a loss-scale wrapper, so the optimizer's moments would restart from "
            f"zero. Resume with --mixed-precision {before}, or start a new run directory."
        )


def resolve_run_precision(config, model_config, strategy, flags=None, device=None):
    """The precision and compile step a run of `config` uses under `strategy` ("auto" resolved).

    See `albert_tf.precision.resolve_precision` for the precision rule. XLA
    compiles TPUStrategy's replica step, and that of a single replica, with
    two exceptions where the compiled replica step cannot run:
      - several replicas outside a TPU: XLA runs each replica's program on
        one device, and it cannot reach the variables other devices hold
        ("Trying to access resource ... located in device CPU:1 from device
        CPU:0");
      - MirroredStrategy or MultiWorkerMirroredStrategy on a GPU: Keras'
        `optimizer.apply` increments its iteration counter (an
        ONLY_FIRST_REPLICA variable) with a `merge_call`, which TensorFlow
        refuses inside a compiled replica function on GPUs ("merge_call
        called while defining a new graph", keras-team/keras#17187). On CPUs
        TensorFlow keeps merge calls outside XLA, and the default strategy
        makes none.
    Those runs get "forward", which holds no variable write and no all-reduce.

    Args:
        config: a `TrainerConfig`.
        model_config: the `AlbertConfig` trained.
        strategy: the `tf.distribute.Strategy` of the run.
        flags: the CPU's flags (this machine's when None).
        device: "cpu", "gpu" or "tpu", what runs the replicas
            (`albert_tf.precision.device_kind(strategy)` when None).

    Returns:
        An `albert_tf.precision.PrecisionChoice`.

    Raises:
        ValueError: "whole" under a strategy where the compiled step cannot run.
    """
    device = device or device_kind(strategy)
    on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    merge_calls = device == "gpu" and isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    )
    whole_compiles = on_tpu or (strategy.num_replicas_in_sync == 1 and not merge_calls)
    if config.compile_step == "whole" and not whole_compiles:
        why = ("Keras' optimizer makes a merge call that TensorFlow refuses inside XLA on GPUs under "
               f"{type(strategy).__name__} (run one GPU without --strategy)" if merge_calls else
               "XLA compiles the all-reduce only under TPUStrategy and with one replica")
        raise UserError(
            f"compile_step='whole' cannot run here: {why}. Received: {type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replicas on {device.upper()}; use 'forward'."
        )
    return resolve_precision(config.mixed_precision, config.compile_step, model_config.hidden_size,
                             device, whole_compiles, flags)


def loop_length(step, config):
    """Steps of the loop that starts after `step`: `steps_per_loop`, cut at the next checkpoint, log line or end."""
    end = min(step + config.steps_per_loop, config.num_steps)
    # Evaluations fall on log lines (`eval_every` is a multiple of `log_every`).
    for every in (config.checkpoint_every, config.log_every):
        end = min(end, (step // every + 1) * every)
    return end - step


_ABSENT = "(absent)"


def _differences(saved, new, prefix=""):
    """["name: saved -> new", ...] for every differing leaf of two JSON-like dicts (nested names dotted)."""
    lines = []
    for key in sorted(set(saved) | set(new), key=str):
        old_value, new_value = saved.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(old_value, dict) and isinstance(new_value, dict):
            lines += _differences(old_value, new_value, f"{prefix}{key}.")
        elif old_value != new_value:
            lines.append(f"{prefix}{key}: {old_value!r} -> {new_value!r}")
    return lines


def _final_holds(final_dir, step):
    """Whether `final_dir` is a complete `save_pretrained` directory of the weights at `step`."""
    try:
        saved_step = json.loads(files.read_text(os.path.join(final_dir, FINAL_STEP_FILE)))["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return saved_step == step and files.isfile(os.path.join(final_dir, WEIGHTS_FILE))

