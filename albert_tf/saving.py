"""Pretrained directories: a model saved so that the directory alone rebuilds it.

Layout of a directory written by `save_pretrained`:
    config.json          the `AlbertConfig` (original / HF field names)
    albert_tf.json       the Keras config of the whole model (its class, heads, ...)
    model.weights.h5     the weights
"""

import importlib
import json
import os

import keras

from albert_tf.config import AlbertConfig

CONFIG_FILE = "config.json"
MODEL_FILE = "albert_tf.json"
WEIGHTS_FILE = "model.weights.h5"


def save_pretrained(model, directory):
    """Writes `model` (a backbone or any model built on one) to `directory`."""
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "config") or not isinstance(backbone.config, AlbertConfig):
        raise ValueError(
            "`model` must be an AlbertBackbone or a model with a `.backbone`. "
            f"Received: {type(model).__name__}"
        )
    os.makedirs(directory, exist_ok=True)
    backbone.config.save(os.path.join(directory, CONFIG_FILE))
    with open(os.path.join(directory, MODEL_FILE), "w") as f:
        json.dump(keras.saving.serialize_keras_object(model), f, indent=2)
    model.save_weights(os.path.join(directory, WEIGHTS_FILE))


def load_pretrained(directory):
    """Rebuilds the model saved in `directory` by `save_pretrained` (or `albert-tf convert`).

    Returns:
        The model that was saved: an `AlbertBackbone`, an `AlbertPretrainer`
        or a task model.

    Raises:
        ValueError: naming the file and what is wrong with it: missing files,
            bytes that are not UTF-8, invalid JSON, an unknown config, a
            corrupt or truncated weights file, weights that do not fit the config.
    """
    missing = [
        name for name in (CONFIG_FILE, MODEL_FILE, WEIGHTS_FILE)
        if not os.path.isfile(os.path.join(directory, name))
    ]
    if missing:
        raise ValueError(
            f"{directory} is not an albert-tf pretrained directory: missing {missing}. "
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
    with open(path, "rb") as f:
        data = f.read()
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
        with h5py.File(path, "r") as f:
            f.visit(lambda name: None)
    except (OSError, RuntimeError) as e:
        raise ValueError(f"{path} is not a readable HDF5 weights file (truncated or corrupt): {e}") from e


class PretrainedMixin:
    """`save_pretrained` / `from_pretrained` for the models of this package."""

    def save_pretrained(self, directory):
        """Writes this model to `directory`; see `albert_tf.saving`."""
        save_pretrained(self, directory)

    @classmethod
    def from_pretrained(cls, directory):
        """Loads `directory` as this class.

        A backbone can be taken from any saved model built on one (a
        pretrainer, a task model); other classes must match what was saved.
        """
        model = load_pretrained(directory)
        if isinstance(model, cls):
            return model
        backbone = getattr(model, "backbone", None)
        if isinstance(backbone, cls):
            return backbone
        raise ValueError(
            f"{directory} holds a {type(model).__name__}, which is not a {cls.__name__} "
            f"and has no {cls.__name__} backbone."
        )
