"""albert-tf: ALBERT (A Lite BERT) in TensorFlow 2 / Keras 3.

The public names are imported on first use, so `import albert_tf` (and the
`albert-tf` command's start) does not load TensorFlow before the command line
has configured its logging.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "optimizers": "albert_tf.optimizers",
    "schedules": "albert_tf.schedules",
    "PRESETS": "albert_tf.config",
    "AlbertConfig": "albert_tf.config",
    "AlbertBackbone": "albert_tf.models",
    "AlbertClassifier": "albert_tf.models",
    "AlbertMultipleChoice": "albert_tf.models",
    "AlbertPretrainer": "albert_tf.models",
    "AlbertQuestionAnswerer": "albert_tf.models",
    "AlbertRegressor": "albert_tf.models",
    "AlbertTagger": "albert_tf.models",
    "load_pretrained": "albert_tf.saving",
    "save_pretrained": "albert_tf.saving",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'albert_tf' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    value = module if module.__name__ == f"albert_tf.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
