"""`.keras` archives of every albert-tf model load with `keras.models.load_model` in a fresh process
after `import albert_tf` alone (before or after `import keras`): the test process saves, fresh ones load.

Keras imports a class's module by itself only for its own packages (keras,
keras_hub, ...), so without `import albert_tf` the load fails; with it,
albert_tf.keras_registry resolves the names lazily.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

import keras_archive_worker
from albert_tf import keras_registry
from cli_helpers import user_environment
from source_scan import modules

pytestmark = pytest.mark.slow

WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_archive_worker.py")
CLASSES = ("AlbertBackbone", "AlbertPretrainer", "AlbertClassifier", "AlbertRegressor", "AlbertTagger",
           "AlbertQuestionAnswerer", "AlbertMultipleChoice", "AlbertMultiLabelClassifier")
ORDERS = ("albert_tf_first", "keras_first")


def _worker(*args):
    done = subprocess.run([sys.executable, WORKER, *args], capture_output=True, text=True, env=user_environment(),
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("archives"))
    keras_archive_worker.save(directory)  # the loads are the subject, each in a process of its own
    return directory


@pytest.fixture(scope="module", params=ORDERS)
def loaded(request, archives):
    _worker("load", archives, request.param)
    with open(os.path.join(archives, f"loaded-{request.param}.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("name", CLASSES)
def test_every_model_loads_in_a_fresh_process(loaded, name, lora):
    result = loaded[name + ("-lora" if lora else "")]
    assert result["class"] == name and result["diff"] <= 1e-5, result
    assert result["lora_rank"] == (2 if lora else None)


def test_archives_load_without_importing_the_models_first(loaded):
    assert not loaded["models_imported_before_load"]
    assert loaded["AlbertClassifier"]["optimizer"] == "albert_tf.optimizers.AdamW"


def test_raw_text_preprocessor_travels_in_the_archive(loaded):
    result = loaded["AlbertClassifier-preprocessor"]
    assert result["class"] == "AlbertClassifier" and result["preprocessor"] and result["diff"] <= 1e-5, result


def test_every_registered_class_is_known_to_the_registry(loaded):
    decorated = set()
    for path in modules("albert_tf"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                "register_keras_serializable" in ast.unparse(d) for d in node.decorator_list
            ):
                decorated.add(node.name)
    assert decorated == set(keras_registry.SERIALIZABLE)
    # Importing DEFINING_MODULES (what a stand-in does) registered every one of them.
    assert loaded["registered"] == sorted(f"albert_tf>{n}" for n in decorated)
