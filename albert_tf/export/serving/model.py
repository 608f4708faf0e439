"""`ServingModel`: the highest version of a TF-Serving model directory, answering REST requests."""

import gc
import os
from http import HTTPStatus

from albert_tf.export.batching_parameters import DEFAULT_MAX_BATCH_SIZE
from albert_tf.export.saved_model import load_saved_model, version_dirs
from albert_tf.export.signature_names import CLASSIFY_METHOD, EXAMPLES_INPUT, REGRESS_METHOD
from albert_tf.export.warmup import PREDICT, read_warmup_file
from albert_tf.export.serving import codec
from albert_tf.export.serving.batching import Batcher
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import SAVED_MODEL_FILE, WARMUP_FILE


class ServingModel:
    """The highest version under a TF-Serving base path, loaded once.

    Args:
        base_path: the directory holding numbered versions (`1/`, `2/`, ...).
        name: the model name in request paths; default: the directory's name.
        max_batch_size: most rows a request may hold; with `batching`, at most its max_batch_size, the limit
            TF-Serving's batch queue applies.
        warmup: replay the version's `assets.extra/tf_serving_warmup_requests` before answering, as
            TF-Serving does (its --enable_model_warmup); `warmup_requests` says how many ran.
        batching: a `BatchingParameters`: concurrent requests run batched, as TF-Serving's
            --enable_batching runs them, warmup requests included; None runs each request alone.
            `close()` stops its threads.
    """

    def __init__(self, base_path, name=None, max_batch_size=DEFAULT_MAX_BATCH_SIZE, warmup=True,
                 batching=None):
        versions = version_dirs(base_path)
        if not versions:
            raise UserError(
                f"{base_path} holds no numbered SavedModel version (e.g. {base_path}/1/). "
                "Write one with `albert-tf export --format saved_model`."
            )
        self.name = name or os.path.basename(files.normpath(base_path))
        self.version = versions[-1]
        self.max_batch_size = int(max_batch_size if batching is None else min(max_batch_size,
                                                                                   batching.max_batch_size))
        path = os.path.join(base_path, str(self.version))
        self._loaded = load_saved_model(path)
        self.signatures = dict(self._loaded.signatures)
        self.input_specs = {name: fn.structured_input_signature[1] for name, fn in self.signatures.items()}
        self._signature_defs = _signature_defs(path, self.signatures)
        self.method_names = {name: d["method_name"] for name, d in self._signature_defs.items()}
        # TF-Serving wraps the session for batching, then replays the warmup records through it
        # (tensorflow_serving/servables/tensorflow/saved_model_bundle_factory.cc: WrapSessionForBatching;
        # saved_model_warmup.cc: RunSavedModelWarmup, for every version it loads; this server loads one).
        self.batching = batching
        self._batcher = Batcher(self._call, batching) if batching is not None else None
        try:
            self.warmup_requests = self._warm_up(path) if warmup else 0
        except BaseException:
            self.close()
            raise
        # The loaded model's Python objects live as long as the server: out of the garbage collector's
        # sight, a full collection no longer walks them in the middle of a request (the first one after
        # the load met it: 2x the steady latency; bench/results/serving_warmup.md).
        gc.collect()
        gc.freeze()

    def close(self):
        """Stops the batching threads, if any."""
        if self._batcher is not None:
            self._batcher.close()

    def _warm_up(self, path):
        """Runs every warmup request of the version, through the batcher when batching; returns how many.

        A failing one fails the load, as in TF-Serving (saved_model_warmup_util.cc).
        """
        requests = read_warmup_file(path)
        for i, (kind, signature_name, inputs) in enumerate(requests):
            if signature_name not in self.signatures:
                raise UserError(f"{os.path.join(path, WARMUP_FILE)}: record {i} names the signature "
                                f"{signature_name!r}, which the model lacks (it has {sorted(self.signatures)}).")
            arrays = inputs if kind == PREDICT else {EXAMPLES_INPUT: _strings(inputs)}
            try:
                self.run(signature_name, arrays)
            except codec.RequestError as e:
                raise UserError(f"{os.path.join(path, WARMUP_FILE)}: record {i} ({signature_name}) failed: "
                                f"{e.message}") from None
        return len(requests)

    def status(self):
        """The body of `GET /v1/models/NAME`."""
        return {"model_version_status": [{
            "version": str(self.version),
            "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""},
        }]}

    def metadata(self):
        """The body of `GET /v1/models/NAME/metadata`: the SavedModel's signature defs."""
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": self._signature_defs}},
        }

    def predict(self, request):
        """Answers a decoded predict request (a JSON value) as TF-Serving would.

        Raises:
            codec.RequestError: for anything wrong with the request, including
                inputs the model's in-graph checks refuse.
        """
        signature_name, arrays, row_format = codec.parse_predict(request, self.input_specs, self.max_batch_size)
        return codec.encode_outputs(self.run(signature_name, arrays), row_format)

    def classify(self, request):
        """Answers a decoded classify request as TF-Serving's REST API does: {"results": [[[label, score], ...]]}."""
        signature_name, examples = codec.parse_examples(request, self.method_names, CLASSIFY_METHOD,
                                                        self.max_batch_size)
        outputs = self.run(signature_name, {EXAMPLES_INPUT: _strings(examples)})
        return codec.encode_classify(outputs["classes"], outputs["scores"])

    def regress(self, request):
        """Answers a decoded regress request as TF-Serving's REST API does: {"results": [v, ...]}."""
        signature_name, examples = codec.parse_examples(request, self.method_names, REGRESS_METHOD,
                                                        self.max_batch_size)
        return codec.encode_regress(self.run(signature_name, {EXAMPLES_INPUT: _strings(examples)})["outputs"])

    def run(self, signature_name, arrays):
        """Runs a signature on numpy inputs; returns its outputs as numpy arrays.

        Raises:
            codec.RequestError: inputs the model's in-graph checks refuse (400), other failures (500).
        """
        if self._batcher is not None:
            return self._batcher.run(signature_name, arrays)
        return self._call(signature_name, arrays)

    def _call(self, signature_name, arrays):
        import tensorflow as tf

        try:
            outputs = self.signatures[signature_name](**{n: tf.constant(a) for n, a in arrays.items()})
        except tf.errors.InvalidArgumentError as e:
            raise codec.RequestError(codec.clean_tf_error(e.message)) from e
        except tf.errors.OpError as e:
            raise codec.RequestError(codec.clean_tf_error(e.message), HTTPStatus.INTERNAL_SERVER_ERROR) from e
        return {n: v.numpy() for n, v in outputs.items()}


def _strings(values):
    import numpy as np

    return np.array(values, dtype=object)


def _signature_defs(path, signatures):
    """The SignatureDefs of `signatures` as TF-Serving's metadata writes them (DT_FLOAT, ...)."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(files.read_bytes(os.path.join(path, SAVED_MODEL_FILE)))
    defs = proto.meta_graphs[0].signature_def

    def tensor_info(info):
        shape = info.tensor_shape
        return {
            "dtype": types_pb2.DataType.Name(info.dtype),
            "tensor_shape": {
                "dim": [{"size": str(d.size), "name": d.name} for d in shape.dim],
                "unknown_rank": shape.unknown_rank,
            },
            "name": info.name,
        }

    return {
        name: {
            "inputs": {k: tensor_info(v) for k, v in sorted(defs[name].inputs.items())},
            "outputs": {k: tensor_info(v) for k, v in sorted(defs[name].outputs.items())},
            "method_name": defs[name].method_name,
        }
        for name in sorted(signatures)
    }
