"""HuggingFace transformers checkpoints <-> this package's models.

Reads a `save_pretrained` directory of AlbertModel, AlbertForPreTraining or
AlbertForMaskedLM (config.json + model.safetensors, sharded safetensors, or
pytorch_model.bin) and writes one that `AlbertForPreTraining.from_pretrained`
(or `AlbertModel.from_pretrained`, for a backbone) loads with no missing or
unexpected keys. Safetensors are read and written with the safetensors numpy
API, so torch is needed only for pytorch_model.bin.

The tokenizer goes along both ways: `spiece.model` plus a
tokenizer_config.json whose AlbertTokenizer options (`remove_space`,
`keep_accents`, `do_lower_case`) are our `Preprocessing` (whitespace
collapse, accent stripping, lowercasing), so `AutoTokenizer.from_pretrained`
encodes text as `AlbertTokenizer.encode` does.

`albert_tf.load_pretrained` and the `--model` of every command take a HF
directory as it is (`is_hf_dir`), converting it in memory with `load_hf`.
"""

import json
import os

import keras
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save

from albert_tf.config import AlbertConfig
from albert_tf.convert import mapping
from albert_tf.convert.output import check_output_dir, write_dir
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.saving import MODEL_FILE as ALBERT_TF_MODEL_FILE
from albert_tf.saving import load_pretrained, save_pretrained
from input_pipeline import files
from input_pipeline.tokenizer import CLS_PIECE, MASK_PIECE, PAD_PIECE, SEP_PIECE, UNK_PIECE, AlbertTokenizer
from input_pipeline.tokenizer import MODEL_FILE as SPIECE_FILE
from input_pipeline.tokenizer import Preprocessing

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"
# What `_open_weights` reads, in its order of preference.
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_FILE + INDEX_SUFFIX, TORCH_FILE, TORCH_FILE + INDEX_SUFFIX)
# The HF classes whose checkpoints `load_hf` reads (config.json's "architectures").
READ_ARCHITECTURES = ("AlbertModel", "AlbertForPreTraining", "AlbertForMaskedLM")
_BACKBONE_PREFIX = "albert."
# Non-persistent buffers that older transformers versions saved.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Tied to `albert.embeddings.word_embeddings.weight` and `predictions.bias`;
# transformers 5 does not save them, older versions did.
_DECODER_WEIGHT, _DECODER_BIAS = "predictions.decoder.weight", "predictions.decoder.bias"


def is_hf_dir(path):
    """Whether `path` is a HF `save_pretrained` directory, read by `load_hf`.

    That is: a config.json beside HF weights (any of `WEIGHT_FILES`), and no
    albert_tf.json (which marks albert-tf's own directories, whose config.json
    says `model_type` "albert" too). Whether the config describes an ALBERT
    model is `load_hf`'s check, so that another model type is an error naming
    config.json rather than a directory that holds "no model".
    """
    return (
        files.isfile(os.path.join(path, CONFIG_FILE))
        and not files.isfile(os.path.join(path, ALBERT_TF_MODEL_FILE))
        and any(files.isfile(os.path.join(path, name)) for name in WEIGHT_FILES)
    )


def is_hf_tokenizer_dir(path):
    """Whether the tokenizer in `path` is a HF one (read by `hf_tokenizer`, not `AlbertTokenizer.load`).

    transformers writes tokenizer_config.json, which albert-tf's tokenizer
    directories never hold; a hub download may lack it, but then sits in a
    HF model directory. Its tokenizer.json, if any, is transformers' own
    format, not albert-tf's.
    """
    return files.isfile(os.path.join(path, TOKENIZER_CONFIG_FILE)) or is_hf_dir(path)


def from_hf(src_dir):
    """Builds the model held by a HF `save_pretrained` directory.

    Returns:
        An `AlbertPretrainer` for AlbertForPreTraining / AlbertForMaskedLM
        sources, an `AlbertBackbone` for AlbertModel. AlbertForMaskedLM has
        no pooler and no SOP head: those are newly initialized (see
        `load_hf` for the list).

    Raises:
        ValueError: unreadable files, or tensors that do not match the config
            (listing every difference).
    """
    return load_hf(src_dir).model


def load_hf(src_dir):
    """Like `from_hf`, returning a `mapping.ConversionReport`."""
    config = _read_config(src_dir)
    shapes, read, source = _open_weights(src_dir)
    prefix = _BACKBONE_PREFIX if any(n.startswith(_BACKBONE_PREFIX) for n in shapes) else ""
    shapes = {n: s for n, s in shapes.items() if n.removeprefix(prefix) not in _BUFFERS}
    _check_tied_decoder(shapes, read, prefix, source)
    shapes = {n: s for n, s in shapes.items() if n not in (_DECODER_WEIGHT, _DECODER_BIAS)}
    try:
        return mapping.build_from_checkpoint(config, shapes, read, mapping.hf_scheme(prefix), source)
    except ValueError as e:
        # A task model's head shows up as unexpected tensors: say why.
        others = sorted(set(_architectures(src_dir)) - set(READ_ARCHITECTURES))
        if not others:
            raise
        raise ValueError(
            f"{e}\n  {os.path.join(src_dir, CONFIG_FILE)} names {others}: albert-tf reads the weights of "
            f"{', '.join(READ_ARCHITECTURES)}, not task heads."
        ) from e


def convert_from_hf(src_dir, out_dir):
    """Converts a HF directory to an albert-tf pretrained directory (`save_pretrained`).

    Its `spiece.model`, when present, becomes `out_dir/tokenizer`.
    Everything is read and checked before `out_dir` is created.

    Returns:
        A `mapping.ConversionReport`.
    """
    check_output_dir(out_dir)
    report = load_hf(src_dir)
    tokenizer = hf_tokenizer(src_dir)

    def write(directory):
        save_pretrained(report.model, directory)
        if tokenizer is not None:
            tokenizer.save(os.path.join(directory, TOKENIZER_DIR))

    write_dir(out_dir, write)
    return report


def hf_tokenizer(src_dir):
    """The `AlbertTokenizer` of a HF directory's spiece.model, or None without one.

    The preprocessing follows tokenizer_config.json (transformers' defaults
    when absent: lowercase, strip accents, collapse whitespace).
    """
    model_path = os.path.join(src_dir, SPIECE_FILE)
    if not files.isfile(model_path):
        return None
    options = {}
    config_path = os.path.join(src_dir, TOKENIZER_CONFIG_FILE)
    if files.isfile(config_path):
        try:
            options = json.loads(files.read_bytes(config_path).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{config_path} is not valid UTF-8 JSON: {e}") from e
        if not isinstance(options, dict):
            raise ValueError(f"{config_path} must hold a JSON object. Received: {type(options).__name__}")
    # transformers 5 writes `"remove_space": null` (its tokenizer always splits
    # on whitespace): null, like an absent key, takes transformers' default.
    def option(name, default):
        value = options.get(name)
        return default if value is None else bool(value)

    preprocessing = Preprocessing(
        collapse_whitespace=option("remove_space", True),
        strip_accents=not option("keep_accents", False),
        lower_case=option("do_lower_case", True),
    )
    return AlbertTokenizer(files.read_bytes(model_path), preprocessing)


def hf_tokenizer_files(tokenizer, max_length):
    """{file name: content} of a HF AlbertTokenizer matching `tokenizer`."""
    special = {"bos_token": CLS_PIECE, "eos_token": SEP_PIECE, "unk_token": UNK_PIECE, "sep_token": SEP_PIECE,
               "pad_token": PAD_PIECE, "cls_token": CLS_PIECE, "mask_token": MASK_PIECE}
    preprocessing = tokenizer.preprocessing
    config = {
        "tokenizer_class": "AlbertTokenizer",
        "remove_space": preprocessing.collapse_whitespace,
        "keep_accents": not preprocessing.strip_accents,
        "do_lower_case": preprocessing.lower_case,
        "model_max_length": max_length,
        **special,
    }
    return {
        SPIECE_FILE: tokenizer.model_proto,
        TOKENIZER_CONFIG_FILE: (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(),
        SPECIAL_TOKENS_FILE: (json.dumps(special, indent=2, sort_keys=True) + "\n").encode(),
    }


def hf_tensors(model):
    """`model`'s weights as HF names them -> float32 numpy arrays (HF layout)."""
    prefix = _BACKBONE_PREFIX if isinstance(model, AlbertPretrainer) else ""
    scheme = mapping.hf_scheme(prefix)
    tensors = {}
    for e in mapping.weight_entries(model):
        # float32 whatever the variable dtype: what HF checkpoints hold by default.
        value = np.asarray(keras.ops.convert_to_numpy(e.variable), dtype=np.float32)
        value = value.T if scheme.transposed(e) else value
        tensors[scheme.name_of(e)] = np.ascontiguousarray(value)
    return tensors


def hf_config(model):
    """The HF config.json dict for `model`."""
    backbone = getattr(model, "backbone", model)
    values = backbone.config.to_dict()
    values.pop("sharing")  # always "all" here (checked by `weight_entries`); not an HF field
    values["architectures"] = [
        "AlbertForPreTraining" if isinstance(model, AlbertPretrainer) else "AlbertModel"
    ]
    return values


def to_hf(model, out_dir, tokenizer=None):
    """Writes `model` as a HF `save_pretrained` directory (config.json + model.safetensors).

    An `AlbertPretrainer` becomes AlbertForPreTraining, an `AlbertBackbone`
    AlbertModel. The tied decoder is not written, as transformers' own
    `save_pretrained` does not write it. With `tokenizer`, its spiece.model
    and a matching tokenizer_config.json are written too.

    Raises:
        ValueError: for partial sharing (no HF equivalent), another model
            type, or a non-empty `out_dir`; nothing is written then.
    """
    check_output_dir(out_dir)
    tensors = hf_tensors(model)
    config = hf_config(model)
    tokenizer_files = {} if tokenizer is None else hf_tokenizer_files(tokenizer, config["max_position_embeddings"])

    def write(directory):
        files.write_text(os.path.join(directory, CONFIG_FILE), json.dumps(config, indent=2, sort_keys=True) + "\n")
        # transformers refuses safetensors files without a known "format".
        files.write_bytes(os.path.join(directory, SAFETENSORS_FILE), save(tensors, metadata={"format": "pt"}))
        for name, content in tokenizer_files.items():
            files.write_bytes(os.path.join(directory, name), content)

    write_dir(out_dir, write)


def convert_to_hf(src_dir, out_dir, tokenizer=None):
    """Converts an albert-tf pretrained directory to a HF directory; returns the model.

    `tokenizer` (an `AlbertTokenizer`) is written along when given.
    """
    check_output_dir(out_dir)
    model = load_pretrained(src_dir)
    to_hf(model, out_dir, tokenizer)
    return model


def _read_config(src_dir):
    path = os.path.join(src_dir, CONFIG_FILE)
    if not files.isfile(path):
        raise ValueError(f"{src_dir} is not a HF model directory: {CONFIG_FILE} is missing.")
    try:
        values = json.loads(files.read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid UTF-8 JSON: {e}") from e
    if isinstance(values, dict) and values.get("model_type", "albert") != "albert":
        raise ValueError(f"{path} describes a {values['model_type']!r} model, not 'albert'.")
    # HF names: "gelu" is the exact erf form, "gelu_new" the tanh approximation.
    try:
        return AlbertConfig.from_dict(values, gelu_is_tanh=False)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def _architectures(src_dir):
    """config.json's "architectures" (checked to be readable JSON by `_read_config`)."""
    architectures = json.loads(files.read_bytes(os.path.join(src_dir, CONFIG_FILE)).decode("utf-8")).get("architectures")
    return architectures if isinstance(architectures, list) else []


def _open_weights(src_dir):
    """(shapes, read, source) for the weight files of `src_dir`."""
    for index_name, reader in (
        (SAFETENSORS_FILE + INDEX_SUFFIX, _open_safetensors),
        (TORCH_FILE + INDEX_SUFFIX, _open_torch),
    ):
        single = os.path.join(src_dir, index_name[: -len(INDEX_SUFFIX)])
        index = os.path.join(src_dir, index_name)
        if files.isfile(single):
            return (*reader([single]), single)
        if files.isfile(index):
            return (*reader(_shard_paths(src_dir, index)), index)
    raise ValueError(
        f"{src_dir} holds no weights: expected {SAFETENSORS_FILE}, {TORCH_FILE} "
        "or a sharded index of either."
    )


def _shard_paths(src_dir, index_path):
    try:
        weight_map = json.loads(files.read_text(index_path))["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{index_path} is not a valid shard index: {e!r}") from e
    return [os.path.join(src_dir, name) for name in sorted(set(weight_map.values()))]


def _open_safetensors(paths):
    shapes, where = {}, {}
    for path in paths:
        try:
            with safe_open(path, framework="np") as f:
                for name in f.keys():
                    shapes[name] = tuple(f.get_slice(name).get_shape())
                    where[name] = path
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{path} is not a readable safetensors file: {e}") from e

    def read(name):
        try:
            with safe_open(where[name], framework="np") as f:
                return f.get_tensor(name)
        except (SafetensorError, OSError, TypeError) as e:
            raise ValueError(f"{where[name]}: cannot read tensor {name!r}: {e}") from e

    return shapes, read


def _open_torch(paths):
    try:
        import torch
    except ImportError as e:
        raise ValueError(
            f"{paths[0]} is a PyTorch pickle, which needs torch to read; install torch, "
            "or save the model with safe_serialization=True (model.safetensors)."
        ) from e
    tensors = {}
    for path in paths:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a bad file
            raise ValueError(f"{path} is not a readable PyTorch checkpoint: {e}") from e
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
                raise ValueError(
                    f"{source}: {name} differs from {tied_to}; ALBERT's decoder is tied, so "
                    "an untied decoder cannot be converted."
                )
