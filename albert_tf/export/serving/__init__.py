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

from albert_tf.utils.lazy import lazy_names

# Public name -> module that defines it.
_EXPORTS = {
    "DEFAULT_MAX_BATCH_SIZE": "albert_tf.export.batching_parameters",
    "RequestError": "albert_tf.export.serving.codec",
    "ServingModel": "albert_tf.export.serving.model",
    "DEFAULT_MAX_BODY_BYTES": "albert_tf.export.serving.server",
    "ModelServer": "albert_tf.export.serving.server",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
