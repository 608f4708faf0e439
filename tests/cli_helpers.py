"""Run `albert-tf` as a user does, in the test process or in a process of its own.

`run_cli` calls `albert_tf.cli.main(argv)` in the test process, with the
command's own stdin, stdout, stderr (file descriptors 0-2, so the lines of
TensorFlow's C++ side and of worker processes are caught too), working
directory, environment, umask, `sys.argv` and signal handlers, all given back
when it returns: the command starts in a few milliseconds instead of paying
TensorFlow's import (seconds). A command that changes what TensorFlow fixes
once per process (--logical-cpus, a TF_CONFIG cluster) or that ends its
process on Ctrl-C (exit 130) runs in a process of its own, and so does every
program `start_program`/`run_program` start: `albert-tf ...`, the tests' worker
scripts and `python -m pytest` are forked from this process's fork server
(tests/fork_server.py), which imported TensorFlow and the commands once; other
programs, and those a test asks `fresh=True` of (start-up, what a fresh
process imports), are new processes. docs/architecture.md ("Where the tests
are") lists the tests whose subject is a process.

`exit_status_in_process` runs a command on given descriptors: the docs'
shell blocks hand theirs over (tests/doc_blocks_worker.py).
"""

import atexit
import contextlib
import gc
import io
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import urllib.request
import warnings
from pathlib import Path

from fork_server import ForkServer

# Variables of the test process that must not leak into a user's command.
_PRIVATE_PREFIXES = ("PYTEST_", "TF_", "KERAS_", "CUDA_")
# Save the one the user set for every program: TensorFlow's CPU kernels (oneDNN on or off), whose numbers
# a test compares between its own process and the commands it runs.
_SHARED = ("TF_ENABLE_ONEDNN_OPTS",)
# Exit status of a command stopped by Ctrl-C: `albert_tf.cli.main` then leaves through os._exit,
# which would end the test process.
_INTERRUPTED = 130
# Signals whose handlers a command may change (pretrain's SIGTERM) and the test process keeps.
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# What the forked programs import when they run, imported once by the fork server.
_SERVER_MODULES = [f"albert_tf.commands.{name}" for name in (
    "train_tokenizer", "create_data", "pretrain", "finetune", "export", "demo", "predict", "serve", "convert")]
_SERVER_MODULES += ["albert_tf.cli", "albert_tf.apps.demo", "albert_tf.recipes.finetune", "albert_tf.training",
                    "albert_tf.loading", "albert_tf.export", "albert_tf.models", "albert_tf.export.tflite"]
# The tests' scripts that are forked: the rest (MediaPipe's, the other venvs') start as a user's program does.
_FORKED_SCRIPTS = {"training_worker.py", "fault_worker.py", "data_service_worker.py", "doc_blocks_worker.py",
                   "saved_model_cli_worker.py", "snippet_worker.py"}
_TESTS = Path(__file__).parent


def snippet_command(code):
    """`python -c CODE` as the fork server forks it (tests/snippet_worker.py): for a snippet that needs a
    process of its own but not a new `python`."""
    return [sys.executable, str(_TESTS / "snippet_worker.py"), code]


def albert_tf_command():
    """The installed `albert-tf` console script, as the README calls it."""
    script = Path(sys.executable).with_name("albert-tf")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "albert_tf.cli"]


def ctrl_c_reaches_it():
    """`preexec_fn` for a command a test interrupts with SIGINT, as Ctrl-C does.

    A shell without job control starts background jobs with SIGINT ignored,
    and a child inherits that; Python then installs no KeyboardInterrupt
    handler, so a test suite launched with `&` saw Ctrl-C do nothing. The
    user's terminal never ignores it: restore the default before exec.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def user_environment(**overrides):
    """os.environ without the test process's own settings, plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if k in _SHARED or not k.startswith(_PRIVATE_PREFIXES)}
    env.update(overrides)
    return env


# A user's environment as this process started: the fork server's.
_STARTING_ENVIRONMENT = user_environment()


def run_cli(*args, cwd=None, input=None, timeout=900, expect_rc=0, env=None, fresh=False, umask=None):
    """Runs `albert-tf ARGS...`; fails the test with the command's output when the
    exit status is not `expect_rc` (None accepts any).

    In the test process unless `--logical-cpus` is among `args`, `env` names a
    TF_CONFIG cluster, or `expect_rc` is 130 (Ctrl-C): then in a forked process
    of its own (`start_program`); `fresh` starts the console script in a new
    process. `timeout` bounds a process of its own only.

    Args:
        cwd: the command's working directory (default: this process's).
        input: text on the command's stdin (default: an empty file).
        env: the command's whole environment (default: user_environment()).
        umask: the command's, as a shell's `umask` sets it (default: this process's).

    Returns:
        A `subprocess.CompletedProcess`: args, returncode, text stdout and stderr.
    """
    args = [str(a) for a in args]
    env = user_environment() if env is None else env
    if fresh or needs_own_process(args, env, expect_rc):
        done = run_program(albert_tf_command() + args, cwd=cwd, input=input, timeout=timeout, env=env, umask=umask,
                           fresh=fresh)
    else:
        done = run_in_process(args, cwd=cwd, input=input, env=env, umask=umask)
    if expect_rc is not None and done.returncode != expect_rc:
        raise AssertionError(
            f"`albert-tf {' '.join(args)}` exited {done.returncode}, expected {expect_rc}\n"
            f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
        )
    return done


def needs_own_process(args, env, expect_rc=0):
    """Whether `albert-tf ARGS` under `env` must start a process of its own.

    TensorFlow fixes its logical devices when it first initializes, once per
    process (--logical-cpus); a TF_CONFIG cluster is several processes; and a
    command stopped by Ctrl-C leaves through os._exit.
    """
    flags = {a.split("=", 1)[0] for a in args}
    return "--logical-cpus" in flags or bool(env.get("TF_CONFIG")) or expect_rc == _INTERRUPTED


def run_in_process(args, *, cwd=None, input=None, env=None, umask=None):
    """`albert_tf.cli.main(args)` in this process, as `run_cli` describes; returns a `CompletedProcess`."""
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        if input is not None:
            stdin.write(input.encode())
            stdin.seek(0)
        files = stdin.fileno(), out.fileno(), err.fileno()
        code = exit_status_in_process(args, files, cwd, user_environment() if env is None else env, umask)
        texts = []
        for stream in (out, err):
            stream.seek(0)
            texts.append(io.TextIOWrapper(io.BytesIO(stream.read()), encoding="utf-8", errors="replace").read())
    return subprocess.CompletedProcess(albert_tf_command() + list(args), code, *texts)


def exit_status_in_process(args, fds, cwd, env, umask):
    """The exit status of `albert_tf.cli.main(args)` run in this process with `fds` as its stdin, stdout and
    stderr, and `cwd`, `env` and `umask` (None: this process's) as its own; this process's all back after."""
    from albert_tf.cli import main

    with _as_a_process(args, fds, cwd, env, umask):
        return _exit_status(main, args)


def _exit_status(main, args):
    """What the process would exit with: main's return, a SystemExit's code, 1 after an uncaught exception."""
    try:
        return main(list(args)) or 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except Exception:  # as the interpreter ends a program: the traceback on stderr, status 1
        traceback.print_exc()
        return 1


@contextlib.contextmanager
def _as_a_process(args, fds, cwd, env, umask):
    """The command's stdio on fds 0-2 and sys.std*, its directory, environment, argv and umask, then
    this process's back, signal handlers and shown warnings included.

    The command's garbage is collected before its environment is swapped back: a tf.data iterator that a
    command left (one held by an exception's frames, as when Ctrl-C stops `fit`) keeps its threads until
    then, and tf.data's autotuning thread reads the environment (getenv) as it runs. Swapping it meanwhile
    (setenv reallocates the C library's array of variables) crashed a test process once, a segmentation
    fault in such a thread."""
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_argv, saved_env, saved_cwd = sys.argv, dict(os.environ), os.getcwd()
    saved_handlers = {number: signal.getsignal(number) for number in _HANDLED_SIGNALS}
    saved_tempdir = tempfile.tempdir
    for stream in saved_streams:
        with contextlib.suppress(Exception):
            stream.flush()
    mask = os.umask(0)
    os.umask(mask if umask is None else umask)
    try:
        for fd, given in enumerate(fds):
            os.dup2(given, fd)
        sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
        sys.argv = ["albert-tf", *args]
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # found again from the command's TMPDIR
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings():
            # As a new process shows them: Python's default filters, printed on the command's stderr.
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = _show_warning
            yield
    finally:
        gc.collect()
        for stream in (sys.stdin, sys.stdout, sys.stderr):
            if stream not in saved_streams:
                with contextlib.suppress(Exception):
                    stream.close()  # flushes; the descriptor stays open (closefd=False)
        for fd, saved in enumerate(saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        tempfile.tempdir = saved_tempdir
        os.chdir(saved_cwd)
        os.umask(mask)
        for number, handler in saved_handlers.items():
            if handler is not None:
                signal.signal(number, handler)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def start_program(args, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None, text=True, umask=None,
                  preexec_fn=None, fresh=False, **kwargs):
    """`subprocess.Popen(args, ...)` for the programs the tests start, each a process of its own.

    `albert-tf ...`, `python -m pytest ...` and `python tests/SCRIPT.py ...` (the
    worker scripts of _FORKED_SCRIPTS) are forked by this process's fork server
    unless `fresh`, `kwargs` or `preexec_fn` ask for what only Popen gives or
    `env` changes what TensorFlow or Keras read at import; the rest start as
    new processes. `umask` is the program's, as a shell's `umask` sets it; a
    program's stdin is an empty file unless `stdin` says otherwise.
    """
    args = [str(a) for a in args]
    env = os.environ if env is None else env
    stdin = subprocess.DEVNULL if stdin is None else stdin
    program = None if fresh or kwargs or preexec_fn not in (None, ctrl_c_reaches_it) else _forked(args)
    if program is not None and fork_server().serves(env):
        return fork_server().start(program.pop("args"), cwd=cwd, env=env, umask=umask, stdin=stdin, stdout=stdout,
                                   stderr=stderr, text=text, **program,
                                   sigint_ignored=False if preexec_fn is ctrl_c_reaches_it else None)
    return subprocess.Popen(args, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text,
                            preexec_fn=_preexec(preexec_fn, umask), **kwargs)


def _forked(args):
    """What the fork server runs for `args` ({"args", and "script" or "module"}), or None: a program it does not."""
    command = albert_tf_command()
    if args[:len(command)] == command:
        return {"args": args[len(command):]}
    if args[:1] != [sys.executable] or len(args) < 2:
        return None
    if args[1:3] == ["-m", "pytest"]:
        return {"args": args[3:], "module": "pytest"}
    script = Path(args[1])
    if script.parent.resolve() == _TESTS.resolve() and script.name in _FORKED_SCRIPTS:
        return {"args": args[2:], "script": str(script)}
    return None


_server = None


def fork_server():
    """This process's fork server (tests/fork_server.py), started the first time a program is forked."""
    global _server
    if _server is None:
        _server = ForkServer(_SERVER_MODULES, env=_STARTING_ENVIRONMENT)
        atexit.register(_server.close)
    return _server


def run_program(args, *, input=None, timeout=None, **kwargs):
    """`subprocess.run(args, capture_output=True, text=True, ...)` through `start_program`.

    The program's stdin, stdout and stderr are files, as a user's redirections make them.
    """
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        if input is not None:
            stdin.write(input.encode())
            stdin.seek(0)
        process = start_program(args, stdin=stdin, stdout=out, stderr=err, **kwargs)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        texts = []
        for stream in (out, err):
            stream.seek(0)
            texts.append(io.TextIOWrapper(io.BytesIO(stream.read())).read())  # as `text=True` decodes
    return subprocess.CompletedProcess([str(a) for a in args], process.returncode, *texts)


def _preexec(preexec_fn, umask):
    if umask is None:
        return preexec_fn

    def both():
        os.umask(umask)
        if preexec_fn:
            preexec_fn()

    return both


def free_ports(count):
    """`count` TCP ports free on localhost now (for a test cluster's TF_CONFIG)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@contextlib.contextmanager
def serving(base, stderr_path, *flags, stop=signal.SIGINT, env=None):
    """`albert-tf serve BASE --port 0 FLAGS` in its own process; yields a `predict(body)` for its REST :predict URL.

    `body` is the request's JSON object; `predict` returns the answer's "predictions"; `predict.url` is the
    model's URL and `predict.banner` the start-up line. On leaving, the server gets `stop` (Ctrl-C's SIGINT
    unless told) and must stop cleanly (exit 0). Its stderr goes to `stderr_path`; `env` adds to its environment.
    """
    with open(stderr_path, "w") as stderr:
        process = start_program(albert_tf_command() + ["serve", str(base), "--port", "0", *flags],
                                stdout=subprocess.PIPE, stderr=stderr, env=user_environment(**(env or {})),
                                preexec_fn=ctrl_c_reaches_it)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
        try:
            try:
                banner = lines.get(timeout=300)
            except queue.Empty:
                banner = ""
            url = re.search(r"http://\S+", banner)
            assert url, f"no start-up line; exit {process.poll()}; stderr:\n{open(stderr_path).read()[-3000:]}"

            def predict(body):
                request = urllib.request.Request(url.group(0) + ":predict", data=json.dumps(body).encode())
                with urllib.request.urlopen(request, timeout=60) as answer:
                    return json.loads(answer.read())["predictions"]

            predict.url, predict.banner = url.group(0), banner
            yield predict
        finally:
            process.send_signal(stop)  # Ctrl-C or SIGTERM: the server stops cleanly
            assert process.wait(timeout=60) == 0
