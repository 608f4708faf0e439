"""The fork server (tests/fork_server.py): a forked program starts and ends as a new `python` does.

Each probe runs twice, forked and as a real process, and what it reports must
agree: argv, directory, umask, environment, `sys.path`, signal dispositions,
stdin, threads, and the exit status, output and atexit work of each way a
program ends. The probes import nothing of TensorFlow, so the real process
starts in a fraction of a second. The last test starts a server of its own: what
AutoGraph converted in one child, the server converts for the children after it.
"""

import json
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

from cli_helpers import _forked, albert_tf_command, fork_server, run_program, start_program, user_environment
from fork_server import ForkedProgram, ForkServer

PROBE = textwrap.dedent("""
    import atexit, json, os, random, signal, sys, threading, time
    import numpy as np

    how = sys.argv[1]
    if how == "report":
        umask = os.umask(0)
        print(json.dumps({
            "argv": sys.argv, "cwd": os.getcwd(), "umask": umask, "marker": os.environ.get("PROBE_MARKER"),
            "path": sys.path[:2], "main": __name__, "stdin": sys.stdin.read(), "threads": threading.active_count(),
            "signals": {name: str(signal.getsignal(getattr(signal, name)))
                        for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGXFSZ", "SIGHUP", "SIGUSR1", "SIGCHLD")},
            "random": [random.random(), float(np.random.rand())]}))
    elif how == "raise":
        raise ValueError("a bug")
    elif how == "interrupt":
        raise KeyboardInterrupt
    elif how == "exit":
        sys.exit(int(sys.argv[2]) if sys.argv[2].isdigit() else sys.argv[2])
    elif how == "thread":
        done = []
        atexit.register(lambda: print("atexit after the thread:", done, flush=True))
        threading.Thread(target=lambda: (time.sleep(0.3), done.append(1))).start()
        sys.stdout.write("unflushed, ")
    elif how == "wait":
        print("waiting", flush=True)
        time.sleep(60)
    elif how == "pair":
        mine, theirs = sys.argv[2:4]
        open(mine, "w").close()
        deadline = time.time() + 30
        while not os.path.exists(theirs):
            assert time.time() < deadline, "the other program never ran beside this one"
            time.sleep(0.05)
""")


def _both(tmp_path, *args, input=""):
    """(forked, real): returncode, stdout, stderr of the probe run both ways, umask 027, in `tmp_path`."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = user_environment(PROBE_MARKER="m", PYTHONPATH=str(tmp_path / "lib"))
    forked = fork_server().start(list(args), script=probe, cwd=tmp_path, env=env, umask=0o027,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = forked.communicate(input, timeout=60)
    real = run_program([sys.executable, probe, *args], cwd=tmp_path, env=env, umask=0o027, input=input, timeout=60,
                       fresh=True)
    return (forked.returncode, out, err), (real.returncode, real.stdout, real.stderr)


# This process's SIGINT as a terminal's shell leaves it, and as a shell without job control leaves it to a
# `&` job (ignored, and inherited so by the programs it starts).
@pytest.mark.parametrize("sigint", [signal.default_int_handler, signal.SIG_IGN], ids=["terminal", "background"])
def test_a_forked_program_starts_as_a_new_python_would(tmp_path, sigint):
    before = signal.signal(signal.SIGINT, sigint)
    try:
        (code, out, err), (real_code, real_out, real_err) = _both(tmp_path, "report", "x y", input="a line\n")
    finally:
        signal.signal(signal.SIGINT, before)
    assert code == real_code == 0, err + real_err
    forked, real = json.loads(out), json.loads(real_out)
    assert forked.pop("random") != real.pop("random")
    assert forked == real
    assert forked["signals"]["SIGINT"] == str(sigint)
    assert forked["argv"][1:] == ["report", "x y"] and forked["umask"] == 0o027 and forked["stdin"] == "a line\n"
    assert forked["path"] == [str(tmp_path), str(tmp_path / "lib")] and forked["threads"] == 1
    # Two forked programs draw different random numbers (the server's generators are not theirs).
    pair = [fork_server().start(["report", ""], script=tmp_path / "probe.py", stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE) for _ in range(2)]
    draws = [json.loads(program.communicate(timeout=60)[0])["random"] for program in pair]
    assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1]


def test_a_forked_program_ends_as_a_new_python_would(tmp_path):
    for args in (["raise"], ["interrupt"], ["exit", "3"], ["exit", "a message"], ["thread"]):
        (code, out, err), (real_code, real_out, real_err) = _both(tmp_path, *args)
        assert (code, out) == (real_code, real_out), (args, err, real_err)
        assert err.splitlines()[-1:] == real_err.splitlines()[-1:], args
    assert _both(tmp_path, "interrupt")[0][0] == -signal.SIGINT
    assert _both(tmp_path, "thread")[0][1] == "unflushed, atexit after the thread: [1]\n"
    program = fork_server().start(["wait"], script=tmp_path / "probe.py", stdout=subprocess.PIPE)
    assert program.stdout.readline() == "waiting\n" and program.poll() is None
    program.send_signal(signal.SIGTERM)
    assert program.wait(timeout=30) == -signal.SIGTERM


def test_forked_programs_run_side_by_side(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    pair = [fork_server().start(["pair", str(tmp_path / mine), str(tmp_path / theirs)], script=tmp_path / "probe.py",
                                stderr=subprocess.PIPE) for mine, theirs in (("a", "b"), ("b", "a"))]
    for program in pair:
        _, err = program.communicate(timeout=60)
        assert program.returncode == 0, err


def test_which_programs_are_forked(tmp_path):
    with start_program(albert_tf_command() + ["no-such-command"], stderr=subprocess.PIPE) as command:
        assert isinstance(command, ForkedProgram)
        assert command.wait(timeout=60) == 2 and "no-such-command" in command.stderr.read()
    for fresh, env in ((True, None), (False, user_environment(KERAS_BACKEND="jax")),
                       (False, user_environment(HOME=str(tmp_path)))):
        with start_program([sys.executable, "-c", "pass"], fresh=fresh, env=env) as plain:
            assert isinstance(plain, subprocess.Popen)
        with start_program(albert_tf_command() + ["--version"], fresh=fresh, env=env,
                           stdout=subprocess.PIPE) as real:
            assert isinstance(real, subprocess.Popen) and real.wait(timeout=120) == 0
    tests = pathlib.Path(__file__).parents[1]
    assert _forked([sys.executable, "-m", "pytest", "-q"]) == {"args": ["-q"], "module": "pytest"}
    assert _forked([sys.executable, str(tests / "training_worker.py"), "--steps", "1"]) == {
        "args": ["--steps", "1"], "script": str(tests / "training_worker.py")}
    assert _forked([sys.executable, str(tests / "mediapipe_worker.py")]) is None
    assert _forked([sys.executable, "-c", "pass"]) is None


LEARNT = textwrap.dedent("""
    import tensorflow as tf

    def top(x):
        if x > 0:
            x = x * 2
        return x

    def outer(step):
        def inner(x):
            for i in tf.range(3):
                x += i * step
            return x
        return inner
""")
CONVERTS = textwrap.dedent("""
    import json
    import tensorflow as tf
    from tensorflow.python.autograph.core import converter
    from tensorflow.python.autograph.impl import api
    import learnt

    options = converter.ConversionOptions(recursive=True, user_requested=True, optional_features=None)
    functions = [learnt.top, learnt.outer(5)]
    cached = [api._TRANSPILER._cache.has(function, options) for function in functions]
    print(json.dumps({"cached": cached, "values": [int(tf.function(f)(tf.constant(1))) for f in functions]}))
""")


def test_a_conversion_a_child_made_is_made_in_the_server_for_the_children_after(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "learnt.py").write_text(LEARNT)
    (tmp_path / "converts.py").write_text(CONVERTS)
    server = ForkServer(["learnt"], env=user_environment(PYTHONPATH=str(tmp_path / "lib")))
    try:
        reports = []
        for _ in range(2):
            program = server.start([], script=tmp_path / "converts.py", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = program.communicate(timeout=120)
            assert program.returncode == 0, err
            reports.append(json.loads(out))
    finally:
        server.close()
    # The first converted both (a module's function, one defined inside another); the second found them made.
    assert [report["cached"] for report in reports] == [[False, False], [True, True]]
    assert reports[0]["values"] == reports[1]["values"] == [2, 16]
