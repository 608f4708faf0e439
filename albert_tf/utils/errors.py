"""The errors `albert-tf` shows its user, and its exit codes besides 0.

Library code raises them; only `albert_tf.cli` prints them:

- `UserError`: bad input the user must fix (a flag value, a file's content, a
  directory that holds no model). One line naming the flag or file, exit 2.
  It is a ValueError, so library callers that catch ValueError keep working.
- `Interrupted`: a run that stopped before its end (Ctrl-C, SIGTERM, a
  diverged loss), with what was kept and what to do next. Its message and
  its exit code; subclasses carry the data a command words it from.

Any other exception is a bug: its traceback with --verbose, else one line
pointing there, and exit 1.
"""

# Bad input: a one-line error naming the flag or file.
EXIT_USER_ERROR = 2
# A run that failed: an internal error (a bug), or a run that stopped itself (a diverged loss).
EXIT_FAILED = 1
# The shell's code for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130
# A run stopped by SIGTERM after saving its step: 128 + 15, what a process
# killed by SIGTERM reports to its shell or container runtime, and the
# "restart" code of TensorFlow's own preemption handler on Google Cloud; a
# scheduler that retries preempted jobs reruns the command, which resumes.
EXIT_PREEMPTED = 143


class UserError(ValueError):
    """Bad input the user must fix; the message names the flag or file and what it got."""


class Interrupted(Exception):
    """A run stopped before its end.

    Args:
        message: what stopped, what was kept and what to do next (one line).
        exit_code: the process's exit status, e.g. `EXIT_INTERRUPTED`.
    """

    def __init__(self, message, exit_code=EXIT_INTERRUPTED):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
