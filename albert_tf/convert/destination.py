"""Writing a converted model's directory all at once, or not at all."""

from albert_tf.model_dirs import ENTRY_FILES
from albert_tf.utils import files
from albert_tf.utils.errors import UserError


def check_output_dir(out_dir, overwrite=False):
    """Raises a ValueError unless `out_dir` is absent or an empty directory, or `overwrite`."""
    if overwrite or not files.exists(out_dir) or (files.isdir(out_dir) and not files.listdir(out_dir)):
        return
    raise UserError(
        f"Output directory {out_dir} already exists and is not empty; "
        "choose a new directory, or pass overwrite=True to replace it."
    )


def write_dir(out_dir, write, overwrite=False):
    """Calls `write(staging_dir)`, then publishes it as `out_dir` (`files.publish`).

    A failure while writing leaves no partial `out_dir`, and an old one (with
    `overwrite`) as it was.
    """
    check_output_dir(out_dir, overwrite)
    with files.publish(out_dir, ENTRY_FILES) as staging:
        write(staging)
