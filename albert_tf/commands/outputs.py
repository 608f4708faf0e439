"""What the commands that write an output share: --overwrite, and the names readers look for first.

A command writes its output through `albert_tf.utils.files.publish_output`:
an existing non-empty output is refused unless --overwrite, and the output
is written into a staging place beside it and published whole when the
command succeeded, so a failed or interrupted command leaves no half-written
output and an old one as it was.
"""

from albert_tf import model_dirs
from albert_tf.utils import layout

# What readers of each command's output look for first, written last at a URL:
# a model directory's (model_dirs.ENTRY_FILES), create-data's metadata.json,
# finetune's finetune.json, a SavedModel's saved_model.pb and a TFLite export's
# model.tflite.
ENTRY_FILES = model_dirs.ENTRY_FILES + (
    layout.DATA_METADATA_FILE, layout.FINETUNE_RUN_FILE, layout.SAVED_MODEL_FILE, layout.TFLITE_MODEL_FILE,
)


def add_overwrite_flag(parser, flag="--out"):
    """--overwrite, whose help names the output `flag` it replaces."""
    parser.add_argument("--overwrite", action="store_true", help=f"Replace a non-empty {flag}.")
