"""Runs one page's code blocks in order, in this one process, for tests/project/test_docs.py.

    python tests/doc_blocks_worker.py < blocks.json     # [{"line": 63, "language": "python", "script": "block_63.py"}]

A ```python block runs here, in a namespace of its own as a script does (`__name__ == "__main__"`), so
the page's later Python blocks reuse the TensorFlow and Keras this process has loaded rather than each
loading them again; one that imports MediaPipe runs as `python block.py` (MediaPipe carries its own
TFLite runtime and absl, which should not meet TensorFlow's in one process).

A ```bash or ```sh block runs as the user's shell runs it, `bash -e -o pipefail`, and its `albert-tf`
commands run in this process too: a stand-in `albert-tf` first on the block's PATH (`stand_in`, no
TensorFlow) hands its arguments, directory, environment, umask and its stdin, stdout and stderr (the
descriptors themselves, over a unix socket) to this process, which runs the command as
tests/cli_helpers.py's `run_cli` does, and exits with the command's status, so `set -e`, pipes,
redirections and `$?` see what they would see. A command that must be a process of its own
(`needs_own_process`, `serve`, a `&` job, one that comes while another runs here) is the installed
console script.

Each block's time and the number of commands run here follow it on stderr. The first block that fails
ends the page: its line and exit status are the last line on stderr, `FAILED LINE STATUS`, and this
process exits 1.
"""

import json
import os
import queue
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from cli_helpers import albert_tf_command, ctrl_c_reaches_it, exit_status_in_process, needs_own_process

# A block's limit; a command running here is not stopped, and its block ends when it returns
# (test_docs.py's limit for the whole page ends this process).
BLOCK_TIMEOUT_S = 600
OWN_PROCESS = re.compile(r"^\s*(from|import) mediapipe\b", re.M)
# The stand-in's answer when a command is already running here.
BUSY = b"busy"


def run_block(block, commands):
    """The block's exit status: 0, a bash block's own, or 1 for a Python block that raised."""
    with open(block["script"], encoding="utf-8") as f:
        own_process = OWN_PROCESS.search(f.read())
    if block["language"] != "python":
        return commands.run_shell(["bash", "-e", "-o", "pipefail", block["script"]])
    if own_process:
        try:
            return subprocess.run([sys.executable, block["script"]], timeout=BLOCK_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            print(f"ran past {BLOCK_TIMEOUT_S} s", file=sys.stderr)
            return 124
    try:
        runpy.run_path(block["script"], run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


class Commands:
    """The `albert-tf` commands of shell blocks, run in this process's main thread (a command may set
    signal handlers), one at a time; a thread takes the stand-ins' requests on a unix socket."""

    def __init__(self, folder):
        self.bin = os.path.join(folder, "bin")
        os.mkdir(self.bin)
        address = os.path.join(folder, "socket")
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(address)
        self.listener.listen()
        with open(os.path.join(self.bin, "albert-tf"), "w", encoding="utf-8") as script:
            script.write(f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {os.path.dirname(__file__)!r})\n"
                         f"import doc_blocks_worker\ndoc_blocks_worker.stand_in({address!r})\n")
            os.fchmod(script.fileno(), 0o755)
        self.requests = queue.Queue()
        self.busy = threading.Lock()
        self.ran = 0  # commands run here
        threading.Thread(target=self._take_requests, daemon=True).start()

    def _take_requests(self):
        while True:
            connection, _ = self.listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
            while chunk := connection.recv(1 << 16):
                message += chunk
            if self.busy.acquire(blocking=False):
                self.requests.put((connection, json.loads(message), fds))
                continue
            connection.sendall(BUSY)  # the stand-in starts the console script
            connection.close()
            for fd in fds:
                os.close(fd)

    def run_shell(self, program):
        """`program`'s exit status, its `albert-tf` commands run here while it runs."""
        env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ.get("PATH", ""))
        # SIGINT as a terminal leaves it, so that the stand-in tells a `&` job by its ignored SIGINT.
        process = subprocess.Popen(program, env=env, preexec_fn=ctrl_c_reaches_it)
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                print(f"ran past {BLOCK_TIMEOUT_S} s", file=sys.stderr)
                return 124
            try:
                connection, request, fds = self.requests.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                status = exit_status_in_process(request["args"], fds, request["cwd"], request["env"], request["umask"])
                connection.sendall(str(status).encode())
                self.ran += 1
            finally:
                connection.close()
                for fd in fds:
                    os.close(fd)
                self.busy.release()
        return process.returncode


def stand_in(address):
    """`albert-tf` on a shell block's PATH: the command run by the page's process at `address`, or the
    console script where it must be a process of its own or that process is busy."""
    args = sys.argv[1:]
    own_bin = os.path.dirname(os.path.abspath(sys.argv[0]))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != own_bin)
    background = signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # as bash starts a `&` job
    if not ("serve" in args or background or needs_own_process(args, env)):
        umask = os.umask(0)
        os.umask(umask)
        request = json.dumps({"args": args, "cwd": os.getcwd(), "env": env, "umask": umask}).encode()
        with socket.socket(socket.AF_UNIX) as connection:
            connection.connect(address)
            socket.send_fds(connection, [request], [0, 1, 2])
            connection.shutdown(socket.SHUT_WR)
            answer = connection.makefile("rb").read()
        if answer != BUSY:
            sys.exit(int(answer) if answer else "albert-tf: the docs' blocks process ended during the command")
    command = albert_tf_command()
    os.execve(command[0], command + args, env)


def main():
    sys.path[0] = os.getcwd()  # as for `python block.py` in the page's directory: not tests/ first
    folder = tempfile.mkdtemp(prefix="albert-tf-blocks-")
    try:
        commands = Commands(folder)
        for block in json.load(sys.stdin):
            for stream in (sys.stdout, sys.stderr):
                print(f"--- block at line {block['line']} ---", file=stream, flush=True)
            started, ran = time.monotonic(), commands.ran
            status = run_block(block, commands)
            sys.stdout.flush()
            print(f"--- block at line {block['line']} took {time.monotonic() - started:.1f} s, "
                  f"{commands.ran - ran} albert-tf commands in this process ---", file=sys.stderr, flush=True)
            if status != 0:
                print(f"FAILED {block['line']} {status}", file=sys.stderr, flush=True)
                sys.exit(1)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
