"""The suite's files start longest first (tests/conftest.py), so two test processes end together."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

TESTS = Path(__file__).parents[1]
# Loaded by its path: every test folder's conftest.py is a module named "conftest".
_spec = importlib.util.spec_from_file_location("tests_conftest", TESTS / "conftest.py")
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)


def test_the_longest_files_are_handed_out_first_and_each_file_stays_in_order():
    longest, shorter = sorted(conftest.LONGEST_FILES, key=conftest.LONGEST_FILES.get)[-2:][::-1]
    unlisted = "project/test_packaging.py"
    assert unlisted not in conftest.LONGEST_FILES
    items = [SimpleNamespace(path=TESTS / name, nodeid=f"{name}::{n}")
             for name, n in [(unlisted, 1), (shorter, 1), (unlisted, 2), (longest, 1), (shorter, 2), (longest, 2)]]
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.nodeid for item in items] == [
        f"{longest}::1", f"{longest}::2", f"{shorter}::1", f"{shorter}::2", f"{unlisted}::1", f"{unlisted}::2"]


def test_every_file_named_exists_and_is_collected_as_tests():
    for name in conftest.LONGEST_FILES:
        assert (TESTS / name).is_file() and Path(name).name.startswith("test_"), name
