"""The fine-tuning loop: AdamW with warmup, evaluation every epoch, best checkpoint kept.

The output directory (its layout drawn in `albert_tf.utils.layout`) holds
best/, the best epoch's task model with its tokenizer; tokenizer/; and
finetune.json, the resolved `FinetuneConfig`, label names, per-epoch metrics
and the best epoch: enough to rebuild and rerun. While the run is unfinished,
resume/ holds checkpoints of model, optimizer (its step, moments, loss scale),
the dropout seeds and the data position (epoch and batch), written at every
epoch's end and at a stop request; a call on the same directory with the
same settings resumes from the newest, mid-epoch, to the weights an unstopped
run ends with. Ctrl-C keeps them too (a step cut short is not whole, so the
newest is the last finished epoch's end, or a stop request's). It is removed
when the run ends.

Epochs train with Keras' `model.fit`, or under MultiWorkerMirroredStrategy
(where `fit` does not run) with `CustomLoop`, which takes the same steps.
Only the chief of a multi-worker cluster writes the output directory (so a
multi-worker run resumes when it is on storage every worker reads, gs://).
"""

import contextlib
import dataclasses
import json
import math
import os
import tempfile
import time

import keras
import tensorflow as tf

from albert_tf.distribute import any_worker, clip_after_all_reduce, is_chief, num_workers
from albert_tf.loading import load_pretrained
from albert_tf.model_dirs import ENTRY_FILES, TOKENIZER_DIR, find_tokenizer
from albert_tf.models import AlbertBackbone
from albert_tf.models.pretrained import with_dtype_policy
from albert_tf.optimizers import build_optimizer
from albert_tf.precision import choose_precision
from albert_tf.recipes.config import FinetuneConfig
from albert_tf.recipes.custom_loop import CustomLoop, needs_custom_loop
from albert_tf.recipes.encoded import Encoded
from albert_tf.recipes.registry import RECIPES, get_recipe
from albert_tf.recipes.sentence import SentenceRecipe
from albert_tf.training import checkpoints
from albert_tf.training.stop_requests import StopRequests
from albert_tf.utils import files
from albert_tf.utils.errors import CHECKPOINT, INTERRUPTED, PREEMPTED, RunStopped, UserError
from albert_tf.utils.layout import BEST_DIR, FINETUNE_RUN_FILE, RESUME_DIR, finetune_run_dir
from albert_tf.utils.preemption import ctrl_c_at_step_boundaries
from input_pipeline.finetuning import make_dataset


def check_lengths(config, backbone, tokenizer):
    tokenizer.check_vocab_size(backbone.config.vocab_size)
    if config.max_seq_length > backbone.config.max_position_embeddings:
        raise UserError(
            f"`max_seq_length` ({config.max_seq_length}) is longer than the model allows "
            f"(max_position_embeddings={backbone.config.max_position_embeddings})."
        )


def finetune(config, backbone, tokenizer, train_path, eval_path, out_dir, log=print, verbose=0, strategy=None,
             stop_requested=None, preemption_notice=None, recipe=None):
    """Fine-tunes `backbone` on a task and keeps the best epoch.

    Under a `strategy` other than the default one, `config.fixed_shapes`
    defaults to on: every batch is (batch_size, max_seq_length), the partial
    last training batch is dropped, and evaluation fills its last batch with
    padding rows whose outputs are discarded. `config.batch_size` is the
    global batch, split across the replicas; gradients are all-reduced before
    they are clipped, so the steps are those of one device. Under
    `MultiWorkerMirroredStrategy` (which needs fixed shapes, and a batch that
    is a multiple of the replicas) every worker calls this with the same
    arguments, and only the chief writes `out_dir`.

    Args:
        config: a `FinetuneConfig`.
        backbone: an `AlbertBackbone` (pretrained, converted or freshly
            initialised). With `config.lora_rank` it gets LoRA factors
            (`AlbertBackbone.enable_lora`), in place. Under another dtype
            policy than `config.mixed_precision` resolves to, a copy under
            that policy trains (`with_dtype_policy`).
        tokenizer: the `AlbertTokenizer` matching the backbone's vocabulary.
        train_path, eval_path: data files (or directories, for RACE).
        out_dir: where `best/`, `tokenizer/` and `finetune.json` go (by
            the chief alone; other workers write nothing).
        log: called with one line of text per event.
        verbose: Keras `fit` verbosity.
        strategy: a `tf.distribute.Strategy` (default: the current one). The
            backbone's variables must have been created under its `scope()`;
            the task model and optimizer are built under it here.
        stop_requested: optional `fn() -> bool` (a preemption's SIGTERM),
            asked after every training step: True checkpoints model,
            optimizer and data position into `out_dir/resume/` and raises
            `RunStopped`; calling again with the same arguments resumes
            there. On several workers any worker's request stops them all
            at the same step.
        preemption_notice: optional `fn() -> bool`, a cluster's notice that
            it will preempt this machine, watched under
            MultiWorkerMirroredStrategy by TensorFlow's
            `PreemptionCheckpointHandler` (`albert_tf.training.stop_requests`),
            which stops every worker after the same step, as
            `stop_requested` does; None: the platform's (a GCE GPU VM's
            maintenance event).
        recipe: the task's recipe (default: `config.task`'s). Distillation
            (`albert_tf.recipes.distill`) passes one whose `encode_training`
            labels the training rows with a teacher's outputs, and whose
            `resume_settings` a resume must agree with.

    Returns:
        dict with "history" (per-epoch metrics), "best_epoch" and "best".

    Raises:
        RunStopped: why "preempted" (`stop_requested` or the notice) or
            "interrupted" (Ctrl-C); either way `out_dir` holds the finished
            epochs' outputs and the checkpoint a call resumes from, or, at a
            Ctrl-C before any checkpoint was written, `saved` is None.
    """
    if not isinstance(backbone, AlbertBackbone):
        raise ValueError(f"`backbone` must be an AlbertBackbone. Received: {type(backbone).__name__}")
    check_lengths(config, backbone, tokenizer)
    strategy = strategy or tf.distribute.get_strategy()
    config, backbone = _resolve_settings(config, backbone, strategy, log)
    recipe = recipe or get_recipe(config.task)
    if isinstance(recipe, SentenceRecipe):  # the heads that read one vector per example
        log(f"pooling {config.pooling}")
    keras.utils.set_random_seed(config.seed)
    data = _read_data(recipe, config, tokenizer, train_path, eval_path, log)
    model, steps_per_epoch, loop = _build_under(strategy, config, recipe, backbone, data, log)
    # Non-chief workers of a cluster train and evaluate as the chief does, and write nothing.
    writes = is_chief(strategy)
    state = _ResumeState(model, strategy, out_dir, writes,
                         settings={"config": config.to_dict(), "train": str(train_path), "eval": str(eval_path),
                                   "labels": data.label_names, "backbone": backbone.config.to_dict(),
                                   **getattr(recipe, "resume_settings", {})})
    if writes:
        files.makedirs(out_dir)
        tokenizer.save(os.path.join(out_dir, TOKENIZER_DIR))
    run = _Run(config, recipe, data, model, steps_per_epoch, loop, state, tokenizer, out_dir, writes, log, verbose)
    progress, start = state.restore(log)
    stops = StopRequests(strategy, stop_requested, preemption_notice, out_dir)
    try:
        _train_epochs(run, progress, start, stops)
    finally:
        stops.close()
    state.remove()
    return {"history": progress.history, "best_epoch": progress.best_epoch, "best": progress.best}


def _resolve_settings(config, backbone, strategy, log):
    """(config with every "auto" resolved, backbone under the precision chosen); logs what was chosen."""
    with strategy.scope():
        # False only in the default (no-op) strategy's scope.
        distributed = tf.distribute.has_strategy()
    config = config.resolved(backbone.config, distributed=distributed)
    # `fit` runs without XLA (see `_build`); TPUStrategy compiles the whole step.
    choice = choose_precision("finetune", config.mixed_precision, backbone.config.hidden_size, strategy=strategy)
    config = config.replace(mixed_precision=choice.precision)  # finetune.json records what ran
    log(f"Precision: {choice.describe()}")
    with strategy.scope():
        backbone = with_dtype_policy(backbone, choice.precision)
    log(f"learning rate {config.learning_rate:.3g}")
    if config.fixed_shapes:
        log(f"fixed shapes: batches of ({config.batch_size}, {config.max_seq_length}); the partial last training "
            "batch is dropped")
    return config, backbone


@dataclasses.dataclass(frozen=True)
class _Data:
    """The task's label names, and its training and evaluation examples."""

    label_names: list
    train: Encoded
    evaluation: Encoded
    class_weights: list | None = None  # `--class-weights` resolved, one per class


def _read_data(recipe, config, tokenizer, train_path, eval_path, log):
    """The `_Data` of the two files, encoded for the model; refuses a file with no example left."""
    label_names = recipe.label_names(train_path, config)
    train = getattr(recipe, "encode_training", recipe.encode)(train_path, tokenizer, config, label_names)
    evaluation = recipe.encode(eval_path, tokenizer, config, label_names)
    for name, encoded in (("train", train), ("eval", evaluation)):
        log(f"{name}: " + "; ".join(encoded.notes))
    if not train.inputs or not evaluation.inputs:
        raise UserError(f"No examples left to {'train' if not train.inputs else 'evaluate'} on.")
    weights = recipe.class_weights(config, train, label_names) if config.class_weights else None
    if weights:
        log("class weights " + ", ".join(f"{name} {w:.3g}" for name, w in zip(label_names, weights)))
    return _Data(label_names, train, evaluation, weights)


def _build_under(strategy, config, recipe, backbone, data, log):
    """(compiled task model, steps per epoch, `CustomLoop` or None where Keras `fit` trains) under `strategy`."""
    custom = needs_custom_loop(strategy)
    if custom and not config.fixed_shapes:
        raise UserError(f"`fixed_shapes` must be on under {type(strategy).__name__}: its step splits each "
                         "batch across the workers by shape. Received: fixed_shapes=False")
    with strategy.scope():
        model, steps_per_epoch = _build(config, recipe, backbone, data, log)
    return model, steps_per_epoch, CustomLoop(model, strategy, config.batch_size) if custom else None


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every epoch of one `finetune` call reads: its settings, data and model, and where it writes."""

    config: FinetuneConfig
    recipe: object
    data: _Data
    model: keras.Model
    steps_per_epoch: int
    loop: CustomLoop | None
    state: "_ResumeState"
    tokenizer: object
    out_dir: str
    writes: bool  # the chief alone writes out_dir
    log: object
    verbose: int


@dataclasses.dataclass
class _Progress:
    """The finished epochs: their records, the best one's scores and number, and the last one's number."""

    history: list
    best: dict | None = None
    best_epoch: int | None = None
    finished: int = 0


def _train_epochs(run, progress, start, stops):
    """Trains from `start` (epoch, batch and loss so far) to the last epoch, keeping the best in `progress`.

    Raises `RunStopped` as `finetune` says: at a stop request (`stops`, a
    `StopRequests`) or at Ctrl-C, with the checkpoint to resume from.
    """
    config = run.config
    try:
        with ctrl_c_at_step_boundaries() as ctrl_c:
            stop = _StopAtStep(stops, ctrl_c)
            for epoch in range(start["epoch"], config.epochs + 1):
                resumed = epoch == start["epoch"]
                trained = _train_epoch(run, epoch, start["batch"] if resumed else 0,
                                       start["loss_sum"] if resumed else 0.0, stop)
                if stop.stopped and trained.done < run.steps_per_epoch:
                    saved = run.state.save(epoch, trained.done, trained.loss_sum, progress)
                    raise RunStopped(PREEMPTED, f"in epoch {epoch} of {config.epochs}, at step {trained.done} of "
                                                f"{run.steps_per_epoch}", step=trained.done, saved=CHECKPOINT,
                                     path=saved, cause=stops.cause)
                saved = _finish_epoch(run, progress, trained)
                if saved and stop.stopped:  # asked at the epoch's last step: the next epoch starts from here
                    raise RunStopped(PREEMPTED, f"after epoch {epoch} of {config.epochs}", step=0, saved=CHECKPOINT,
                                     path=saved, cause=stops.cause)
    except KeyboardInterrupt:
        raise _interrupted(run, progress) from None


@dataclasses.dataclass(frozen=True)
class _TrainedEpoch:
    """One epoch's training in this call: its number, the step it resumed at (`skip`), the steps this call took
    (`batches`), the loss summed over the epoch's steps so far, the model trained and the seconds it took."""

    epoch: int
    skip: int
    batches: int
    loss_sum: float
    model: keras.Model
    seconds: float

    @property
    def done(self):
        """The epoch's steps trained, by this call and before it."""
        return self.skip + self.batches


def _train_epoch(run, epoch, skip, loss_sum, stop):
    """Trains `epoch` from its step `skip` to its end or a stop request (`stop`, a `_StopAtStep`): a `_TrainedEpoch`.

    `loss_sum`: the loss summed over the steps before `skip`.
    """
    start = time.perf_counter()
    stop.batches = 0
    if run.loop is None:
        fit = run.model.fit(_epoch_dataset(run, epoch, skip), epochs=epoch, initial_epoch=epoch - 1, shuffle=False,
                            verbose=run.verbose, callbacks=[stop])
        batches, trained = stop.batches, run.model
        loss_sum += float(fit.history["loss"][-1]) * batches if batches else 0.0
    else:
        mean, batches = run.loop.train_epoch(lambda: _epoch_dataset(run, epoch, skip), stop.agreed)
        trained = run.loop.local_model()
        loss_sum += mean * batches
    return _TrainedEpoch(epoch, skip, batches, loss_sum, trained, time.perf_counter() - start)


def _epoch_dataset(run, epoch, skip=0):
    """The training batches of `epoch` after its first `skip`: a new order each epoch (see make_dataset's `shuffle`)."""
    config, train = run.config, run.data.train
    dataset = make_dataset(train.inputs, train.labels, config.batch_size, shuffle=True,
                           seed=config.seed + epoch - 1, bucket=config.bucket and not config.fixed_shapes,
                           label_pad=run.recipe.label_pad, pad_to=config.pad_to,
                           remainder="drop" if config.fixed_shapes else "keep")
    return dataset.skip(skip)


def _finish_epoch(run, progress, trained):
    """Scores the `_TrainedEpoch`, writes its outputs (best/ when it is the best, finetune.json) and checkpoints
    the next epoch's start; returns that checkpoint's path (None after the last epoch)."""
    config, epoch, main_metric = run.config, trained.epoch, _main_metric(run)
    scores = run.recipe.evaluate(trained.model, run.data.evaluation, config)
    if main_metric not in scores:
        raise UserError(f"--metric {main_metric}: {config.task} reports "
                        f"{[k for k, v in scores.items() if isinstance(v, float)]}.")
    record = {"epoch": epoch, "train_loss": trained.loss_sum / max(trained.done, 1),
              "train_seconds": round(trained.seconds, 2), **scores}
    progress.history.append(record)
    improved = progress.best is None or scores[main_metric] > progress.best[main_metric]
    if improved:
        if "thresholds" in scores:  # multilabel: the thresholds tuned on dev go with the model
            trained.model.thresholds = scores["thresholds"]
        if run.writes:
            _save_best(trained.model, run.tokenizer, run.out_dir)
        progress.best, progress.best_epoch = scores, epoch
    if run.writes:
        _write_run(run, progress.history, progress.best_epoch)
    progress.finished = epoch
    # A rerun after a kill from here on starts at the next epoch.
    saved = run.state.save(epoch + 1, 0, 0.0, progress) if epoch < config.epochs else None
    # Logged once the epoch's outputs are written: a Ctrl-C after this line keeps the epoch.
    # The steps this call trained: a resumed epoch trained only the rest of it.
    steps = f"{trained.batches} steps" + (
        f", resumed at step {trained.skip} of {run.steps_per_epoch}" if trained.skip else "")
    run.log(f"epoch {epoch}/{config.epochs}: train loss {record['train_loss']:.4f}, "
            + ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if isinstance(v, float))
            + f" ({trained.seconds:.1f}s train, {steps})" + (" *best*" if improved else ""))
    return saved


def _interrupted(run, progress):
    """The `RunStopped` of Ctrl-C, taken at the step boundary after it (`_StopAtStep`); a second Ctrl-C may come
    in the middle of a step, whose weights then are not whole: the newest checkpoint (the last finished epoch's
    end, or a stop request's) is what a rerun resumes from, as after SIGTERM. Before any checkpoint, nothing is
    kept."""
    where = f"in epoch {progress.finished + 1} of {run.config.epochs}"
    newest = checkpoints.newest_checkpoint(run.state.directory) if run.writes else None
    if newest is None:
        run.state.remove()
        return RunStopped(INTERRUPTED, where)
    return RunStopped(INTERRUPTED, where, saved=CHECKPOINT, path=newest)


def _main_metric(run):
    """The metric that picks the best epoch: --metric, else the task's first."""
    return run.config.metric or run.recipe.metrics[0]


class _StopAtStep(keras.callbacks.Callback):
    """Asks `stops` (a `StopRequests`) after every training step; True ends `fit` there (`stopped`), whole.

    A Ctrl-C since the last step (`ctrl_c`, a `utils.preemption.CtrlC`) is
    raised there first, as a KeyboardInterrupt. Counts the steps of the
    running `fit` in `batches`. `agreed()` is the same question for
    `CustomLoop`. On several workers, any worker's request stops all.
    """

    def __init__(self, stops, ctrl_c):
        super().__init__()
        self._stops, self._ctrl_c = stops, ctrl_c
        self.stopped, self.batches = False, 0

    def agreed(self):
        self._ctrl_c.check()
        if not self.stopped:
            self.stopped = self._stops.requested()
        return self.stopped

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.agreed():
            self.model.stop_training = True


class _ResumeState:
    """The checkpoints of an unfinished fine-tuning run in `out_dir/resume/`, and their restore.

    A checkpoint holds every variable of the task model (the dropout seeds
    too) and of its optimizer, the position (epoch, batch, the epoch's loss
    so far) and a JSON record of the finished epochs and of the settings it
    was made with; a call with other settings starts over.
    """

    def __init__(self, model, strategy, out_dir, writes, settings):
        self._strategy, self._writes, self._settings = strategy, writes, settings
        self._optimizer = model.optimizer
        self.directory = os.path.join(out_dir, RESUME_DIR)
        with strategy.scope():
            # Built before a restore: `fit` and `CustomLoop` then find it built.
            model.optimizer.build(model.trainable_variables)
        # Outside the strategy: each worker's own bookkeeping (a collective cannot mirror a string).
        self._position = tf.Variable([1, 0], dtype=tf.int64, trainable=False)
        self._loss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self._record = tf.Variable("", dtype=tf.string, trainable=False)
        # Lists of variables, in the order the same model and optimizer always build them.
        self._checkpoint = tf.train.Checkpoint(
            model=[v.value for v in model.variables], optimizer=[v.value for v in model.optimizer.variables],
            position=self._position, loss_sum=self._loss_sum, record=self._record,
        )

    def restore(self, log):
        """The run's finished epochs (`_Progress`) and its position ({"epoch", "batch", "loss_sum"}): where a
        newest readable checkpoint left them, else the start.

        Raises:
            UserError: the workers of a cluster found different positions
                (each its own unfinished run, on disks of their own).
        """
        run = self._restore(log)
        history = run["history"]
        progress = _Progress(history, run["best"], run["best_epoch"], finished=history[-1]["epoch"] if history else 0)
        steps = int(self._optimizer.iterations.numpy())  # 0 on a start
        if num_workers(self._strategy) > 1:
            mean = self._strategy.reduce(
                tf.distribute.ReduceOp.MEAN, self._strategy.run(lambda: tf.constant(float(steps), tf.float64)), None)
            if any_worker(self._strategy, float(mean) != steps):
                raise UserError(f"The workers resume from different steps ({self.directory} differs between "
                                "them): put --out on storage every worker reads (gs://), or move the unfinished "
                                "run away on every worker to start over.")
        return progress, {k: run[k] for k in ("epoch", "batch", "loss_sum")}

    def _restore(self, log):
        start = {"epoch": 1, "batch": 0, "loss_sum": 0.0, "history": [], "best": None, "best_epoch": None}
        newest = checkpoints.newest_checkpoint(self.directory)
        if newest is None:
            log(f"Starting a new run (no checkpoint in {self.directory}).")
            return start
        if self._settings_of(newest) not in (None, self._settings):  # None: unreadable, the restore falls back
            log(f"Starting a new run: {self.directory} holds an unfinished run with other settings.")
            self.remove()
            return start
        path = checkpoints.restore_newest_readable(self._checkpoint, self.directory, log)
        record = json.loads(self._record.numpy().decode())
        epoch, batch = (int(x) for x in self._position.numpy())
        log(f"Resuming from {path}: epoch {epoch}, step {batch}")
        return {"epoch": epoch, "batch": batch, "loss_sum": float(self._loss_sum.numpy()),
                **{k: record[k] for k in ("history", "best", "best_epoch")}}

    @staticmethod
    def _settings_of(path):
        """The settings a checkpoint was made with, read without restoring it (None if unreadable)."""
        try:
            record = tf.train.load_checkpoint(path).get_tensor("record/.ATTRIBUTES/VARIABLE_VALUE")
            return json.loads(record)["settings"]
        except Exception:  # a damaged checkpoint: `restore_newest_readable` reports it and falls back
            return None

    def save(self, epoch, batch, loss_sum, progress):
        """Checkpoints the position before `batch` of `epoch` and the `_Progress`; returns the checkpoint's path."""
        self._position.assign([epoch, batch])
        self._loss_sum.assign(loss_sum)
        self._record.assign(json.dumps({"settings": self._settings, "history": progress.history, "best": progress.best,
                                        "best_epoch": progress.best_epoch}))
        # Named by the optimizer's step, which grows with every save.
        step = int(self._optimizer.iterations.numpy())
        if self._writes:
            return checkpoints.save_checkpoint(self._checkpoint, self.directory, step, keep=2)
        # Every worker takes part in a save (variables may be read with collectives); the others write a local
        # scratch copy, outside `out_dir`, which they never touch.
        scratch = tempfile.mkdtemp(prefix=f"albert-tf-worker-{self._strategy.cluster_resolver.task_id}-")
        self._checkpoint.write(checkpoints.checkpoint_path(scratch, step))
        files.rmtree(scratch, ignore_errors=True)
        return checkpoints.checkpoint_path(self.directory, step)

    def remove(self):
        if self._writes:
            checkpoints.remove_checkpoints(self.directory)


def _build(config, recipe, backbone, data, log):
    """(compiled task model, steps per epoch); call under the strategy's scope."""
    if backbone.lora_rank is not None:
        # A LoRA fine-tuned model fine-tunes on from its merged weights, so
        # `lora_rank` alone says what trains.
        backbone.merge_lora()
    weighted = {} if data.class_weights is None else {"class_weights": data.class_weights}
    model = recipe.build_model(backbone, data.label_names, config, **weighted)
    num_examples = len(data.train.inputs)
    if config.lora_rank:
        # Before compile: the optimizer takes the trainable variables as they are then.
        backbone.enable_lora(config.lora_rank, embedding_rank=config.lora_embedding_rank)
    trainable = sum(math.prod(v.shape) for v in model.trainable_weights)
    total = model.count_params()
    log(f"trainable parameters {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)"
        + (f", LoRA rank {config.lora_rank}" if config.lora_rank else "")
        + (f" (word embeddings rank {config.lora_embedding_rank})" if config.lora_rank and config.lora_embedding_rank
           else ""))
    # Fixed shapes drop the partial last batch.
    batches = num_examples // config.batch_size if config.fixed_shapes else math.ceil(num_examples / config.batch_size)
    total_steps = batches * config.epochs
    # AdamW (LayerNorm/bias not decayed), warmup then linear decay, gradients clipped to norm 1.
    optimizer = build_optimizer(
        "adamw", learning_rate=config.learning_rate, warmup_steps=int(round(config.warmup_fraction * total_steps)),
        total_steps=total_steps, weight_decay=config.weight_decay, clip_norm=1.0,
    )
    clip_after_all_reduce(optimizer)
    # Per-batch padding gives a new sequence length nearly every batch, which
    # XLA would compile once each; with fixed shapes, XLA on CPUs and GPUs is
    # left off too (it was not measured here), and TPUStrategy compiles the
    # whole step whatever this says.
    model.compile(optimizer=optimizer, jit_compile=False)
    return model, batches


def _save_best(model, tokenizer, out_dir):
    """Writes best/ (model and tokenizer) whole: Ctrl-C leaves the previous best/ or the new one, never a mix.

    Weights only: Keras saves a compiled model's optimizer variables with its
    weights, and AdamW's two moments per weight would make every fine-tuned
    model three times its size for nothing a reader of best/ uses. Its
    compile config goes too, or loading would rebuild those moments (and warn
    that the file has none): best/ loads as an uncompiled model, as a
    backbone does.
    """
    with files.publish(os.path.join(out_dir, BEST_DIR), ENTRY_FILES) as staging:
        with _uncompiled(model):
            model.save_pretrained(staging)
        tokenizer.save(os.path.join(staging, TOKENIZER_DIR))


@contextlib.contextmanager
def _uncompiled(model):
    """`model` as Keras saves an uncompiled one, for the block; then as it was, to train on."""
    optimizer, compiled = getattr(model, "optimizer", None), model.compiled
    model.optimizer, model.compiled = None, False
    try:
        yield model
    finally:
        model.optimizer, model.compiled = optimizer, compiled


def _write_run(run, history, best_epoch):
    """Writes the `_Run`'s finetune.json: its settings, data notes, the epochs in `history` and the best one."""
    record = {
        "config": run.config.to_dict(),
        "label_names": run.data.label_names,
        "data": {"train": run.data.train.notes, "eval": run.data.evaluation.notes},
        "history": history,
        "best_epoch": best_epoch,
    }
    files.write_text(os.path.join(run.out_dir, FINETUNE_RUN_FILE), json.dumps(record, indent=2))


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How the fine-tuning run that wrote a model directory read its text: what an export or `serve` of
    that directory defaults to. Any other directory, and a run recorded before a setting existed, gets the
    defaults (BERT's: one window, cut from the end).

    Attributes:
        max_seq_length: the run's `max_seq_length`; None for a directory no fine-tuning run wrote.
        truncate_from: which pieces of a longer text went: "end", "start" or "middle".
        max_windows: how many windows a long text was read as (classifiers and regressors).
        reads_pairs: whether the run read text pairs (a pair column, or a GLUE pair task).
    """

    max_seq_length: int | None = None
    truncate_from: str = "end"
    max_windows: int = 1
    reads_pairs: bool = False


def run_settings(model_dir):
    """The `RunSettings` of the fine-tuning run whose `best/` is `model_dir`; the defaults for any other directory.

    Args:
        model_dir: a model directory (local path or URL).
    """
    out_dir = finetune_run_dir(model_dir)
    path = os.path.join(out_dir, FINETUNE_RUN_FILE)
    if out_dir == files.normpath(model_dir) or not files.isfile(path):
        return RunSettings()
    config = json.loads(files.read_text(path)).get("config", {})
    glue = getattr(RECIPES.get(config.get("task")), "glue", None)
    known = {name: config[name] for name in ("max_seq_length", "truncate_from", "max_windows") if name in config}
    return RunSettings(**known, reads_pairs=bool(config.get("text_pair_column") or (glue is not None and glue.text_b)))


def load_run(directory):
    """(FinetuneConfig, task model, tokenizer, run record) of a `finetune` output directory.

    Args:
        directory: the `finetune --out` directory, or its `best/`.
    """
    directory = finetune_run_dir(directory)
    if not files.isdir(directory):
        raise UserError(f"{directory}: no such directory.")
    path = os.path.join(directory, FINETUNE_RUN_FILE)
    if not files.isfile(path):
        raise UserError(f"{directory} is not a fine-tuning output directory: {FINETUNE_RUN_FILE} is missing.")
    try:
        run = json.loads(files.read_text(path))
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON: {e}") from e
    config = FinetuneConfig.from_dict(run["config"])
    best_dir = os.path.join(directory, BEST_DIR)
    model = load_pretrained(best_dir)
    return config, model, find_tokenizer(best_dir), run
