"""albert-tf: ALBERT (A Lite BERT) in TensorFlow 2 / Keras 3.

The public names load on first use (PEP 562): `import albert_tf` and the
command-line entry point stay light, and processes that only need part of the
package (data-writer workers, `albert-tf --help`) never load Keras or the models.
"""

from albert_tf import keras_registry
from albert_tf.utils.lazy import lazy_names

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    "AlbertConfig": "albert_tf.config",
    "PRESETS": "albert_tf.config",
    "AlbertBackbone": "albert_tf.models",
    "AlbertClassifier": "albert_tf.models",
    "AlbertMultiLabelClassifier": "albert_tf.models",
    "AlbertMultipleChoice": "albert_tf.models",
    "AlbertPreprocessor": "albert_tf.preprocessor",
    "AlbertPretrainer": "albert_tf.models",
    "AlbertQuestionAnswerer": "albert_tf.models",
    "AlbertRegressor": "albert_tf.models",
    "AlbertTagger": "albert_tf.models",
    "AlbertTokenizer": "input_pipeline.tokenizer",
    "FrozenForward": "albert_tf.inference",
    "export_saved_model": "albert_tf.export.saved_model",
    "export_tflite": "albert_tf.export.tflite",
    "load_pretrained": "albert_tf.loading",
    "save_pretrained": "albert_tf.models.pretrained",
}
# Submodules reached as attributes (`albert_tf.optimizers.AdamW`).
_SUBMODULES = ("albert_tf.optimizers", "albert_tf.schedules")

# `keras.models.load_model` then finds albert-tf's classes without importing them first.
keras_registry.register_when_keras_loads()

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS, _SUBMODULES)
