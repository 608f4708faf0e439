"""Reading a keras-hub ALBERT preset: its config.json and the tensors of its model.weights.h5.

A keras-hub preset directory is what `keras_hub.models.AlbertBackbone.save_to_preset`
(and the tokenizer's) writes:

    config.json                        the backbone's Keras config, registered_name "keras_hub>AlbertBackbone"
    model.weights.h5                   its weights, in Keras' HDF5 layout
    tokenizer.json                     the tokenizer's Keras config
    assets/tokenizer/vocabulary.spm    the SentencePiece model
    metadata.json                      versions, parameter count

The weights are read with h5py by layer name, so loading a preset needs no
keras-hub. The file groups each layer under a path Keras derives from its
class ("layers/transformer_encoder_3"), which shifts with the layer order;
the layer's own name ("group_1_inner_layer_1") is stored beside its
variables (Keras 3.9 and later), and is what this module goes by; older
files are read by the class-derived path (`_layer_name`). Names are mapped from the
canonical names of `albert_tf.models.checkpoint_weights` (`keras_hub_name`);
keras-hub's attention kernels are (H, heads, head size) where ours are
(H, H), reshaped on read. The config maps both ways here too
(`config_from_keras_hub`, `keras_hub_config`), for the writer in
`albert_tf.convert.keras_hub`. This module imports neither Keras nor the models.
"""

import dataclasses
import io
import json
import math
import os
import re

import h5py
import numpy as np

from albert_tf.config import AlbertConfig
from albert_tf.model_dirs import CONFIG_FILE, KERAS_HUB_TASK_FILE, WEIGHTS_FILE, read_capped
from albert_tf.utils import files
from albert_tf.utils.errors import UserError

BACKBONE_NAME = "keras_hub>AlbertBackbone"
# What keras-hub's AlbertBackbone fixes where `AlbertConfig` has a field.
KERAS_HUB_ACTIVATION = "gelu_new"  # keras-hub's `gelu_approximate`, the tanh form
KERAS_HUB_LAYER_NORM_EPS = 1e-12

# Our canonical layer names -> keras-hub's layer names (backbone.get_layer).
_LAYERS = {
    "embeddings/word_embeddings": "token_embedding",
    "embeddings/position_embeddings": "position_embedding",
    "embeddings/token_type_embeddings": "segment_embedding",
    "embeddings/layer_norm": "embeddings_layer_norm",
    "encoder/embedding_projection": "embedding_projection",
    "pooler": "pooled_dense",
}
# A block's layers -> their attribute path inside keras-hub's TransformerEncoder.
_BLOCK_LAYERS = {
    "attention/query": "_self_attention_layer/query_dense",
    "attention/key": "_self_attention_layer/key_dense",
    "attention/value": "_self_attention_layer/value_dense",
    "attention/output_dense": "_self_attention_layer/output_dense",
    "attention/layer_norm": "_self_attention_layer_norm",
    "feed_forward/intermediate": "_feedforward_intermediate_dense",
    "feed_forward/output_dense": "_feedforward_output_dense",
    "feed_forward/layer_norm": "_feedforward_layer_norm",
}
# A variable's place in its layer's list (Dense: kernel, bias; LayerNorm: gamma, beta).
# Files of Keras before 3.9: keras-hub's layer names by the groups Keras names after their class.
_LAYERS_BY_CLASS = {
    "reversible_embedding": "token_embedding",
    "position_embedding": "position_embedding",
    "embedding": "segment_embedding",
    "layer_normalization": "embeddings_layer_norm",
    "dense": "embedding_projection",
    "dense_1": "pooled_dense",
}
_VARIABLE_INDEX = {"kernel": 0, "bias": 1, "gamma": 0, "beta": 1, "embeddings": 0}
_ATTENTION = "_self_attention_layer/"
_ATTENTION_OUTPUT = "_self_attention_layer/output_dense"


def keras_hub_name(canonical):
    """The keras-hub name of a canonical weight name: "LAYER[/SUBLAYER...]/INDEX".

    "encoder/group_1/inner_0/attention/query/kernel" ->
    "group_1_inner_layer_0/_self_attention_layer/query_dense/0": the layer
    name, the attribute path inside it, the variable's index in its list.
    """
    layer, variable = canonical.rsplit("/", 1)
    if layer.startswith("encoder/group_"):
        _, group, inner, block_layer = layer.split("/", 3)
        path = f"{group}_inner_layer_{inner.removeprefix('inner_')}/{_BLOCK_LAYERS[block_layer]}"
    else:
        path = _LAYERS[layer]
    return f"{path}/{_VARIABLE_INDEX[variable]}"


def ours_from_keras_hub_shape(name, shape):
    """The shape albert-tf gives the variable that keras-hub stores as `name` with `shape`.

    keras-hub's query/key/value kernels are (H, heads, head size) and biases
    (heads, head size), its attention output kernel (heads, head size, H);
    ours are (H, H) and (H,): the head axes flattened, in the same order.
    """
    shape = tuple(shape)
    if _ATTENTION not in name:
        return shape
    output = _ATTENTION_OUTPUT in name
    if name.endswith("/1"):  # a bias: the output's is (H,) already
        return shape if output else (math.prod(shape),)
    return (math.prod(shape[:-1]), shape[-1]) if output else (shape[0], math.prod(shape[1:]))


def config_from_keras_hub(values):
    """The `AlbertConfig` of a keras-hub AlbertBackbone's config (the "config" of config.json).

    keras-hub's backbone always has the E -> H projection, one dropout for
    all, the tanh GELU and LayerNorm epsilon 1e-12, and puts layer i in group
    i // (L / G) with G dividing L: `group_formula` "exact" gives the same.

    Raises:
        UserError: a missing field or a shape `AlbertConfig` refuses.
    """
    try:
        return AlbertConfig(
            vocab_size=values["vocabulary_size"],
            embedding_size=values["embedding_dim"],
            hidden_size=values["hidden_dim"],
            num_hidden_layers=values["num_layers"],
            num_attention_heads=values["num_heads"],
            intermediate_size=values["intermediate_dim"],
            num_hidden_groups=values.get("num_groups", 1),
            inner_group_num=values.get("num_inner_repetitions", 1),
            hidden_act=KERAS_HUB_ACTIVATION,
            hidden_dropout=values.get("dropout", 0.0),
            attention_dropout=values.get("dropout", 0.0),
            max_position_embeddings=values.get("max_sequence_length", 512),
            type_vocab_size=values.get("num_segments", 2),
            layer_norm_eps=KERAS_HUB_LAYER_NORM_EPS,
        )
    except KeyError as e:
        raise UserError(f"the keras-hub AlbertBackbone config lacks {e.args[0]!r}") from e


def keras_hub_config(config):
    """The keras-hub `AlbertBackbone(**kwargs)` for an `AlbertConfig` keras-hub can express.

    Raises:
        UserError: naming each field keras-hub's AlbertBackbone cannot
            express (`cannot_cross`), in one line.
    """
    reasons = cannot_cross(config)
    if reasons:
        raise UserError(f"keras-hub's AlbertBackbone cannot express this model: {'; '.join(reasons)}.")
    if config.sharing == "none":
        # Nothing shared: every layer its own group of one block, which keras-hub expresses as G = L.
        config = config.replace(sharing="all", num_hidden_groups=config.num_hidden_layers, inner_group_num=1)
    return {
        "vocabulary_size": config.vocab_size,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "embedding_dim": config.embedding_size,
        "hidden_dim": config.hidden_size,
        "intermediate_dim": config.intermediate_size,
        "num_groups": config.num_hidden_groups,
        "num_inner_repetitions": config.inner_group_num,
        "dropout": config.hidden_dropout,
        "max_sequence_length": config.max_position_embeddings,
        "num_segments": config.type_vocab_size,
    }


def cannot_cross(config):
    """What in `config` keras-hub's AlbertBackbone cannot express: a list of reasons, empty when all crosses.

    An E == H model without the projection crosses (the writer gives keras-hub
    an identity projection), and so do any grouping keras-hub computes the
    same way and `sharing="none"` (G = L groups of one block).
    `initializer_range` and `classifier_dropout` describe training only, not
    the function, and are not written.
    """
    reasons = []
    if config.sharing not in ("all", "none"):
        reasons.append(f"sharing={config.sharing!r} (keras-hub shares whole blocks or nothing)")
    if config.hidden_act != KERAS_HUB_ACTIVATION:
        reasons.append(f"hidden_act={config.hidden_act!r} (keras-hub's is the tanh GELU, gelu_new)")
    if config.layer_norm_eps != KERAS_HUB_LAYER_NORM_EPS:
        reasons.append(f"layer_norm_eps={config.layer_norm_eps} (keras-hub's is {KERAS_HUB_LAYER_NORM_EPS})")
    if config.hidden_dropout != config.attention_dropout:
        reasons.append(
            f"hidden_dropout={config.hidden_dropout} != attention_dropout={config.attention_dropout} "
            "(keras-hub has one dropout)"
        )
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    if layers % groups or config.group_indices() != tuple(i // (layers // groups) for i in range(layers)):
        reasons.append(
            f"num_hidden_layers={layers} in num_hidden_groups={groups} by group_formula={config.group_formula!r} "
            "(keras-hub needs the groups to divide the layers evenly, in order)"
        )
    return reasons


@dataclasses.dataclass(frozen=True)
class KerasHubPreset:
    """The tensors of a keras-hub preset, named by `keras_hub_name`, in albert-tf's layout.

    Attributes:
        config: the `AlbertConfig` of its config.json.
        shapes: tensor name -> shape (albert-tf's layout).
        read: tensor name -> numpy array (albert-tf's layout).
        source: the weights file, for messages.
    """

    config: AlbertConfig
    shapes: dict
    read: object
    source: str


def read_keras_hub_preset(directory):
    """The `KerasHubPreset` of the keras-hub preset directory `directory`.

    Raises:
        UserError: unreadable files, a config.json of another keras-hub class,
            a task preset (task.json: a head albert-tf does not read), or a
            weights file Keras' loader refuses (`_read_weights`).
    """
    path = os.path.join(directory, CONFIG_FILE)
    try:
        values = json.loads(files.read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not valid UTF-8 JSON: {e}") from e
    name = values.get("registered_name") if isinstance(values, dict) else None
    if name != BACKBONE_NAME or not isinstance(values.get("config"), dict):
        raise UserError(f"{path} describes a {name!r}, not a {BACKBONE_NAME!r}: not a keras-hub ALBERT preset.")
    task_path = os.path.join(directory, KERAS_HUB_TASK_FILE)
    if files.isfile(task_path):
        try:
            task = json.loads(files.read_text(task_path)).get("registered_name")
        except (ValueError, AttributeError):  # unreadable: the file's presence alone says it is a task
            task = "task"
        raise UserError(
            f"{task_path} holds a {task!r}: albert-tf reads keras-hub backbone presets, not task heads. "
            "Save its backbone alone (`task.backbone.save_to_preset(DIR)`) and load that."
        )
    try:
        config = config_from_keras_hub(values["config"])
    except UserError as e:
        raise UserError(f"{path}: {e}") from e
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    shapes, tensors = _read_weights(weights_path, config)
    return KerasHubPreset(config, shapes, tensors.__getitem__, weights_path)


def _read_weights(path, config):
    """{keras-hub name: array in albert-tf's layout} of every variable in a keras-hub model.weights.h5.

    Read with the guards of Keras' own h5 loader (`keras.src.saving.saving_lib.safe_get_h5_dataset`,
    a private function, so copied rather than called; this floor imports no Keras): no soft or
    external links, no external or virtual datasets, no dataset that declares far more than it
    stores. Each variable's declared shape and dtype are checked against `config` before anything
    is read (floats only, or the bfloat16 Keras' `H5IOStore` writes), and their bytes together
    against `AlbertConfig.weights_budget`, so a file cannot make the reader allocate more than the
    model it describes. A file at a URL is read into memory whole: its size is held to the same budget
    first. No object may be reached by two hard links, so no walk of the groups can loop.
    """
    expected = _keras_hub_shapes(config)
    budget = config.weights_budget()
    places = {}  # keras-hub name -> the dataset's path in the file
    try:
        with h5py.File(io.BytesIO(read_capped(path, config)) if files.is_url(path) else path, "r") as f:
            layers = _guarded(f, "layers", path)
            if not isinstance(layers, h5py.Group):
                raise UserError(f"{path} holds no layers: not the weights of a keras-hub backbone.")
            for stored in layers:
                group = _guarded(layers, stored, path)
                if not isinstance(group, h5py.Group):
                    continue
                datasets = _datasets(group, path)  # first: it refuses links before `_layer_name` reads the group
                layer = _layer_name(stored, group, config.inner_group_num)
                for sub_path, dataset in datasets:
                    # A (sub)layer's variables sit in its "vars" group, numbered in its variables' order.
                    inner, _, index = sub_path.rpartition("/")
                    if not (inner == "vars" or inner.endswith("/vars")):
                        continue
                    inner = inner[: -len("vars")].rstrip("/")
                    key = "/".join(p for p in (layer, inner, index) if p)
                    _check_dataset(path, f"layers/{stored}/{sub_path}", dataset, expected.get(key))
                    places[key] = dataset
            _check_budget(path, [dataset for key, dataset in places.items() if key in expected], budget)
            tensors = {key: _as_float(dataset).reshape(ours_from_keras_hub_shape(key, dataset.shape))
                       for key, dataset in places.items() if key in expected}
            shapes = {key: ours_from_keras_hub_shape(key, dataset.shape) for key, dataset in places.items()}
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path} is not a readable HDF5 weights file (truncated or corrupt): {e}") from e
    return shapes, tensors


# Keras' shape-bomb guard: a dataset that declares more than 4 GiB must store at least 1/1000 of it.
_BOMB_FLOOR_BYTES = 1 << 32
_MAX_EXPANSION = 1000


def _guarded(group, name, path):
    """`group[name]`, refusing a soft or external link (Keras' `safe_get_h5_group` and `_dataset`), and
    an object that more than one hard link names: Keras writes each group and dataset once, and a group
    linked into itself would make `_datasets` walk forever."""
    link = group.get(name, getlink=True)
    where = f"{group.name.strip('/')}/{name}"
    if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
        raise UserError(f"{path}: {where} is an HDF5 {type(link).__name__}; a weights file must hold its "
                        "weights itself, and albert-tf (as Keras) follows no links.")
    item = group.get(name)
    links = h5py.h5o.get_info(item.id).rc
    if links > 1:
        raise UserError(f"{path}: {where} is one of {links} hard links to one HDF5 object; a weights file "
                        "holds each group and dataset once, so albert-tf follows no such links.")
    return item


def _check_budget(path, datasets, budget):
    """UserError naming `path` when `datasets` declare more bytes together than `budget`."""
    declared = sum(math.prod(dataset.shape) * dataset.dtype.itemsize for dataset in datasets)
    if declared > budget:
        raise UserError(f"{path}: its weights declare {declared:,} bytes, more than the {budget:,} its "
                        "config.json's model holds in float32; refused unread (save it in float32 or bfloat16).")


def _is_bfloat16(dataset):
    """Whether `dataset` holds bfloat16 as Keras' `H5IOStore` writes it: 2-byte opaque values, so marked."""
    return dataset.dtype.kind == "V" and dataset.dtype.itemsize == 2 and dataset.attrs.get("dtype") in (
        "bfloat16", b"bfloat16")


def _as_float(dataset):
    """The values of a checked dataset as a numpy float array (bfloat16 widened to float32)."""
    if _is_bfloat16(dataset):
        # bfloat16 is the upper half of a float32: shift each 16-bit pattern up (little-endian, as Keras writes).
        bits = np.asarray(dataset).view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    return np.asarray(dataset)


def _datasets(group, path):
    """[(path under `group`, dataset)] of every dataset under `group`, through `_guarded` at each step."""
    found = []
    for name in group:
        item = _guarded(group, name, path)
        if isinstance(item, h5py.Group):
            found += [(f"{name}/{sub}", dataset) for sub, dataset in _datasets(item, path)]
        elif isinstance(item, h5py.Dataset):
            found.append((name, item))
    return found


def _check_dataset(path, name, dataset, shape):
    """UserError naming the dataset `name` of `path` when it is external, virtual, not floats, a shape bomb,
    or not `shape`.

    `shape`: the keras-hub shape the config gives it, or None for a name the
    model does not have (refused later, with every other difference, unread).
    """
    if dataset.external:
        raise UserError(f"{path}: dataset {name} keeps its data in another file ({dataset.external[0][0]}); "
                        "albert-tf (as Keras) reads no external datasets.")
    if dataset.is_virtual:
        raise UserError(f"{path}: dataset {name} is a virtual dataset (its data is in other files); albert-tf "
                        "(as Keras) reads no virtual datasets.")
    # Strings, compound, variable-length and object values are no weights, and a string's declared
    # width alone can ask for gigabytes: refused before the size checks below, which trust itemsize.
    # Only what is read is checked: a name the model lacks is refused later, unread.
    if shape is not None and dataset.dtype.kind != "f" and not _is_bfloat16(dataset):
        raise UserError(f"{path}: dataset {name} holds {dataset.dtype.str!r} values; weights are floating "
                        "point (float16, bfloat16, float32 or float64).")
    declared = math.prod(dataset.shape) * dataset.dtype.itemsize
    if declared > _BOMB_FLOOR_BYTES and declared > _MAX_EXPANSION * dataset.id.get_storage_size():
        raise UserError(f"{path}: dataset {name} declares {declared:,} bytes but stores "
                        f"{dataset.id.get_storage_size():,}; refused, as Keras refuses it.")
    if shape is not None and tuple(dataset.shape) != shape:
        raise UserError(f"{path}: dataset {name} has shape {tuple(dataset.shape)}; its config.json's model "
                        f"needs {shape}.")


def _keras_hub_shapes(config):
    """{keras-hub name: shape} of every variable of the keras-hub AlbertBackbone of `config`, as stored."""
    v, e, h, i = config.vocab_size, config.embedding_size, config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads
    head = h // heads
    shapes = {
        "token_embedding/0": (v, e), "position_embedding/0": (config.max_position_embeddings, e),
        "segment_embedding/0": (config.type_vocab_size, e),
        "embeddings_layer_norm/0": (e,), "embeddings_layer_norm/1": (e,),
        "embedding_projection/0": (e, h), "embedding_projection/1": (h,),
        "pooled_dense/0": (h, h), "pooled_dense/1": (h,),
    }
    block = {
        "_self_attention_layer/query_dense": ((h, heads, head), (heads, head)),
        "_self_attention_layer/key_dense": ((h, heads, head), (heads, head)),
        "_self_attention_layer/value_dense": ((h, heads, head), (heads, head)),
        "_self_attention_layer/output_dense": ((heads, head, h), (h,)),
        "_self_attention_layer_norm": ((h,), (h,)),
        "_feedforward_intermediate_dense": ((h, i), (i,)),
        "_feedforward_output_dense": ((i, h), (h,)),
        "_feedforward_layer_norm": ((h,), (h,)),
    }
    for group in range(config.num_hidden_groups):
        for inner in range(config.inner_group_num):
            for sub, pair in block.items():
                for index, shape in enumerate(pair):
                    shapes[f"group_{group}_inner_layer_{inner}/{sub}/{index}"] = shape
    return shapes


def _layer_name(stored, group, inner_group_num):
    """The keras-hub layer name of the top-level group `stored` ("transformer_encoder_3") of a weights file.

    Keras 3.9 and later store it beside the variables. Earlier files hold
    only the group name, which Keras derives from the layer's class and its
    rank among the model's layers of that class: keras-hub's backbone builds
    (and calls) its layers in one fixed order, which maps the one to the other.
    """
    name = group["vars"].attrs.get("name") if isinstance(group.get("vars"), h5py.Group) else None
    if name is not None:
        return name.decode() if isinstance(name, bytes) else str(name)
    match = re.fullmatch(r"transformer_encoder(?:_(\d+))?", stored)
    if match:
        rank = int(match.group(1) or 0)
        return f"group_{rank // inner_group_num}_inner_layer_{rank % inner_group_num}"
    return _LAYERS_BY_CLASS.get(stored, stored)
