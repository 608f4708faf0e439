"""Reading a HuggingFace ALBERT checkpoint: its config.json and its weight tensors.

Reads a `save_pretrained` directory of AlbertModel, AlbertForPreTraining or
AlbertForMaskedLM (config.json + model.safetensors, sharded safetensors, or
pytorch_model.bin). Safetensors are read with the safetensors numpy API, so
torch is needed only for pytorch_model.bin. This module reads files only: the
models put the tensors into their variables (`albert_tf.models.checkpoint_weights`),
so it imports neither Keras nor the models.
"""

import dataclasses
import io
import json
import os

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load as load_safetensors

from albert_tf.config import AlbertConfig
from albert_tf.model_dirs import (
    CONFIG_FILE, INDEX_SUFFIX, SAFETENSORS_FILE, TORCH_FILE, read_capped, shard_names,
)
from albert_tf.utils import files
from albert_tf.utils.errors import UserError

# The HF classes whose checkpoints are read (config.json's "architectures").
READ_ARCHITECTURES = ("AlbertModel", "AlbertForPreTraining", "AlbertForMaskedLM")
# What models with heads put before the backbone's tensor names.
BACKBONE_PREFIX = "albert."
# Non-persistent buffers that older transformers versions saved.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Tied to `albert.embeddings.word_embeddings.weight` and `predictions.bias`;
# transformers 5 does not save them, older versions did.
_DECODER_WEIGHT, _DECODER_BIAS = "predictions.decoder.weight", "predictions.decoder.bias"


@dataclasses.dataclass(frozen=True)
class HFCheckpoint:
    """The tensors of a HF directory, without the buffers and the tied decoder.

    Attributes:
        config: the `AlbertConfig` of its config.json, with the projection and
            HF's layer-to-group formula (where it differs from "exact").
        shapes: tensor name -> shape.
        read: tensor name -> numpy array (HF layout).
        source: the weights file (or shard index), for messages.
        backbone_prefix: `BACKBONE_PREFIX` for models with heads, "" for AlbertModel.
        architectures: config.json's "architectures" (a list, maybe empty).
    """

    config: AlbertConfig
    shapes: dict
    read: object
    source: str
    backbone_prefix: str
    architectures: list

    @property
    def has_heads(self):
        """Whether it holds pretraining heads (the MLM or SOP head) besides the backbone."""
        return bool(self.backbone_prefix) and any(
            not name.startswith(self.backbone_prefix) for name in self.shapes
        )


def read_hf_checkpoint(src_dir):
    """The `HFCheckpoint` of the HF directory `src_dir`.

    Raises:
        ValueError: unreadable files, a `model_type` other than "albert", or an
            untied decoder.
    """
    config, architectures = read_config(src_dir)
    shapes, read, source = _open_weights(src_dir, config)
    prefix = BACKBONE_PREFIX if any(n.startswith(BACKBONE_PREFIX) for n in shapes) else ""
    shapes = {n: s for n, s in shapes.items() if n.removeprefix(prefix) not in _BUFFERS}
    _check_tied_decoder(shapes, read, prefix, source)
    shapes = {n: s for n, s in shapes.items() if n not in (_DECODER_WEIGHT, _DECODER_BIAS)}
    return HFCheckpoint(config, shapes, read, source, prefix, architectures)


def read_config(src_dir):
    """(the `AlbertConfig`, the "architectures" list, maybe empty) of `src_dir`'s config.json, read once."""
    path = os.path.join(src_dir, CONFIG_FILE)
    if not files.isfile(path):
        raise UserError(f"{src_dir} is not a HF model directory: {CONFIG_FILE} is missing.")
    try:
        values = json.loads(files.read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not valid UTF-8 JSON: {e}") from e
    if isinstance(values, dict) and values.get("model_type", "albert") != "albert":
        raise UserError(f"{path} describes a {values['model_type']!r} model, not 'albert'.")
    # HF names: "gelu" is the exact erf form, "gelu_new" the tanh approximation.
    try:
        config = AlbertConfig.from_dict(values, gelu_is_tanh=False)
        # HF's AlbertModel always has the E -> H projection, and picks groups by its own formula.
        config = config.replace(embedding_projection=True).grouped_by("hf")
    except ValueError as e:
        raise UserError(f"{path}: {e}") from e
    architectures = values.get("architectures")
    return config, architectures if isinstance(architectures, list) else []


def _open_weights(src_dir, config):
    """(shapes, read, source) for the weight files of `src_dir`, of the model `config` describes."""
    for index_name, reader in (
        (SAFETENSORS_FILE + INDEX_SUFFIX, _open_safetensors),
        (TORCH_FILE + INDEX_SUFFIX, _open_torch),
    ):
        single = os.path.join(src_dir, index_name[: -len(INDEX_SUFFIX)])
        index = os.path.join(src_dir, index_name)
        if files.isfile(single):
            return (*reader([single], config), single)
        if files.isfile(index):
            return (*reader(_shard_paths(src_dir, index), config), index)
    raise UserError(
        f"{src_dir} holds no weights: expected {SAFETENSORS_FILE}, {TORCH_FILE} "
        "or a sharded index of either."
    )


def _shard_paths(src_dir, index_path):
    return [os.path.join(src_dir, name) for name in shard_names(index_path)]


def _open_safetensors(paths, config):
    if any(files.is_url(path) for path in paths):
        return _read_safetensors_whole(paths, config)
    shapes, where = {}, {}
    for path in paths:
        try:
            with safe_open(path, framework="np") as f:
                for name in f.keys():
                    tensor = f.get_slice(name)
                    _check_float(path, name, tensor.get_dtype())
                    shapes[name] = tuple(tensor.get_shape())
                    where[name] = path
        except (SafetensorError, OSError) as e:
            raise UserError(f"{path} is not a readable safetensors file: {e}") from e

    def read(name):
        try:
            with safe_open(where[name], framework="np") as f:
                return f.get_tensor(name)
        except (SafetensorError, OSError, TypeError) as e:
            raise UserError(f"{where[name]}: cannot read tensor {name!r}: {e}") from e

    return shapes, read


def _read_safetensors_whole(paths, config):
    """(shapes, read) of safetensors files in a bucket: `safe_open` maps local files only, so each file
    is read into memory whole, once its size is found to fit the model (`read_capped`)."""
    tensors = {}
    for path in paths:
        try:
            read = load_safetensors(read_capped(path, config))
        except (SafetensorError, OSError) as e:
            raise UserError(f"{path} is not a readable safetensors file: {e}") from e
        for name, tensor in read.items():
            _check_float(path, name, "F" if tensor.dtype.kind == "f" or tensor.dtype.name == "bfloat16"
                         else tensor.dtype.name.upper())
        tensors.update(read)
    return {name: tuple(t.shape) for name, t in tensors.items()}, tensors.__getitem__


def _check_float(path, name, dtype):
    """UserError naming tensor `name` of `path` unless its safetensors `dtype` ("F32", "BF16", "I64", ...) is a
    floating-point type or it is one of the integer buffers older transformers saved (`_BUFFERS`)."""
    if not dtype.startswith(("F", "BF")) and name.removeprefix(BACKBONE_PREFIX) not in _BUFFERS:
        raise UserError(f"{path}: tensor {name!r} holds {dtype} values; weights are floating point.")


def _open_torch(paths, config):
    try:
        import torch
    except ImportError as e:
        raise UserError(
            f"{paths[0]} is a PyTorch pickle, which needs torch to read; install torch, "
            "or save the model with safe_serialization=True (model.safetensors)."
        ) from e
    tensors = {}
    for path in paths:
        try:
            # torch reads local files only: a file in a bucket is read into memory.
            source = io.BytesIO(read_capped(path, config)) if files.is_url(path) else path
            state = torch.load(source, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a bad file
            raise UserError(f"{path} is not a readable PyTorch checkpoint: {e}") from e
        for name, t in state.items():
            # numpy has no bfloat16; every weight is cast to float32 on assignment anyway.
            tensors[name] = t.float().numpy() if t.is_floating_point() else t.numpy()
    return {n: t.shape for n, t in tensors.items()}, tensors.__getitem__


def _check_tied_decoder(shapes, read, prefix, source):
    """An explicit decoder must equal what it is tied to: nothing here can hold another one."""
    ties = (
        (_DECODER_WEIGHT, prefix + "embeddings.word_embeddings.weight"),
        (_DECODER_BIAS, "predictions.bias"),
    )
    for name, tied_to in ties:
        if name in shapes and tied_to in shapes:
            if shapes[name] != shapes[tied_to] or not np.array_equal(read(name), read(tied_to)):
                raise UserError(
                    f"{source}: {name} differs from {tied_to}; ALBERT's decoder is tied, so "
                    "an untied decoder cannot be converted."
                )
