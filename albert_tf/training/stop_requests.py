"""`StopRequests`: whether a training loop stops at a loop boundary, on SIGTERM or a cluster's preemption notice.

Both end a run the same way: a checkpoint of the step reached, in the run's
own layout (`checkpoints`), then `RunStopped` with why `PREEMPTED`, which the
CLI turns into one line and exit 143; a rerun resumes from that checkpoint.

- SIGTERM, under every strategy: the caller's `stop_requested()`
  (`albert_tf.utils.preemption`), asked after every loop and agreed over the
  workers with one all-reduce (`distribute.any_worker`).
- A cluster's preemption notice, under MultiWorkerMirroredStrategy where the
  platform gives one (`platform_notice`): TensorFlow's
  `tf.distribute.experimental.PreemptionCheckpointHandler` polls it every
  second in a thread of its own, and the worker that got it agrees with the
  others, through the cluster's coordination service, on the loop after
  which all of them save (the next one: the workers are never more than one
  loop apart). It saves through `save_fn`, the trainer's own checkpoint, and
  its `exit_fn` only records that it did: the trainer then raises, where
  TensorFlow's default exit function would `sys.exit` from inside the loop.

What the handler is given, and why (TensorFlow 2.21's
tensorflow/python/distribute/failure_handling/failure_handling.py):
- `grace_period=0`: save at the agreed loop and stop. With a grace period
  (an hour on a GCE GPU VM) it trains on and saves again near the end, timed
  by its estimate of a call's length, which `save_checkpoint_if_preempted`
  (the call for loops of several steps) sets to zero: the save would start
  in the notice's last seconds, with no margin for a loop and a checkpoint.
- A `tf.train.CheckpointManager` of an empty `tf.train.Checkpoint` over a
  directory nothing writes: the handler restores from its manager when it is
  made and adds its own call counter to the manager's checkpoint. The run's
  checkpoints keep their layout, and the trainer's restore (which falls back
  past an unreadable checkpoint) stays the one restore.
- Always a `termination_watcher_fn`: without one it takes SIGTERM's handler
  over, where `albert_tf.utils.preemption` already turns SIGTERM into a stop.

Where TensorFlow's handler watches nothing, no handler is made and SIGTERM is
the notice: on a Cloud TPU VM or a GCE CPU VM (its source: "does not support
usage with TPU or CPU device on GCP"), under TPUStrategy (it watches TPUs on
Google's internal platform only), and on platforms that send only SIGTERM
(spot GPU machines, Kubernetes).
"""

import os

import tensorflow as tf
from tensorflow.python.distribute.failure_handling import failure_handling_util
from tensorflow.python.util import deprecation

from albert_tf.distribute import any_worker
from albert_tf.utils.errors import CHECKPOINT, PREEMPTED, RunStopped

# `RunStopped.cause` of a stop on the handler's notice (a SIGTERM's has none: "stopped by SIGTERM").
NOTICE = "the cluster's preemption notice"
# Beside the checkpoints, never written: the directory of the handler's own (unused) CheckpointManager.
_UNUSED_HANDLER_DIR = ".preemption-handler-unused"


def platform_notice():
    """The preemption notice of this machine's platform, as TensorFlow's handler watches it, or None.

    On a GCE VM with GPUs: whether the metadata server announces a host
    maintenance that stops the VM (its `instance/maintenance-event` reads
    TERMINATE_ON_HOST_MAINTENANCE), TensorFlow's own watcher. Elsewhere None:
    TensorFlow's handler watches nothing there (see the module's docstring).
    Finding the platform asks the metadata server once (`detect_platform`,
    which fails at once off Google Cloud).

    Returns:
        A `fn() -> bool`, True once the notice came, or None.
    """
    if failure_handling_util.detect_platform() is not failure_handling_util.PlatformDevice.GCE_GPU:
        return None
    return failure_handling_util.termination_watcher_function_gce


class StopRequests:
    """Asked by every worker after every loop: raises `RunStopped` (why `PREEMPTED`) at a checkpoint when the run must stop.

    Args:
        strategy: the run's `tf.distribute.Strategy`.
        save: `fn(step) -> path`: checkpoints `step` in the run's layout; every
            worker calls it at the same step (the chief writes).
        stop_requested: optional `fn() -> bool`, SIGTERM's request.
        notice: `fn() -> bool`, the cluster's preemption notice, watched
            under MultiWorkerMirroredStrategy only (the handler's
            `termination_watcher_fn`: light, never blocking); None: the
            platform's (`platform_notice`).
        checkpoint_dir: the run's checkpoint directory (the handler's
            unused manager points beside it).
    """

    def __init__(self, strategy, save, stop_requested=None, notice=None, checkpoint_dir="."):
        self._strategy, self._save, self._requested = strategy, save, stop_requested
        self._handler = None
        self._noticed_save = None  # the checkpoint the handler's save_fn wrote
        self._stopped_at = None  # that checkpoint, once the handler's exit_fn ran
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return
        notice = platform_notice() if notice is None else notice
        if notice is not None:
            manager = tf.train.CheckpointManager(
                tf.train.Checkpoint(), os.path.join(checkpoint_dir, _UNUSED_HANDLER_DIR), max_to_keep=1)
            config = tf.distribute.experimental.TerminationConfig(
                termination_watcher_fn=notice, exit_fn=self._record_stop, grace_period=0, save_fn=self._save_on_notice)
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver, manager, termination_config=config)

    @property
    def watches_notice(self):
        """Whether TensorFlow's handler watches a preemption notice for this run."""
        return self._handler is not None

    def check(self, step, saved, where):
        """Raises `RunStopped` when the run stops after `step`; every worker calls it at every loop boundary.

        Args:
            step: the step the loop ended on.
            saved: the path of `step`'s checkpoint when the loop ended on one, else None.
            where: `RunStopped.where`, e.g. "at step 6 of 12".

        Raises:
            RunStopped: why `PREEMPTED`, `saved` `CHECKPOINT`, `path` the
                checkpoint of `step`; `cause` `NOTICE` on the handler's notice.
        """
        if self._handler is not None:
            # It reads its own deprecated `total_run_calls` when it saves: not the user's to see.
            with deprecation.silence():
                self._handler.save_checkpoint_if_preempted(step, saved)
            if self._stopped_at is not None:
                raise RunStopped(PREEMPTED, where, step=step, saved=CHECKPOINT, path=self._stopped_at, cause=NOTICE)
        if self._requested is not None and any_worker(self._strategy, self._requested()):
            raise RunStopped(PREEMPTED, where, step=step, saved=CHECKPOINT, path=saved or self._save(step))

    def close(self):
        """Stops the handler's watcher threads (TensorFlow stops them only in `__del__`, which they keep from running)."""
        if self._handler is not None:
            self._handler.__del__()
            self._handler = None

    def _save_on_notice(self, step, saved):
        self._noticed_save = saved or self._save(step)

    def _record_stop(self):
        self._stopped_at = self._noticed_save
