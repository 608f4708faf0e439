"""Settings every test shares.

The tests are grouped by the package they protect (tests/pipeline for input_pipeline,
models, training, recipes, export, commands, project); the modules they share
(helpers, fixtures, worker scripts) sit here, on the path through pytest.ini.
No folder here is named after a package: the worker scripts run with tests/
first on their path, where a folder named input_pipeline would stand for the
package as an empty namespace package.
"""

import os

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

