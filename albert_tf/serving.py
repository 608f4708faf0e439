"""A local server for TF-Serving's REST API, backed by the same SavedModel.

It answers the subset of the API a client of `tensorflow/serving` uses, with the
same request and response formats, so requests can be written and tested here
and sent unchanged to the real server:

    GET  /v1/models/NAME                       version status
    GET  /v1/models/NAME[/versions/V]/metadata signature defs
    POST /v1/models/NAME[/versions/V]:predict  {"signature_name": ..., "instances": [...]}
                                               or {"signature_name": ..., "inputs": {...}}

Row format ("instances") answers {"predictions": [...]}, columnar ("inputs")
answers {"outputs": ...}; with one output the name is dropped, as TF-Serving
does. Strings go in and out as JSON strings (or {"b64": ...} in).

Bad requests (malformed JSON, unknown or missing input names, wrong dtypes or
shapes, too many rows, bodies over the size limit, inputs the model's in-graph
checks reject) get HTTP 400 with {"error": "..."}; unknown models or paths get
404. A failing request never stops the server. It serves the highest version
under the base path, loaded at start (no hot reload, no batching, no gRPC:
use TF-Serving for production).

Uses only the standard library's `http.server` next to TensorFlow.
"""

import base64
import json
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from albert_tf.export.saved_model import version_dirs

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BATCH_SIZE = 256
_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?(?P<rest>/metadata|:\w+)?$")


class RequestError(Exception):
    """A request the server refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message, status=HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.message = message
        self.status = int(status)


class ServingModel:
    """The highest version of a TF-Serving model directory, ready to answer requests.

    Args:
        base_path: the directory holding numbered versions (`1/`, `2/`, ...).
        name: the model name in request paths; default: the directory's name.
        max_batch_size: most rows a request may hold.
    """

    def __init__(self, base_path, name=None, max_batch_size=DEFAULT_MAX_BATCH_SIZE):
        import os

        import tensorflow as tf

        versions = version_dirs(base_path)
        if not versions:
            raise ValueError(
                f"{base_path} holds no numbered SavedModel version (e.g. {base_path}/1/). "
                "Write one with `albert-tf export --format saved_model`."
            )
        self.name = name or os.path.basename(os.path.normpath(base_path))
        self.version = versions[-1]
        self.max_batch_size = int(max_batch_size)
        self._loaded = tf.saved_model.load(os.path.join(base_path, str(self.version)))
        self.signatures = dict(self._loaded.signatures)
        self.input_specs = {
            name: fn.structured_input_signature[1] for name, fn in self.signatures.items()
        }

    # ---- status and metadata -----------------------------------------------------------

    def status(self):
        return {"model_version_status": [{
            "version": str(self.version),
            "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""},
        }]}

    def metadata(self):
        def tensor_info(spec, tensor_name):
            dims = [{"size": str(-1 if d is None else d), "name": ""} for d in spec.shape.as_list()]
            return {
                "dtype": "DT_" + spec.dtype.name.upper(),
                "tensor_shape": {"dim": dims, "unknown_rank": False},
                "name": tensor_name,
            }

        defs = {}
        for name, fn in self.signatures.items():
            outputs = fn.structured_outputs
            defs[name] = {
                "inputs": {n: tensor_info(s, f"{name}_{n}:0") for n, s in self.input_specs[name].items()},
                "outputs": {
                    n: tensor_info(_spec_of(t), f"StatefulPartitionedCall:{i}")
                    for i, (n, t) in enumerate(sorted(outputs.items()))
                },
                "method_name": "tensorflow/serving/predict",
            }
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": defs}},
        }

    # ---- predict ----------------------------------------------------------------------

    def predict(self, request):
        """Answers a decoded predict request (a dict) as TF-Serving would.

        Raises:
            RequestError: for anything wrong with the request.
        """
        import tensorflow as tf

        if not isinstance(request, dict):
            raise RequestError(f"The request body must be a JSON object. Received: {type(request).__name__}")
        unknown = sorted(set(request) - {"signature_name", "instances", "inputs"})
        if unknown:
            raise RequestError(f"Unknown request keys {unknown}; expected 'signature_name' and 'instances' or 'inputs'.")
        signature_name = request.get("signature_name", "serving_default")
        if signature_name not in self.signatures:
            raise RequestError(
                f"Serving signature name: \"{signature_name}\" not found in signature def. "
                f"Available: {sorted(self.signatures)}"
            )
        specs = self.input_specs[signature_name]
        if ("instances" in request) == ("inputs" in request):
            raise RequestError("The request must have exactly one of 'instances' (row format) or 'inputs' (columnar format).")
        row_format = "instances" in request
        values = _rows_to_columns(request["instances"], specs) if row_format else _columns(request["inputs"], specs)
        arrays = {name: _to_array(values[name], specs[name], name) for name in specs}
        batch_sizes = {a.shape[0] if a.ndim else None for a in arrays.values()}
        if len(batch_sizes) > 1:
            raise RequestError(f"All inputs must have the same batch size (first dimension). Received: { {n: a.shape for n, a in arrays.items()} }")
        batch = batch_sizes.pop()
        if batch is not None and batch > self.max_batch_size:
            raise RequestError(f"The request has {batch} rows; at most max_batch_size={self.max_batch_size} are accepted.")
        try:
            outputs = self.signatures[signature_name](**{n: tf.constant(a) for n, a in arrays.items()})
        except tf.errors.InvalidArgumentError as e:
            raise RequestError(_clean_tf_error(e.message)) from e
        except tf.errors.OpError as e:
            raise RequestError(_clean_tf_error(e.message), HTTPStatus.INTERNAL_SERVER_ERROR) from e
        outputs = {name: _to_json(value.numpy()) for name, value in outputs.items()}
        if row_format:
            names = sorted(outputs)
            rows = len(outputs[names[0]])
            if len(names) == 1:
                return {"predictions": outputs[names[0]]}
            return {"predictions": [{n: outputs[n][i] for n in names} for i in range(rows)]}
        if len(outputs) == 1:
            return {"outputs": next(iter(outputs.values()))}
        return {"outputs": outputs}


def _spec_of(tensor):
    import tensorflow as tf

    return tf.TensorSpec(tensor.shape, tensor.dtype)


def _rows_to_columns(instances, specs):
    if not isinstance(instances, list) or not instances:
        raise RequestError("'instances' must be a non-empty list, one entry per example.")
    names = list(specs)
    columns = {name: [] for name in names}
    for i, instance in enumerate(instances):
        if isinstance(instance, dict):
            missing = [n for n in names if n not in instance]
            extra = sorted(set(instance) - set(names))
            if missing or extra:
                raise RequestError(
                    f"Failed to process element: {i} of 'instances' list. JSON object: "
                    + (f"does not have named input(s): {missing}. " if missing else "")
                    + (f"has unknown input(s): {extra}. " if extra else "")
                    + f"Expected inputs: {names}"
                )
            for n in names:
                columns[n].append(instance[n])
        elif len(names) == 1:
            columns[names[0]].append(instance)
        else:
            raise RequestError(
                f"Failed to process element: {i} of 'instances' list. Expected a JSON object "
                f"with the named inputs {names}."
            )
    return columns


def _columns(inputs, specs):
    names = list(specs)
    is_b64_value = isinstance(inputs, dict) and set(inputs) == {"b64"}
    if isinstance(inputs, dict) and not is_b64_value:
        missing = [n for n in names if n not in inputs]
        extra = sorted(set(inputs) - set(names))
        if missing or extra:
            raise RequestError(
                "'inputs' "
                + (f"does not have named input(s): {missing}. " if missing else "")
                + (f"has unknown input(s): {extra}. " if extra else "")
                + f"Expected inputs: {names}"
            )
        return inputs
    if len(names) == 1:
        return {names[0]: inputs}
    raise RequestError(f"'inputs' must be a JSON object with the named inputs {names}.")


def _to_array(value, spec, name):
    """A JSON value -> numpy array of the spec's dtype and a compatible shape."""
    import numpy as np
    import tensorflow as tf

    shape, leaves = _shape_and_leaves(value, name)
    if spec.dtype == tf.string:
        converted = [_to_bytes(leaf, name) for leaf in leaves]
        array = np.array(converted, dtype=object).reshape(shape)
    elif spec.dtype.is_integer:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in leaves):
            bad = next(v for v in leaves if not isinstance(v, int) or isinstance(v, bool))
            raise RequestError(f"Input `{name}` must hold integers ({spec.dtype.name}). Received the value {json.dumps(bad)[:50]}")
        info = np.iinfo(spec.dtype.as_numpy_dtype)
        if leaves and not (info.min <= min(leaves) and max(leaves) <= info.max):
            raise RequestError(f"Input `{name}` holds values outside the {spec.dtype.name} range.")
        array = np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
    elif spec.dtype.is_floating:
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in leaves):
            raise RequestError(f"Input `{name}` must hold numbers ({spec.dtype.name}).")
        array = np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
    else:
        raise RequestError(f"Input `{name}` has dtype {spec.dtype.name}, which this server does not accept.")
    if not spec.shape.is_compatible_with(array.shape):
        expected = tuple(-1 if d is None else d for d in spec.shape.as_list())
        raise RequestError(
            f"Input `{name}` must have shape {expected} (-1: any size; the first dimension is "
            f"the batch). Received shape {array.shape}."
        )
    return array


def _shape_and_leaves(value, name):
    """Shape of a nested JSON list and its leaves in row-major order; ragged lists are an error."""
    if isinstance(value, list):
        if not value:
            return (0,), []
        parts = [_shape_and_leaves(v, name) for v in value]
        inner = parts[0][0]
        if any(p[0] != inner for p in parts):
            raise RequestError(f"Input `{name}` is ragged: its lists have different lengths. Pad them to one length.")
        return (len(value),) + inner, [leaf for p in parts for leaf in p[1]]
    if isinstance(value, dict) and set(value) != {"b64"}:
        raise RequestError(f"Input `{name}` holds a JSON object; expected numbers, strings or {{\"b64\": ...}}.")
    return (), [value]


def _to_bytes(value, name):
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError) as e:
            raise RequestError(f"Input `{name}` has invalid base64: {e}") from e
    raise RequestError(f"Input `{name}` must hold strings. Received the value {json.dumps(value)[:50]}")


def _to_json(array):
    """A numpy output -> JSON-able nested lists; tf.string bytes become str."""
    def decode(value):
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    return decode(array.tolist())


def _clean_tf_error(message):
    """The useful part of a TF runtime error: the failed assertion, without graph node noise."""
    match = re.search(r"assertion failed: (.*?)(?:\n|$)", message)
    if match:
        return match.group(1).strip()
    return message.split("\n\t [[")[0].strip()


class _Handler(BaseHTTPRequestHandler):
    server_version = "albert-tf-serving"
    timeout = 60  # seconds a client may take to send its request

    def log_message(self, fmt, *args):
        if self.server.log_requests:
            super().log_message(fmt, *args)

    def _answer(self, status, body):
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method):
        match = _PATH.match(self.path)
        if not match:
            raise RequestError(f"Malformed request: {method} {self.path}", HTTPStatus.NOT_FOUND)
        model = self.server.model
        version = match.group("version")
        if match.group("name") != model.name or (version is not None and int(version) != model.version):
            spec = f"{match.group('name')}" + (f" version {version}" if version else "")
            raise RequestError(
                f"Servable not found for request: {spec} (this server has {model.name} version {model.version})",
                HTTPStatus.NOT_FOUND,
            )
        return match.group("rest")

    def do_GET(self):
        try:
            rest = self._route("GET")
            if rest is None:
                return self._answer(HTTPStatus.OK, self.server.model.status())
            if rest == "/metadata":
                return self._answer(HTTPStatus.OK, self.server.model.metadata())
            raise RequestError(f"Malformed request: GET {self.path}", HTTPStatus.NOT_FOUND)
        except RequestError as e:
            self._answer(e.status, {"error": e.message})
        except Exception as e:  # noqa: BLE001 - a bug must not take the server down
            self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})

    def do_POST(self):
        try:
            rest = self._route("POST")
            if rest != ":predict":
                raise RequestError(
                    f"Malformed request: POST {self.path} (only :predict is supported here)",
                    HTTPStatus.NOT_FOUND if rest is None else HTTPStatus.BAD_REQUEST,
                )
            request = json.loads(self._read_body())
            self._answer(HTTPStatus.OK, self.server.model.predict(request))
        except json.JSONDecodeError as e:
            self._answer(HTTPStatus.BAD_REQUEST, {"error": f"JSON Parse error: {e}"})
        except UnicodeDecodeError as e:
            self._answer(HTTPStatus.BAD_REQUEST, {"error": f"The request body is not UTF-8: {e}"})
        except RequestError as e:
            self._answer(e.status, {"error": e.message})
        except Exception as e:  # noqa: BLE001 - a bug must not take the server down
            self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})

    def _read_body(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise RequestError("The request needs a Content-Length header (chunked bodies are not supported).")
        length = int(length)
        if length > self.server.max_body_bytes:
            # Not read: close the connection instead of draining a huge body.
            self.close_connection = True
            raise RequestError(
                f"The request body has {length} bytes; at most {self.server.max_body_bytes} are accepted."
            )
        return self.rfile.read(length).decode("utf-8")


class ModelServer(ThreadingHTTPServer):
    """A `ThreadingHTTPServer` answering TF-Serving REST requests for one `ServingModel`.

    `server_address[1]` is the bound port (pass port 0 for a free one). Run it
    with `serve_forever()` (blocking) or `start()` (a daemon thread); stop it
    with `shutdown()` then `server_close()`.
    """

    daemon_threads = True

    def __init__(self, model, host="127.0.0.1", port=8501, max_body_bytes=DEFAULT_MAX_BODY_BYTES,
                 log_requests=False):
        self.model = model
        self.max_body_bytes = int(max_body_bytes)
        self.log_requests = log_requests
        super().__init__((host, port), _Handler)

    @property
    def url(self):
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1/models/{self.model.name}"

    def start(self):
        thread = threading.Thread(target=self.serve_forever, name="albert-tf-serving", daemon=True)
        thread.start()
        return thread
