"""Settings every test shares, and how pytest-xdist splits the suite between its processes.

The tests are grouped by the package they protect (tests/input_pipeline,
models, training, recipes, export, commands, project); the modules they share
(helpers, fixtures, worker scripts) sit here, on the path through pytest.ini.
"""

import os

import pytest

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Each test file is one unit of work for pytest-xdist (`--dist loadgroup`), unless it names a group.

    A file whole on one process builds its module fixtures once; files marked
    `xdist_group(NAME)` run on one process together and share its session
    fixtures (the CLI journeys' tour, tests/commands/conftest.py).
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
