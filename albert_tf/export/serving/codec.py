"""TF-Serving's REST formats: request bodies -> numpy inputs, outputs -> JSON, with validation.

Nothing here touches a socket or a model: a request is checked against the
signature's input specs (`tf.TensorSpec`s) and every problem raises a
`RequestError` carrying the HTTP status to answer with.

Request (`POST ...:predict`):
    {"signature_name": S, "instances": [...]}   row format: one entry per example
    {"signature_name": S, "inputs": {...}}      columnar format: one value per input
Strings are JSON strings or {"b64": "..."}.

Response: row format -> {"predictions": [...]}, columnar -> {"outputs": ...};
with a single output its name is dropped, as TF-Serving does. An error is
{"error": "one line"} (tensorflow_serving/util/json_tensor.cc:
MakeJsonFromStatus), with the HTTP status TF-Serving maps its status code to
(tensorflow_serving/model_servers/http_server.cc: ToHTTPStatusCode): every
malformed request is 400, never 500.

Classify and regress (`POST ...:classify`, `...:regress`):
    {"signature_name": S, "context": {...}, "examples": [{"text": "..."}, ...]}
Each example is a tf.Example's features: a string (or {"b64": ...}) is a
bytes feature, an integer an int64 one, a number a float one, a list of
one kind a feature of that many values; `context`'s features are in every
example (an example's own win). Responses: classify
{"results": [[["label", score], ...], ...]}, regress {"results": [v, ...]}.
"""

import base64
import json
import re
from http import HTTPStatus

from albert_tf.export.batching_parameters import DEFAULT_MAX_BATCH_SIZE, task_too_large
from albert_tf.export.signature_names import ID_SIGNATURE, TEXT_SIGNATURE
# A predict body nests at most: object, "instances" list, row object, then the
# input's own dimensions (rank <= 3 here). 32 leaves room and stops a body
# nested thousands deep before anything recurses over it.
MAX_JSON_DEPTH = 32


class RequestError(Exception):
    """A request the server refuses.

    Args:
        message: the text of the answer's `error` field.
        status: the HTTP status to answer with.
        headers: extra (name, value) response headers, e.g. 405's `Allow`.
    """

    def __init__(self, message, status=HTTPStatus.BAD_REQUEST, headers=()):
        super().__init__(message)
        self.message = message
        self.status = int(status)
        self.headers = tuple(headers)


def decode_json(body, max_depth=MAX_JSON_DEPTH):
    """A request body (bytes) -> the JSON value it holds.

    Raises:
        RequestError (400): the body is not UTF-8, not JSON, or nested deeper
            than `max_depth` lists/objects.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"The request body is not UTF-8: {e}") from e
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise RequestError(f"JSON Parse error: {e}") from e
    except RecursionError as e:
        raise RequestError(f"JSON Parse error: the body nests lists/objects more than {max_depth} deep.") from e
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise RequestError(f"JSON Parse error: {e}") from e
    depth = json_depth(value)
    if depth > max_depth:
        raise RequestError(
            f"JSON Parse error: the body nests lists/objects {depth} deep; at most {max_depth} are accepted."
        )
    return value


def json_depth(value):
    """Nesting depth of lists/objects in a decoded JSON value (a scalar is 0); no recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_predict(request, input_specs, max_batch_size=DEFAULT_MAX_BATCH_SIZE):
    """Checks a decoded predict request and converts its inputs.

    Args:
        request: the decoded JSON body.
        input_specs: signature name -> {input name -> `tf.TensorSpec`}.
        max_batch_size: most rows a request may hold.

    Returns:
        (signature_name, arrays, row_format): arrays maps every input name to a
        numpy array of the spec's dtype and a compatible shape (batch, ...).

    Raises:
        RequestError: for anything wrong with the request.
    """
    signature_name = _signature_name(request, {"instances", "inputs"}, "'signature_name' and 'instances' or 'inputs'",
                                     input_specs)
    specs = input_specs[signature_name]
    if ("instances" in request) == ("inputs" in request):
        raise RequestError("The request must have exactly one of 'instances' (row format) or 'inputs' (columnar format).")
    row_format = "instances" in request
    values = _rows_to_columns(request["instances"], specs) if row_format else _columns(request["inputs"], specs)
    # Before any conversion: a body of many rows costs its size in Python objects, not a copy per row.
    _check_batch_size(max((len(v) for v in values.values() if isinstance(v, list)), default=None), max_batch_size)
    try:
        arrays = {name: to_array(values[name], specs[name], name) for name in specs}
    except RequestError as e:
        if signature_name == ID_SIGNATURE and TEXT_SIGNATURE in input_specs and _holds_text(values):
            e.message += (f' Raw text goes to the text signature: "signature_name": "{TEXT_SIGNATURE}" '
                          '(it tokenizes in the model).')
        raise
    batch_sizes = {a.shape[0] if a.ndim else None for a in arrays.values()}
    if len(batch_sizes) > 1:
        shapes = {n: a.shape for n, a in arrays.items()}
        raise RequestError(f"All inputs must have the same batch size (first dimension). Received: {shapes}")
    return signature_name, arrays, row_format


def _holds_text(values):
    """Whether the first leaf of any input's value is a JSON string."""
    for value in values.values():
        while isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, str):
            return True
    return False


def parse_examples(request, method_names, method, max_batch_size=DEFAULT_MAX_BATCH_SIZE):
    """Checks a decoded classify or regress request; returns (signature_name, serialized tf.Examples).

    Args:
        request: the decoded JSON body.
        method_names: signature name -> its SignatureDef method name.
        method: the method the API needs, e.g. "tensorflow/serving/classify".
        max_batch_size: most examples a request may hold.

    Raises:
        RequestError (400): anything wrong with the request, a signature of another method included.
    """
    signature_name = _signature_name(request, {"examples", "context"}, "'signature_name', 'context' and 'examples'",
                                     method_names)
    if method_names[signature_name] != method:
        api = method.rsplit("/", 1)[-1]
        raise RequestError(f"Expected {api} signature method_name to be {method}. Was: {method_names[signature_name]}"
                           f" (signature {signature_name}; the {api} signatures: "
                           f"{sorted(n for n, m in method_names.items() if m == method)})")
    examples, context = request.get("examples"), request.get("context", {})
    if not isinstance(examples, list) or not examples:
        raise RequestError("'examples' must be a non-empty list of JSON objects, one per tf.Example.")
    if not isinstance(context, dict):
        raise RequestError("'context' must be a JSON object of features.")
    _check_batch_size(len(examples), max_batch_size)
    serialized = []
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            raise RequestError(f"Failed to process element: {i} of 'examples' list. Expected a JSON object of "
                               f"features. Received the value {_shown(example)}")
        serialized.append(to_example({**context, **example}, i))
    return signature_name, serialized


def _signature_name(request, keys, expected, signatures):
    """The signature a decoded request names ("serving_default" when none), after the checks every API shares.

    Args:
        request: the decoded JSON body.
        keys: the request keys the API reads besides "signature_name".
        expected: how an error names those keys.
        signatures: the signature names the API may run.

    Raises:
        RequestError (400): the body is no JSON object, has another key, or
            names no signature of `signatures`.
    """
    if not isinstance(request, dict):
        raise RequestError(f"The request body must be a JSON object. Received: {type(request).__name__}")
    unknown = sorted(set(request) - {"signature_name", *keys})
    if unknown:
        raise RequestError(f"Unknown request keys {unknown}; expected {expected}.")
    signature_name = request.get("signature_name", ID_SIGNATURE)
    if not isinstance(signature_name, str) or signature_name not in signatures:
        raise RequestError(
            f"Serving signature name: {json.dumps(signature_name)} not found in signature def. "
            f"Available: {sorted(signatures)}"
        )
    return signature_name


def _check_batch_size(size, max_batch_size):
    """Refuses a request of more than `max_batch_size` rows as TF-Serving's batch queue does; None: no batch."""
    if size is not None and size > max_batch_size:
        raise RequestError(task_too_large(size, max_batch_size))


def to_example(features, index=0):
    """A JSON object of features -> a serialized tf.Example (TF-Serving's REST mapping)."""
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example()
    for name, value in features.items():
        values = value if isinstance(value, list) else [value]
        where = f"Feature {_shown(name)} of element {index} of 'examples'"
        _check_text(name, where + ": its name")
        feature = example.features.feature[name]
        if all(isinstance(v, str) or (isinstance(v, dict) and set(v) == {"b64"}) for v in values):
            feature.bytes_list.value.extend(_to_bytes(v, name) for v in values)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            if any(not -2**63 <= v < 2**63 for v in values):
                raise RequestError(f"{where} holds an integer outside the int64 range.")
            feature.int64_list.value.extend(values)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            try:
                feature.float_list.value.extend(values)
            except OverflowError:
                raise RequestError(f"{where} holds a number outside the float range.") from None
        else:
            raise RequestError(f"{where} must be a string, {{\"b64\": ...}}, a number or a list of one kind of "
                               f"them. Received the value {_shown(value)}")
    return example.SerializeToString()


def encode_classify(classes, scores):
    """Classify outputs (batch, classes) of labels (bytes) and scores -> {"results": [[[label, score], ...], ...]}."""
    return {"results": [[[label, score] for label, score in zip(row_labels, row_scores)]
                        for row_labels, row_scores in zip(_to_json(classes), _to_json(scores))]}


def encode_regress(outputs):
    """Regress outputs (batch,) or (batch, 1) -> {"results": [v, ...]}."""
    return {"results": [float(v) for v in outputs.reshape(-1)]}


def encode_outputs(outputs, row_format):
    """A signature's outputs (name -> numpy array, batch first) -> the response body."""
    outputs = {name: _to_json(value) for name, value in outputs.items()}
    if row_format:
        names = sorted(outputs)
        if len(names) == 1:
            return {"predictions": outputs[names[0]]}
        rows = len(outputs[names[0]])
        return {"predictions": [{n: outputs[n][i] for n in names} for i in range(rows)]}
    if len(outputs) == 1:
        return {"outputs": next(iter(outputs.values()))}
    return {"outputs": outputs}


def to_array(value, spec, name):
    """A JSON value -> numpy array of `spec`'s dtype and a shape compatible with it.

    Raises:
        RequestError (400): wrong element type, values out of the dtype's
            range, ragged lists, invalid strings, or an incompatible shape.
    """
    import numpy as np
    import tensorflow as tf

    shape, leaves = _shape_and_leaves(value, name)
    if spec.dtype == tf.string:
        array = np.array([_to_bytes(leaf, name) for leaf in leaves], dtype=object).reshape(shape)
    elif spec.dtype.is_integer:
        bad = next((i for i, v in enumerate(leaves) if not isinstance(v, int) or isinstance(v, bool)), None)
        if bad is not None:
            raise RequestError(
                f"Input `{name}` must hold integers ({spec.dtype.name}). Received the value {_shown(leaves[bad])}"
            )
        info = np.iinfo(spec.dtype.as_numpy_dtype)
        if leaves and not (info.min <= min(leaves) and max(leaves) <= info.max):
            raise RequestError(f"Input `{name}` holds values outside the {spec.dtype.name} range.")
        array = np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
    elif spec.dtype.is_floating:
        bad = next((i for i, v in enumerate(leaves) if not isinstance(v, (int, float)) or isinstance(v, bool)),
                   None)
        if bad is not None:
            raise RequestError(
                f"Input `{name}` must hold numbers ({spec.dtype.name}). Received the value {_shown(leaves[bad])}"
            )
        try:
            array = np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
        except OverflowError:
            raise RequestError(f"Input `{name}` holds a number outside the {spec.dtype.name} range.") from None
    else:
        raise RequestError(f"Input `{name}` has dtype {spec.dtype.name}, which this server does not accept.")
    if not spec.shape.is_compatible_with(array.shape):
        expected = tuple(-1 if d is None else d for d in spec.shape.as_list())
        raise RequestError(
            f"Input `{name}` must have shape {expected} (-1: any size; the first dimension is "
            f"the batch). Received shape {array.shape}."
        )
    return array


def clean_tf_error(message):
    """A TF runtime error as one line: the failed check's own message, without TF's dump of it.

    tf.debugging's assertions fail with "[MESSAGE] [Condition x > 0 did not
    hold element-wise:] [x (sub:0) = ] [3 0]" plus graph node names: only
    MESSAGE says what was wrong. A message ending in ":" (tf.debugging.Assert's
    "... received shape:") keeps the value that follows it; a failed
    "x > 0" whose values are all shown names the rows that failed it.
    """
    match = re.search(r"assertion failed: (.*?)(?:\n|$)", message)
    # Other errors: the op's own line, without the "Graph execution error: Detected at node ..." lines before it.
    text = match.group(1).strip() if match else message.split("\n\t [[")[0].strip().splitlines()[-1].strip()
    parts = re.findall(r"\[([^\[\]]*)\]", text)
    if not text.startswith("[") or not parts:
        return text
    first = parts[0].strip().rstrip(".")
    if first.endswith(":") and len(parts) > 1:
        return f"{first} [{parts[1].strip()}]"
    rows = _failed_rows(parts) if len(parts) > 3 and parts[1].startswith("Condition x > 0") else None
    if rows:
        first += f" (row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows))} of the request)"
    return first + "."


def _failed_rows(parts):
    """The indices of the values <= 0 in "[x (name) = ] [3 0]", or None when TF shortened them ("...")."""
    try:
        values = [int(v) for v in parts[3].split()]
    except ValueError:
        return None
    return [i for i, v in enumerate(values) if v <= 0]


def _rows_to_columns(instances, specs):
    if not isinstance(instances, list) or not instances:
        raise RequestError("'instances' must be a non-empty list, one entry per example.")
    names = list(specs)
    columns = {name: [] for name in names}
    for i, instance in enumerate(instances):
        if isinstance(instance, dict) and set(instance) != {"b64"}:
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
    if isinstance(inputs, dict) and set(inputs) != {"b64"}:
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


def _shape_and_leaves(value, name):
    """Shape of a nested JSON list and its leaves in row-major order; ragged lists are an error.

    Recursion depth is the list nesting, which `decode_json` bounds.
    """
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


def _check_text(value, where):
    """`value` (a str) as UTF-8 bytes; a lone surrogate is a RequestError naming `where`.

    JSON's \\uD800-style escapes decode to lone surrogates, which no UTF-8 text
    holds; the model's string ops and protobuf's strings would reject them anyway.
    """
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = value[e.start:e.end].encode("unicode_escape").decode("ascii")
        raise RequestError(f"{where} holds a lone surrogate ({bad}) at character {e.start}: not valid Unicode "
                           "text.") from e


def _to_bytes(value, name):
    if isinstance(value, str):
        return _check_text(value, f"Input `{name}`")
    if isinstance(value, dict):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError) as e:
            raise RequestError(f"Input `{name}` has invalid base64: {e}") from e
    raise RequestError(f"Input `{name}` must hold strings. Received the value {_shown(value)}")


def _shown(value):
    """A received JSON value as the error repeats it: JSON text (null, true, ...), at most 50 characters."""
    return json.dumps(value)[:50]


def _to_json(array):
    """A numpy output -> JSON-able nested lists; tf.string bytes become str."""
    def decode(value):
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    return decode(array.tolist())
