"""`Trainer`: ALBERT pretraining under every `tf.distribute` strategy, resumable at any moment.

Orbit splits a trainer in two, and so does this package: `Trainer` is the
controller (its `Controller`), and it composes
  - `step_runner.StepRunner` (Orbit's `StandardTrainer.train_step`): the
    model, the optimizer and the compiled graph loop of up to
    `steps_per_loop` steps under the strategy, which returns the loop's
    metrics in one read;
  - `run_directory.RunDirectory`: the run's files (configs, tokenizer,
    `final/`) and the checks that let a rerun resume it.
The controller decides what happens between loops. A loop ends at every
checkpoint, progress line, evaluation and the last step (`loop_length`), so
checkpoints, logs, the step count and the learning-rate schedule do not
depend on `steps_per_loop`.

With held-out data (`eval_dataset_fn`) and `config.eval_every`, every
`eval_every` steps and at the last step the model reads the same
`config.eval_steps` batches of it, and the held-out MLM loss and accuracies
join that step's progress line, log record and TensorBoard point.

Runs are resumable: a `tf.train.Checkpoint` of model, optimizer and step is
written every `checkpoint_every` steps, and a restarted run restores it and
asks the input pipeline to skip the micro-batches already consumed (no lost
or repeated examples). A non-finite loss stops the run with a `RunStopped`
(why "diverged"): the graph loop stops after the step that made it and
returns, so the host, which reads the metrics at the end of each loop, sees
it there with no step run after it; a checkpoint is only written when every
weight is finite.
Checkpoints and `final/` survive a kill at any moment (see `checkpoints`): a
rerun resumes from the newest readable checkpoint and rebuilds a missing
`final/`. The run directory's layout, and what a rerun may change, are in
`run_directory`.
"""

import math
import os
import re

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.distribute import is_chief, num_workers
from albert_tf.precision import choose_precision
from albert_tf.schedules import WarmupLinearDecay
from albert_tf.training import checkpoints
from albert_tf.training.config import TrainerConfig
from albert_tf.training.progress import ProgressLogger
from albert_tf.training.run_directory import RunDirectory
from albert_tf.training.step_runner import StepRunner
from albert_tf.training.stop_requests import StopRequests
from albert_tf.utils import files
from albert_tf.utils.errors import CHECKPOINT, DIVERGED, INTERRUPTED, PREEMPTED, RunStopped, UserError
from albert_tf.utils.preemption import ctrl_c_at_step_boundaries


class Trainer:
    """Pretrains an `AlbertPretrainer` under a `tf.distribute` strategy.

    Args:
        model_config: the `AlbertConfig` to train.
        config: a `TrainerConfig`.
        run_dir: the run directory (see `run_directory`). Running the same
            command again resumes from its last checkpoint.
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
        self.run_directory = RunDirectory(run_dir, self._is_chief, print_fn)
        self.checkpoint_dir = self.run_directory.checkpoint_dir
        # The precision and XLA setting this run uses ("auto" resolved), recorded in training_config.json.
        self.precision = resolve_run_precision(config, model_config, self.strategy)
        self.compile_step = self.precision.compile_step
        resolved = {"mixed_precision": self.precision.precision, "compile_step": self.compile_step,
                    "reason": self.precision.reason}
        # Made (and its errors raised) before anything is written to RUN_DIR.
        self._eval_dataset = None if eval_dataset_fn is None else self.strategy.distribute_datasets_from_function(
            lambda input_context: eval_dataset_fn(config.micro_batch_size, input_context, 0)
        )
        self.run_directory.write_run_files(model_config, config, tokenizer, {**(run_info or {}), "resolved": resolved})

        # Model, optimizer and step, mirrored on every replica, and the compiled loop that trains them.
        self.runner = StepRunner(model_config, config, self.strategy, self.precision)
        self._schedule = WarmupLinearDecay(config.learning_rate, config.num_warmup_steps, config.num_steps)
        self._checkpoint = tf.train.Checkpoint(model=self.runner.model, optimizer=self.runner.optimizer,
                                               step=self.runner.step_variable)
        if word_embeddings_init is not None and not checkpoints.checkpoint_steps(self.checkpoint_dir):
            self.runner.set_word_embeddings(word_embeddings_init)

    @property
    def step(self):
        """Optimizer steps done so far (restored from the checkpoint on resume)."""
        return int(self.runner.step_variable.numpy())

    def restore(self):
        """Restores the newest readable checkpoint of RUN_DIR, if any, and says which it did: resumed, or started new.

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
        elif self._is_chief:
            self._print(f"Starting a new run in {self.run_dir} (no checkpoint in {self.checkpoint_dir}).")
        return self.step

    def train(self, stop_requested=None, preemption_notice=None):
        """Trains to `config.num_steps`, resuming from the last checkpoint.

        Args:
            stop_requested: optional `fn() -> bool`, asked after every loop
                (every `steps_per_loop` steps at most): True checkpoints the
                step reached and raises `RunStopped` (why "preempted"). A
                preemption notice (SIGTERM, `albert_tf.utils.preemption`)
                sets it; a running loop is never cut, so a stop waits for at
                most one loop. On several workers the run stops when any
                worker's says so, all at the same step.
            preemption_notice: optional `fn() -> bool`, a cluster's notice
                that it will preempt this machine, watched under
                MultiWorkerMirroredStrategy by TensorFlow's
                `PreemptionCheckpointHandler` (`stop_requests`), which stops
                every worker after the same loop, as `stop_requested` does;
                None: the platform's (a GCE GPU VM's maintenance event).

        Returns:
            dict: the last progress record (step, losses, accuracies, ...).

        Raises:
            RunStopped: why "diverged": the loss or the weights became
                non-finite (the last good checkpoint is kept); "preempted":
                `stop_requested` or the notice said so before the last step
                (that step is checkpointed); "interrupted": Ctrl-C, taken
                where the running loop of steps ends, after its progress
                line and any checkpoint due (`utils.preemption.CtrlC`; a
                second Ctrl-C stops at once): the newest checkpoint is kept.
            DamagedData: the data (or the held-out data) has a damaged
                record; the steps before it are checkpointed.
        """
        start = self.restore()
        if start >= self.config.num_steps:
            return self._complete_run(start)
        record = self._train_from(start, stop_requested, preemption_notice)
        if self._is_chief:
            self.run_directory.save_final(self.runner.model, self._tokenizer, self.step)
            self._print(f"Saved the pretrained model to {self.run_directory.final_dir}")
        return {"step": self.step, **record}

    def _complete_run(self, step):
        """A rerun of a finished run trains nothing: it rebuilds `final/` if a kill left it missing or stale."""
        final_dir = self.run_directory.final_dir
        self._print(f"The run in {self.run_dir} is complete ({step}/{self.config.num_steps} steps).")
        if self._is_chief and not self.run_directory.final_holds(step):
            self._print(f"{final_dir} is missing, incomplete or older than step {step}; rebuilding it.")
            self.run_directory.save_final(self.runner.model, self._tokenizer, self.step)
        return {"step": step}

    def _train_from(self, start, stop_requested, preemption_notice):
        """Runs the loops from step `start` to the last (`train`'s arguments); returns the last progress record.

        A damaged record and Ctrl-C end the run here, as the `DamagedData` or
        `RunStopped` that `train` documents; the stop watcher and the progress
        log are closed however the loops end.
        """
        c = self.config
        iterator = self.input_iterator(start)
        progress = ProgressLogger(
            self.run_dir, c.num_steps, c.global_batch_size, c.log_every, enabled=self._is_chief,
            print_fn=self._print,
        )
        progress.start(start)
        record, step = {}, start
        stops = StopRequests(self.strategy, stop_requested, preemption_notice, self.run_dir)
        try:
            with ctrl_c_at_step_boundaries() as ctrl_c:
                while step < c.num_steps:
                    step, record = self._run_loop(iterator, step, progress)
                    self._checkpoint_or_stop(step, stops)
                    ctrl_c.check()
        except tf.errors.DataLossError as error:
            raise self._damaged_data(error) from None
        except KeyboardInterrupt:
            # A second Ctrl-C may cut a loop or a save: what is kept is the newest complete checkpoint.
            newest = checkpoints.newest_checkpoint(self.checkpoint_dir)
            raise RunStopped(INTERRUPTED, f"at step {self.step} of {c.num_steps}", step=self.step,
                             saved=newest and CHECKPOINT, path=newest) from None
        finally:
            stops.close()
            progress.close()
        return record

    def _run_loop(self, iterator, step, progress):
        """One graph loop of the steps after `step`, checked for divergence, evaluated where due and logged.

        Returns:
            (the step reached, the loop's progress record).
        """
        length = loop_length(step, self.config)
        done, means, record = self.runner.run_loop(iterator, length)
        reached = step + done
        if not math.isfinite(record["loss"]):
            raise self._diverged(
                reached, f"the loss is {record['loss']}, found at the end of the loop of steps "
                         f"{step + 1}-{step + length}, which stopped there: the metrics are read once per loop"
            )
        evaluation = self.evaluate() if self._evaluates_at(reached) else None
        # Keras evaluates the schedule at the iteration count before the update.
        progress.update(reached, means, float(self._schedule(reached - 1)), num_steps=done, evaluation=evaluation)
        return reached, record

    def _checkpoint_or_stop(self, step, stops):
        """Checkpoints `step` where one is due, and stops the run (checkpointed) when `stops` asks before the end."""
        c = self.config
        saved = None
        if step % c.checkpoint_every == 0 or step == c.num_steps:
            saved = self._save_checkpoint(step)
        if step < c.num_steps and stops.requested():
            raise RunStopped(PREEMPTED, f"at step {step} of {c.num_steps}", step=step, saved=CHECKPOINT,
                             path=saved or self._save_checkpoint(step), cause=stops.cause)

    def input_iterator(self, step):
        """The distributed iterator over the micro-batches of the steps after `step` (none repeated or lost)."""
        consumed = step * self.config.accumulation_steps  # in global micro-batches
        dataset = self.strategy.distribute_datasets_from_function(
            lambda input_context: self._dataset_fn(self.config.micro_batch_size, input_context, consumed)
        )
        return iter(dataset)

    def evaluate(self):
        """The held-out metrics of the current weights over the first `config.eval_steps` eval batches.

        Returns:
            dict of floats named `step_runner.EVAL_METRICS`: MLM loss and
            accuracy over the real masked positions, SOP loss and accuracy
            over the examples.
        """
        if self._eval_dataset is None:
            raise ValueError("`evaluate()` needs held-out data: pass `eval_dataset_fn` to the Trainer.")
        return self.runner.evaluate(self._eval_dataset, self.config.eval_steps)

    def _evaluates_at(self, step):
        every = self.config.eval_every
        return every is not None and (step % every == 0 or step == self.config.num_steps)

    def _save_checkpoint(self, step):
        if not self.runner.weights_finite():
            raise self._diverged(step, "a weight is NaN or infinite")
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

    def _damaged_data(self, error):
        """The `DamagedData` of a damaged record met by the input pipeline, after a checkpoint of the last whole step.

        The graph loop stops at the step whose batch failed to read: the
        steps before it are whole (weights, optimizer and step count), so
        they are checkpointed, and only their progress lines are missing. On
        several workers the others wait in that step's all-reduce, so none
        can take part in a save: the newest checkpoint is what is kept.
        """
        newest = checkpoints.newest_checkpoint(self.checkpoint_dir)
        step = self.step
        saved = (checkpoints.checkpoint_steps(self.checkpoint_dir) or [0])[-1]
        if num_workers(self.strategy) == 1 and step > saved and self.runner.weights_finite():
            newest = self._save_checkpoint(step)
        return DamagedData(step, newest, _op_error_reason(error))

    def _diverged(self, step, what):
        """The `RunStopped` of a run that diverged at `step` (`what` says how); the last good checkpoint is kept."""
        newest = checkpoints.newest_checkpoint(self.checkpoint_dir)
        return RunStopped(
            DIVERGED, f"at step {step} ({what})", step=step, saved=newest and CHECKPOINT, path=newest,
            then=f"Lower the learning rate (now {self.config.learning_rate}) or lengthen the warmup (now "
                 f"{self.config.num_warmup_steps} steps), then rerun the same command: it "
                 + ("resumes from that checkpoint." if newest else "starts again from step 0."),
        )


class DamagedData(UserError):
    """The input pipeline met a damaged record (`tf.errors.DataLossError`, which names no file) after `step`.

    Attributes:
        step: the steps done (the last whole one).
        path: the newest checkpoint, of `step` where it could be saved, or None.
        reason: TensorFlow's one line ("corrupted record at 1989").
        kept: one sentence on what the run kept, for a message.
    """

    def __init__(self, step, path, reason):
        self.step, self.path, self.reason = step, path, reason
        self.kept = (f"Training stopped after step {step}; the newest checkpoint is {path}." if path
                     else f"Training stopped after step {step}, before any checkpoint.")
        super().__init__(f"The training data has a damaged record ({reason}). {self.kept}")


def _op_error_reason(error):
    """TensorFlow's own line of an `OpError` ("corrupted record at 156"), without the graph's call stack and op names."""
    lines = [line for line in str(error.message).splitlines() if line.strip() and not line[0].isspace()]
    return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:.*$", "", lines[-1]).strip()


def resolve_run_precision(config, model_config, strategy, flags=None, device=None):
    """The precision and compile step a run of `config` uses under `strategy` ("auto" resolved).

    `albert_tf.precision.choose_precision` for the "pretrain" job: see there
    where XLA can compile the whole step.

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
        UserError: "whole" under a strategy where the compiled step cannot run.
    """
    return choose_precision("pretrain", config.mixed_precision, model_config.hidden_size,
                            compile_step=config.compile_step, strategy=strategy, device=device, flags=flags)


def loop_length(step, config):
    """Steps of the loop that starts after `step`: `steps_per_loop`, cut at the next checkpoint, log line or end."""
    end = min(step + config.steps_per_loop, config.num_steps)
    # Evaluations fall on log lines (`eval_every` is a multiple of `log_every`).
    for every in (config.checkpoint_every, config.log_every):
        end = min(end, (step // every + 1) * every)
    return end - step
