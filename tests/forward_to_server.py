"""`albert-tf` as the docs pages' bash blocks call it in tests/project/test_docs.py: a client of
the test process's command server (tests/cli_zygote.py).

It hands the server its command line, directory, environment, umask and its own stdin, stdout
and stderr, passes Ctrl-C and SIGTERM on to the command, and ends as the command ended (its exit
status, or the signal that killed it). ALBERT_TF_TESTS_SERVER names the server's socket.
"""

import json
import os
import signal
import socket
import sys

SERVER_VARIABLE = "ALBERT_TF_TESTS_SERVER"


def main():
    path = os.environ.pop(SERVER_VARIABLE)
    umask = os.umask(0)
    os.umask(umask)
    request = {"run": ["albert-tf", *sys.argv[1:]], "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        answers = connection.makefile("r")
        pid = int(answers.readline().split()[1])
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda received, _: os.kill(pid, received))
        how, number = answers.readline().split()
    if how == "signal":
        signal.signal(int(number), signal.SIG_DFL)
        os.kill(os.getpid(), int(number))
    sys.exit(int(number))


if __name__ == "__main__":
    main()
