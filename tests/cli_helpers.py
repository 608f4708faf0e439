"""Run `albert-tf` as a user does: its own process, a fresh environment.

Nothing the test process has imported or prepared (TensorFlow Text's ops, a
tokenizer in memory, Keras state) reaches the command, so the bugs a user meets
when chaining commands show up here first.
"""

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

# Variables of the test process that must not leak into a user's command.
_PRIVATE_PREFIXES = ("PYTEST_", "TF_", "KERAS_", "CUDA_")


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_PREFIXES)}
    env.update(overrides)
    return env


def run_cli(*args, cwd=None, input=None, timeout=900, expect_rc=0, env=None):
    """Runs `albert-tf ARGS...`; fails the test with the command's output when the
    exit status is not `expect_rc` (None accepts any).

    Returns:
        The `subprocess.CompletedProcess` (text stdout and stderr).
    """
    command = albert_tf_command() + [str(a) for a in args]
    done = subprocess.run(
        command, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout,
        env=env if env is not None else user_environment(),
    )
    if expect_rc is not None and done.returncode != expect_rc:
        raise AssertionError(
            f"`albert-tf {' '.join(map(str, args))}` exited {done.returncode}, expected {expect_rc}\n"
            f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
        )
    return done


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
