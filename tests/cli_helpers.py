"""Run `albert-tf` as a user does: its own process, a fresh environment.

Nothing the test process has imported or prepared (TensorFlow Text's ops, a
tokenizer in memory, Keras state) reaches the command, so the bugs a user meets
when chaining commands show up here first.

`run_cli` forks each command, and `start_program`/`run_program` each worker
script and `python -c` probe, from a server that has imported TensorFlow once
(tests/cli_zygote.py says what the fork shares): the program still has a
process, directory, environment, stdio, signals and exit status of its own, and
imports `albert_tf` itself, without paying TensorFlow's 4.5 s import each time.
`fresh=True` (the quick journey, the start-up noise checks), an environment
TensorFlow or Keras would read differently at import, and
ALBERT_TF_TESTS_FRESH_PROCESSES=1 (every call) start a new process instead.
"""

import atexit
import contextlib
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
import time
import urllib.request
from pathlib import Path

# Variables of the test process that must not leak into a user's command.
_PRIVATE_PREFIXES = ("PYTEST_", "TF_", "KERAS_", "CUDA_")
XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory="
# Names a running command server's socket to a program outside the test process that forks
# through it (tests/forward_to_server.py, the docs pages' `albert-tf`).
SERVER_VARIABLE = "ALBERT_TF_TESTS_SERVER"


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
    """os.environ without the test process's own settings, plus `overrides`.

    One setting stays: the run's XLA compilation cache (tests/conftest.py),
    which changes how long a compile takes, not what it builds.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_PREFIXES)}
    cache = [flag for flag in os.environ.get("TF_XLA_FLAGS", "").split() if flag.startswith(XLA_CACHE_FLAG)]
    if cache:
        env["TF_XLA_FLAGS"] = cache[0]
    env.update(overrides)
    return env


def run_cli(*args, cwd=None, input=None, timeout=900, expect_rc=0, env=None, fresh=False, umask=None):
    """Runs `albert-tf ARGS...`; fails the test with the command's output when the
    exit status is not `expect_rc` (None accepts any).

    The command is forked from the TensorFlow-imported server unless `fresh`, `env`
    sets what TensorFlow or Keras reads at import (`start_program` says which) or
    ALBERT_TF_TESTS_FRESH_PROCESSES is set: then the console script starts.
    `env`: the command's whole environment (default: user_environment()).
    `umask`: the command's, as a shell's `umask` sets it (default: this process's).

    Returns:
        The `subprocess.CompletedProcess` (text stdout and stderr).
    """
    command = albert_tf_command() + [str(a) for a in args]
    done = run_program(command, cwd=cwd, input=input, timeout=timeout,
                       env=env if env is not None else user_environment(), fresh=fresh, umask=umask)
    if expect_rc is not None and done.returncode != expect_rc:
        raise AssertionError(
            f"`albert-tf {' '.join(map(str, args))}` exited {done.returncode}, expected {expect_rc}\n"
            f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
        )
    return done


# Variables a program may set apart from user_environment() and still be forked from the server:
# read at run time, not at TensorFlow's or Keras' import (TF_CPP_MIN_LOG_LEVEL is read at import,
# but only decides which log lines show).
_FORKABLE_DIFFERENCES = {"TF_CONFIG", "CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "PYTHONPATH",
                         "PYTHONUNBUFFERED", "TF_XLA_FLAGS", "PATH"}


def start_program(args, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None, text=True, umask=None,
                  fresh=False, preexec_fn=None):
    """`subprocess.Popen(args, ...)` for the programs the tests start: `albert-tf ...`, `python SCRIPT ...`
    and `python -c CODE ...`, forked from the command server where nothing could tell the difference.

    Started as a new process instead when `fresh`, ALBERT_TF_TESTS_FRESH_PROCESSES is set, `args` is
    another program, or `env` differs from user_environment() in a variable TensorFlow or Keras
    reads at import, HOME or TMPDIR among them (Keras makes ~/.keras at import). `preexec_fn` is
    accepted for `ctrl_c_reaches_it` only, which every forked program already has.
    """
    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    run_as = _forkable(args, env)
    if fresh or run_as is None or os.environ.get("ALBERT_TF_TESTS_FRESH_PROCESSES"):
        return subprocess.Popen(args, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text,
                                preexec_fn=_preexec(preexec_fn, umask))
    if preexec_fn not in (None, ctrl_c_reaches_it):
        raise ValueError("a forked program takes no preexec_fn but ctrl_c_reaches_it")
    return ForkedProcess(args, run_as, cwd, env, stdin, stdout, stderr, text, umask)


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
    return subprocess.CompletedProcess(args, process.returncode, *texts)


def _preexec(preexec_fn, umask):
    if umask is None:
        return preexec_fn

    def both():
        os.umask(umask)
        if preexec_fn:
            preexec_fn()

    return both


def _forkable(args, env):
    """The server's "run" list for `args`, or None where the program must start fresh."""
    server = _zygote_environment or user_environment()  # what the server has, or will start with
    differences = {k for k in set(env) | set(server) if env.get(k) != server.get(k)}
    if any(k not in _FORKABLE_DIFFERENCES and not k.startswith("PYTEST_") for k in differences):
        return None
    others = [f for f in env.get("TF_XLA_FLAGS", "").split() if not f.startswith(XLA_CACHE_FLAG)]
    if others:
        return None  # XLA flags other than the run's cache: read when XLA starts, maybe in the server
    if args[:len(albert_tf_command())] == albert_tf_command():
        return ["albert-tf", *args[len(albert_tf_command()):]]
    if args[0] == sys.executable and len(args) > 1:
        if args[1] == "-c" and len(args) > 2:
            return ["code", *args[2:]]
        if not args[1].startswith("-") and args[1].endswith(".py"):
            return ["script", *args[1:]]  # a relative path is found from the program's directory
    return None


class ForkedProcess:
    """A program forked by the command server, with the parts of `subprocess.Popen` the tests use:
    pid, stdin/stdout/stderr (for PIPE), poll, wait, communicate, send_signal, terminate, kill."""

    def __init__(self, args, run_as, cwd, env, stdin, stdout, stderr, text, umask):
        self.args, self.returncode = args, None
        self.stdin = self.stdout = self.stderr = None
        handed, mine = [], []  # the program's three descriptors; this end of its pipes
        for number, (spec, mode) in enumerate(((stdin, "w"), (stdout, "r"), (stderr, "r"))):
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                theirs, ours = (read, write) if mode == "w" else (write, read)
                stream = os.fdopen(ours, mode + ("" if text else "b"), **({"encoding": "utf-8"} if text else {}))
                setattr(self, ("stdin", "stdout", "stderr")[number], stream)
                handed.append(theirs)
                mine.append(theirs)
            elif spec == subprocess.STDOUT:
                handed.append(handed[1])
            elif spec == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                handed.append(fd)
                mine.append(fd)
            elif spec is None:
                handed.append(number)
            else:
                handed.append(spec if isinstance(spec, int) else spec.fileno())
        request = {"run": run_as, "cwd": os.path.abspath(cwd or os.getcwd()), "env": env, "umask": umask}
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._connection.connect(command_server())
        socket.send_fds(self._connection, [json.dumps(request).encode()], handed)
        for fd in mine:
            os.close(fd)
        self._answers = self._connection.makefile("r")
        self.pid = int(self._answers.readline().split()[1])
        self._ended = threading.Event()
        threading.Thread(target=self._wait_for_the_end, daemon=True).start()

    def _wait_for_the_end(self):
        line = self._answers.readline().split()
        how, number = (line if len(line) == 2 else ("signal", signal.SIGKILL))
        self.returncode = int(number) if how == "exit" else -int(number)
        self._connection.close()
        self._ended.set()

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        if self.stdin:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        outputs = {}
        readers = [threading.Thread(target=lambda name=name: outputs.__setitem__(name, getattr(self, name).read()),
                                    daemon=True) for name in ("stdout", "stderr") if getattr(self, name)]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        for name in ("stdout", "stderr"):
            if getattr(self, name):
                getattr(self, name).close()
        return outputs.get("stdout"), outputs.get("stderr")

    def send_signal(self, number):
        if self.returncode is None:
            os.kill(self.pid, number)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


_zygote = None
_zygote_environment = None


def command_server():
    """The socket path of this test process's command server (tests/cli_zygote.py), started on first use.

    A program the tests started with SERVER_VARIABLE set uses that server instead of starting its own.
    """
    global _zygote, _zygote_environment
    if _zygote is None and os.environ.get(SERVER_VARIABLE):
        _zygote = os.environ[SERVER_VARIABLE]
    if _zygote is None:
        _zygote_environment = user_environment()
        directory = tempfile.mkdtemp(prefix="albert-tf-cli-")
        path = os.path.join(directory, "socket")
        with open(os.path.join(directory, "stderr"), "w") as stderr:
            process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_zygote.py")), path],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=directory,
                                       stderr=stderr, env=_zygote_environment)
        ready = process.stdout.readline()
        assert ready == "ready\n", f"the command server did not start (exit {process.poll()})"
        atexit.register(process.stdin.close)  # the server ends when its stdin closes
        _zygote = path
    return _zygote


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
def serving(base, stderr_path):
    """`albert-tf serve BASE --port 0` in its own process; yields a `predict(body)` for its REST :predict URL.

    `body` is the request's JSON object; `predict` returns the answer's "predictions". On leaving,
    the server gets Ctrl-C and must stop cleanly (exit 0). Its stderr goes to `stderr_path`.
    """
    with open(stderr_path, "w") as stderr:
        process = start_program(albert_tf_command() + ["serve", str(base), "--port", "0"], stdout=subprocess.PIPE,
                        stderr=stderr, env=user_environment(), preexec_fn=ctrl_c_reaches_it)
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

            yield predict
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C: the server stops cleanly
            assert process.wait(timeout=60) == 0
