"""Settings every test shares.

The tests are grouped by the package they protect (tests/input_pipeline,
models, training, recipes, export, commands, project); the modules they share
(helpers, fixtures, worker scripts) sit here, on the path through pytest.ini.
"""

import os

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

