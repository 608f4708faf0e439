"""What the commands that write an output share: --overwrite, and the names readers look for first.

A command writes its output through `albert_tf.utils.files.publish_output`:
an existing non-empty output is refused unless --overwrite, and the output
is written into a staging place beside it and published whole when the
command succeeded, so a failed or interrupted command leaves no half-written
output and an old one as it was.
"""

from albert_tf import model_dirs

# What readers of each command's output look for first, written last at a URL:
# a model directory's (model_dirs.ENTRY_FILES), create-data's metadata.json,
# finetune's finetune.json, a SavedModel's saved_model.pb and a TFLite export's
# model.tflite (names only: their modules would load TensorFlow into every command).
ENTRY_FILES = model_dirs.ENTRY_FILES + ("metadata.json", "finetune.json", "saved_model.pb", "model.tflite")


def add_overwrite_flag(parser, flag="--out"):
    """--overwrite, whose help names the output `flag` it replaces."""
    parser.add_argument("--overwrite", action="store_true", help=f"Replace a non-empty {flag}.")
