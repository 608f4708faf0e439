"""`albert-tf` as the docs pages' bash blocks call it in tests/project/test_docs.py: a client of
the test process's command server (tests/cli_zygote.py), whose socket SERVER_VARIABLE names.

It hands the server its command line, directory, environment, umask and its own stdin, stdout
and stderr (cli_helpers.ForkedProcess), passes Ctrl-C and SIGTERM on to the command, and ends as
the command ended: its exit status, or the signal that killed it.
"""

import os
import signal
import sys

from cli_helpers import SERVER_VARIABLE, ForkedProcess


def main():
    umask = os.umask(0)
    os.umask(umask)
    env = {name: value for name, value in os.environ.items() if name != SERVER_VARIABLE}
    run = ["albert-tf", *sys.argv[1:]]
    process = ForkedProcess(run, run, os.getcwd(), env, None, None, None, True, umask)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda received, _: process.send_signal(received))
    status = process.wait()
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


if __name__ == "__main__":
    main()
