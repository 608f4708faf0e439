"""`albert-tf`'s stderr filter keeps every line that is not TensorFlow's start-up noise."""

import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from albert_tf import cli


class _LateThread(threading.Thread):
    """A thread that first runs only after the command it serves has ended."""

    def run(self):
        time.sleep(0.3)
        super().run()


def test_a_command_that_ends_before_the_copying_thread_runs_keeps_its_error(monkeypatch, capfd):
    monkeypatch.setattr(cli.threading, "Thread", _LateThread)
    with cli.QuietStderr():
        os.write(2, b"albert-tf demo: error: something the user must see\n")
        os.write(2, b"I0000 00:00:1795628714.721118   20435 some_op.cc:213] start-up noise\n")
    err = capfd.readouterr().err
    assert "something the user must see" in err
    assert "start-up noise" not in err


def test_benign_error_lines_are_dropped_and_real_ones_kept(capfd):
    with cli.QuietStderr():
        # util.cc's note on a CPU without AVX-512: the op runs in Eigen instead; nothing failed.
        os.write(2, b"E0000 00:00:1795628714.721118   20435 util.cc:131] oneDNN supports DT_INT64 only on "
                    b"platforms with AVX-512. Falling back to the default Eigen-based implementation if present.\n")
        os.write(2, b"E0000 00:00:1795628714.721118   20435 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n")
        os.write(2, b"E0000 00:00:1795628714.721118   20435 some_kernel.cc:99] a real failure\n")
    err = capfd.readouterr().err
    assert "DT_INT64" not in err and "cuInit" not in err
    assert "a real failure" in err


def test_a_child_that_outlives_the_command_neither_delays_its_exit_nor_loses_its_lines(capfd):
    # As create-data's worker pool leaves multiprocessing's resource tracker holding the stderr
    # pipe until the command's process exits: EOF never comes before exit.
    with cli.QuietStderr():
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.write(2, b'a worker line, no newline'); "
                                  "print('written', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "written\n"
        os.write(2, b"the command's last line\n")
        started = time.monotonic()
    ended = time.monotonic() - started
    child.kill()
    child.wait()
    err = capfd.readouterr().err
    assert ended < 2, f"the filter waited {ended:.1f} s for a pipe a child still held"
    assert "a worker line, no newline" in err and "the command's last line" in err, err


@pytest.mark.parametrize("flags", [[], ["--verbose"]], ids=["quiet", "verbose"])
def test_a_command_that_crashes_leaves_the_python_tracebacks_of_where_it_was(flags):
    # A fresh process: the crash is the subject. The quiet command's stderr is a pipe its own thread copies, so
    # whatever the crash wrote there dies with the process: without the handler stderr stays empty.
    program = ("import os\nfrom albert_tf import cli\n"
               "def a_step_that_crashes(argv, verbose):\n    os.abort()\n"
               "cli._run = a_step_that_crashes\n"
               f"cli.main(['demo', *{flags!r}])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == -signal.SIGABRT, result
    assert "Fatal Python error: Aborted" in result.stderr and "a_step_that_crashes" in result.stderr, result.stderr


def test_a_crash_handler_already_installed_is_left_in_place(tmp_path):
    with open(tmp_path / "theirs", "w") as theirs:
        installed_here = not faulthandler.is_enabled()  # pytest's own, unless it is off
        if installed_here:
            faulthandler.enable(theirs)
        try:
            with cli.crash_tracebacks(2):
                pass
            assert faulthandler.is_enabled()
        finally:
            if installed_here:
                faulthandler.disable()
