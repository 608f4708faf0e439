"""albert-tf models -> keras-hub presets (`albert-tf convert --to keras-hub`).

`save_keras_hub_preset` writes a directory that
`keras_hub.models.AlbertBackbone.from_preset` and
`keras_hub.models.AlbertTokenizer.from_preset` load, with albert-tf's
backbone outputs and token ids. keras-hub itself builds and saves the
preset, so the files are in the layout of the keras-hub version installed;
writing needs keras-hub (`pip install keras-hub`), reading does not
(`albert_tf.keras_hub_preset`, loaded wherever a model directory is).

What cannot cross is refused in one line before anything is written
(docs/deployment.md#keras-hub-presets has the table):
- a task model's head: keras-hub's backbone preset has no place for it. A
  pretrainer's MLM and SOP heads are left out with a note, as keras-hub's own
  ALBERT presets hold the backbone alone.
- a config keras-hub's AlbertBackbone cannot express (`keras_hub_preset.cannot_cross`):
  attention-only or FFN-only sharing, another activation or LayerNorm
  epsilon, two dropouts, groups that do not divide the layers evenly.
- a tokenizer whose preprocessing cannot be built into vocabulary.spm (byte
  fallback, Unicode normalization: the ko, ja, zh and multi presets): keras-hub
  runs SentencePiece alone on the raw text.
An E == H model without the E -> H projection crosses: keras-hub always has
the layer, and gets an identity kernel and a zero bias (the same function).
So does `sharing="none"`: keras-hub gets L groups of one block each.
"""

import os
import tempfile

import keras
import numpy as np

from albert_tf.keras_hub_preset import keras_hub_config, keras_hub_name
from albert_tf.loading import load_pretrained
from albert_tf.model_dirs import ENTRY_FILES
from albert_tf.models import AlbertBackbone, checkpoint_weights
from albert_tf.utils import files
from albert_tf.utils.errors import UserError


def save_keras_hub_preset(model, tokenizer, directory, overwrite=False, print_fn=print):
    """Writes `model`'s backbone and `tokenizer` as a keras-hub preset directory.

    Args:
        model: an `AlbertBackbone`, or an `AlbertPretrainer` (its heads are
            left out, with a note to `print_fn`).
        tokenizer: an `AlbertTokenizer`, or None for a preset without one.
        directory: the preset directory, written whole (local or a URL); a
            non-empty one is refused unless `overwrite`.
        overwrite: replace an existing `directory`.
        print_fn: where the note on left-out pretraining heads goes.

    Raises:
        UserError: what keras-hub cannot express (a task head, the config,
            the tokenizer's preprocessing), or keras-hub not installed;
            nothing is written then.
    """
    with files.publish_output(directory, overwrite, ENTRY_FILES, "directory") as staging:
        backbone = _backbone_to_write(model, print_fn)
        kwargs = keras_hub_config(backbone.config)
        if backbone.config.sharing == "none":
            backbone = _groups_of_one(backbone)
        proto = None if tokenizer is None else _vocabulary(tokenizer, backbone.config.vocab_size)
        keras_hub = _import_keras_hub()
        theirs = keras_hub.models.AlbertBackbone(**kwargs)
        _copy_weights(backbone, theirs)
        with tempfile.TemporaryDirectory() as local:
            # keras-hub writes local files; they are copied into the staging directory (local or a URL).
            theirs.save_to_preset(local)
            if proto is not None:
                keras_hub.models.AlbertTokenizer(proto=proto).save_to_preset(local)
            _copy_tree(local, staging)


def convert_to_keras_hub(src_dir, out_dir, tokenizer=None, overwrite=False, print_fn=print):
    """Converts an albert-tf model directory to a keras-hub preset; returns the model read.

    See `save_keras_hub_preset`; `tokenizer` (an `AlbertTokenizer`) is written along when given.
    """
    with files.publish_output(out_dir, overwrite, ENTRY_FILES, "out_dir") as staging:
        model = load_pretrained(src_dir)
        # Written plainly into the staging directory.
        save_keras_hub_preset(model, tokenizer, staging, print_fn=print_fn)
    return model


def _backbone_to_write(model, print_fn):
    """The backbone of `model`; a task model is refused, a pretrainer's heads left out with a note."""
    backbone = getattr(model, "backbone", model)
    if backbone is model:
        return backbone
    if not (hasattr(model, "mlm_head") and hasattr(model, "sop_head")):
        raise UserError(
            f"The model is an {type(model).__name__}: keras-hub's backbone preset has no place for its task "
            "head. Convert the model it was fine-tuned from (a pretraining run's final/), or save "
            "`model.backbone` with `save_keras_hub_preset`."
        )
    print_fn(
        "Note: the MLM and SOP heads are left out: a keras-hub preset holds the backbone "
        "(keras-hub's AlbertMaskedLM builds its own head)."
    )
    return backbone


def _groups_of_one(backbone):
    """A `sharing="all"` backbone with G = L groups of one block, computing what the `sharing="none"` `backbone` does.

    Both hold one block per layer, of the same layers in the same order;
    only the weight table (`checkpoint_weights`) is for whole-block sharing.
    """
    c = backbone.config
    shared = AlbertBackbone(c.replace(sharing="all", num_hidden_groups=c.num_hidden_layers, inner_group_num=1))
    pairs = [(backbone.embeddings, shared.embeddings), (backbone.pooler, shared.pooler)]
    pairs += [(ours[0], theirs[0]) for ours, theirs in zip(backbone.blocks, shared.blocks)]
    if backbone.embedding_projection is not None:
        pairs.append((backbone.embedding_projection, shared.embedding_projection))
    for ours, theirs in pairs:
        theirs.set_weights(ours.get_weights())
    return shared


def _vocabulary(tokenizer, vocab_size):
    """The vocabulary.spm bytes of `tokenizer`: its preprocessing built into the model's normalizer.

    keras-hub's AlbertTokenizer gives SentencePiece the raw text, so the
    preprocessing must travel inside the model (`standalone_model_proto`),
    which works for the English presets, cased or not.
    """
    tokenizer.check_vocab_size(vocab_size)
    if not tokenizer.can_embed_preprocessing:
        p = tokenizer.preprocessing
        raise UserError(
            f"The tokenizer's preprocessing cannot travel to keras-hub (language={tokenizer.language!r}, "
            f"byte_fallback={tokenizer.byte_fallback}, normalization={p.normalization!r}): keras-hub's "
            "AlbertTokenizer runs SentencePiece alone on the raw text, and only the English presets' steps "
            "can be built into its vocabulary.spm."
        )
    return tokenizer.standalone_model_proto()


def _copy_weights(backbone, theirs):
    """Assigns every weight of our `backbone` to keras-hub's AlbertBackbone `theirs`.

    Block weights go to each keras-hub group as they are: `keras_hub_config`
    checked that keras-hub puts each layer in the group it uses here.
    """
    for e in checkpoint_weights.weight_entries(backbone):
        target = _variable(theirs, keras_hub_name(e.name))
        target.assign(_reshaped(e.variable, target))
    if backbone.embedding_projection is None:
        # E == H without the layer: keras-hub always has it; the identity is the same function.
        hidden = backbone.config.hidden_size
        _variable(theirs, "embedding_projection/0").assign(np.eye(hidden, dtype=np.float32))
        _variable(theirs, "embedding_projection/1").assign(np.zeros(hidden, np.float32))


def _variable(theirs, name):
    """The keras-hub variable `name` ("LAYER[/ATTRIBUTE...]/INDEX", `keras_hub_name`) of `theirs`."""
    layer_name, *attributes, index = name.split("/")
    layer = theirs.get_layer(layer_name)
    for attribute in attributes:
        layer = getattr(layer, attribute)
    return layer.variables[int(index)]


def _reshaped(ours, theirs):
    """Our variable's value as float32 in the shape of keras-hub's (the attention's head axes split)."""
    value = np.asarray(keras.ops.convert_to_numpy(ours), dtype=np.float32)
    return value.reshape(tuple(theirs.shape))


def _copy_tree(source, target):
    """Copies the local directory `source` into `target` (local or a URL)."""
    for root, _, names in os.walk(source):
        # Never "target/.": at a URL that is a directory of its own.
        directory = target if root == source else os.path.join(target, os.path.relpath(root, source))
        files.makedirs(directory)
        for name in names:
            files.write_bytes(os.path.join(directory, name), files.read_bytes(os.path.join(root, name)))


def _import_keras_hub():
    try:
        import keras_hub
    except ImportError as e:
        raise UserError("Writing a keras-hub preset needs keras-hub: pip install keras-hub") from e
    return keras_hub
