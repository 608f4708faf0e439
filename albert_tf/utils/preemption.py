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
stops all of them, at the same step).
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
