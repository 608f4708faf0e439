"""Stop requests: SIGTERM (a preemption's notice) asks a run to stop at its next safe point.

TPU VMs, spot GPU machines and Kubernetes stop a job with SIGTERM and kill it
a grace period later. `sigterm_requests_stop` turns SIGTERM into a flag
instead of an exit. The long loops (pretraining, fine-tuning, the demo,
create-data's shards, the tokenizer's reading) take a `stop_requested()`
callable and ask it between units of work that end whole (a loop of steps,
a fine-tuning step, a shard), keep what they have, and raise
`errors.RunStopped` with why `PREEMPTED`. Python runs a signal handler only
between calls into TensorFlow, so a stop waits for the running unit at most.
On several workers the trainers agree on the stop (any worker's request
stops all of them, at the same step). Ctrl-C in the training loops waits for
their next step boundary too (`ctrl_c_at_step_boundaries`), and stops there.
"""

import contextlib
import signal
import threading


@contextlib.contextmanager
def sigterm_requests_stop():
    """Yields a `threading.Event` that SIGTERM sets instead of ending the process, for the block's duration.

    Outside the main thread (where Python refuses signal handlers) it is only
    the event, for a caller to set.
    """
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: requested.set())
    try:
        yield requested
    finally:
        signal.signal(signal.SIGTERM, previous)


class CtrlC:
    """Ctrl-C inside a training loop, raised at the loop's next step boundary (`check`) rather than where it lands.

    Python raises KeyboardInterrupt at whatever line runs when SIGINT comes:
    between two steps that is often the loop's host work (the progress line's
    TensorBoard scalars, a checkpoint's save), inside TensorFlow's conversions
    of Python values to tensors, which do not all survive an exception there
    (a forked demo died of SIGSEGV in one). In `ctrl_c_at_step_boundaries`'s block,
    the first Ctrl-C only marks the interrupt; `check()` at the next step
    boundary raises it, and the block raises it as it ends if no check came.
    A second Ctrl-C raises at once. A step (a loop of them) runs in
    TensorFlow's runtime, where no KeyboardInterrupt is raised anyway: a
    Ctrl-C stops at the boundary after it, as before, with its host work done.

    Outside the main thread, and where SIGINT does not raise KeyboardInterrupt
    (ignored, as in a background job, or a program's own handler), nothing changes.
    """

    def __init__(self):
        self.pending = False

    def check(self):
        """Raises the KeyboardInterrupt of a Ctrl-C that came since the block began (or the last check)."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def _mark(self, signum, frame):
        if self.pending:
            raise KeyboardInterrupt  # Ctrl-C again: now
        self.pending = True


@contextlib.contextmanager
def ctrl_c_at_step_boundaries():
    """Yields a `CtrlC` whose `check()` the loop calls at each step boundary; see `CtrlC`."""
    ctrl_c = CtrlC()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield ctrl_c
        return
    signal.signal(signal.SIGINT, ctrl_c._mark)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c.check()  # a Ctrl-C after the last check, when the block ended without an exception
