"""SavedModel export in TF-Serving's versioned layout: `BASE/1/`, then `BASE/2/`, ...

Each version is written to a hidden temporary directory and renamed into place,
so a TF-Serving instance polling BASE never loads a half-written version.

Precision: "float32" exports the model's float32 graph, "mixed_bfloat16" the
model rebuilt under the mixed_bfloat16 policy (every signature runs its
matmuls in bfloat16). Both freeze the weights into the graph as constants
(`albert_tf.inference.FrozenForward`): the graph optimizer then folds what
depends on the weights alone once, when the server loads the model (under
mixed_bfloat16 the weights' casts to bfloat16), and oneDNN keeps its own
layout of constant weights between requests. Frozen ALBERT-base answers
batch 1 faster than on its variables, in float32 and in bfloat16
(bench/results/export_latency*.md). Such a SavedModel has no variables, which
TF-Serving accepts. A model too large for one GraphDef (`FrozenForward`'s
limit) keeps its float32 variables (cast on every call under mixed_bfloat16).

`xla=True` (opt-in) instead runs the forward pass as a function XLA must
compile, on the float32 variables: faster where TensorFlow runs Eigen rather
than oneDNN (CPUs with AVX2 alone), and an error on its first request in a
server without XLA:CPU, so a stock `tensorflow_model_server` needs
`albert_tf.export.options.XLA_SERVER_FLAG` (docs/deployment.md has the measurements).
"""

import json
import os

import tensorflow as tf
from google.protobuf.message import DecodeError

from albert_tf import precision as precision_lib
from albert_tf.export import signatures as signatures_lib
from albert_tf.export.batching_parameters import SUGGESTED
from albert_tf.export.warmup import write_warmup_file
from albert_tf.export.options import DEFAULT_MAX_LENGTH, EXPORT_PRECISIONS
from albert_tf.inference import FrozenForward
from albert_tf.models.pretrained import with_dtype_policy
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import (ASSETS_EXTRA_DIR, BATCHING_PARAMETERS_FILE, EXPORT_METADATA_FILE,
                                    SAVED_MODEL_FILE)
from input_pipeline.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID



def resolve_export_precision(precision, hidden_size, flags=None):
    """The precision an export runs in, "auto" resolved, and why.

    "auto" is what `albert_tf.precision.choose_precision` picks for an
    export (inference without XLA) on this CPU: mixed_bfloat16 where it has
    bfloat16 units and H >= its width threshold, else float32. This
    machine's CPU stands for the serving machine's: a mixed_bfloat16 export
    runs emulated, slowly, on a CPU without bfloat16 units.

    Args:
        precision: one of `EXPORT_PRECISIONS`.
        hidden_size: the model's H.
        flags: the CPU's flags (`albert_tf.precision.cpu_flags()` when None).

    Returns:
        (precision, reason): "float32" or "mixed_bfloat16", and a short reason such as
        "auto: this CPU has avx512_bf16, H 768 >= 512".
    """
    if precision not in EXPORT_PRECISIONS:
        raise ValueError(f"`precision` must be one of {EXPORT_PRECISIONS}. Received: precision={precision!r}")
    if precision != "auto":
        return precision, "requested"
    choice = precision_lib.choose_precision("export", "auto", hidden_size, flags=flags)
    return choice.precision, choice.reason


def version_dirs(base_dir):
    """The numeric version subdirectories of `base_dir`, as ints, sorted."""
    if not files.isdir(base_dir):
        return []
    return sorted(
        int(name) for name in files.listdir(base_dir)
        if name.isdigit() and files.isdir(os.path.join(base_dir, name))
    )


def load_saved_model(path):
    """`tf.saved_model.load(path)` after registering TF Text's ops.

    Loading imports every function of the SavedModel, and the text signatures
    use TF Text ops (`NormalizeUTF8`, `FastSentencepieceTokenize`, ...) that
    plain TensorFlow does not know until `tensorflow_text` is imported: without
    this, a fresh process fails with "Op type not registered". Use it wherever
    an export is loaded.
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the ops; nothing else is used

    if not files.isfile(os.path.join(path, SAVED_MODEL_FILE)):
        raise UserError(f"{path} is not a SavedModel directory: it has no {SAVED_MODEL_FILE}.")
    try:
        return tf.saved_model.load(path)
    except (OSError, tf.errors.OpError, DecodeError) as e:  # a corrupt or truncated saved_model.pb or variables
        raise UserError(f"{path} is not a readable SavedModel (corrupt or truncated): {_first_line(e)}") from None


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def custom_ops(path):
    """Op types in a SavedModel that core TensorFlow does not define (TF Text's).

    A TF-Serving build must link in every one of them to load the model. The
    id signature needs none; the text signatures need TF Text's.

    Args:
        path: a SavedModel directory (a version, e.g. `BASE/1`).

    Returns:
        Sorted op type names, e.g. ["NormalizeUTF8", "TFText>FastSentencepieceTokenize"].
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(files.read_bytes(os.path.join(path, SAVED_MODEL_FILE)))
    ops = set()
    for meta_graph in proto.meta_graphs:
        graph = meta_graph.graph_def
        functions = {f.signature.name for f in graph.library.function}
        nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
        # A node calling a library function names the function as its op.
        ops.update(n.op for n in nodes if n.op not in functions)
    # `tf.raw_ops` holds exactly the ops compiled into TensorFlow itself.
    return sorted(op for op in ops if not hasattr(tf.raw_ops, op))


def set_method_names(path, methods):
    """Sets the SignatureDefs' method names in a saved SavedModel (TF2's saver writes every one as predict).

    TF-Serving's Classify and Regress APIs refuse a signature whose method
    name is not `tensorflow/serving/classify` (`regress`).
    """
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(path, SAVED_MODEL_FILE)
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(files.read_bytes(pb))
    for meta_graph in proto.meta_graphs:
        for name, method in methods.items():
            if name in meta_graph.signature_def:
                meta_graph.signature_def[name].method_name = method
    files.write_bytes(pb, proto.SerializeToString())


def check_max_length(interface, max_length):
    limit = interface.config.max_position_embeddings
    if not 3 <= int(max_length) <= limit:
        raise UserError(
            f"`max_length` must be between 3 and the model's max_position_embeddings={limit}. "
            f"Received: max_length={max_length}"
        )


def export_metadata(interface, max_length, tokenizer, signature_names, truncate_from="end", max_windows=1,
                    **extra):
    """The JSON-able description written next to every export."""
    dropped = {"end": "from the end (BERT truncate_seq_pair)", "start": "from the start (the end is kept)",
               "middle": "from the middle (the first quarter and the end are kept)"}[truncate_from]
    return {
        "kind": interface.kind,
        "max_length": int(max_length),
        "label_names": list(interface.label_names) if interface.label_names else None,
        **({"thresholds": list(interface.thresholds),
            "scores": "independent sigmoids: a label applies when its probability is at or above its threshold"}
           if interface.thresholds is not None else {}),
        "signatures": list(signature_names),
        "inputs": {n: list(s) for n, s in interface.inputs.items()},
        "outputs": sorted(interface.outputs),
        "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "cls": CLS_ID, "sep": SEP_ID, "mask": MASK_ID},
        "tokenizer": tokenizer is not None,
        "truncation": f"longest segment first, {dropped}; [CLS] A [SEP] (B [SEP]) fits in max_length",
        "truncate_from": truncate_from,
        "max_windows": int(max_windows),
        **({"long_text": f"a single text of more than max_length - 2 pieces is read as up to {int(max_windows)} "
            "near-equal windows, [CLS] window [SEP] each, and the logits (predictions) are averaged over them; "
            "beyond that many windows it is cut as truncation says"} if max_windows > 1 else {}),
        "albert_config": interface.config.to_dict(),
        **extra,
    }


def export_saved_model(model, base_dir, *, tokenizer=None, max_length=DEFAULT_MAX_LENGTH,
                       version=None, label_names=None, truncate_from="end", max_windows=1, precision="float32",
                       overwrite=False, xla=False, replace_batching_parameters=False):
    """Writes `model` as the next version of a TF-Serving model directory.

    Args:
        model: an `AlbertBackbone`, `AlbertPretrainer` or task model.
        base_dir: the model's base path (TF-Serving's `--model_base_path`).
        tokenizer: an `AlbertTokenizer`; default: the model's preprocessor's.
            Without one only `serving_default` is exported.
        max_length: longest sequence the signatures accept (ids) or produce
            (text, by truncation); at most `max_position_embeddings`.
        version: the version number; default: one more than the highest present.
        label_names: overrides the model's `label_names`.
        truncate_from: which pieces of a too-long text the text signatures
            drop: "end", "start" or "middle" (as fine-tuning's --truncate-from).
        max_windows: classifiers and regressors: `serve_text` reads a long
            text as up to this many windows and averages their outputs (as
            fine-tuning's --max-windows); 1 reads one window.
        precision: "float32", or "mixed_bfloat16" (bfloat16 compute); either
            way the weights are constants (see the module docstring). "auto" is the command's,
            resolved by `resolve_export_precision` first.
        overwrite: replace an existing `version` (whole: the old one stays
            if the export fails); without it an existing (non-empty) version is refused, also one another
            export writes while this one runs.
        xla: run the forward pass as a function XLA must compile, on the
            float32 weights as variables (see the module docstring); a
            server needs `albert_tf.export.options.XLA_SERVER_FLAG` for it.
        replace_batching_parameters: write the suggested `BATCHING_PARAMETERS_FILE` over one already in
            `base_dir` (which a user may have tuned); it is written anyway where there is none.

    Returns:
        The path of the written version directory.
    """
    if precision not in EXPORT_PRECISIONS[1:]:
        raise ValueError(f"`precision` must be one of {EXPORT_PRECISIONS[1:]} (resolve \"auto\" with "
                         f"resolve_export_precision). Received: precision={precision!r}")
    interface = signatures_lib.describe_model(model, label_names)
    check_max_length(interface, max_length)
    tokenizer = signatures_lib.model_tokenizer(model, tokenizer)
    existing = version_dirs(base_dir)
    version = (existing[-1] + 1 if existing else 1) if version is None else int(version)
    final = os.path.join(base_dir, str(version))
    if version < 1 or (version in existing and not overwrite and files.listdir(final)):
        raise UserError(
            f"`version` must be a positive number not already in {base_dir} "
            f"(present: {existing}). Received: version={version}"
        )
    if xla and precision != "float32":
        # XLA's CPU backend does not use bfloat16 units (albert_tf.precision): a bfloat16 graph is oneDNN's.
        raise UserError(f"An XLA-compiled export runs in float32 only. Received: precision={precision!r}, xla=True")
    if precision == "mixed_bfloat16":
        model = with_dtype_policy(model, precision)
    if xla:
        forward, weights = tf.function(lambda batch: model(batch, training=False), jit_compile=True), "variables"
    else:
        frozen = FrozenForward(model)
        forward = frozen.graph_function(signatures_lib.id_input_specs(interface))
        weights = "constants" if frozen.frozen else "variables"
    signatures = signatures_lib.build_signatures(model, interface, tokenizer, max_length, truncate_from,
                                                 max_windows, forward)

    module = tf.Module()
    # The tf.Variables behind the Keras variables, tracked directly (as Keras'
    # ExportArchive does): TF1-style loaders (TF-Serving, saved_model_cli run)
    # restore by these, and tracking through the Keras model misses some.
    # Weights frozen to constants need none.
    module.model_variables = [v.value for v in model.variables] if weights == "variables" else []
    # Published whole: TF-Serving never loads a half-written version. Without `overwrite`, a version another
    # export published meanwhile (two exports to one base path at once) is refused, not replaced.
    with files.publish(final, (SAVED_MODEL_FILE,), replace=overwrite) as staging:
        tf.saved_model.save(module, staging, signatures=signatures)
        methods = signatures_lib.signature_methods(signatures, interface)
        set_method_names(staging, methods)
        metadata = export_metadata(interface, max_length, tokenizer, signatures, truncate_from, max_windows,
                                   version=version, precision=precision, weights=weights,
                                   compiler="xla" if xla else "none")
        files.makedirs(os.path.join(staging, ASSETS_EXTRA_DIR))
        # Replayed by TF-Serving (and `albert-tf serve`) at load: the first request is as fast as the next.
        write_warmup_file(staging, signatures, methods, interface.config.vocab_size, max_length)
        files.write_text(os.path.join(staging, EXPORT_METADATA_FILE), json.dumps(metadata, indent=2))
    write_batching_parameters(base_dir, replace_batching_parameters)
    return final


def write_batching_parameters(base_dir, replace=False):
    """Writes the suggested `BATCHING_PARAMETERS_FILE` into `base_dir` unless one is there; returns whether it did.

    The file is the user's to tune (docs/deployment.md#batching), so a new version keeps it; `replace` writes
    over it.
    """
    path = os.path.join(base_dir, BATCHING_PARAMETERS_FILE)
    if files.exists(path) and not replace:
        return False
    with files.publish(path, directory=False) as staging:
        files.write_text(staging, SUGGESTED.to_text())
    return True
