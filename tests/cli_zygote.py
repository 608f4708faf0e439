"""A process that has imported TensorFlow and nothing else, and forks a fresh program per request.

Every `albert-tf` command that does work, and every worker script the tests
start, imports TensorFlow first (about 4.5 s of one core here); the tests start
such programs a few hundred times. This server pays for the import once per
test process, then forks: each program still runs in a process of its own,
with its own working directory, environment, umask, stdin, stdout, stderr,
exit status and signals, and imports `albert_tf` itself. What the fork shares
with the server is TensorFlow's and Keras' modules, loaded under the user's
environment (tests/cli_helpers.user_environment) before any op ran, as the
program's own import would have loaded them. tests/cli_helpers.py decides
which programs may start this way (not those whose environment TensorFlow or
Keras would read differently at import).

    python tests/cli_zygote.py SOCKET_PATH      (tests/cli_helpers.py starts it)

Per request on the Unix socket: a JSON line {"run", "cwd", "env", "umask"} with
three file descriptors (stdin, stdout, stderr). "run" is one of
["albert-tf", ARG...] (the console script), ["script", PATH, ARG...]
(`python PATH ARG...`) and ["code", CODE, ARG...] (`python -c CODE ARG...`).
A monitor process forks the program, answers "pid N", then "exit N" or
"signal N" when it ends. The server exits when its own stdin closes (the test
process ended).
"""

import builtins
import io
import json
import os
import runpy
import select
import signal
import socket
import sys
import tempfile
import traceback



def _pythonpath():
    """The directories PYTHONPATH names, in order, as Python's start-up reads them."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


# The directories every program's path ends with: the interpreter's own, not
# tests/ (sys.path[0] here) and not the server's PYTHONPATH.
_BASE_PATH = [p for p in sys.path[1:] if p not in _pythonpath()]
sys.path[0] = os.path.dirname(sys.executable)

import tensorflow  # noqa: E402,F401  (the import every working program makes first)


def _stdio(unbuffered):
    """sys.stdin/stdout/stderr on fds 0-2, as Python's start-up opens them (PYTHONUNBUFFERED honoured)."""
    sys.stdin = open(0, "r", closefd=False)
    if unbuffered:
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), write_through=True)
    else:
        sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace", buffering=1)


def _exit_status(exit):
    """The status `raise SystemExit(code)` gives a Python program (a message goes to stderr, status 1)."""
    if exit.code is None or isinstance(exit.code, int):
        return exit.code or 0
    print(exit.code, file=sys.stderr)
    return 1


def _run_program(request, fds):
    """In the forked program: the request's stdio, directory, environment and path, then the program."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if request.get("umask") is not None:
        os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from this environment's TMPDIR
    _stdio(bool(os.environ.get("PYTHONUNBUFFERED")))
    kind, *args = request["run"]
    target = None if kind == "albert-tf" else args.pop(0)
    first = {"albert-tf": os.path.dirname(sys.executable), "script": os.path.dirname(os.path.abspath(target or "")),
             "code": ""}[kind]
    pythonpath = _pythonpath()
    sys.path[:] = [first, *pythonpath, *[p for p in _BASE_PATH if p not in pythonpath]]
    code = 1
    try:
        if kind == "albert-tf":
            sys.argv = ["albert-tf", *args]
            from albert_tf.cli import main

            code = main()
        elif kind == "script":
            sys.argv = [target, *args]
            runpy.run_path(target, run_name="__main__")
            code = 0
        else:
            sys.argv = ["-c", *args]
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
            code = 0
    except SystemExit as exit:
        code = _exit_status(exit)
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as Python does: the process dies of the SIGINT
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code or 0)


def _monitor(connection, request, fds):
    """Forks the program, tells the client its pid, waits for it and tells how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _run_program(request, fds)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"pid {pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        connection.sendall(f"signal {os.WTERMSIG(status)}\n".encode())
    else:
        connection.sendall(f"exit {os.WEXITSTATUS(status)}\n".encode())
    os._exit(0)


def serve(path):
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the monitors are reaped without waiting
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:
            return  # the test process closed our stdin: it has ended
        connection, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message.decode())
        if os.fork() == 0:
            listener.close()
            _monitor(connection, request, fds)
        connection.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1])
