"""What a light import loads: the command line, the tokenizer and the data writers start without Keras.

The floors themselves (which module may import which) are checked in
tests/project/test_import_floors.py against docs/architecture.md.
"""

import os
import subprocess
import sys

from source_scan import ROOT


def _run(script):
    """What `python -c SCRIPT` prints, in a new process from the checkout; fails the test if it fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _loaded_after(statement, depth=None):
    """The names of the modules loaded after `statement`, cut to their first `depth` parts."""
    return set(_run(f"import sys\n{statement}\n"
                    f"print(' '.join(sorted({{'.'.join(m.split('.')[:{depth}]) for m in sys.modules}})))").split())


def test_tokenizer_and_data_writing_load_no_keras():
    # create-data workers import these (the writer's worker functions live in
    # input_pipeline.pretraining.tfrecord_shards); TensorFlow and Keras would cost each spawned
    # worker seconds of start-up and ~800 MB.
    # Of albert_tf they load the ground floor alone: the utilities and the package's light __init__.
    loaded = _loaded_after("import input_pipeline.tokenizer, input_pipeline.pretraining.examples, "
                           "input_pipeline.pretraining.tfrecord_shards", depth=2)
    assert not loaded & {"keras", "tensorflow"}, loaded & {"keras", "tensorflow"}
    of_albert_tf = {m for m in loaded if m.split(".")[0] == "albert_tf"}
    assert of_albert_tf <= {"albert_tf", "albert_tf.utils", "albert_tf.keras_registry"}, of_albert_tf


def test_reading_a_tokenizer_loads_no_keras_and_no_models(tmp_path):
    # `albert-tf create-data` reads the tokenizer this way; its workers must
    # not pay for Keras, the models or the converter.
    from data_fixtures import small_tokenizer

    small_tokenizer().save(str(tmp_path / "tokenizer"))
    loaded = _loaded_after(
        "from albert_tf import model_dirs\n"
        "from input_pipeline import AlbertTokenizer\n"
        f"model_dirs.load_tokenizer({str(tmp_path / 'tokenizer')!r})\n"
        f"model_dirs.find_tokenizer({str(tmp_path)!r})\n"
        f"AlbertTokenizer.load({str(tmp_path / 'tokenizer')!r})")
    heavy = sorted(m for m in loaded if m == "keras" or m.startswith(("albert_tf.models", "albert_tf.convert")))
    assert not heavy, heavy


PUBLIC_NAMES = (
    "AlbertTokenizer", "AlbertPreprocessor", "AlbertConfig", "AlbertBackbone", "AlbertPretrainer",
    "AlbertClassifier", "AlbertRegressor", "AlbertTagger", "AlbertQuestionAnswerer", "AlbertMultipleChoice",
    "load_pretrained", "save_pretrained", "export_saved_model", "export_tflite",
)


def test_one_public_import_and_it_stays_light():
    # `import albert_tf` and the command line (`--help`, data workers) load neither Keras nor
    # TensorFlow; each public name loads its module on first use.
    assert _run(
        "import sys\n"
        "import albert_tf, albert_tf.cli\n"
        "assert not {'keras', 'tensorflow'} & set(sys.modules), sorted({'keras', 'tensorflow'} & set(sys.modules))\n"
        f"from albert_tf import {', '.join(PUBLIC_NAMES)}\n"
        "from albert_tf.models import AlbertBackbone as backbone_class\n"
        "from input_pipeline.tokenizer import AlbertTokenizer as tokenizer_class\n"
        "assert AlbertBackbone is backbone_class and AlbertTokenizer is tokenizer_class\n"
        f"missing = set({PUBLIC_NAMES!r}) - set(albert_tf.__all__)\n"
        "assert not missing, missing\n"
        "print('ok')\n").strip() == "ok"
