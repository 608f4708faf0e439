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

Runs are resumable: a `tf.train.Checkpoint` of model, optimizer and step is
written every `checkpoint_every` steps, and a restarted run restores it and
asks the input pipeline to skip the micro-batches already consumed (no lost
or repeated examples). A non-finite loss stops the run with
`TrainingDiverged`; a checkpoint is only written when every weight is finite.

Run directory layout:
    config.json            the `AlbertConfig`
    training_config.json   the `TrainerConfig` and the caller's run info (data, strategy)
    tokenizer/             the tokenizer, when one is given
    checkpoints/           ckpt-STEP.* (model, optimizer, step) and a copy of config.json
    tensorboard/           summaries of the progress metrics
    train_log.jsonl        the progress records
    final/                 `save_pretrained` of the trained `AlbertPretrainer`
"""

import json
import math
import os
import shutil

import keras
import tensorflow as tf

from albert_tf import features
from albert_tf.accumulation import GradientAccumulator
from albert_tf.config import AlbertConfig
from albert_tf.models import AlbertBackbone, AlbertPretrainer
from albert_tf.optimizers import AdamW, Lamb
from albert_tf.saving import save_pretrained
from albert_tf.schedules import WarmupLinearDecay
from albert_tf.training.config import TrainerConfig
from albert_tf.training.progress import ProgressLogger

CONFIG_FILE = "config.json"
TRAINING_CONFIG_FILE = "training_config.json"
CHECKPOINT_DIR = "checkpoints"
TOKENIZER_DIR = "tokenizer"
FINAL_DIR = "final"
# The original's MLM denominator: sum(w) + 1e-5, so a batch without masks gives 0, not NaN.
_MLM_EPSILON = 1e-5


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or infinite; the run stopped."""


def build_optimizer(config, clip_in_optimizer=False):
    """The optimizer of `config`: LAMB or AdamW on the warmup-linear-decay schedule.

    Args:
        config: a `TrainerConfig`.
        clip_in_optimizer: also set Keras' `global_clipnorm` (for `model.fit`).
            `Trainer` clips the all-reduced gradient itself and leaves it off;
            Keras clips before its all-reduce, i.e. each replica's gradient,
            which only equals the recipe on a single replica.

    Returns:
        A Keras optimizer; wrapped in `keras.optimizers.LossScaleOptimizer`
        (dynamic loss scaling) under "mixed_float16".
    """
    schedule = WarmupLinearDecay(config.learning_rate, config.warmup_steps, config.num_steps)
    kwargs = {"global_clipnorm": config.clip_norm} if clip_in_optimizer and config.clip_norm else {}
    if config.optimizer == "lamb":
        optimizer = Lamb(learning_rate=schedule, weight_decay_rate=config.weight_decay, **kwargs)
    else:
        optimizer = AdamW(learning_rate=schedule, weight_decay=config.weight_decay, **kwargs)
    if config.mixed_precision == "mixed_float16":
        # float16 gradients underflow without it; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


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
            See `pretraining_dataset_fn`.
        strategy: a `tf.distribute.Strategy`; None uses the current one.
        tokenizer: optional `AlbertTokenizer`, saved in RUN_DIR/tokenizer.
        run_info: optional JSON-serializable dict written into
            training_config.json next to the trainer config (data, strategy...).
        print_fn: where progress lines and messages go.
    """

    def __init__(self, model_config, config, run_dir, dataset_fn, *, strategy=None, tokenizer=None,
                 run_info=None, print_fn=print):
        if not isinstance(model_config, AlbertConfig):
            raise ValueError(f"`model_config` must be an AlbertConfig. Received: {type(model_config).__name__}")
        if not isinstance(config, TrainerConfig):
            raise ValueError(f"`config` must be a TrainerConfig. Received: {type(config).__name__}")
        self.strategy = strategy or tf.distribute.get_strategy()
        replicas = self.strategy.num_replicas_in_sync
        if config.micro_batch_size % replicas:
            raise ValueError(
                "The micro-batch (global_batch_size / accumulation_steps) must split evenly over the "
                f"{replicas} replicas. Received: global_batch_size={config.global_batch_size}, "
                f"accumulation_steps={config.accumulation_steps}"
            )
        if tokenizer is not None:
            tokenizer.check_vocab_size(model_config.vocab_size)
        self.model_config = model_config
        self.config = config
        self.run_dir = run_dir
        self._dataset_fn = dataset_fn
        self._print = print_fn
        self._is_chief = _is_chief(self.strategy)
        self._write_run_files(tokenizer, run_info or {})

        # === Model, optimizer and step, mirrored on every replica ===
        with self.strategy.scope():
            keras.utils.set_random_seed(config.seed)
            self.model = build_pretrainer(model_config, config.mixed_precision, config.remat)
            self.optimizer = build_optimizer(config)
            self.optimizer.build(self.model.trainable_variables)
            _leave_all_reduce_to_trainer(self.optimizer)
            self._step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            # k = 1 needs no sums: the one micro-batch's gradient is the step's.
            self._accumulator = (
                GradientAccumulator(self.model.trainable_variables) if config.accumulation_steps > 1 else None
            )
        self._schedule = WarmupLinearDecay(config.learning_rate, config.warmup_steps, config.num_steps)
        self._checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self._step)
        self.checkpoint_dir = os.path.join(run_dir, CHECKPOINT_DIR)
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, self.checkpoint_dir, max_to_keep=config.keep_checkpoints
        )
        # XLA compiles the forward and backward pass only: it holds no
        # collectives, so it compiles the same under every strategy.
        self._forward_backward = (
            tf.function(self._micro_step, jit_compile=True) if config.jit_compile else self._micro_step
        )
        self._train_step = tf.function(self._distributed_step)
        self._weights_finite = tf.function(
            lambda: tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in self.model.trainable_variables])
        )

    @property
    def step(self):
        """Optimizer steps done so far (restored from the checkpoint on resume)."""
        return int(self._step.numpy())

    def restore(self):
        """Restores the latest checkpoint of RUN_DIR, if any. Returns: the step reached."""
        latest = self._manager.latest_checkpoint
        if latest:
            self._checkpoint.restore(latest).assert_existing_objects_matched()
            if self._is_chief:
                self._print(f"Resumed from {latest} at step {self.step}.")
        return self.step

    def train(self):
        """Trains to `config.num_steps`, resuming from the last checkpoint.

        Returns:
            dict: the last progress record (step, losses, accuracies, ...).

        Raises:
            TrainingDiverged: the loss or the weights became non-finite. The
                last good checkpoint is kept.
        """
        c = self.config
        start = self.restore()
        final_dir = os.path.join(self.run_dir, FINAL_DIR)
        if start >= c.num_steps:
            self._print(f"The run in {self.run_dir} is complete ({start}/{c.num_steps} steps).")
            if self._is_chief and not os.path.isdir(final_dir):
                save_pretrained(self.model, final_dir)
            return {"step": start}

        # Micro-batches already consumed, counted in global micro-batches.
        consumed = start * c.accumulation_steps
        dataset = self.strategy.distribute_datasets_from_function(
            lambda input_context: self._dataset_fn(c.micro_batch_size, input_context, consumed)
        )
        iterator = iter(dataset)
        progress = ProgressLogger(
            self.run_dir, c.num_steps, c.global_batch_size, c.log_every, enabled=self._is_chief,
            print_fn=self._print,
        )
        progress.start(start)
        record = {}
        try:
            for step in range(start + 1, c.num_steps + 1):
                record = {name: float(value) for name, value in self._train_step(iterator).items()}
                if not math.isfinite(record["loss"]):
                    raise TrainingDiverged(self._divergence_message(step, f"the loss is {record['loss']}"))
                # Keras evaluates the schedule at the iteration count before the update.
                progress.update(step, record, float(self._schedule(step - 1)))
                if step % c.checkpoint_every == 0 or step == c.num_steps:
                    self._save_checkpoint(step)
        finally:
            progress.close()
        if self._is_chief:
            save_pretrained(self.model, final_dir)
            self._print(f"Saved the pretrained model to {final_dir}")
        return {"step": self.step, **record}

    # ------------------------------------------------------------------ step
    def _distributed_step(self, iterator):
        """One optimizer step: k micro-batches from `iterator`, one update."""
        micro_batches = [next(iterator) for _ in range(self.config.accumulation_steps)]
        per_replica = self.strategy.run(self._replica_step, args=(micro_batches,))
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
            sums = dict.fromkeys(_SUM_NAMES, tf.constant(0.0))
            for index in tf.range(self.config.accumulation_steps):
                inputs, labels = tf.nest.map_structure(lambda t: tf.gather(t, index), stacked)
                micro_gradients, micro_sums = self._forward_backward(inputs, labels, total_weight, total_examples)
                self._accumulator.accumulate(micro_gradients)
                sums = {name: sums[name] + micro_sums[name] for name in _SUM_NAMES}
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

        mlm_loss = sums["mlm_ce"] / (total_weight + _MLM_EPSILON)
        sop_loss = sums["sop_ce"] / total_examples
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
            loss = sums["mlm_ce"] / (total_weight + _MLM_EPSILON) + sums["sop_ce"] / total_examples
            scaled_loss = self.optimizer.scale_loss(loss)
        return tape.gradient(scaled_loss, self.model.trainable_variables), sums

    # ----------------------------------------------------------- bookkeeping
    def _save_checkpoint(self, step):
        if not bool(self._weights_finite()):
            raise TrainingDiverged(self._divergence_message(step, "a weight is NaN or infinite"))
        if self._is_chief:
            path = self._manager.save(checkpoint_number=step)
            self._print(f"Saved checkpoint {path}")
            return
        # Every worker must take part in a save (variables may be read with
        # collectives); non-chief workers write to a scratch directory.
        scratch = os.path.join(self.run_dir, f".worker_{self.strategy.cluster_resolver.task_id}")
        tf.train.CheckpointManager(self._checkpoint, scratch, max_to_keep=1).save(checkpoint_number=step)
        shutil.rmtree(scratch, ignore_errors=True)

    def _divergence_message(self, step, what):
        latest = self._manager.latest_checkpoint
        kept = f"The last good checkpoint, {latest}, is kept" if latest else "No checkpoint was written yet"
        return (
            f"Training diverged at step {step}: {what}. {kept}. Lower the learning rate "
            f"(now {self.config.learning_rate}) or lengthen the warmup (now {self.config.warmup_steps} steps), "
            "then rerun the same command to resume from that checkpoint."
        )

    def _write_run_files(self, tokenizer, run_info):
        """Writes (or checks, on resume) the run directory's configs and tokenizer."""
        config_path = os.path.join(self.run_dir, CONFIG_FILE)
        if os.path.isfile(config_path):
            existing = AlbertConfig.load(config_path)
            if existing != self.model_config:
                raise ValueError(
                    f"{self.run_dir} holds a run of a different model ({config_path}: {existing}); "
                    f"this run's config is {self.model_config}. Use a new run directory or the same model flags."
                )
        if not self._is_chief:
            return
        os.makedirs(os.path.join(self.run_dir, CHECKPOINT_DIR), exist_ok=True)
        self.model_config.save(config_path)
        # Next to the checkpoints too, so the checkpoint directory alone rebuilds the model.
        self.model_config.save(os.path.join(self.run_dir, CHECKPOINT_DIR, CONFIG_FILE))
        with open(os.path.join(self.run_dir, TRAINING_CONFIG_FILE), "w") as f:
            json.dump({"trainer": self.config.to_dict(), **run_info}, f, indent=2, sort_keys=True)
            f.write("\n")
        if tokenizer is not None:
            tokenizer.save(os.path.join(self.run_dir, TOKENIZER_DIR))


_SUM_NAMES = ("mlm_ce", "mlm_correct", "sop_ce", "sop_correct")


def pretraining_sums(labels, outputs):
    """Sums over a batch from which the pretraining losses and accuracies follow.

    Args:
        labels: dict with mask_ids (batch, P), mask_weights (batch, P) and
            sentence_order_label (batch,).
        outputs: dict with mlm_logits (batch, P, V) and sop_logits (batch, 2), float32.

    Returns:
        dict of float32 scalars: mlm_ce = sum(w * ce), mlm_correct =
        sum(w * [argmax == id]), sop_ce = sum(ce), sop_correct.
    """
    weights = tf.cast(labels[features.MASK_WEIGHTS], tf.float32)
    mask_ids = tf.cast(labels[features.MASK_IDS], tf.int32)
    order = tf.cast(labels[features.SENTENCE_ORDER_LABEL], tf.int32)
    mlm_logits = tf.cast(outputs["mlm_logits"], tf.float32)
    sop_logits = tf.cast(outputs["sop_logits"], tf.float32)
    # The same cross-entropy op as `pretraining_losses`, so the numbers agree.
    mlm_ce = keras.losses.sparse_categorical_crossentropy(mask_ids, mlm_logits, from_logits=True)
    sop_ce = keras.losses.sparse_categorical_crossentropy(order, sop_logits, from_logits=True)
    mlm_hit = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), mask_ids), tf.float32)
    sop_hit = tf.cast(tf.equal(tf.argmax(sop_logits, -1, output_type=tf.int32), order), tf.float32)
    return {
        "mlm_ce": tf.reduce_sum(weights * mlm_ce),
        "mlm_correct": tf.reduce_sum(weights * mlm_hit),
        "sop_ce": tf.reduce_sum(sop_ce),
        "sop_correct": tf.reduce_sum(sop_hit),
    }


def pretraining_dataset_fn(source, data_config=None, seed=0):
    """A `Trainer` dataset_fn over `input_pipeline.make_pretraining_dataset`.

    Args:
        source: a `create-data` directory or a `TokenizedCorpus`.
        data_config: `PretrainingDataConfig` (required for a corpus).
        seed: the data seed.

    Returns:
        `dataset_fn(global_batch_size, input_context, start_step)`. One input
        pipeline feeds `num_replicas_in_sync / num_input_pipelines` replicas in
        turn, so it has consumed that many of its batches per global batch.
    """
    from input_pipeline import make_pretraining_dataset

    def dataset_fn(global_batch_size, input_context, start_step):
        replicas_per_pipeline = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        return make_pretraining_dataset(
            source, global_batch_size, input_context, seed=seed,
            start_step=start_step * replicas_per_pipeline, config=data_config,
        )

    return dataset_fn


def _is_chief(strategy):
    """True unless this process is a non-chief worker of a multi-worker cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return True
    jobs = resolver.cluster_spec().as_dict()
    if "chief" in jobs:
        return resolver.task_type == "chief"
    return resolver.task_type != "worker" or resolver.task_id == 0


def _leave_all_reduce_to_trainer(optimizer):
    """Stops Keras from all-reducing gradients that `Trainer` already all-reduced.

    Keras' TF optimizer sums gradients across replicas inside `apply()`,
    after its own (per-replica) clipping. The trainer all-reduces first so it
    can clip by the global norm; a second sum would multiply the gradient by
    the number of replicas, so the optimizer's reduction becomes the identity.
    The Trainer's tests check mirrored and multi-worker runs against one device.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not hasattr(inner, "_all_reduce_sum_gradients"):
        raise ValueError(
            f"{type(inner).__name__} has no `_all_reduce_sum_gradients`: this Keras version "
            "reduces gradients differently; the Trainer cannot control the all-reduce."
        )
    inner._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)
