"""The `albert-tf` command line: turns flags into configs and calls the library.

Each subcommand lives in its own module under `albert_tf.commands` with two
functions, `add_parser(subparsers)` and `run(args)`.

The commands report through `albert_tf.utils.errors`, and only this module
prints and picks the exit code: a `UserError` (bad input: a missing or
unreadable file, a wrong format, a bad flag value; also a mistyped flag or
command, with the closest known one) is one line naming the problem, exit 2; a
`RunStopped` run (Ctrl-C: 130, SIGTERM or a preemption notice: 143, a diverged
loss: 1) says in one line where it stopped, what it kept and what to do next.
A command whose module sets `STOPS_ON_SIGTERM` gets `args.stop_requested`,
which SIGTERM sets instead of ending the process
(`albert_tf.utils.preemption`), from the moment `albert-tf` starts; the other
commands end on SIGTERM at once. Any other exception is a bug: its traceback
with `--verbose`, else one line saying so, exit 1; a crash in C++ (SIGSEGV,
SIGABRT) leaves Python's tracebacks of every thread. The paths a command line
names are checked before the command's module loads
(`albert_tf.commands.early_checks`), and its flags before TensorFlow loads.
TensorFlow's C++ and CUDA start-up messages are off unless `--verbose`.
"""

import contextlib
import faulthandler
import importlib
import json
import os
import re
import signal
import sys
import threading
import traceback

from albert_tf import __version__
from albert_tf.utils.errors import CHECKPOINT, DIVERGED, INTERRUPTED, PREEMPTED, RunStopped, UserError
from albert_tf.utils.preemption import sigterm_requests_stop

# Bad input: a one-line error naming the flag or file.
EXIT_USER_ERROR = 2
# A run that failed: an internal error (a bug), or a run that stopped itself (a diverged loss).
EXIT_FAILED = 1
# The shell's code for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130
# A run stopped by SIGTERM after saving what it had: 128 + 15, what a process
# killed by SIGTERM reports to its shell or container runtime, and the
# "restart" code of TensorFlow's own preemption handler on Google Cloud; a
# scheduler that retries preempted jobs reruns the command, which resumes.
EXIT_PREEMPTED = 143
_STOPS = {  # RunStopped.why -> (how the line starts, exit code)
    INTERRUPTED: ("interrupted", EXIT_INTERRUPTED),
    PREEMPTED: ("stopped by SIGTERM", EXIT_PREEMPTED),
    DIVERGED: ("training diverged", EXIT_FAILED),
}


def build_parser(argv=None):
    """The `albert-tf` parser; given the command line `argv`, it imports only the command it names.

    The other commands are listed by name and help alone (`COMMANDS`): their
    modules load only when run. Without
    `argv` every command's parser is built (tests parse several command lines).
    """
    from albert_tf.commands import COMMANDS
    from albert_tf.commands.flags import ArgumentParser, HelpFormatter, add_verbose_flag

    parser = ArgumentParser(
        prog="albert-tf", description="ALBERT in TensorFlow 2 / Keras 3.", formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"albert-tf {__version__}")
    add_verbose_flag(parser)
    subparsers = parser.add_subparsers(dest="command", required=True)
    chosen = COMMANDS if argv is None else [_command_name(argv)]
    for name, (module_name, help) in COMMANDS.items():
        if name in chosen:
            module = importlib.import_module(module_name)
            module.add_parser(subparsers).set_defaults(
                _run=module.run, _stops_on_sigterm=getattr(module, "STOPS_ON_SIGTERM", False))
        else:
            subparsers.add_parser(name, help=help)
    return parser


def _command_name(argv):
    """The command named on a command line: its first word that is not a flag (None if none)."""
    return next((a for a in argv if not a.startswith("-")), None)


# TensorFlow's start-up lines (absl's pre-init banner, C++ INFO/WARNING log
# lines such as cudart_stub's "Could not find cuda drivers", port.cc's "oneDNN
# custom operations are on" and cpu_feature_guard's, and the latter's second
# line), and two ERROR lines that are not errors: the CUDA probe of a machine
# without a GPU, and util.cc's note that a CPU without AVX-512 runs int64 ops
# in Eigen instead of oneDNN (the TPU VM's host and many laptops). Other
# errors (E...) are kept. TF_CPP_MIN_LOG_LEVEL=2 (set below) reaches only part
# of them: port.cc and cudart_stub log through their own copy of absl before
# TensorFlow's logging starts, and level 3 would hide every real C++ error too.
_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+\s+\d+ \S+:\d+\] "
    r"|E\d{4} [\d:.]+\s+\d+ cuda\w*\.cc:\d+\] failed call to cuInit"
    r"|E\d{4} [\d:.]+\s+\d+ util\.cc:\d+\] oneDNN supports DT_\w+ only on platforms with"
    r"|To enable the following instructions: .* rebuild TensorFlow"
)


@contextlib.contextmanager
def crash_tracebacks(fd):
    """Python's tracebacks of every thread on file descriptor `fd` if the process crashes (SIGSEGV, SIGABRT, ...).

    A crash in TensorFlow's C++ kills the process before `QuietStderr`'s
    thread copies its last lines, and the exit status alone does not say
    where it happened. Leaves a handler someone already installed (pytest's,
    `PYTHONFAULTHANDLER`) alone.
    """
    if faulthandler.is_enabled():
        yield
        return
    with os.fdopen(os.dup(fd), "w") as file:
        faulthandler.enable(file, all_threads=True)
        try:
            yield
        finally:
            faulthandler.disable()


class QuietStderr:
    """Drops TensorFlow's start-up lines from file descriptor 2, this process's and its children's.

    The lines come from C++ while TensorFlow's libraries load (in this
    process and in create-data's worker processes), before any Python
    setting can reach them, so fd 2 is pointed at a pipe and a thread copies
    every other line to the real stderr (`real_fd` while the block runs).
    """

    def __enter__(self):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        sys.stderr.flush()
        self.real_fd = os.dup(2)
        # The thread gets its own copy of the real stderr, made here: a command
        # that ends before the thread first runs closes `self.real_fd` in
        # `__exit__`, and a copy made in the thread would then fail (EBADF) and
        # lose every line written to the pipe, the command's error included.
        thread_real = os.dup(self.real_fd)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._end_mark = f"albert-tf stderr copied {os.getpid()} {id(self)}\n".encode()
        self._drained = threading.Event()
        self._thread = threading.Thread(target=self._copy, args=(read_fd, thread_real), daemon=True)
        self._thread.start()
        return self

    def _copy(self, read_fd, real_fd):
        with os.fdopen(read_fd, "rb") as pipe, os.fdopen(real_fd, "wb", buffering=0) as real:
            for line in pipe:
                if line.endswith(self._end_mark):  # after a child's last line if that had no newline
                    line = line[: -len(self._end_mark)]
                    self._drained.set()
                if line and not _NOISE.match(line.decode("utf-8", "replace")):
                    real.write(line)

    def __exit__(self, *exc_info):
        sys.stderr.flush()
        # A mark after the last line this process wrote, then the real stderr
        # back. The thread copies until the mark, not until EOF: a child may
        # outlive the command with the pipe as its stderr (multiprocessing's
        # resource tracker, which create-data's worker pool starts, lives until
        # this process exits), so EOF comes only after exit. Lines the workers
        # wrote came before the mark: they ended before the command did.
        os.write(2, self._end_mark)
        os.dup2(self.real_fd, 2)
        os.close(self.real_fd)
        self._drained.wait(timeout=5)
        return False


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # --verbose before or after the command (every command has it): known before TensorFlow loads.
    verbose = "--verbose" in argv
    if verbose:
        with crash_tracebacks(2):
            code = _run(argv, verbose)
    else:
        with QuietStderr() as quiet, crash_tracebacks(quiet.real_fd):
            code = _run(argv, verbose)
    if code == EXIT_INTERRUPTED:
        # Ctrl-C can stop TensorFlow's input threads mid-op; tearing the
        # interpreter down around them crashed once (SIGSEGV instead of 130),
        # so leave without teardown once the messages are out.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(argv, verbose):
    # From the start, TensorFlow's import included: a SIGTERM while a long command
    # loads is seen at its first safe point, not lost.
    with sigterm_requests_stop() as requested:
        return _run_command(argv, verbose, requested)


def _run_command(argv, verbose, sigterm):
    from albert_tf.commands import COMMANDS
    from albert_tf.commands.early_checks import check_paths
    from albert_tf.commands.flags import closest_command

    command = _command_name(argv)
    if command is not None and command not in COMMANDS:
        print(f"albert-tf: error: unknown command {command!r}{closest_command(command, COMMANDS)}; "
              f"commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        # Before the command's module loads (with it, for most, TensorFlow: seconds).
        check_paths(command, argv[argv.index(command) + 1 :] if command else [])
    except UserError as e:
        return _user_error(command, e)
    args = build_parser(argv).parse_args(argv)
    prefix = f"albert-tf {args.command}: error:"
    args.stop_requested = sigterm.is_set
    if not args._stops_on_sigterm:
        # These end at once, as SIGTERM ends a process (a signal already received, now).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if sigterm.is_set():
            os.kill(os.getpid(), signal.SIGTERM)
    try:
        return args._run(args) or 0
    except UserError as e:
        return _user_error(args.command, e)
    except RunStopped as e:
        # After Ctrl-C's "^C" echo, on a line of its own.
        start = "\n" if e.why == INTERRUPTED else ""
        print(f"{start}albert-tf {args.command}: {stop_message(e)}", file=sys.stderr, flush=True)
        return _STOPS[e.why][1]
    except KeyboardInterrupt:  # a command that has nothing to keep
        print(f"\nalbert-tf {args.command}: {stop_message(RunStopped(INTERRUPTED, 'before it finished'))}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except FileNotFoundError as e:
        print(f"{prefix} {e.filename}: no such file or directory", file=sys.stderr)
        return EXIT_USER_ERROR
    except IsADirectoryError as e:
        print(f"{prefix} {e.filename}: is a directory, expected a file", file=sys.stderr)
        return EXIT_USER_ERROR
    except PermissionError as e:
        print(f"{prefix} {e.filename}: permission denied", file=sys.stderr)
        return EXIT_USER_ERROR
    except UnicodeDecodeError as e:
        print(f"{prefix} a file is not UTF-8 text ({e.reason} at byte {e.start})", file=sys.stderr)
        return EXIT_USER_ERROR
    except json.JSONDecodeError as e:
        print(f"{prefix} invalid JSON: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as e:
        return _internal_error(args.command, e, verbose)


def stop_message(stop):
    """The one line of a `RunStopped`: why and where it stopped, what it kept, what to do next."""
    if stop.saved == CHECKPOINT:
        kept = f"the newest checkpoint is {stop.path}"
    elif stop.saved:
        kept = f"kept {stop.saved}" + (f" in {stop.path}" if stop.path else "")
    else:
        kept = "nothing was kept"
    then = stop.then or f"Rerun the same command to {'resume' if stop.saved else 'start again'}."
    start = f"stopped by {stop.cause}" if stop.cause else _STOPS[stop.why][0]
    return f"{start} {stop.where}; {kept}. {then}"


def _user_error(command, error):
    """Bad input: says what was wrong, on one line, without a traceback."""
    print(f"albert-tf {command}: error: {' '.join(str(error).split())}", file=sys.stderr)
    return EXIT_USER_ERROR


def _internal_error(command, error, verbose):
    """A bug (an error no check of the input raised): its traceback with --verbose, else a pointer to it."""
    if verbose:
        traceback.print_exception(error)
    else:
        what = " ".join(f"{type(error).__name__}: {error}".split())
        print(f"albert-tf {command}: internal error (a bug, not bad input): {what[:300]}. "
              "Rerun with --verbose for its traceback.", file=sys.stderr)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
