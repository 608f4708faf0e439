"""The errors `albert-tf` shows its user.

Library code raises them; only `albert_tf.cli` prints them and picks the exit code:

- `UserError`: bad input the user must fix (a flag value, a file's content, a
  directory that holds no model). One line naming the flag or file, exit 2.
  It is a ValueError, so library callers that catch ValueError keep working.
- `RunStopped`: a run that stopped before its end (Ctrl-C, SIGTERM or a
  cluster's preemption notice, a diverged loss), with where it stopped, what
  it kept and where: the one kind of stop every command and library loop raises.

Any other exception is a bug: its traceback with --verbose, else one line
pointing there, and exit 1.
"""

# Why a run stopped (`RunStopped.why`).
INTERRUPTED = "interrupted"  # Ctrl-C
PREEMPTED = "preempted"  # SIGTERM, or a cluster's preemption notice
DIVERGED = "diverged"  # a non-finite loss or weight
WHY = (INTERRUPTED, PREEMPTED, DIVERGED)
# `RunStopped.saved` of a run that kept a training checkpoint.
CHECKPOINT = "checkpoint"


class UserError(ValueError):
    """Bad input the user must fix; the message names the flag or file and what it got."""


class RunStopped(Exception):
    """A run stopped before its end, at a point where what it kept is whole.

    Args:
        why: `INTERRUPTED`, `PREEMPTED` or `DIVERGED`.
        where: where it stopped, a phrase: "at step 6 of 12", "in epoch 2 of 3, at step 14 of 30",
            "while training the tokenizer", "at step 8 (the loss is nan)".
        step: the step reached, or None where steps do not apply.
        saved: what was kept: `CHECKPOINT` (a training checkpoint, which a rerun
            resumes from), another noun phrase ("the best finished epoch, 1 (accuracy
            0.8100)"), or None when nothing was.
        path: where `saved` is, or None.
        then: what to do next, one sentence; None: rerun the same command (to
            resume when something was saved, else to start again).
        cause: what asked for the stop, a noun phrase ("the cluster's preemption
            notice"); None: what `why` says (Ctrl-C, SIGTERM, the loss).
    """

    def __init__(self, why, where, *, step=None, saved=None, path=None, then=None, cause=None):
        if why not in WHY:
            raise ValueError(f"`why` must be one of {WHY}. Received: why={why!r}")
        self.why, self.where, self.step, self.saved, self.path, self.then = why, where, step, saved, path, then
        self.cause = cause
        super().__init__(f"{why} {where}; saved {saved or 'nothing'}" + (f" in {path}" if path else ""))
