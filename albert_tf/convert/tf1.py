"""Original google-research/albert TF1 checkpoints -> this package's models.

Reads a `model.ckpt-N` prefix with `tf.train.load_checkpoint`. Accepts the
plain names of the released checkpoints and the `module/`-prefixed names of
TF-Hub exports. Optimizer state (slot variables, `global_step`) is skipped
with a note; any other variable the model does not have is an error.
"""


import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.model_dirs import ENTRY_FILES
from albert_tf.models import AlbertBackbone, AlbertPretrainer
from albert_tf.models.checkpoint_weights import TF1_PROJECTION, load_checkpoint, tf1_scheme
from albert_tf.models.pretrained import save_pretrained
from albert_tf.utils import files
from albert_tf.utils.errors import UserError

_HUB_PREFIX = "module/"
# Optimizer state: the original's LAMB (and AdamW) slot variables, and the step counter.
_SLOT_SUFFIXES = ("/adam_m", "/adam_v", "/lamb_m", "/lamb_v")
_IGNORED_NAMES = ("global_step",)


def from_tf1(ckpt_prefix, config, print_fn=print):
    """Builds the model held by an original TF1 checkpoint.

    Args:
        ckpt_prefix: the checkpoint prefix, e.g. ".../model.ckpt-125000".
        config: an `AlbertConfig`, or the path of the `albert_config.json`
            it was trained with (whose "gelu" is the tanh approximation).
            The model follows the checkpoint where the config cannot say:
            layers are grouped by the original's formula (`group_formula`,
            set to "original" where that differs from "exact", e.g.
            L = G = 22), and with E == H the E -> H projection is built only
            if the checkpoint holds it (`embedding_projection`).
        print_fn: where the one-line note on skipped optimizer state goes.

    Returns:
        An `AlbertPretrainer` when the checkpoint has the `cls/` heads, else an
        `AlbertBackbone`.

    Raises:
        ValueError: unreadable checkpoint, or variables that do not match the
            config (listing every missing, unexpected and mis-shaped one).
    """
    return load_tf1(ckpt_prefix, config, print_fn).model


def load_tf1(ckpt_prefix, config, print_fn=print):
    """Like `from_tf1`, returning a `checkpoint_weights.ConversionReport`."""
    if not isinstance(config, AlbertConfig):
        config = _read_config(config)
    try:
        reader = tf.train.load_checkpoint(ckpt_prefix)
        all_shapes = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as e:
        raise UserError(f"{ckpt_prefix} is not a readable TF checkpoint: {e}") from e
    shapes, stored_name, skipped = {}, {}, []
    for name, shape in all_shapes.items():
        if name.endswith(_SLOT_SUFFIXES) or name.rsplit("/", 1)[-1] in _IGNORED_NAMES:
            skipped.append(name)
            continue
        plain = name.removeprefix(_HUB_PREFIX)
        shapes[plain], stored_name[plain] = tuple(shape), name
    if skipped:
        kinds = sorted({n.rsplit("/", 1)[-1] for n in skipped})
        print_fn(f"Skipped {len(skipped)} optimizer-state variables of {ckpt_prefix} ({', '.join(kinds)}): "
                 "not model weights.")

    def read(name):
        try:
            return reader.get_tensor(stored_name[name])
        except tf.errors.OpError as e:
            raise UserError(f"{ckpt_prefix}: cannot read {stored_name[name]}: {e}") from e

    # The original picks groups by its own formula, and builds the E -> H
    # projection only when E != H: the model is built as the checkpoint holds it.
    config = config.grouped_by("original")
    if config.embedding_size == config.hidden_size:
        config = config.replace(embedding_projection=TF1_PROJECTION + "/kernel" in shapes)
    # The pretraining heads live under "cls/"; a checkpoint without them is a backbone.
    backbone = AlbertBackbone(config)
    scheme = tf1_scheme()
    model = AlbertPretrainer(backbone) if any(scheme.is_head(name) for name in shapes) else backbone
    return load_checkpoint(model, shapes, read, scheme, ckpt_prefix)


def convert_from_tf1(ckpt_prefix, config, out_dir, print_fn=print, overwrite=False):
    """Converts a TF1 checkpoint to an albert-tf pretrained directory.

    Everything is read and checked before `out_dir` is created; a non-empty
    `out_dir` is refused unless `overwrite`. `print_fn` gets the note on
    skipped optimizer state.

    Returns:
        A `checkpoint_weights.ConversionReport`.
    """
    with files.publish_output(out_dir, overwrite, ENTRY_FILES, "out_dir") as staging:
        report = load_tf1(ckpt_prefix, config, print_fn)
        save_pretrained(report.model, staging)
    return report


def _read_config(path):
    if not files.isfile(path):
        raise UserError(f"Config file {path} does not exist.")
    try:
        # No `model_type` in the original albert_config.json: its "gelu" reads as tanh.
        return AlbertConfig.load(path)
    except ValueError as e:
        raise UserError(f"{path}: {e}") from e
