"""Pretrained directories: a model saved so that the directory alone rebuilds it.

Layout of a directory written by `save_pretrained` (names in `albert_tf.model_dirs`):
    config.json          the `AlbertConfig` (original / HF field names)
    albert_tf.json       the Keras config of the whole model (its class, heads, ...)
    model.weights.h5     the weights
    tokenizer/           the preprocessor's tokenizer, for a model that has one

A HuggingFace `save_pretrained` directory of an ALBERT model is read with
`load_hf_dir`: `albert_tf.hf_checkpoint` reads its files and
`checkpoint_weights` puts the tensors into a model built from its config;
a keras-hub preset is read the same way with `load_keras_hub_dir`
(`albert_tf.keras_hub_preset` reads its files).
Neither this module nor those import a model class: a saved model is rebuilt
from the names its classes register with Keras, all registered as soon as
any module of `albert_tf.models` is imported (the package imports them all).
"""

import io
import json
import os
import warnings

import keras

from albert_tf.config import AlbertConfig
from albert_tf.hf_checkpoint import READ_ARCHITECTURES, read_hf_checkpoint
from albert_tf.keras_hub_preset import keras_hub_name, read_keras_hub_preset
from albert_tf.hub import resolve_model
from albert_tf.model_dirs import (
    CONFIG_FILE, KERAS_HUB, MODEL_FILE, TOKENIZER_DIR, WEIGHT_FILES, WEIGHTS_FILE, ModelDir, resolve_model_dir,
)
from albert_tf.models.checkpoint_weights import Scheme, hf_scheme, load_checkpoint
from albert_tf.utils import files
from albert_tf.utils.errors import UserError


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
    # Saved as float32 whatever policy trained it: the weights are float32
    # under every policy, and the precision is the loading run's choice
    # (`with_dtype_policy`), so exports and later runs do not inherit it.
    serialized = _with_backbone_policy(keras.saving.serialize_keras_object(model), type(backbone).__name__, "float32")
    files.write_text(os.path.join(directory, MODEL_FILE), json.dumps(serialized, indent=2))
    model.save_weights(os.path.join(directory, WEIGHTS_FILE))
    preprocessor = getattr(model, "preprocessor", None)
    if preprocessor is not None:
        # Where every command looks for a model's tokenizer; the preprocessor
        # itself (SentencePiece model included) is in the model's config.
        preprocessor.tokenizer.save(os.path.join(directory, TOKENIZER_DIR))


def with_dtype_policy(model, dtype):
    """`model` (a backbone or a model built on one) rebuilt under the dtype policy `dtype`, with its weights.

    The weights are float32 under every policy, so they carry over as they
    are; the task heads follow the backbone's policy (logits and losses stay
    float32). Returns `model` itself when its backbone already has `dtype`.

    Args:
        model: an `AlbertBackbone`, an `AlbertPretrainer` or a task model.
        dtype: a dtype policy name: "float32", "mixed_bfloat16" or "mixed_float16".
    """
    backbone = getattr(model, "backbone", model)
    if backbone.dtype_policy.name == dtype:
        return model
    serialized = _with_backbone_policy(keras.saving.serialize_keras_object(model), type(backbone).__name__, dtype)
    rebuilt = keras.saving.deserialize_keras_object(serialized)
    rebuilt.set_weights(model.get_weights())
    return rebuilt


def _with_backbone_policy(serialized, backbone_class, dtype):
    """A copy of a serialized model whose backbone (the `backbone_class` entry) has the dtype policy `dtype`."""
    policy = keras.saving.serialize_keras_object(keras.dtype_policies.get(dtype))

    def rewrite(value):
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        if not isinstance(value, dict):
            return value
        value = {k: rewrite(v) for k, v in value.items()}
        if value.get("class_name") == backbone_class and isinstance(value.get("config"), dict):
            value["config"] = {**value["config"], "dtype": policy}
        return value

    return rewrite(serialized)


def open_model_dir(directory):
    """The `ModelDir` a model argument names, classified once: a hub handle is downloaded first, a run
    directory names its `best/` or `final/` (`model_dirs.resolve_model_dir`), a `ModelDir` is itself."""
    return resolve_model_dir(directory if isinstance(directory, ModelDir) else resolve_model(directory))


def load_saved_model(model_dir):
    """Rebuilds the model that `save_pretrained` (or `albert-tf convert`) wrote to the `ModelDir` `model_dir`.

    Returns:
        The model that was saved: an `AlbertBackbone`, an `AlbertPretrainer`
        or a task model.

    Raises:
        ValueError: naming the file and what is wrong with it: missing files,
            bytes that are not UTF-8, invalid JSON, an unknown config, a
            corrupt or truncated weights file, weights that do not fit the config.
    """
    # A fine-tuned model's compile config names our optimizer and schedule,
    # which Keras knows once their modules are loaded. Imported on use: they
    # import TensorFlow, which the models alone (on JAX) do not need.
    from albert_tf import optimizers, schedules  # noqa: F401

    directory = model_dir.path
    missing = [name for name in (CONFIG_FILE, MODEL_FILE, WEIGHTS_FILE) if name not in model_dir.names]
    if missing:
        raise UserError(
            f"{directory} is not an albert-tf pretrained directory: missing {missing}; nor a HuggingFace "
            f"one: no {' or '.join(WEIGHT_FILES)} beside a {CONFIG_FILE}. "
            "Write one with `save_pretrained` or `albert-tf convert`."
        )
    config_path, model_path, weights_path = (os.path.join(directory, n) for n in (CONFIG_FILE, MODEL_FILE, WEIGHTS_FILE))
    config_values, model_values = _read_json(config_path), _read_json(model_path)
    try:
        config = AlbertConfig.from_dict(config_values)
    except ValueError as e:
        raise UserError(f"{config_path}: {e}") from e
    try:
        model = keras.saving.deserialize_keras_object(model_values)
    except (ValueError, TypeError, KeyError) as e:
        raise UserError(f"{model_path} does not describe an albert-tf model: {e}") from e
    backbone = getattr(model, "backbone", model)
    if getattr(backbone, "config", None) != config:
        raise UserError(
            f"{directory}: {CONFIG_FILE} and {MODEL_FILE} describe different models "
            f"({config} vs {getattr(backbone, 'config', type(model).__name__)})."
        )
    _check_weights_file(weights_path)
    try:
        model.load_weights(weights_path)
    except (ValueError, KeyError, OSError) as e:
        raise UserError(
            f"{weights_path}: the weights do not match the model described by {CONFIG_FILE} "
            f"and {MODEL_FILE}: {e}"
        ) from e
    return model


def load_hf_dir(directory, build):
    """The model of the HF `save_pretrained` directory `directory`, built by `build`.

    Args:
        directory: a HF directory of AlbertModel, AlbertForPreTraining or
            AlbertForMaskedLM weights.
        build: (AlbertConfig, has_heads) -> the empty model to load the
            weights into: an `AlbertBackbone`, or an `AlbertPretrainer` when
            `has_heads` (the checkpoint holds the MLM head).

    Returns:
        A `checkpoint_weights.ConversionReport`: the model, and the weights
        the checkpoint did not hold (the pooler and SOP head of an
        AlbertForMaskedLM), initialized fresh.

    Raises:
        ValueError: unreadable files, a `model_type` other than "albert", or
            tensors that do not match the config (listing every difference;
            a task head names the architectures that are read).
    """
    checkpoint = read_hf_checkpoint(directory)
    model = build(checkpoint.config, checkpoint.has_heads)
    try:
        return load_checkpoint(
            model, checkpoint.shapes, checkpoint.read, hf_scheme(checkpoint.backbone_prefix), checkpoint.source
        )
    except ValueError as e:
        # A task model's head shows up as unexpected tensors: say why.
        others = sorted(set(checkpoint.architectures) - set(READ_ARCHITECTURES))
        if not others:
            raise
        raise UserError(
            f"{e}\n  {os.path.join(directory, CONFIG_FILE)} names {others}: albert-tf reads the weights of "
            f"{', '.join(READ_ARCHITECTURES)}, not task heads."
        ) from e


def load_converted_dir(model_dir, build):
    """The model of another library's `ModelDir` (`ModelDir.converts_on_load`), built by `build`.

    A HF directory is read by `load_hf_dir`, a keras-hub preset by
    `load_keras_hub_dir`; `build` and the result are as for `load_hf_dir`.
    """
    if model_dir.kind == KERAS_HUB:
        return load_keras_hub_dir(model_dir.path, build)
    return load_hf_dir(model_dir.path, build)


def load_keras_hub_dir(directory, build):
    """The backbone of the keras-hub preset `directory` (what `AlbertBackbone.save_to_preset` writes).

    Args:
        directory: a keras-hub preset directory of an AlbertBackbone.
        build: as for `load_hf_dir`; a preset holds no heads (`has_heads` False).

    Returns:
        A `checkpoint_weights.ConversionReport` of the backbone, nothing newly initialized.

    Raises:
        UserError: unreadable files, another keras-hub class, a task preset,
            or tensors that do not match the config (listing every difference).
    """
    preset = read_keras_hub_preset(directory)
    scheme = Scheme("keras-hub", lambda e: keras_hub_name(e.name), lambda e: False, lambda name: False)
    return load_checkpoint(build(preset.config, False), preset.shapes, preset.read, scheme, preset.source)


def warn_newly_initialized(directory, report):
    """Warns when a HF checkpoint left weights freshly initialized (AlbertForMaskedLM's pooler, SOP head)."""
    if report.newly_initialized:
        # Usable (MLM works; fine-tuning trains the pooler), so a warning
        # rather than an error, as transformers gives for the same checkpoints.
        warnings.warn(
            f"{directory} has no pooler/SOP head (e.g. AlbertForMaskedLM); these "
            f"{len(report.newly_initialized)} weights are newly initialized and need training "
            f"before use: {', '.join(report.newly_initialized)}",
            stacklevel=3,
        )


def _read_json(path):
    """The JSON value in `path`; ValueError naming the file for bad bytes or bad JSON."""
    data = files.read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path} is not UTF-8 text: byte {data[e.start]:#04x} at offset {e.start} ({e.reason}). "
            "The file is damaged; write it again (save_pretrained or albert-tf convert)."
        ) from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON: {e}") from e


def _check_weights_file(path):
    """ValueError naming `path` unless it is a readable HDF5 file (not truncated, not garbage)."""
    import h5py

    try:
        # h5py reads local files only; Keras' load_weights reads a URL into memory too.
        with h5py.File(io.BytesIO(files.read_bytes(path)) if files.is_url(path) else path, "r") as f:
            f.visit(lambda name: None)
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path} is not a readable HDF5 weights file (truncated or corrupt): {e}") from e


class PretrainedMixin:
    """`save_pretrained` for the models of this package (each defines its `from_pretrained`)."""

    def save_pretrained(self, directory):
        """Writes this model (and its preprocessor's tokenizer) to `directory`; see `save_pretrained`."""
        save_pretrained(self, directory)
