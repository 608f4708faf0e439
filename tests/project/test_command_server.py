"""The tests' command server (tests/cli_zygote.py) starts programs as a new process would.

Many tests start `albert-tf`, worker scripts and `python -c` probes through
cli_helpers.start_program/run_program; what those tests check rests on the forked
program seeing what a new process sees.
"""

import json
import signal
import subprocess
import sys

from cli_helpers import ForkedProcess, run_program, start_program, user_environment

PROBE = ("import json, os, sys\n"
         "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'name': __name__, 'path0': sys.path[0],\n"
         "                  'flag': os.environ.get('TF_CONFIG'), 'umask': oct(os.umask(0)),\n"
         "                  'stdin': sys.stdin.read()}))\n"
         "sys.exit(int(sys.argv[-1]))\n")


def test_a_script_gets_its_argv_directory_environment_umask_stdin_and_exit_status(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    done = run_program([sys.executable, str(script), "x", "3"], cwd=tmp_path, input="in",
                       env=user_environment(TF_CONFIG="{}"), umask=0o027)
    assert done.returncode == 3, done.stderr
    assert done.args[0] == sys.executable
    seen = json.loads(done.stdout)
    assert seen == {"argv": [str(script), "x", "3"], "cwd": str(tmp_path), "name": "__main__",
                    "path0": str(tmp_path), "flag": "{}", "umask": "0o27", "stdin": "in"}


def test_code_runs_as_python_dash_c_and_an_exception_keeps_its_traceback(tmp_path):
    done = run_program([sys.executable, "-c", "import sys; print(sys.argv); raise ValueError('boom')", "a"],
                       cwd=tmp_path, env=user_environment())
    assert done.stdout.strip() == "['-c', 'a']"
    assert done.returncode == 1 and "Traceback" in done.stderr and "ValueError: boom" in done.stderr


def test_the_program_is_forked_and_signals_reach_it(tmp_path):
    process = start_program([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, env=user_environment())
    assert isinstance(process, ForkedProcess)
    assert process.stdout.readline() == "up\n"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    interrupted = start_program([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=user_environment())
    assert interrupted.stdout.readline() == "up\n"
    interrupted.send_signal(signal.SIGINT)
    _, stderr = interrupted.communicate(timeout=30)
    assert interrupted.returncode == -signal.SIGINT and "KeyboardInterrupt" in stderr  # as Python ends


def test_an_environment_read_at_import_gets_a_new_process(tmp_path):
    for changed in ({"HOME": str(tmp_path)}, {"KERAS_BACKEND": "jax"}, {"TF_ENABLE_ONEDNN_OPTS": "0"}):
        process = start_program([sys.executable, "-c", "pass"], env=user_environment(**changed))
        assert isinstance(process, subprocess.Popen), changed
        process.wait()
    fresh = start_program([sys.executable, "-c", "pass"], env=user_environment(), fresh=True)
    assert isinstance(fresh, subprocess.Popen)
    fresh.wait()
