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
"""

import os
import random

import pytest

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
