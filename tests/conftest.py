"""Settings every test shares, and the process state each test gets back as it found it.

The tests are grouped by the package they protect (tests/pipeline for input_pipeline,
models, training, recipes, export, commands, project); the modules they share
(helpers, fixtures, worker scripts) sit here, on the path through pytest.ini.
No folder here is named after a package: the worker scripts run with tests/
first on their path, where a folder named input_pipeline would stand for the
package as an empty namespace package.

Most tests, `albert-tf` commands included (tests/cli_helpers.py), run in the
test process, one after another: `process_state` below gives every test the
Keras dtype policy, the seeds, the working directory, the umask and the
environment the test process started with.

A test marked `own_process` runs in a pytest process of its own instead
(`pytest_pyfunc_call` below; forked, tests/cli_helpers.py): tests that make a MultiWorkerMirroredStrategy,
which sets up the process's collective ops when it is made (TensorFlow asks
for that at program start-up), and with it the preemption handler's watcher
threads. The test worker's process runs hundreds of tests after it.

After each test, `pytest_runtest_protocol` below collects its garbage and freezes what outlives it, so
that the garbage collector stops walking what the tests before left.

`build_once` below builds what several test processes read (the README's
tour) once per run: the first process that asks builds it, the others wait.
"""

import fcntl
import gc
import json
import os
import random
import re
import sys
import tempfile

import pytest

# Set in the process an `own_process` test runs in: the test's node id.
_OWN_PROCESS = "ALBERT_TF_TEST_OWN_PROCESS"

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# XLA's LLVM back end without its optimization passes, in the tests and every program they start (XLA_FLAGS
# passes user_environment): TensorFlow's and JAX's compiled programs of the tests' tiny models compile in
# less time, and compute the same (XLA's CPU code keeps fast-math off at every level). The tests check what
# XLA computes; bench/ measures its speed at XLA's default level. A level the user set is kept.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()


@pytest.fixture(autouse=True)
def process_state():
    """Puts back what a test or an in-process command may change for the whole process."""
    cwd, mask, env = os.getcwd(), os.umask(0), dict(os.environ)
    os.umask(mask)
    import keras

    policy = keras.config.dtype_policy()
    keras.utils.set_random_seed(0)  # a test's random numbers do not depend on the tests run before it
    yield
    keras.config.set_dtype_policy(policy)
    os.chdir(cwd)
    os.umask(mask)
    if dict(os.environ) != env:
        os.environ.clear()
        os.environ.update(env)
    random.seed()


# The heap's size after the last full collection, in pymalloc's blocks: `sys.getallocatedblocks()` sums
# its arenas (a millisecond), where `gc.get_freeze_count()` walks every frozen object (tenths of a second
# late in a run, which each test would pay).
_blocks_after_a_full_collection = 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """After each test, its garbage is collected and what outlives it is frozen (`gc.freeze`).

    A test process keeps millions of objects from the tests before (traced functions, Keras state), and
    every full collection walked them all: late in a run, tests that trace made collections that took
    seconds each (a 2-step training spent 20 s in them). Frozen, they are not walked again. What dies
    after it was frozen (a module's fixtures) is collected by a full collection made whenever the heap
    has doubled since the last one: the walks add up to a few times the final heap.
    """
    global _blocks_after_a_full_collection
    yield
    if sys.getallocatedblocks() > 2 * _blocks_after_a_full_collection + 1_000_000:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _blocks_after_a_full_collection = sys.getallocatedblocks()
    else:
        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session")
def build_once(tmp_path_factory):
    """`build_once(name, build)`: a folder `build(folder)` filled, and what it returned (JSON), once per run.

    pytest-xdist's processes have base temporary folders side by side: the folder and a lock file lie
    beside them, so the first process that asks builds (holding the lock) and the others wait, then
    read the same folder. Readers must not change it: a test that changes it works on a copy. A build
    that raises leaves nothing, and the next process that asks builds again.
    """
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root

    def build_once(name, build):
        folder, done = root / name, root / f"{name}.json"
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                folder.mkdir(exist_ok=True)
                done.write_text(json.dumps(build(folder)))
        return folder, json.loads(done.read_text())

    return build_once


def pytest_configure(config):
    config.addinivalue_line("markers", "own_process: runs in a fresh pytest process of its own (conftest.py says why)")
    # pytest-timeout's own marker, named here too so that a run without the plugin knows it.
    config.addinivalue_line("markers", "timeout(seconds): a long journey's budget in place of pytest.ini's (tests/README.md)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs an `own_process` test as `python -m pytest NODEID` in a process of its own; its failure is this test's."""
    if pyfuncitem.get_closest_marker("own_process") is None or os.environ.get(_OWN_PROCESS) == pyfuncitem.nodeid:
        return None
    from cli_helpers import run_program

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    with tempfile.TemporaryDirectory() as basetemp:  # not a numbered one beside this run's, which pytest prunes
        done = run_program(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--basetemp", basetemp,
             pyfuncitem.nodeid],
            cwd=pyfuncitem.config.rootpath, env={**env, _OWN_PROCESS: pyfuncitem.nodeid}, timeout=240)
    ran = done.returncode == 0 and re.search(r"^1 passed\b", done.stdout, re.M)
    assert ran, f"in its own process, exit {done.returncode}:\n{(done.stdout + done.stderr)[-6000:]}"
    return True
