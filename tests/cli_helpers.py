"""Run `albert-tf` as a user does: its own process, a fresh environment.

Nothing the test process has imported or prepared (TensorFlow Text's ops, a
tokenizer in memory, Keras state) reaches the command, so the bugs a user meets
when chaining commands show up here first.

`run_cli` forks each command from a server that has imported TensorFlow once
(tests/cli_zygote.py says what the fork shares): the command still has a
process, directory, environment, stdio and exit status of its own, and imports
`albert_tf` itself, without paying TensorFlow's 4.5 s import each time.
`run_cli(..., fresh=True)` (the quick journey, the start-up noise checks) and
ALBERT_TF_TESTS_FRESH_PROCESSES=1 (every call) start the console script instead.
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
import urllib.request
from pathlib import Path

# Variables of the test process that must not leak into a user's command.
_PRIVATE_PREFIXES = ("PYTEST_", "TF_", "KERAS_", "CUDA_")
_XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory="


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
    cache = [flag for flag in os.environ.get("TF_XLA_FLAGS", "").split() if flag.startswith(_XLA_CACHE_FLAG)]
    if cache:
        env["TF_XLA_FLAGS"] = cache[0]
    env.update(overrides)
    return env


def run_cli(*args, cwd=None, input=None, timeout=900, expect_rc=0, env=None, fresh=False, umask=None):
    """Runs `albert-tf ARGS...`; fails the test with the command's output when the
    exit status is not `expect_rc` (None accepts any).

    The command is forked from the TensorFlow-imported server unless `fresh`,
    `env` is given (TensorFlow reads some variables at import) or
    ALBERT_TF_TESTS_FRESH_PROCESSES is set: then the console script starts.
    `umask`: the command's, as a shell's `umask` sets it (default: this process's).

    Returns:
        The `subprocess.CompletedProcess` (text stdout and stderr).
    """
    command = albert_tf_command() + [str(a) for a in args]
    if fresh or env is not None or os.environ.get("ALBERT_TF_TESTS_FRESH_PROCESSES"):
        done = subprocess.run(
            command, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout,
            env=env if env is not None else user_environment(),
            preexec_fn=None if umask is None else lambda: os.umask(umask),
        )
    else:
        done = _forked(command, [str(a) for a in args], cwd, input, timeout, umask)
    if expect_rc is not None and done.returncode != expect_rc:
        raise AssertionError(
            f"`albert-tf {' '.join(map(str, args))}` exited {done.returncode}, expected {expect_rc}\n"
            f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
        )
    return done


_zygote = None


def _zygote_socket():
    """The path of this test process's command server's socket (started on first use)."""
    global _zygote
    if _zygote is None:
        directory = tempfile.mkdtemp(prefix="albert-tf-cli-")
        path = os.path.join(directory, "socket")
        process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_zygote.py")), path],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=directory,
                                   stderr=open(os.path.join(directory, "stderr"), "w"), env=user_environment())
        ready = process.stdout.readline()
        assert ready == "ready\n", f"the command server did not start (exit {process.poll()})"
        atexit.register(process.stdin.close)  # the server ends when its stdin closes
        _zygote = path
    return _zygote


def _forked(command, argv, cwd, input, timeout, umask):
    """Runs `albert-tf ARGV` forked by the command server; a `subprocess.run`-like result."""
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        if input is not None:
            stdin.write(input.encode())
            stdin.seek(0)
        request = {"argv": argv, "cwd": os.path.abspath(cwd or os.getcwd()), "env": user_environment(),
                   "umask": umask}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(_zygote_socket())
            socket.send_fds(connection, [json.dumps(request).encode()], [stdin.fileno(), out.fileno(), err.fileno()])
            connection.settimeout(timeout)
            answers = connection.makefile("r")
            pid = int(answers.readline().split()[1])
            try:
                how, number = answers.readline().split()
            except (TimeoutError, socket.timeout):
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(command, timeout) from None
        returncode = int(number) if how == "exit" else -int(number)
        texts = []
        for stream in (out, err):
            stream.seek(0)
            texts.append(io.TextIOWrapper(io.BytesIO(stream.read())).read())  # as `text=True` decodes
    return subprocess.CompletedProcess(command, returncode, texts[0], texts[1])


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
        process = subprocess.Popen(albert_tf_command() + ["serve", str(base), "--port", "0"], stdout=subprocess.PIPE,
                                   stderr=stderr, text=True, env=user_environment(), preexec_fn=ctrl_c_reaches_it)
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
