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
from pathlib import Path

import pytest

from cli_helpers import XLA_CACHE_FLAG

# Quiet TensorFlow's start-up chatter in test logs; set before TF is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# One XLA compilation cache for the whole run: its processes (both test
# processes, every command and worker script they start) compile the same tiny
# graphs again and again, a few seconds each. An entry's key is the compiled
# program and the traced function's name, so a hit returns what the compile
# would have built. The name carries a per-process counter: programs forked
# again with the same command hit, a second trainer in one process does not.
# The first test process to load this file (pytest's controller, before the
# xdist workers start) makes the directory; the others inherit the variable.
if XLA_CACHE_FLAG not in os.environ.get("TF_XLA_FLAGS", ""):
    _xla_cache = tempfile.mkdtemp(prefix="albert-tf-tests-xla-")
    os.environ["TF_XLA_FLAGS"] = f"{os.environ.get('TF_XLA_FLAGS', '')} {XLA_CACHE_FLAG}{_xla_cache}".strip()

    def pytest_unconfigure(config):
        shutil.rmtree(_xla_cache, ignore_errors=True)



# ---- Longest files first ---------------------------------------------------------------------
# pytest-xdist hands each test file whole to one of the two test processes, in collection order
# (pytest.ini turns off its own reordering by test count). Started first, the longest files do not
# leave one process working alone at the end: the quick loop took 199 s in xdist's order (most
# tests first) and 158-164 s in this one (2026-11-27, same tests, same machine). Seconds per file,
# summed from `--durations=0` of a full run (that day, main at 5d2c263); they only order the
# files, so they may age. A file not named here runs after these, in its usual place.
LONGEST_FILES = {
    "training/test_training_loop.py": 252, "commands/test_journeys.py": 243, "project/test_docs.py": 163,
    "training/test_faults.py": 154, "training/test_distributed_training.py": 126, "commands/test_demo.py": 91,
    "models/test_lora.py": 84, "commands/test_journeys_errors.py": 82, "models/test_keras_workflow.py": 75,
    "commands/test_cloud_storage.py": 73, "commands/test_journeys_precision.py": 72,
    "training/test_training.py": 72, "models/test_mixed_precision.py": 71, "training/test_preemption.py": 68,
    "export/test_export_tflite.py": 64, "commands/test_output_modes.py": 59,
    "export/test_export_saved_model.py": 56, "models/test_backbone.py": 51,
    "models/test_keras_archives.py": 50, "commands/test_quick_journey.py": 46,
    "pipeline/test_data_service.py": 42, "recipes/test_finetune_strategy.py": 39,
    "training/test_training_metrics.py": 37, "pipeline/test_dataset.py": 35, "models/test_task_models.py": 34,
    "commands/test_finetune_cli.py": 33, "export/test_export_bf16.py": 22, "export/test_convert.py": 21,
    "models/test_remat.py": 20, "models/test_hf_parity.py": 19, "commands/test_journeys_languages.py": 17,
    "pipeline/test_languages.py": 15, "pipeline/test_tokenizer.py": 14, "export/test_serving.py": 14,
    "training/test_optimizers.py": 13, "models/test_quantization.py": 13,
    "commands/test_error_protocol.py": 13, "project/test_bench.py": 12, "training/test_pretrainer.py": 10,
}


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    missing = [name for name in LONGEST_FILES if not (tests / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FILES names files that are gone: {missing}")
    items.sort(key=lambda item: -LONGEST_FILES.get(Path(os.path.relpath(item.path, tests)).as_posix(), 0))
