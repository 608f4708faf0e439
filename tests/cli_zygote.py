"""A process that has imported TensorFlow and nothing else, and forks a fresh `albert-tf` per request.

Every `albert-tf` command that does work imports TensorFlow first (about 4.5 s
of one core here); the CLI tests run it more than a hundred times. This server
pays for the import once per test process, then forks: each command still runs
in a process of its own, with its own working directory, environment, stdin,
stdout, stderr, exit status and signals, and imports `albert_tf` itself. What
the fork shares with the server is TensorFlow's and Keras' modules, loaded
under the user's environment (tests/cli_helpers.user_environment) before any
op ran, as the command's own import would have loaded them.

    python tests/cli_zygote.py SOCKET_PATH      (tests/cli_helpers.py starts it)

Per request on the Unix socket: a JSON line {"argv", "cwd", "env", "umask"} with three
file descriptors (stdin, stdout, stderr). A monitor process forks the command,
answers "pid N", then "exit N" or "signal N" when it ends. The server exits
when its own stdin closes (the test process ended).
"""

import json
import os
import select
import signal
import socket
import sys

# As the console script's: the directory of the interpreter first, not tests/.
sys.path[0] = os.path.dirname(sys.executable)

import tensorflow  # noqa: E402,F401  (the import every working command makes first)


def _run_command(request, fds):
    """In the forked command: the request's stdio, directory and environment, then the CLI's main."""
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
    sys.argv = ["albert-tf", *request["argv"]]
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    code = 1
    try:
        from albert_tf.cli import main

        code = main()
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def _monitor(connection, request, fds):
    """Forks the command, tells the client its pid, waits for it and tells how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _run_command(request, fds)
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
