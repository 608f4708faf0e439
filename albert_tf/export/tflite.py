"""TFLite (LiteRT) export: builtin ops only, fixed sequence length, optional quantization.

`OUT_DIR/model.tflite` has one signature, `serving_default`, with the inputs and
outputs of the SavedModel's id signature, at shape (batch_size, max_length):
the sequence length is fixed (pad every input to `max_length`, padding_mask 0),
the batch is 1 by default (mobile inference; static shapes let the converter
fold all shape arithmetic) or dynamic with `batch_size=None`. Next to it:
`spiece.model` + `tokenizer.json` (the tokenizer, byte fallback included)
and `export.json` (special ids, max length, truncation rule, label names) for
on-device tokenization, which must follow `input_pipeline.finetuning.text_inputs.pack_texts`.
A classifier or regressor exported with a tokenizer carries TFLite Model
Metadata (`albert_tf.export.tflite_metadata`) for MediaPipe's TextClassifier
and the Task Library, and then has one output: `probabilities` (classifier)
or `predictions` (regressor).

Quantization (`quantize`):
    none     float32.
    float16  float16 weights (half the size; computed in float32 on CPU).
    dynamic  int8 weights, activations quantized on the fly (dynamic range).
    int8     int8 weights and activations, calibrated on a representative
             dataset of real text; ids stay int32 and outputs float32, and ops
             without an int8 kernel stay float.
    int8-mixed  int8 with the ops int8 handles badly kept in float
             (`INT8_MIXED_FLOAT_OPS`): the matmuls (FULLY_CONNECTED,
             BATCH_MATMUL) run in int8, LayerNorm, softmax, GELU and the
             attention scores' scaling and padding bias in float.
    16x8     int8 weights and int16 activations ("16x8"), calibrated like
             int8: int16 activations (256x finer than int8) wherever LiteRT
             has an int16 kernel. Accurate, but those kernels are reference
             code: ~15-20x slower than float32 on x86
             (bench/results/tflite_accuracy.md).

The converter only gets TFLite builtin ops (`TFLITE_BUILTINS`, plus
`TFLITE_BUILTINS_INT8` for int8 and int8-mixed, or the 16x8 op set): a model that would need the Flex delegate
fails to export instead of producing a file the plain runtime cannot run.
"""

import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from albert_tf.export import signatures as signatures_lib
from albert_tf.export import tflite_metadata
from albert_tf.export.options import CALIBRATED_MODES, DEFAULT_MAX_LENGTH, QUANTIZE_MODES
from albert_tf.export.saved_model import check_max_length, export_metadata
from albert_tf.utils import files
from input_pipeline import features
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import LABELS_FILE, TFLITE_METADATA_FILE, TFLITE_MODEL_FILE
from input_pipeline.finetuning import text_inputs

# What int8-mixed leaves in float. The attention adds a -10000 padding bias to
# the scores: calibrated on padded text, that ADD's int8 range is about
# [-10000, 10], a step of ~40, so every real score rounds to the same value
# (full int8 lost 9-18 points of sentiment accuracy, mostly from this); the
# scaling MUL shares its range. LayerNorm (MEAN, SQUARED_DIFFERENCE, RSQRT,
# SUB, MUL), SOFTMAX and GELU lose the rest. Keeping all of them float brought
# the fine-tuned sentiment classifier back within 1 point of float32.
INT8_MIXED_FLOAT_OPS = ("ADD", "MUL", "SUB", "SOFTMAX", "MEAN", "SQUARED_DIFFERENCE", "RSQRT", "GELU")
# Masked positions the pretrainer's TFLite model takes (the original's
# max_predictions_per_seq); TFLite needs a fixed size.
DEFAULT_NUM_MASK_POSITIONS = 20
# The one output a model with metadata keeps, by kind.
METADATA_OUTPUTS = {signatures_lib.CLASSIFIER: "probabilities", signatures_lib.MULTI_LABEL: "probabilities",
                    signatures_lib.REGRESSOR: "predictions"}


def export_tflite(model, out_dir, *, tokenizer=None, max_length=DEFAULT_MAX_LENGTH, quantize="none",
                  representative_texts=None, batch_size=1, label_names=None,
                  num_mask_positions=DEFAULT_NUM_MASK_POSITIONS, truncate_from="end", max_windows=1,
                  metadata=True, overwrite=False):
    """Converts `model` to `out_dir/model.tflite` (see the module docstring), published whole.

    `out_dir` appears with every file in it or not at all (`files.publish`):
    a failed or killed export leaves no half-written model and an old
    `out_dir` (with `overwrite`) as it was.

    Args:
        model: an `AlbertBackbone`, `AlbertPretrainer` or task model.
        out_dir: output directory: new or empty, unless `overwrite`.
        tokenizer: an `AlbertTokenizer` to ship next to the model; needed for
            int8. Default: the model's preprocessor's.
        max_length: the fixed sequence length.
        quantize: one of QUANTIZE_MODES.
        representative_texts: for int8, real text to calibrate on: a list of
            strings, or of (text, text_pair) tuples; 100-500 examples suffice.
        batch_size: fixed batch size, or None for a dynamic batch.
        label_names: overrides the model's `label_names`.
        num_mask_positions: size of `mask_positions` for a pretrainer.
        truncate_from: which pieces of a too-long text on-device packing
            drops ("end", "start", "middle"): recorded in the metadata and used
            for calibration.
        max_windows: recorded in the metadata: the app reads a long text as
            up to this many windows and averages the logits, as fine-tuning
            did (the model itself scores one window).
        metadata: classifiers and regressors with a tokenizer: write TFLite
            Model Metadata (see the module docstring) so MediaPipe's
            TextClassifier and the Task Library's BertNLClassifier run the
            file on raw text; the model then has one output. False: no
            metadata, and every output (`logits` too).
        overwrite: replace a non-empty `out_dir`.

    Returns:
        The path of the written `.tflite` file.

    Raises:
        UserError: `out_dir` is not empty (without `overwrite`) or cannot be written.
    """
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"`quantize` must be one of {QUANTIZE_MODES}. Received: quantize={quantize!r}")
    files.check_new_output(out_dir, overwrite, "out_dir")
    interface = signatures_lib.describe_model(model, label_names)
    tokenizer = _check_request(model, interface, tokenizer, max_length, max_windows, quantize, representative_texts)
    specs = _input_specs(interface, batch_size, max_length, num_mask_positions)
    text_classifier = metadata and tokenizer is not None and interface.kind in METADATA_OUTPUTS
    if text_classifier:
        check_metadata_length(max_length)
    serve = _frozen_function(model, interface, specs, text_classifier, quantize)
    calibration = None
    if quantize in CALIBRATED_MODES:
        calibration = _representative_dataset(interface, tokenizer, representative_texts, specs, max_length,
                                              truncate_from)
    flatbuffer = _convert(serve, quantize, calibration)
    if text_classifier:
        flatbuffer = tflite_metadata.with_text_classifier_metadata(
            # With the preprocessing inside, where it can be: MediaPipe runs the bare model on raw text.
            flatbuffer, signatures_lib.ID_SIGNATURE, tokenizer.standalone_model_proto(),
            interface.label_names if interface.kind in signatures_lib.CLASSIFY_KINDS else None,
            **_metadata_descriptions(interface),
        )
    description = _export_description(interface, max_length, tokenizer, truncate_from, max_windows, quantize,
                                       batch_size, flatbuffer, text_classifier)
    # Checked at the start (before the conversion): published, not checked again.
    # Another export may have written out_dir since: refused then, unless `overwrite`.
    with files.publish(out_dir, (TFLITE_MODEL_FILE,), name="out_dir", replace=overwrite) as staging:
        if tokenizer is not None:
            tokenizer.write(staging)
        files.write_text(os.path.join(staging, TFLITE_METADATA_FILE), json.dumps(description, indent=2))
        files.write_bytes(os.path.join(staging, TFLITE_MODEL_FILE), flatbuffer)
    return os.path.join(files.normpath(out_dir), TFLITE_MODEL_FILE)


def _check_request(model, interface, tokenizer, max_length, max_windows, quantize, representative_texts):
    """Refuses what cannot be exported, before any conversion; returns the tokenizer to ship (or None)."""
    check_max_length(interface, max_length)
    signatures_lib.check_max_windows(interface, max_windows)
    tokenizer = signatures_lib.model_tokenizer(model, tokenizer)
    if tokenizer is not None:
        tokenizer.check_vocab_size(interface.config.vocab_size)
    if quantize in CALIBRATED_MODES and (tokenizer is None or not representative_texts):
        raise UserError(
            f"`quantize={quantize!r}` needs a tokenizer and `representative_texts` (real text to "
            "calibrate activation ranges on)."
        )
    return tokenizer


def _input_specs(interface, batch_size, max_length, num_mask_positions):
    """The id inputs at their fixed sizes (TFLite needs them): `mask_positions` of `num_mask_positions`."""
    specs = signatures_lib.id_input_specs(interface, batch_size, max_length)
    if features.MASK_POSITIONS in specs:
        shape = specs[features.MASK_POSITIONS].shape.as_list()
        shape[-1] = num_mask_positions
        specs[features.MASK_POSITIONS] = tf.TensorSpec(shape, tf.int32, name=features.MASK_POSITIONS)
    return specs


def _frozen_function(model, interface, specs, text_classifier, quantize):
    """The model's forward pass on `specs` with its weights frozen to constants, as a concrete function."""

    @tf.function
    def serve(**inputs):
        outputs = signatures_lib.model_outputs(model, interface, inputs)
        if text_classifier:
            # One output: BertNLClassifier refuses more, and MediaPipe would make a
            # classification head of the logits too.
            return {METADATA_OUTPUTS[interface.kind]: outputs[METADATA_OUTPUTS[interface.kind]]}
        # A multilabel model's label names over threshold are strings, which TFLite's builtin ops do not
        # select; `predicted` marks the same labels.
        if interface.kind == signatures_lib.MULTI_LABEL:
            del outputs["labels"]
        return outputs

    # Freeze the weights into constants: converted from a function that reads
    # Keras variables, the model keeps them as resource variables (VAR_HANDLE /
    # READ_VARIABLE ops, matmuls instead of FULLY_CONNECTED) and quantization
    # leaves them in float.
    concrete = serve.get_concrete_function(**specs)
    frozen = convert_variables_to_constants_v2(concrete)
    input_order = [t.name.split(":")[0] for t in frozen.inputs]
    if quantize == "16x8":
        frozen = _int16_compatible(frozen)

    @tf.function
    def frozen_serve(**inputs):
        flat = frozen(*[inputs[name] for name in input_order])
        return tf.nest.pack_sequence_as(concrete.structured_outputs, flat)

    return frozen_serve.get_concrete_function(**specs)


def _convert(serve, quantize, representative_dataset):
    """The TFLite flatbuffer (bytes) of a concrete function, builtin ops only, quantized as `quantize` says."""
    # Local scratch (deleted on leaving): the converter reads a local SavedModel.
    with tempfile.TemporaryDirectory() as staging:
        tf.saved_model.save(tf.Module(), staging, signatures={signatures_lib.ID_SIGNATURE: serve})
        converter = tf.lite.TFLiteConverter.from_saved_model(
            staging, signature_keys=[signatures_lib.ID_SIGNATURE]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize != "none":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if quantize in CALIBRATED_MODES:
            integer_ops = (
                tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8 if quantize == "16x8"
                else tf.lite.OpsSet.TFLITE_BUILTINS_INT8
            )
            converter.target_spec.supported_ops = [integer_ops, tf.lite.OpsSet.TFLITE_BUILTINS]
            converter.representative_dataset = representative_dataset
        try:
            if quantize == "int8-mixed":
                # The quantization debugger's public options are TFLite's way
                # to leave chosen op types out of full-integer quantization.
                debugger = tf.lite.experimental.QuantizationDebugger(
                    converter=converter, debug_dataset=converter.representative_dataset,
                    debug_options=tf.lite.experimental.QuantizationDebugOptions(
                        denylisted_ops=list(INT8_MIXED_FLOAT_OPS)
                    ),
                )
                return debugger.get_nondebug_quantized_model()
            return converter.convert()
        except Exception as e:  # the converter raises its own ConverterError
            raise ValueError(
                f"TFLite conversion with builtin ops only failed (an op would need the Flex "
                f"delegate, or has no {quantize} kernel): {e}"
            ) from e


def _export_description(interface, max_length, tokenizer, truncate_from, max_windows, quantize, batch_size,
                        flatbuffer, text_classifier):
    """What `TFLITE_METADATA_FILE` says of the export (the JSON beside the model)."""
    return export_metadata(
        interface, max_length, tokenizer, [signatures_lib.ID_SIGNATURE], truncate_from, max_windows,
        quantize=quantize,
        batch_size=batch_size,
        tflite_metadata=text_classifier,
        # What the file itself takes and gives, in the subgraph's order.
        inputs=_tensors(flatbuffer, "inputs", text_classifier),
        outputs=_tensors(flatbuffer, "outputs", text_classifier),
        on_device_tokenization="preprocess as tokenizer.json says, SentencePiece-encode with "
        "spiece.model (characters without a piece become UTF-8 byte pieces where tokenizer.json says "
        "byte_fallback, as the sentencepiece library does), pack [CLS] A [SEP] (B [SEP]) with segment ids 0 then 1, truncate to "
        "max_length as truncation says, pad with pad id to max_length (padding_mask 0).",
    )


def check_metadata_length(max_length):
    """MediaPipe packs [CLS] text [SEP] and pads, so a model with metadata needs room for one piece."""
    if max_length < 3:
        raise UserError(f"A TFLite model with metadata needs `max_length` >= 3. Received: max_length={max_length}")


def _metadata_descriptions(interface):
    labels = ", ".join(interface.label_names) if interface.label_names else None
    if interface.kind == signatures_lib.MULTI_LABEL:
        return dict(
            name="ALBERT multi-label text classifier",
            description="Tags one text with any of its labels" + (f" ({labels})." if labels else "."),
            output_description=f"Independent sigmoid probability of each label ({LABELS_FILE} order), shape "
            f"(1, labels): no softmax; a label applies at or above its threshold ({TFLITE_METADATA_FILE}'s "
            "thresholds).",
            score_range=(0.0, 1.0),
        )
    if interface.kind == signatures_lib.CLASSIFIER:
        return dict(
            name="ALBERT text classifier",
            description="Classifies one text" + (f" as {labels}." if labels else "."),
            output_description=f"Softmax probability of each class ({LABELS_FILE} order), shape (1, classes).",
            score_range=(0.0, 1.0),
        )
    return dict(
        name="ALBERT text regressor",
        description="Scores one text.",
        output_description="The predicted value, shape (1,): read it as the score of category 0.",
    )


def _tensors(flatbuffer, side, with_metadata):
    """The file's inputs or outputs in subgraph order: signature name, metadata name, dtype, shape."""
    interpreter = Interpreter(model_content=bytes(flatbuffer))
    signature = interpreter.get_signature_list()[signatures_lib.ID_SIGNATURE][side]
    by_index = {}
    details = interpreter.get_input_details() if side == "inputs" else interpreter.get_output_details()
    runner = interpreter.get_signature_runner(signatures_lib.ID_SIGNATURE)
    named = runner.get_input_details() if side == "inputs" else runner.get_output_details()
    for name in signature:
        by_index[named[name]["index"]] = name
    described = []
    for detail in details:
        name = by_index[detail["index"]]
        entry = {"name": name, "dtype": np.dtype(detail["dtype"]).name,
                 "shape": [int(d) for d in detail["shape_signature"]]}
        if with_metadata:
            entry["metadata_name"] = (tflite_metadata.INPUT_ROLES[name] if side == "inputs"
                                      else tflite_metadata.OUTPUT_NAME)
        described.append(entry)
    return described


def _int16_compatible(frozen):
    """`frozen` with two graph rewrites the 16x8 quantizer needs; same outputs.

    That quantizer (TFLite's older one: the MLIR quantizer does not do 16x8)
    quantizes every op that has an int16 kernel and fails on two patterns:
      * Keras' `ops.take` wraps negative indices, `where(ids < 0, ids + n, ids)`,
        an int32 ADD it tries to quantize without a calibrated range ("Empty
        min/max for tensor serving_default_segment_ids"). The ids fed to an
        exported model are never negative (the SELECT always picks `ids`), so
        the SELECT becomes an identity of the input.
      * LayerNorm's SQUARED_DIFFERENCE gets int16 tensors, which LiteRT's
        kernel rejects at run time; SUB then MUL computes the same with int16
        kernels.
    """
    graph_def = frozen.graph.as_graph_def()
    nodes = {node.name: node for node in graph_def.node}

    def source(name):
        return nodes[name.split(":")[0].lstrip("^")]

    for node in list(graph_def.node):
        if node.op == "SelectV2":
            condition, wrapped, ids = (source(name) for name in node.input)
            if (condition.op == "Less" and wrapped.op == "AddV2" and ids.op == "Placeholder"
                    and source(condition.input[0]) is ids):
                dtype = node.attr["T"]
                node.op = "Identity"
                node.ClearField("input")
                node.input.append(ids.name)
                node.ClearField("attr")
                node.attr["T"].CopyFrom(dtype)
        elif node.op == "SquaredDifference":
            diff = graph_def.node.add(name=f"{node.name}/difference", op="Sub", input=node.input)
            diff.attr["T"].CopyFrom(node.attr["T"])
            node.op = "Mul"
            node.ClearField("input")
            node.input.extend([diff.name, diff.name])
    graph = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
    return graph.prune(
        [graph.graph.get_tensor_by_name(t.name) for t in frozen.inputs],
        [graph.graph.get_tensor_by_name(t.name) for t in frozen.outputs],
    )


def _representative_dataset(interface, tokenizer, texts, specs, max_length, truncate_from="end"):
    """Calibration samples: real text packed exactly as at inference, one batch-1 sample each."""
    batch = specs[features.TOKEN_IDS].shape[0] or 1

    def samples():
        rows = [t if isinstance(t, (tuple, list)) else (t, None) for t in texts]
        for start in range(0, len(rows) - batch + 1, batch):
            chunk = rows[start : start + batch]
            pairs = [b for _, b in chunk] if chunk[0][1] is not None else None
            packed = text_inputs.pack_texts(
                tokenizer, [a for a, _ in chunk], pairs, max_length, pad_to=max_length, truncate_from=truncate_from
            )
            sample = {}
            for name, spec in specs.items():
                shape = [batch] + spec.shape.as_list()[1:]
                if name in packed:
                    # Multiple choice: the same packed pair in every choice slot.
                    value = np.broadcast_to(packed[name].reshape([batch] + [1] * (len(shape) - 2) + [-1]), shape)
                else:  # mask_positions: real-token positions, after [CLS]
                    lengths = packed[features.PADDING_MASK].sum(-1, keepdims=True)
                    value = 1 + np.arange(shape[-1])[None] % np.maximum(lengths - 2, 1)
                sample[name] = np.ascontiguousarray(value, dtype="int32")
            yield sample

    return samples

