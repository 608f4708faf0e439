"""The package arrows: albert_tf depends on input_pipeline, never the other way round."""

import ast
import os
import subprocess
import sys

from source_scan import ROOT, imports as _imports, modules as _modules


def _package(name):
    return name.split(".")[0]


def test_input_pipeline_never_imports_albert_tf():
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _modules("input_pipeline")
        for name, _ in _imports(ast.parse(path.read_text()))
        if _package(name) == "albert_tf"
    ]
    assert not offenders, offenders


def test_albert_tf_imports_input_pipeline_at_module_level():
    # An import hidden inside a function hides the direction of the arrow and
    # moves import errors from load time to the middle of a run.
    offenders = [
        f"{path.relative_to(ROOT)} imports {name} inside a function"
        for path in _modules("albert_tf")
        for name, top_level in _imports(ast.parse(path.read_text()))
        if _package(name) == "input_pipeline" and not top_level
    ]
    assert not offenders, offenders


def _loaded_after(statement):
    script = f"import sys\n{statement}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True, cwd=ROOT
    )
    return set(result.stdout.split())


def test_tokenizer_and_data_writing_load_no_keras():
    # create-data workers import these (the writer's worker functions live in
    # input_pipeline.pretraining.tfrecord_shards); TensorFlow and Keras would cost each spawned
    # worker seconds of start-up and ~800 MB.
    loaded = _loaded_after("import input_pipeline.tokenizer, input_pipeline.pretraining.examples, input_pipeline.pretraining.tfrecord_shards")
    assert not loaded & {"keras", "tensorflow", "albert_tf"}, loaded & {"keras", "tensorflow", "albert_tf"}


def test_importing_albert_tf_loads_no_models():
    loaded = _loaded_after("import albert_tf, albert_tf.cli")
    assert "keras" not in loaded and "tensorflow" not in loaded
