"""A fork server: `albert-tf` commands in processes of their own that start without TensorFlow's import.

For tests whose subject is a command's process (the signals it gets, the exit
status it ends with) but not its start-up: a new `python -m albert_tf.cli`
spends seconds importing TensorFlow and Keras before it does anything.
`ForkServer` starts this file once as a program that imports them, and
`albert_tf.cli` with the command modules it is given, without running any
TensorFlow op (it refuses to serve once TensorFlow's eager context, and with
it the runtime's thread pools, exists), then waits on a unix socket. For each
`start(args, ...)` it forks a child that becomes the command: the working
directory, environment, umask and argv sent with the request, stdin and
stdout+stderr the file descriptors sent with it (SCM_RIGHTS), Python's start-up
signal dispositions, fresh stdio streams, a reseeded NumPy; then
`albert_tf.cli.main(args)`, leaving as `python -m albert_tf.cli` does: the
status main returns or exits with (1 after an uncaught exception, os._exit
where the CLI calls it), after joining its threads and running the atexit
functions. The child is a real process of its own: the kernel delivers the
signals a test sends it (through a pidfd, so never to a reused pid), and the
server, its parent, reports how it ended.

What a fresh process has and a child does not: the environment at import time
is the server's (a command whose environment changes what TensorFlow or Keras
read at import needs a fresh process), and so are the hash seed and `__main__`.
The server runs one command at a time; test_quick_journey.py covers start-up.
"""

import importlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading

import numpy as np

# Ignored by a new Python process (the rest start at their defaults, SIGINT raising KeyboardInterrupt).
_PYTHON_IGNORES = ("SIGPIPE", "SIGXFSZ")
_READY = "ready"


class ForkServer:
    """The server process, started at once; `start` waits for its imports the first time.

    Args:
        modules: modules to import besides TensorFlow, Keras and `albert_tf.cli` (a command's own work,
            which its module imports when it runs).
        env: the server's environment, and every command's unless `start` says otherwise.
    """

    def __init__(self, modules=(), env=None):
        self._dir = tempfile.mkdtemp(prefix="albert-tf-fork-server-")
        self.address = os.path.join(self._dir, "socket")
        self.env = dict(os.environ if env is None else env)
        self._log = open(os.path.join(self._dir, "log"), "w+")
        # As `albert-tf` sets it before TensorFlow loads: TensorFlow's C++ logging reads it once.
        server_env = {"TF_CPP_MIN_LOG_LEVEL": "2", **self.env}
        self._process = subprocess.Popen([sys.executable, __file__, self.address, *modules], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=self._log, text=True, env=server_env)
        self._ready = False

    def start(self, args, *, cwd=None, env=None, umask=None):
        """`albert-tf ARGS` in a forked child, its stdout and stderr together on one pipe; returns a `ForkedCommand`.

        Args:
            cwd: its working directory (default: this process's).
            env: its whole environment (default: the server's).
            umask: its umask (default: this process's).
        """
        self._wait_ready()
        if umask is None:
            umask = os.umask(0)
            os.umask(umask)
        request = {"args": [str(a) for a in args], "cwd": str(cwd or os.getcwd()),
                   "env": self.env if env is None else env, "umask": umask}
        return ForkedCommand(self.address, request)

    def _wait_ready(self):
        if self._ready:
            return
        line = self._process.stdout.readline().strip()
        if line != _READY:
            self._log.seek(0)
            raise RuntimeError(f"the fork server did not start (exit {self._process.poll()}):\n{self._log.read()}")
        self._ready = True

    def close(self):
        self._process.terminate()
        self._process.wait(timeout=60)
        self._process.stdout.close()
        self._log.close()
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)


class ForkedCommand:
    """A command the server forked, read and signalled as a `subprocess.Popen` with
    `stdout=PIPE, stderr=STDOUT, text=True`: `pid`, `stdout`, `send_signal`, `poll`, `wait`, `returncode`."""

    def __init__(self, address, request):
        read_fd, write_fd = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._socket.connect(address)
            socket.send_fds(self._socket, [json.dumps(request).encode()], [stdin, write_fd, write_fd])
        finally:
            os.close(stdin)
            os.close(write_fd)
        message, fds, _, _ = socket.recv_fds(self._socket, 1024, 1)
        self.pid, self._pidfd = json.loads(message)["pid"], fds[0]
        self.stdout = open(read_fd, encoding="utf-8")
        self.returncode = None

    def send_signal(self, signum):
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, signum)
            except ProcessLookupError:  # it ended, and the server reaped it
                pass

    def poll(self):
        return self.wait(timeout=0) if self.returncode is None else self.returncode

    def wait(self, timeout=None):
        """Its exit status as Popen gives it (-N after signal N); raises `subprocess.TimeoutExpired` after `timeout` s.
        (`poll` is `wait(timeout=0)` without the exception.)"""
        if self.returncode is None:
            self._socket.settimeout(timeout)
            try:
                message = self._socket.recv(1024)
            except (TimeoutError, BlockingIOError):
                if timeout == 0:
                    return None
                raise subprocess.TimeoutExpired(f"albert-tf (pid {self.pid})", timeout) from None
            if not message:
                raise RuntimeError(f"the fork server ended before albert-tf (pid {self.pid}) did")
            self.returncode = os.waitstatus_to_exitcode(json.loads(message)["status"])
            self._socket.close()
            os.close(self._pidfd)
        return self.returncode


def _serve(address, modules):
    for name in ("tensorflow", "keras", *modules):
        importlib.import_module(name)
    from albert_tf import cli

    # Private, and the one place TensorFlow says whether its runtime started: the eager context's handle.
    from tensorflow.python.eager import context

    if context._context is not None and context._context._context_handle is not None:
        sys.exit(f"importing {modules} started TensorFlow's runtime: a forked child would inherit its threads' locks")
    if threading.active_count() != 1:
        sys.exit(f"importing {modules} started Python threads: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen()
    print(_READY, flush=True)
    while True:
        connection, _ = listener.accept()
        with connection:
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                _become_the_command(cli, json.loads(message), fds)
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(connection, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
            _, status = os.waitpid(pid, 0)
            try:
                connection.send(json.dumps({"status": status}).encode())
            except OSError:  # the test went away
                pass


def _become_the_command(cli, request, fds):
    """In the forked child: becomes the process `python -m albert_tf.cli ARGS` would be, and leaves as it does,
    through `sys.exit(main(ARGS))` (the interpreter joins its threads, runs the atexit functions, prints an
    uncaught exception's traceback and exits 1); never returns."""
    for fd, received in enumerate(fds):
        os.dup2(received, fd)
        os.close(received)
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(number, signal.SIG_DFL)
            except (OSError, ValueError):  # a signal no process may handle (the C library's real-time ones)
                pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in _PYTHON_IGNORES:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    tempfile.tempdir = None  # found again from the command's TMPDIR
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = _std_stream(0, "r", unbuffered)
    sys.stdout = sys.__stdout__ = _std_stream(1, "w", unbuffered)
    sys.stderr = sys.__stderr__ = _std_stream(2, "w", unbuffered, errors="backslashreplace")
    np.random.seed()  # a new process's global generator starts from the OS's entropy
    sys.argv = [cli.__file__, *request["args"]]
    sys.exit(cli.main(request["args"]))


def _std_stream(fd, mode, unbuffered, errors="strict"):
    """Python's sys.std* for file descriptor `fd`: line-buffered on a terminal (stderr always), written through
    when `unbuffered` (PYTHONUNBUFFERED)."""
    raw = io.FileIO(fd, mode, closefd=False)
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors=errors)
    buffer = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffer, encoding="utf-8", errors=errors, line_buffering=raw.isatty() or fd == 2,
                            write_through=unbuffered)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2:])
