"""A local server for TF-Serving's REST API, backed by the same SavedModel.

It answers the subset of the API a client of `tensorflow/serving` uses, with
the same request and response formats, so requests can be written and tested
here and sent unchanged to the real server. `codec` turns bodies into inputs
and outputs into bodies (no sockets), `model` loads the SavedModel and
answers decoded requests, `server` speaks HTTP.

The names load on first use (PEP 562): `codec` and `server` need no
TensorFlow, and `albert-tf serve` reads its flags' defaults from them before
TensorFlow loads.
"""

import importlib

# Public name -> module that defines it.
_EXPORTS = {
    "DEFAULT_MAX_BATCH_SIZE": "albert_tf.export.serving.codec",
    "RequestError": "albert_tf.export.serving.codec",
    "ServingModel": "albert_tf.export.serving.model",
    "DEFAULT_MAX_BODY_BYTES": "albert_tf.export.serving.server",
    "ModelServer": "albert_tf.export.serving.server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
