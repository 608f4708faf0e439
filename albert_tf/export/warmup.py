"""TF-Serving's warmup records: `assets.extra/tf_serving_warmup_requests` in each SavedModel version.

TF-Serving replays this TFRecord file of `PredictionLog` protos when it loads
a version, before it reports the version available: the first real request
then finds the graph optimized, its kernels made and its buffers allocated.
`export_saved_model` writes one request per signature, batch size and length
(`WARMUP_BATCH_SIZES`, `warmup_lengths`); `albert-tf serve` replays them too.

The protos (tensorflow_serving/apis/prediction_log.proto and what it
imports) are written and read here in protobuf's wire format, by hand.
The `tensorflow-serving-api` package that defines them fits albert-tf's
TensorFlow (2.20.0 requires tensorflow>=2.20,<3), but it also installs
grpcio, a gRPC client albert-tf has no use for; the handful of fields a
warmup request sets costs less written here than that dependency costs
every user. Only the fields a warmup request sets are written: PredictionLog.{classify_log = 2, regress_log = 3, predict_log = 6},
each {request = 1}; PredictRequest {model_spec = 1, inputs = 2 (map of
TensorProto)}; ClassificationRequest and RegressionRequest {model_spec = 1,
input = 2}; Input {example_list = 1}; ExampleList {examples = 1};
ModelSpec {name = 1, signature_name = 3}. The tests check them against
`tensorflow-serving-api`'s own classes.
"""

import os

import numpy as np

from albert_tf.export.batching_parameters import WARMUP_BATCH_SIZES
from albert_tf.export.signature_names import (CLASSIFY_METHOD, ID_SIGNATURE, REGRESS_METHOD, TEXT_FEATURE,
                                              TEXT_PAIR_FEATURE)
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import WARMUP_FILE
from input_pipeline import features

# TF-Serving refuses to load a version whose warmup file holds more records than this
# (tensorflow_serving/servables/tensorflow/saved_model_warmup_util.h: WarmupConsts::kMaxNumRecords; the check is in
# saved_model_warmup_util.cc). Batch sizes: `WARMUP_BATCH_SIZES`, tied to the suggested batching parameters.
MAX_WARMUP_RECORDS = 1000
PREDICT, CLASSIFY, REGRESS = "predict", "classify", "regress"
_LOG_FIELDS = {CLASSIFY: 2, REGRESS: 3, PREDICT: 6}
_LENGTH_DELIMITED, _VARINT = 2, 0
# Words of real text: a text of n of them tokenizes to at least n pieces in any English vocabulary.
_WORDS = ("a fine and moving film with great acting but the plot was thin and too long for me").split()


def warmup_lengths(max_length):
    """Sequence lengths a warmup request has: 16, 32, 64, ... below max_length, and max_length.

    A request's length is its longest row: each length warms the buffers of requests about that long.
    """
    lengths, length = {max_length}, 16
    while length < max_length:
        lengths.add(length)
        length *= 2
    return tuple(sorted(lengths))


# -- Wire format --------------------------------------------------------------------------------------

def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, payload):
    """A length-delimited field: a string, bytes or an embedded message."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _fields(data):
    """(field number, value) of a message's fields: bytes for length-delimited ones, ints for varints.

    Raises:
        ValueError: bytes that are not a protobuf message of those wire types.
    """
    position, out = 0, []
    while position < len(data):
        key, position = _read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, position = _read_varint(data, position)
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _read_varint(data, position)
            if position + length > len(data):
                raise ValueError("a field runs past the end of the message")
            value, position = data[position:position + length], position + length
        else:
            raise ValueError(f"field {number} has wire type {wire_type}, which no warmup request uses")
        out.append((number, value))
    return out


def _read_varint(data, position):
    value, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("a truncated or over-long varint")
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return value, position


def prediction_log(kind, signature_name, inputs, model_name=""):
    """A serialized PredictionLog holding one request.

    Args:
        kind: PREDICT, CLASSIFY or REGRESS.
        signature_name: the signature the request names.
        inputs: PREDICT: input name -> numpy array; CLASSIFY, REGRESS: a list of serialized tf.Examples.
        model_name: ModelSpec.name (TF-Serving's warmup ignores it).
    """
    import tensorflow as tf

    spec = (_field(1, model_name) if model_name else b"") + _field(3, signature_name)
    if kind == PREDICT:
        entries = b"".join(
            _field(2, _field(1, name) + _field(2, tf.make_tensor_proto(value).SerializeToString()))
            for name, value in inputs.items()
        )
        request = _field(1, spec) + entries
    else:
        example_list = b"".join(_field(1, example) for example in inputs)
        request = _field(1, spec) + _field(2, _field(1, example_list))
    return _field(_LOG_FIELDS[kind], _field(1, request))


def parse_prediction_log(data):
    """A serialized PredictionLog -> (kind, signature_name, inputs) as `prediction_log` takes them.

    Raises:
        ValueError: not a PredictionLog holding a predict, classify or regress request.
    """
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2

    kinds = {number: kind for kind, number in _LOG_FIELDS.items()}
    logs = [(kinds[n], v) for n, v in _fields(data) if n in kinds]
    if len(logs) != 1:
        raise ValueError("a PredictionLog must hold one predict, classify or regress log")
    kind, log = logs[0]
    request = next((v for n, v in _fields(log) if n == 1), b"")
    fields = _fields(request)
    spec = next((v for n, v in fields if n == 1), b"")
    signature_name = next((v for n, v in _fields(spec) if n == 3), b"").decode("utf-8") or ID_SIGNATURE
    if kind == PREDICT:
        inputs = {}
        for entry in (v for n, v in fields if n == 2):
            entry = dict(_fields(entry))
            proto = tensor_pb2.TensorProto()
            proto.ParseFromString(entry.get(2, b""))
            inputs[entry.get(1, b"").decode("utf-8")] = tf.make_ndarray(proto)
        return kind, signature_name, inputs
    input_message = next((v for n, v in fields if n == 2), b"")
    example_list = next((v for n, v in _fields(input_message) if n == 1), None)
    if example_list is None:
        raise ValueError("a classify or regress warmup request must hold an example_list")
    return kind, signature_name, [v for n, v in _fields(example_list) if n == 1]


# -- The requests an export holds --------------------------------------------------------------------

def warmup_requests(signatures, methods, vocab_size, max_length):
    """(kind, signature_name, inputs) for every signature at every warmup batch size and length.

    Args:
        signatures: name -> concrete function (the export's).
        methods: name -> SignatureDef method name (`signatures.signature_methods`).
        vocab_size: the model's vocabulary size (ids of the id signature are below it).
        max_length: the export's max_length.
    """
    import tensorflow as tf

    kinds = {CLASSIFY_METHOD: CLASSIFY, REGRESS_METHOD: REGRESS}
    requests = []
    for name in sorted(signatures):
        # Positional or keyword: the specs carry the input names either way.
        specs = {spec.name: spec for spec in tf.nest.flatten(signatures[name].structured_input_signature)}
        kind = kinds.get(methods.get(name), PREDICT)
        for batch in WARMUP_BATCH_SIZES:
            for length in warmup_lengths(max_length):
                if kind == PREDICT:
                    requests.append((kind, name, {n: _input(n, s, batch, length, vocab_size) for n, s in specs.items()}))
                else:
                    requests += [(kind, name, _examples(batch, length, pair)) for pair in (False, True)]
    return requests


def write_warmup_file(version_dir, signatures, methods, vocab_size, max_length):
    """Writes `WARMUP_FILE` into a SavedModel version directory (before it is published)."""
    import tensorflow as tf

    requests = warmup_requests(signatures, methods, vocab_size, max_length)
    if len(requests) > MAX_WARMUP_RECORDS:
        raise ValueError(f"{len(requests)} warmup requests, more than TF-Serving loads ({MAX_WARMUP_RECORDS}).")
    with tf.io.TFRecordWriter(os.path.join(version_dir, WARMUP_FILE)) as writer:
        for kind, name, inputs in requests:
            writer.write(prediction_log(kind, name, inputs))
    return len(requests)


def read_warmup_file(version_dir):
    """The requests of a version's `WARMUP_FILE`: a list of (kind, signature_name, inputs); [] without one.

    Raises:
        UserError: the file is not a TFRecord file of PredictionLogs.
    """
    import tensorflow as tf

    path = os.path.join(version_dir, WARMUP_FILE)
    if not files.isfile(path):
        return []
    requests = []
    try:
        for record in tf.data.TFRecordDataset(path).take(MAX_WARMUP_RECORDS + 1):
            requests.append(parse_prediction_log(record.numpy()))
    except (tf.errors.OpError, ValueError) as e:
        message = e.message if isinstance(e, tf.errors.OpError) else str(e)
        raise UserError(f"{path}: not a TFRecord file of TF-Serving PredictionLogs (record {len(requests)}): "
                        f"{message.strip().splitlines()[0]}") from None
    if len(requests) > MAX_WARMUP_RECORDS:  # TF-Serving's words (saved_model_warmup_util.cc): the load fails
        raise UserError(f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}")
    return requests


def _text(length, index):
    """A text of `length` words, differing per row."""
    return " ".join(_WORDS[(index + i) % len(_WORDS)] for i in range(length))


def _input(name, spec, batch, length, vocab_size):
    """A valid value of one signature input: texts of `length` words, or ids of `length` tokens."""
    shape = [batch] + [length if d is None else d for d in spec.shape.as_list()[1:]]
    if spec.dtype.name == "string":
        count = int(np.prod(shape))
        return np.array([_text(length, i).encode() for i in range(count)], dtype=object).reshape(shape)
    if name == features.TOKEN_IDS:
        return (np.arange(np.prod(shape)) % (vocab_size - 5) + 5).astype(np.int32).reshape(shape)
    if name == features.PADDING_MASK:
        return np.ones(shape, np.int32)
    # segment_ids, mask_positions: zeros are valid for every model.
    return np.zeros(shape, np.int32)


def _examples(batch, length, pair):
    """Serialized tf.Examples with a `text` (and a `text_pair`) of `length` words."""
    from tensorflow.core.example import example_pb2

    out = []
    for i in range(batch):
        example = example_pb2.Example()
        example.features.feature[TEXT_FEATURE].bytes_list.value.append(_text(length, i).encode())
        if pair:
            example.features.feature[TEXT_PAIR_FEATURE].bytes_list.value.append(_text(length, i + 1).encode())
        out.append(example.SerializeToString())
    return out
