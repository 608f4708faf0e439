"""TFLite Model Metadata for text classifiers: what MediaPipe Tasks and the TFLite Task Library read.

MediaPipe's `TextClassifier` and the Task Library's `BertNLClassifier` take a
`.tflite` file and raw text. They find what to do in the file's
`TFLITE_METADATA` (a flatbuffer of the published `metadata_schema.fbs`, file
identifier "M001") and the files zipped after the model:

    input tensors   named `ids`, `mask`, `segment_ids` in the metadata (they are
                    found by these names); in the subgraph in that order too,
                    the positions the Task Library resizes for dynamic lengths.
    tokenizer       a SentencePiece tokenizer process unit (the subgraph's
                    input process unit 0) naming `spiece.model`.
    output          one tensor, named `probability`, with `labels.txt` (one
                    label per line) as its TENSOR_AXIS_LABELS file. Both
                    libraries read one output: BertNLClassifier refuses more,
                    and MediaPipe makes every output a classification head.
    associated files  stored (uncompressed) in a zip archive appended to the
                    flatbuffer, as MediaPipe's metadata populator writes them;
                    the interpreter ignores the bytes after the model.

`min_parser_version` is 1.1.0, the schema version that added
SentencePieceTokenizerOptions and input process units (nothing newer is used).

The metadata flatbuffer is written here with the `flatbuffers` package (a
TensorFlow dependency) from the schema's tables and field slots; maintained
writers ship only inside MediaPipe or tflite-support, which albert-tf does not
depend on. tests/export/test_export_tflite.py reads it back with MediaPipe's own
reader and runs MediaPipe's TextClassifier on it.
"""

import io
import zipfile

import flatbuffers
from tensorflow.lite.python import schema_py_generated as tflite_schema
from tensorflow.lite.tools import flatbuffer_utils

from albert_tf.utils.layout import LABELS_FILE
from input_pipeline import features

METADATA_NAME = "TFLITE_METADATA"
METADATA_FILE_IDENTIFIER = b"M001"
MIN_PARSER_VERSION = "1.1.0"
# Metadata name of each id input, in the order they are put in the subgraph.
INPUT_ROLES = {features.TOKEN_IDS: "ids", features.PADDING_MASK: "mask", features.SEGMENT_IDS: "segment_ids"}
OUTPUT_NAME = "probability"
TOKENIZER_FILE = "spiece.model"

# Enum values and union type codes of metadata_schema.fbs.
_TENSOR_AXIS_LABELS = 2
_FEATURE_PROPERTIES = 1  # ContentProperties union
_SENTENCE_PIECE_TOKENIZER_OPTIONS = 5  # ProcessUnitOptions union

_INPUT_DESCRIPTIONS = {
    "ids": "SentencePiece ids of [CLS] text [SEP], then padding (id 0) to the fixed length.",
    "mask": "1 for each real token ([CLS], pieces, [SEP]), 0 for padding.",
    "segment_ids": "0 for every position (one text).",
}


def with_text_classifier_metadata(flatbuffer, signature_key, spiece_model, label_names, *, name, description,
                                  output_description, score_range=None):
    """`flatbuffer` (a converted .tflite) with text-classifier metadata and its files; returns bytes.

    Args:
        flatbuffer: bytes of a model whose signature `signature_key` takes
            the int32 inputs `token_ids`, `segment_ids`, `padding_mask`, each
            (1, max_length), and has one output.
        signature_key: the signature whose tensors are described.
        spiece_model: bytes of the tokenizer's `spiece.model`.
        label_names: one name per output column, or None (no labels file).
        name, description: the model's name and description.
        output_description: what the output holds.
        score_range: (min, max) of the output when it is bounded (probabilities), else None.
    """
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    signature = next((s for s in model.signatureDefs if s.signatureKey.decode() == signature_key), None)
    if signature is None or len(model.subgraphs) != 1:
        raise ValueError(f"Text-classifier metadata needs one subgraph with the signature {signature_key!r}.")
    inputs = {t.name.decode(): t for t in signature.inputs}
    if set(inputs) != set(INPUT_ROLES) or len(signature.outputs) != 1:
        raise ValueError(
            f"Text-classifier metadata needs the inputs {sorted(INPUT_ROLES)} and one output. Received: inputs "
            f"{sorted(inputs)}, outputs {[t.name.decode() for t in signature.outputs]}"
        )
    subgraph = model.subgraphs[0]
    signature.inputs = [inputs[n] for n in INPUT_ROLES]
    subgraph.inputs = [inputs[n].tensorIndex for n in INPUT_ROLES]

    metadata = _metadata_flatbuffer(name, description, output_description, score_range, label_names is not None)
    buffer = tflite_schema.BufferT()
    buffer.data = metadata
    model.buffers.append(buffer)
    entry = tflite_schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = [m for m in (model.metadata or []) if m.name.decode() != METADATA_NAME] + [entry]
    packed = io.BytesIO(flatbuffer_utils.convert_object_to_bytearray(model))
    associated = {TOKENIZER_FILE: spiece_model}
    if label_names is not None:
        associated[LABELS_FILE] = "".join(f"{label}\n" for label in label_names).encode("utf-8")
    # Appending mode after the flatbuffer: the archive's offsets count from the start of the file.
    with zipfile.ZipFile(packed, "a", compression=zipfile.ZIP_STORED) as archive:
        for file_name, data in associated.items():
            archive.writestr(file_name, data)
    return packed.getvalue()


def read_metadata(flatbuffer):
    """The raw `TFLITE_METADATA` bytes of a .tflite file, or None."""
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    for entry in model.metadata or []:
        if entry.name.decode() == METADATA_NAME:
            return bytes(model.buffers[entry.buffer].data)
    return None


def _metadata_flatbuffer(name, description, output_description, score_range, has_labels):
    """The ModelMetadata table, field by field as metadata_schema.fbs numbers them."""
    b = flatbuffers.Builder(1024)

    def table(slots):
        """A table from {slot: (kind, value)}; kind is "offset", "int8" or "ubyte"."""
        b.StartObject(max(slots) + 1 if slots else 0)
        for slot, (kind, value) in slots.items():
            if kind == "offset":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            else:
                b.PrependInt8Slot(slot, value, 0)
        return b.EndObject()

    def vector(offsets):
        b.StartVector(4, len(offsets), 4)
        for offset in reversed(offsets):
            b.PrependUOffsetTRelative(offset)
        return b.EndVector()

    def float_vector(values):
        b.StartVector(4, len(values), 4)
        for value in reversed(values):
            b.PrependFloat32(value)
        return b.EndVector()

    def associated_file(file_name, file_description, file_type=None):
        slots = {0: ("offset", b.CreateString(file_name)), 1: ("offset", b.CreateString(file_description))}
        if file_type is not None:
            slots[2] = ("int8", file_type)
        return table(slots)

    def feature_content():
        return table({0: ("int8", _FEATURE_PROPERTIES), 1: ("offset", table({}))})

    def tensor(tensor_name, tensor_description, stats=None, files=()):
        slots = {0: ("offset", b.CreateString(tensor_name)), 1: ("offset", b.CreateString(tensor_description)),
                 3: ("offset", feature_content())}
        if stats is not None:  # Stats: max (slot 0), min (slot 1)
            low, high = stats
            slots[5] = ("offset", table({0: ("offset", float_vector([high])), 1: ("offset", float_vector([low]))}))
        if files:
            slots[6] = ("offset", vector(list(files)))
        return table(slots)

    inputs = [tensor(role, _INPUT_DESCRIPTIONS[role]) for role in INPUT_ROLES.values()]
    labels = ([associated_file(LABELS_FILE, "The class names, one per line, in output order.",
                               _TENSOR_AXIS_LABELS)] if has_labels else [])
    output = tensor(OUTPUT_NAME, output_description, score_range, labels)
    spiece = associated_file(TOKENIZER_FILE, "The SentencePiece model that splits text into ids.")
    tokenizer_options = table({0: ("offset", vector([spiece]))})
    tokenizer = table({0: ("int8", _SENTENCE_PIECE_TOKENIZER_OPTIONS), 1: ("offset", tokenizer_options)})
    subgraph = table({
        2: ("offset", vector(inputs)),
        3: ("offset", vector([output])),
        5: ("offset", vector([tokenizer])),
    })
    root = table({
        0: ("offset", b.CreateString(name)),
        1: ("offset", b.CreateString(description)),
        3: ("offset", vector([subgraph])),
        7: ("offset", b.CreateString(MIN_PARSER_VERSION)),
    })
    b.Finish(root, file_identifier=METADATA_FILE_IDENTIFIER)
    return bytes(b.Output())
