"""Command outputs that are either complete or absent.

A command writes into a staging directory next to `--out`, published into
place only when it succeeded (`albert_tf.utils.files.publish`), so a failed
or interrupted command leaves no half-written output and an old `--out` as
it was; an existing non-empty `--out` is refused unless `--overwrite`.
"""

from albert_tf import model_dirs
from albert_tf.utils import files
from albert_tf.utils.errors import UserError

# What readers of each command's output look for first, written last at a URL:
# a model directory's (model_dirs.ENTRY_FILES), create-data's metadata.json,
# finetune's finetune.json, a SavedModel's saved_model.pb and a TFLite export's
# model.tflite (names only: their modules would load TensorFlow into every command).
ENTRY_FILES = model_dirs.ENTRY_FILES + ("metadata.json", "finetune.json", "saved_model.pb", "model.tflite")


def add_overwrite_flag(parser):
    parser.add_argument("--overwrite", action="store_true", help="Replace a non-empty --out.")


def check_out(path, overwrite, flag="--out"):
    """Refuses a non-empty output directory (or an existing file) unless `overwrite`."""
    if files.isfile(path):
        if not overwrite:
            raise UserError(f"{flag} {path} exists; pass --overwrite to replace it.")
    elif files.isdir(path) and files.listdir(path) and not overwrite:
        raise UserError(f"{flag} {path} is not empty; pass --overwrite to replace it, or choose a new {flag}.")


def fresh_output_dir(path, overwrite, flag="--out", keep_when=None):
    """`files.publish` of directory `path` (with the commands' entry files), refusing a
    non-empty one unless `overwrite`.

    Raises:
        ValueError: when `path` is not empty and not `overwrite`.
    """
    check_out(path, overwrite, flag)
    return files.publish(path, ENTRY_FILES, keep_when=keep_when)


def fresh_output_file(path, overwrite, flag="--output"):
    """`files.publish` of file `path`, refusing an existing one unless `overwrite`."""
    check_out(path, overwrite, flag)
    return files.publish(path, directory=False)
