"""Settings every test shares.

The tests are grouped by the package they protect (tests/pipeline for input_pipeline,
models, training, recipes, export, commands, project); the modules they share
(helpers, fixtures, worker scripts) sit here, on the path through pytest.ini.
No folder here is named after a package: the worker scripts run with tests/
first on their path, where a folder named input_pipeline would stand for the
package as an empty namespace package.
"""

import os
import shutil
import tempfile

from cli_helpers import XLA_CACHE_FLAG

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# One XLA compilation cache for the whole run: its processes (both test
# processes, every command and worker script they start) compile the same tiny
# graphs again and again, a few seconds each. XLA keys an entry by the
# compiled program itself, so a hit returns what the compile would have built.
# The first test process to load this file (pytest's controller, before the
# xdist workers start) makes the directory; the others inherit the variable.
if XLA_CACHE_FLAG not in os.environ.get("TF_XLA_FLAGS", ""):
    _xla_cache = tempfile.mkdtemp(prefix="albert-tf-tests-xla-")
    os.environ["TF_XLA_FLAGS"] = f"{os.environ.get('TF_XLA_FLAGS', '')} {XLA_CACHE_FLAG}{_xla_cache}".strip()

    def pytest_unconfigure(config):
        shutil.rmtree(_xla_cache, ignore_errors=True)

