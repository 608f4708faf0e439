"""Pretrained directories: a model saved so that the directory alone rebuilds it.

Layout of a directory written by `save_pretrained`:
    config.json          the `AlbertConfig` (original / HF field names)
    albert_tf.json       the Keras config of the whole model (its class, heads, ...)
    model.weights.h5     the weights
    tokenizer/           the preprocessor's tokenizer, for a model that has one

`load_pretrained` also takes a HuggingFace `save_pretrained` directory of an
ALBERT model and converts it on load (`albert_tf.convert.hf`).
"""

import importlib
import io
import json
import os
import warnings

import keras

from albert_tf.config import AlbertConfig
from input_pipeline import files
from input_pipeline.tokenizer import MODEL_FILE as SPIECE_FILE

CONFIG_FILE = "config.json"
MODEL_FILE = "albert_tf.json"
WEIGHTS_FILE = "model.weights.h5"
# What a reader of a model directory (and of its tokenizer/) looks for first:
# `files.move` writes these last where a directory cannot be renamed at once.
ENTRY_FILES = (SPIECE_FILE, CONFIG_FILE, MODEL_FILE)


def save_pretrained(model, directory):
    """Writes `model` (a backbone or any model built on one) to `directory`."""
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "config") or not isinstance(backbone.config, AlbertConfig):
        raise ValueError(
            "`model` must be an AlbertBackbone or a model with a `.backbone`. "
            f"Received: {type(model).__name__}"
        )
    files.makedirs(directory)
    backbone.config.save(os.path.join(directory, CONFIG_FILE))
    files.write_text(
        os.path.join(directory, MODEL_FILE), json.dumps(keras.saving.serialize_keras_object(model), indent=2)
    )
    model.save_weights(os.path.join(directory, WEIGHTS_FILE))
    preprocessor = getattr(model, "preprocessor", None)
    if preprocessor is not None:
        # Where every command looks for a model's tokenizer; the preprocessor
        # itself (SentencePiece model included) is in the model's config.
        # Imported here: model_dirs imports this module.
        from albert_tf.model_dirs import TOKENIZER_DIR

        preprocessor.tokenizer.save(os.path.join(directory, TOKENIZER_DIR))


def load_pretrained(directory):
    """Rebuilds the model in `directory`: albert-tf's own, or a HuggingFace one.

    `directory` is either what `save_pretrained` (or `albert-tf convert`)
    wrote, or a HF transformers `save_pretrained` directory of an ALBERT model
    (config.json with model.safetensors, pytorch_model.bin or a sharded index
    of either, and no albert_tf.json), which is converted in memory as
    `albert-tf convert --from hf` converts it.

    Returns:
        The model that was saved: an `AlbertBackbone`, an `AlbertPretrainer`
        or a task model. From a HF directory: an `AlbertPretrainer` for
        AlbertForPreTraining / AlbertForMaskedLM weights (the latter with a
        freshly initialized SOP head and pooler, with a warning that lists
        them), an `AlbertBackbone` for AlbertModel.

    Raises:
        ValueError: naming the file and what is wrong with it: missing files,
            bytes that are not UTF-8, invalid JSON, an unknown config, a
            corrupt or truncated weights file, weights that do not fit the
            config; for a HF directory also a `model_type` other than "albert"
            and tensors the converter does not know (a task head, for one).
    """
    # albert_tf.convert.hf imports this module: imported here, on first use.
    from albert_tf.convert import hf

    if hf.is_hf_dir(directory):
        report = hf.load_hf(directory)
        if report.newly_initialized:
            # Usable (MLM works; fine-tuning trains the pooler), so a warning
            # rather than an error, as transformers gives for the same checkpoints.
            warnings.warn(
                f"{directory} has no pooler/SOP head (e.g. AlbertForMaskedLM); these "
                f"{len(report.newly_initialized)} weights are newly initialized and need training "
                f"before use: {', '.join(report.newly_initialized)}",
                stacklevel=2,
            )
        return report.model
    missing = [
        name for name in (CONFIG_FILE, MODEL_FILE, WEIGHTS_FILE)
        if not files.isfile(os.path.join(directory, name))
    ]
    if missing:
        raise ValueError(
            f"{directory} is not an albert-tf pretrained directory: missing {missing}; nor a HuggingFace "
            f"one: no {' or '.join(hf.WEIGHT_FILES)} beside a {CONFIG_FILE}. "
            "Write one with `save_pretrained` or `albert-tf convert`."
        )
    config_path, model_path, weights_path = (os.path.join(directory, n) for n in (CONFIG_FILE, MODEL_FILE, WEIGHTS_FILE))
    config_values, model_values = _read_json(config_path), _read_json(model_path)
    try:
        config = AlbertConfig.from_dict(config_values)
    except ValueError as e:
        raise ValueError(f"{config_path}: {e}") from e
    # Keras finds the model classes by the names they register when their
    # modules load; `albert_tf` loads them lazily, and albert_tf.models imports
    # this module (PretrainedMixin), so they are loaded here, on first use.
    importlib.import_module("albert_tf.models")
    # A fine-tuned model's compile config names our optimizer and schedule.
    importlib.import_module("albert_tf.optimizers")
    importlib.import_module("albert_tf.schedules")
    try:
        model = keras.saving.deserialize_keras_object(model_values)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{model_path} does not describe an albert-tf model: {e}") from e
    backbone = getattr(model, "backbone", model)
    if getattr(backbone, "config", None) != config:
        raise ValueError(
            f"{directory}: {CONFIG_FILE} and {MODEL_FILE} describe different models "
            f"({config} vs {getattr(backbone, 'config', type(model).__name__)})."
        )
    _check_weights_file(weights_path)
    try:
        model.load_weights(weights_path)
    except (ValueError, KeyError, OSError) as e:
        raise ValueError(
            f"{weights_path}: the weights do not match the model described by {CONFIG_FILE} "
            f"and {MODEL_FILE}: {e}"
        ) from e
    return model


def _read_json(path):
    """The JSON value in `path`; ValueError naming the file for bad bytes or bad JSON."""
    data = files.read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path} is not UTF-8 text: byte {data[e.start]:#04x} at offset {e.start} ({e.reason}). "
            "The file is damaged; write it again (save_pretrained or albert-tf convert)."
        ) from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def _check_weights_file(path):
    """ValueError naming `path` unless it is a readable HDF5 file (not truncated, not garbage)."""
    import h5py

    try:
        # h5py reads local files only; Keras' load_weights reads a URL into memory too.
        with h5py.File(io.BytesIO(files.read_bytes(path)) if files.is_url(path) else path, "r") as f:
            f.visit(lambda name: None)
    except (OSError, RuntimeError) as e:
        raise ValueError(f"{path} is not a readable HDF5 weights file (truncated or corrupt): {e}") from e


class PretrainedMixin:
    """`save_pretrained` / `from_pretrained` for the models of this package."""

    def save_pretrained(self, directory):
        """Writes this model (and its preprocessor's tokenizer) to `directory`; see `save_pretrained`."""
        save_pretrained(self, directory)

    @classmethod
    def from_pretrained(cls, directory):
        """Loads `directory` (a model directory, or a run's) as this class.

        A backbone can be taken from any saved model built on one (a
        pretrainer, a task model); other classes must match what was saved.
        Task models override this to build a new head on a saved backbone.
        """
        from albert_tf.model_dirs import resolve_model_dir

        model = load_pretrained(resolve_model_dir(directory))
        if isinstance(model, cls):
            return model
        backbone = getattr(model, "backbone", None)
        if isinstance(backbone, cls):
            return backbone
        raise ValueError(
            f"{directory} holds a {type(model).__name__}, which is not a {cls.__name__} "
            f"and has no {cls.__name__} backbone."
        )
