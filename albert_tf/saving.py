"""Pretrained directories: a model saved so that the directory alone rebuilds it.

Layout of a directory written by `save_pretrained`:
    config.json          the `AlbertConfig` (original / HF field names)
    albert_tf.json       the Keras config of the whole model (its class, heads, ...)
    model.weights.h5     the weights
"""

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
        ValueError: when files are missing, or the weights do not fit the config.
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
    # Registers every model class the saved Keras config may name.
    import albert_tf.models  # noqa: F401

    config = AlbertConfig.load(os.path.join(directory, CONFIG_FILE))
    with open(os.path.join(directory, MODEL_FILE)) as f:
        model_config = json.load(f)
    model = keras.saving.deserialize_keras_object(model_config)
    backbone = getattr(model, "backbone", model)
    if backbone.config != config:
        raise ValueError(
            f"{directory}: {CONFIG_FILE} and {MODEL_FILE} describe different models "
            f"({config} vs {backbone.config})."
        )
    try:
        model.load_weights(os.path.join(directory, WEIGHTS_FILE))
    except (ValueError, KeyError, OSError) as e:
        raise ValueError(
            f"{directory}: the weights in {WEIGHTS_FILE} do not match the model described "
            f"by {CONFIG_FILE}: {e}"
        ) from e
    return model


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
