"""A local server for TF-Serving's REST API, backed by the same SavedModel.

It answers the subset of the API a client of `tensorflow/serving` uses, with
the same request and response formats, so requests can be written and tested
here and sent unchanged to the real server. `codec` turns bodies into inputs
and outputs into bodies (no sockets), `model` loads the SavedModel and
answers decoded requests, `server` speaks HTTP.
"""

from albert_tf.export.serving.codec import DEFAULT_MAX_BATCH_SIZE, RequestError
from albert_tf.export.serving.model import ServingModel
from albert_tf.export.serving.server import DEFAULT_MAX_BODY_BYTES, ModelServer
