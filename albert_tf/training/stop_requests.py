"""`StopRequests`: whether a training loop stops at a step boundary, on SIGTERM or a cluster's preemption notice.

Both end a run the same way: the loop checkpoints the step reached, in the
run's own layout, and raises `RunStopped` with why `PREEMPTED`, which the CLI
turns into one line and exit 143; a rerun resumes from that checkpoint.

- SIGTERM, under every strategy: the caller's `stop_requested()`
  (`albert_tf.utils.preemption`), agreed over the workers with one
  all-reduce per check (`distribute.any_worker`).
- A cluster's preemption notice, under MultiWorkerMirroredStrategy where the
  platform gives one (`platform_notice`): TensorFlow's
  `tf.distribute.experimental.PreemptionCheckpointHandler` polls it every
  second in a thread of its own, and the worker that got it agrees with the
  others, through the cluster's coordination service, on the check after
  which all of them stop (the next one: the workers are never more than one
  step apart). At that check the handler calls its `save_fn` and `exit_fn`
  on every worker; both only record, and the loop then saves and raises as
  on SIGTERM, where TensorFlow's defaults would save through the handler's
  own CheckpointManager and `sys.exit` from inside the loop.

What the handler is given, and why (TensorFlow 2.21's
tensorflow/python/distribute/failure_handling/failure_handling.py):
- `grace_period=0`: stop at the agreed check. With a grace period (an hour
  on a GCE GPU VM) it trains on and stops near the end, timed by its
  estimate of a call's length, which `save_checkpoint_if_preempted` (the
  call for loops of several steps) sets to zero: the save would start in the
  notice's last seconds, with no margin for a loop and a checkpoint.
- A `tf.train.CheckpointManager` of an empty `tf.train.Checkpoint` over a
  directory nothing writes: the handler restores from its manager when it is
  made and adds its own call counter to the manager's checkpoint. The run's
  checkpoints keep their layout, and the loop's own restore (which falls
  back past an unreadable checkpoint) stays the one restore.
- Always a `termination_watcher_fn`: without one it takes SIGTERM's handler
  over, where `albert_tf.utils.preemption` already turns SIGTERM into a stop.

Its agreement lives in the coordination service's keys, which outlive the
handler (TensorFlow 2.21's source): in the processes of a multi-worker
cluster, the notice is watched for their first run; a second run in the same
processes ignores it (SIGTERM still stops it).

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

# `RunStopped.cause` of a stop on the handler's notice (a SIGTERM's has none: "stopped by SIGTERM").
NOTICE = "the cluster's preemption notice"
# Where the handler's own CheckpointManager points: beside the run's checkpoints, never written.
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
    """Asked by every worker at the same step boundaries: whether the run stops there, and what asked.

    Args:
        strategy: the run's `tf.distribute.Strategy`.
        stop_requested: optional `fn() -> bool`, SIGTERM's request.
        notice: `fn() -> bool`, the cluster's preemption notice, watched
            under MultiWorkerMirroredStrategy only (the handler's
            `termination_watcher_fn`: light, never blocking); None: the
            platform's (`platform_notice`).
        directory: the run's directory (the handler's unused manager points
            into it).

    Attributes:
        cause: None, or once `requested()` said True, what asked:
            None for SIGTERM (`RunStopped.cause`), `NOTICE` for the notice.
    """

    def __init__(self, strategy, stop_requested=None, notice=None, directory="."):
        self._strategy, self._requested = strategy, stop_requested
        self._handler = None
        self._noticed = False  # the handler's exit_fn ran: every worker is at the agreed check
        self.cause = None
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return
        notice = platform_notice() if notice is None else notice
        if notice is not None:
            manager = tf.train.CheckpointManager(
                tf.train.Checkpoint(), os.path.join(directory, _UNUSED_HANDLER_DIR), max_to_keep=1)
            config = tf.distribute.experimental.TerminationConfig(
                termination_watcher_fn=notice, exit_fn=self._record_notice, grace_period=0,
                save_fn=lambda: None)  # the loop saves, in its own layout, once `requested()` says so
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver, manager, termination_config=config)

    def requested(self):
        """Whether the run stops at this step boundary; every worker asks at the same ones, and gets the same answer.

        Returns:
            bool. True also sets `cause`.
        """
        if self._handler is not None:
            # It reads its own deprecated `total_run_calls` when it saves: not the user's to see.
            with deprecation.silence():
                self._handler.save_checkpoint_if_preempted()
            if self._noticed:
                self.cause = NOTICE
                return True
        return self._requested is not None and any_worker(self._strategy, self._requested())

    def close(self):
        """Stops the handler's watcher threads (TensorFlow stops them only in `__del__`, which they keep from running)."""
        if self._handler is not None:
            self._handler.__del__()
            self._handler = None

    def _record_notice(self):
        self._noticed = True
