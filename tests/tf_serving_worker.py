"""Runs an export as TF-Serving does, in a venv holding only TensorFlow and TensorFlow Text (no albert-tf).

Reads {"path": VERSION_DIR, "requests": [{"signature": S, "inputs": {name: list}}]} (strings in base64) as JSON on
stdin; loads the SavedModel with the TF1 session loader (tf.compat.v1.saved_model.loader.load, as
TF-Serving's SavedModelBundle does); runs each request's signature through its SignatureDef's tensor
names; prints {"versions": {...}, "methods": {signature: method_name}, "outputs": [{name: nested list}]}.
"""

import base64
import importlib.util
import json
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers TF Text's ops, as TF-Serving's build links them

if importlib.util.find_spec("albert_tf") is not None:
    raise SystemExit("albert_tf is importable here: this process must run without it")

job = json.load(sys.stdin)
tf.compat.v1.disable_eager_execution()
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], job["path"])
    signatures = meta_graph.signature_def
    outputs = []
    for request in job["requests"]:
        signature = signatures[request["signature"]]
        feed = {}
        for name, value in request["inputs"].items():
            info = signature.inputs[name]
            dtype = tf.dtypes.as_dtype(info.dtype)
            feed[info.name] = (np.array([base64.b64decode(v) for v in value], dtype=object) if dtype == tf.string
                               else np.array(value, dtype=dtype.as_numpy_dtype))
        names = sorted(signature.outputs)
        values = session.run([signature.outputs[n].name for n in names], feed_dict=feed)
        outputs.append({n: (v.astype(str).tolist() if v.dtype == object else v.tolist()) for n, v in zip(names, values)})
print(json.dumps({
    "versions": {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__},
    "methods": {name: s.method_name for name, s in signatures.items()},
    "outputs": outputs,
}))
