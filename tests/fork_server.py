"""A fork server: the programs the tests start, in processes of their own that skip TensorFlow's import.

A new `python` that runs `albert-tf`, a worker script or `python -m pytest`
spends seconds importing TensorFlow and Keras before it does anything, and
more than a second tearing them down when it ends. `ForkServer` starts this
file once as a program that imports them and the modules it is given, without
running any TensorFlow op (it refuses to serve once TensorFlow's eager context,
and with it the runtime's thread pools, exists), then waits on a unix socket.
For each `start(args, ...)` it forks a child that becomes the program: the
working directory, environment, umask and argv sent with the request, stdin,
stdout and stderr the file descriptors sent with it (SCM_RIGHTS), Python's
start-up signal dispositions, fresh stdio streams, `sys.path` as `python`
makes it from the script's folder and PYTHONPATH, a reseeded `random` and
NumPy. Several children run at once (a cluster's workers, a server and its
client). The child is a real process of its own: the kernel delivers the
signals a test sends it (through a pidfd, so never to a reused pid), and the
server, its parent, reports how it ended.

It ends as `python` does, less the teardown that only frees memory: the exit
status of a SystemExit, 1 and the traceback after an uncaught exception, death
by SIGINT after an uncaught KeyboardInterrupt; first it joins its non-daemon
threads, runs the atexit functions and flushes its streams, then `os._exit`.
What Python would do after that (collect modules, run `__del__`s and C
finalizers) writes nothing a program's user sees.

AutoGraph's conversions, learnt: a child that converts a function for a
`tf.function` or a dataset's map (parsing and rewriting its source, tenths of
a second each, and again in every child) appends its name to a file of the
server's, and before each fork the server converts what the children before
named, so that later children find it in AutoGraph's cache (keyed by the
function's code, as in one process). The server only parses and writes
Python there; it runs no op.

What a fresh process has and a child does not: the import-time environment
(`IMPORT_TIME`; `serves(env)` says whether a request's matches the server's),
the hash seed, the warnings and log lines printed while importing, and any
module the program would not import. Tests of start-up, of what a fresh
process imports and of other runtimes (MediaPipe, other venvs) start real
processes: `start_program(..., fresh=True)` in tests/cli_helpers.py.
"""

import atexit
import importlib
import io
import json
import os
import random
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types

import numpy as np

# Read by Python, TensorFlow, Keras or huggingface_hub while they import, so a child keeps the server's
# (Keras's folder is ~/.keras, huggingface_hub's cache and endpoint constants).
IMPORT_TIME = ("KERAS_BACKEND", "KERAS_HOME", "TF_USE_LEGACY_KERAS", "TF_ENABLE_ONEDNN_OPTS", "PYTHONHASHSEED",
               "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "HOME", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE",
               "HF_ENDPOINT", "HF_HUB_OFFLINE")
# Ignored by a new Python process (the rest start at their defaults, SIGINT raising KeyboardInterrupt).
_PYTHON_IGNORES = ("SIGPIPE", "SIGXFSZ")
_READY = "ready"


class ForkServer:
    """The server process, started at once; `start` waits for its imports the first time.

    Args:
        modules: modules to import besides TensorFlow and Keras (the programs' own work, which they import
            when they run).
        env: the server's environment, and every program's unless `start` says otherwise.
    """

    def __init__(self, modules=(), env=None):
        self._dir = tempfile.mkdtemp(prefix="albert-tf-fork-server-")
        self.address = os.path.join(self._dir, "socket")
        self.env = dict(os.environ if env is None else env)
        self._log = open(os.path.join(self._dir, "log"), "w+")
        # As `albert-tf` sets it before TensorFlow loads: TensorFlow's C++ logging reads it once.
        server_env = {**self.env, "TF_CPP_MIN_LOG_LEVEL": "2"}
        self._process = subprocess.Popen([sys.executable, __file__, self.address, *modules], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=self._log, text=True, env=server_env)
        self._ready = False

    def serves(self, env):
        """Whether a program under `env` sees what it would in a fresh process (its IMPORT_TIME variables)."""
        return all(env.get(name) == self.env.get(name) for name in IMPORT_TIME)

    def start(self, args, *, cwd=None, env=None, umask=None, stdin=None, stdout=None, stderr=None, text=True,
              script=None, module=None, sigint_ignored=None):
        """`albert-tf ARGS`, `python SCRIPT ARGS` or `python -m MODULE ARGS` in a forked child; a `ForkedProgram`.

        Args:
            cwd: its working directory (default: this process's).
            env: its whole environment (default: the server's).
            umask: its umask (default: this process's).
            stdin, stdout, stderr, text: as `subprocess.Popen` takes them (PIPE, DEVNULL, STDOUT, a file, None).
            sigint_ignored: whether it starts with SIGINT ignored; default: as a program this process
                starts inherits it (ignored in a `&` job of a shell without job control), where Python
                leaves it ignored and installs no KeyboardInterrupt handler.
        """
        self._wait_ready()
        if umask is None:
            umask = os.umask(0)
            os.umask(umask)
        if sigint_ignored is None:
            sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        program = {"script": os.path.abspath(script)} if script else {"module": module} if module else {}
        request = {"args": [str(a) for a in args], "cwd": os.path.abspath(cwd or os.getcwd()),
                   "env": self.env if env is None else dict(env), "umask": umask, "sigint_ignored": sigint_ignored,
                   **program}
        return ForkedProgram(self.address, request, stdin, stdout, stderr, text)

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


class ForkedProgram:
    """A program the server forked, used as the `subprocess.Popen` it stands for: `pid`, `args`, `stdin`, `stdout`,
    `stderr`, `returncode`, `poll`, `wait`, `communicate`, `send_signal`, `terminate`, `kill`, `with`."""

    def __init__(self, address, request, stdin, stdout, stderr, text):
        self.args = request["args"]
        self.returncode = None
        self._lock = threading.Lock()
        self._communication = None
        theirs, ours = [], []
        try:
            self.stdin = _end(stdin, 0, "w", text, theirs, ours)
            self.stdout = _end(stdout, 1, "r", text, theirs, ours)
            self.stderr = None if stderr == subprocess.STDOUT else _end(stderr, 2, "r", text, theirs, ours)
            if stderr == subprocess.STDOUT:
                theirs.append(theirs[1])
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._socket.connect(address)
            socket.send_fds(self._socket, [json.dumps(request).encode()], theirs)
            message, fds, _, _ = socket.recv_fds(self._socket, 1024, 1)
        except BaseException:
            for stream in ours:
                stream.close()
            raise
        finally:
            for fd in set(theirs):
                os.close(fd)
        self.pid, self._pidfd = json.loads(message)["pid"], fds[0]

    def send_signal(self, signum):
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, signum)
            except ProcessLookupError:  # it ended, and the server reaped it
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def poll(self):
        return self.wait(timeout=0) if self.returncode is None else self.returncode

    def wait(self, timeout=None):
        """Its exit status as Popen gives it (-N after signal N); raises `subprocess.TimeoutExpired` after `timeout` s.
        (`poll` is `wait(timeout=0)` without the exception.)"""
        with self._lock:
            if self.returncode is None:
                self._socket.settimeout(timeout)
                try:
                    message = self._socket.recv(1024)
                except (TimeoutError, BlockingIOError):
                    if timeout == 0:
                        return None
                    raise subprocess.TimeoutExpired(self.args, timeout) from None
                if not message:
                    raise RuntimeError(f"the fork server ended before {self.args} (pid {self.pid}) did")
                self.returncode = os.waitstatus_to_exitcode(json.loads(message)["status"])
                self._socket.close()
                os.close(self._pidfd)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        """As Popen's: writes `input`, reads stdout and stderr to their ends, waits; (stdout, stderr)."""
        if self._communication is None:
            read = {}
            tasks = [lambda: _feed(self.stdin, input)] if self.stdin else []
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream:
                    tasks.append(lambda name=name, stream=stream: read.__setitem__(name, stream.read()))
            threads = [threading.Thread(target=task, daemon=True) for task in tasks]
            for thread in threads:
                thread.start()
            self._communication = threads, read
        threads, read = self._communication
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        for stream in (self.stdout, self.stderr):
            if stream:
                stream.close()
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        return read.get("stdout"), read.get("stderr")

    def __enter__(self):
        return self

    def __exit__(self, *_):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream:
                stream.close()
        self.wait()


def _end(given, fd, mode, text, theirs, ours):
    """The child's descriptor for `given` (appended to `theirs`) and, for PIPE, this side's stream (returned)."""
    if given == subprocess.PIPE:
        read_fd, write_fd = os.pipe()
        mine, child = (write_fd, read_fd) if mode == "w" else (read_fd, write_fd)
        theirs.append(child)
        if mode == "w":
            stream = io.open(mine, "wb")
            stream = io.TextIOWrapper(stream, write_through=True) if text else stream
        else:
            stream = io.open(mine, "r" if text else "rb")
        ours.append(stream)
        return stream
    if given == subprocess.DEVNULL:
        theirs.append(os.open(os.devnull, os.O_RDWR))
    elif given is None:
        theirs.append(os.dup(fd))
    else:
        theirs.append(os.dup(given if isinstance(given, int) else given.fileno()))
    return None


def _feed(stdin, text):
    try:
        if text:
            stdin.write(text)
        stdin.close()
    except BrokenPipeError:
        pass


def _runtime_started():
    # Private, and the one place TensorFlow says whether its runtime started: the eager context's handle.
    from tensorflow.python.eager import context

    return context._context is not None and context._context._context_handle is not None


def _serve(address, modules):
    for name in ("tensorflow", "keras", *modules):
        importlib.import_module(name)

    if _runtime_started():
        sys.exit(f"importing {modules} started TensorFlow's runtime: a forked child would inherit its threads' locks")
    if threading.active_count() != 1:
        sys.exit(f"importing {modules} started Python threads: {threading.enumerate()}")
    server_entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    base_path = [entry for entry in sys.path[1:] if entry not in server_entries]
    conversions = _Conversions(os.path.join(os.path.dirname(address), "conversions"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen()
    print(_READY, flush=True)
    children = {}  # pidfd: (pid, the connection that asked for it)
    while True:
        for ready in select.select([listener, *children], [], [])[0]:
            if ready is not listener:
                pid, connection = children.pop(ready)
                _, status = os.waitpid(pid, 0)
                os.close(ready)
                try:
                    connection.send(json.dumps({"status": status}).encode())
                except OSError:  # the test went away
                    pass
                connection.close()
                continue
            connection, _ = listener.accept()
            try:
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            except OSError:
                message = None
            if not message or len(fds) != 3:  # the test went away before it asked
                connection.close()
                continue
            conversions.learn()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                for pidfd, (_, other) in children.items():
                    os.close(pidfd)
                    other.close()
                children.clear()
                connection.close()
                _become_the_program(json.loads(message), fds, base_path)
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(connection, [json.dumps({"pid": pid}).encode()], [pidfd])
            except OSError:
                pass
            children[pidfd] = pid, connection


class _Conversions:
    """AutoGraph's conversions in the children, named in the file `path`, and made again in the server.

    A line names one: [module, qualified name, file, first line, its conversion options]. A function defined
    inside another (`f.<locals>.g`) is found among the code objects of the one around it.
    """

    def __init__(self, path):
        from tensorflow.python.autograph.core import converter
        from tensorflow.python.autograph.impl import api

        self._path, self._read, self._made = path, 0, set()
        self._api, self._converter = api, converter
        open(path, "a").close()
        convert, named, server = api._convert_actual, set(), os.getpid()

        def convert_and_name(entity, program_ctx):  # in a child: converts, and names it once for the server
            transformed = convert(entity, program_ctx)
            options = program_ctx.options
            code = getattr(entity, "__code__", None)
            line = [getattr(entity, "__module__", None), getattr(entity, "__qualname__", None),
                    getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None), options.recursive,
                    options.user_requested, options.internal_convert_user_code,
                    sorted(feature.name for feature in options.optional_features)]
            text = json.dumps(line)
            if os.getpid() != server and text not in named and None not in line and line[0] != "__main__":
                named.add(text)
                try:
                    with open(path, "a") as names:  # one short line, appended whole
                        names.write(text + "\n")
                except OSError:  # a full disk: the program goes on as it would, the server learns less
                    pass
            return transformed

        api._convert_actual = convert_and_name

    def learn(self):
        """Converts, here, what the children named since the last call and this process has not converted."""
        with open(self._path, "rb") as names:
            names.seek(self._read)
            lines = names.readlines()
        if lines and not lines[-1].endswith(b"\n"):  # a child still writing it
            lines.pop()
        self._read += sum(len(line) for line in lines)
        for line in lines:
            if line in self._made:
                continue
            self._made.add(line)
            try:
                module, qualname, filename, first_line, recursive, user_requested, convert_user_code, features = (
                    json.loads(line))
                function = _function_named(module, qualname, filename, first_line)
                if function is not None:
                    options = self._converter.ConversionOptions(
                        recursive=recursive, user_requested=user_requested,
                        internal_convert_user_code=convert_user_code,
                        optional_features=[self._converter.Feature[name] for name in features])
                    self._api._convert_actual(function, self._converter.ProgramContext(options=options))
            except Exception:  # not a whole line, or not convertible here: the children convert it, as before
                pass
        if lines and _runtime_started():
            sys.exit("converting what the children named started TensorFlow's runtime")


def _function_named(module, qualname, filename, first_line):
    """The function `module.qualname` defined at `filename:first_line`, or one with its code when it is defined
    inside another; None when this process has not imported its module or finds another there."""
    found = sys.modules.get(module)
    parts = qualname.split(".")
    while found is not None and parts and parts[0] != "<locals>":
        found = getattr(found, parts.pop(0), None)
    code = getattr(found, "__code__", None)
    if code is None or not isinstance(code, types.CodeType):
        return None
    if not parts:
        return found if (code.co_filename, code.co_firstlineno) == (filename, first_line) else None
    while parts:  # ["<locals>", name, ...]: a code object among the constants of the one around it
        name = parts[1] if len(parts) > 1 else None
        parts = parts[2:]
        inner = [const for const in code.co_consts if isinstance(const, types.CodeType) and const.co_name == name]
        if not parts:
            inner = [const for const in inner if (const.co_filename, const.co_firstlineno) == (filename, first_line)]
        if not inner:
            return None
        code = inner[0]
    return types.FunctionType(code, found.__globals__, code.co_name, None,
                              tuple(types.CellType() for _ in code.co_freevars))


def _become_the_program(request, fds, base_path):
    """In the forked child: becomes the process `python` would start for the request and leaves as it does
    (`_run_and_leave`); never returns."""
    try:
        for fd, received in enumerate(fds):
            os.dup2(received, fd)
        for received in set(fds):
            os.close(received)
        for number in signal.valid_signals():
            if number not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    signal.signal(number, signal.SIG_DFL)
                except (OSError, ValueError):  # a signal no process may handle (the C library's real-time ones)
                    pass
        signal.signal(signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler)
        for name in _PYTHON_IGNORES:
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        tempfile.tempdir = None  # found again from the program's TMPDIR
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        sys.stdin = sys.__stdin__ = _std_stream(0, "r", unbuffered)
        sys.stdout = sys.__stdout__ = _std_stream(1, "w", unbuffered)
        sys.stderr = sys.__stderr__ = _std_stream(2, "w", unbuffered, errors="backslashreplace")
        random.seed()
        np.random.seed()  # a new process's global generators start from the OS's entropy
        args = request["args"]
        if "script" in request:
            first = os.path.dirname(request["script"])
            sys.argv = [request["script"], *args]
            run = lambda: runpy.run_path(request["script"], run_name="__main__")  # noqa: E731
        elif "module" in request:
            first = request["cwd"]
            sys.argv = [request["module"], *args]
            run = lambda: runpy.run_module(request["module"], run_name="__main__", alter_sys=True)  # noqa: E731
        else:
            from albert_tf import cli

            first = os.path.dirname(sys.executable)
            sys.argv = [os.path.join(first, "albert-tf"), *args]
            run = lambda: sys.exit(cli.main(args))  # noqa: E731
        entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[:] = [first, *entries, *(entry for entry in base_path if entry not in entries)]
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(127)
    _run_and_leave(run)


def _run_and_leave(run):
    """Runs `run` and ends the process with the status and the last steps of the interpreter's exit."""
    code = 0
    try:
        run()
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = -signal.SIGINT if isinstance(sys.exc_info()[1], KeyboardInterrupt) else 1
    try:
        threading._shutdown()  # what Py_FinalizeEx does first: join the non-daemon threads
    except BaseException:
        sys.excepthook(*sys.exc_info())
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if code == -signal.SIGINT:  # as Python ends after an uncaught KeyboardInterrupt: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


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
