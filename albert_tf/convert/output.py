"""Writing a converted model's directory all at once, or not at all."""

import os

from albert_tf.model_dirs import ENTRY_FILES
from input_pipeline import files


def check_output_dir(out_dir):
    """Raises a ValueError unless `out_dir` is absent or an empty directory."""
    if files.exists(out_dir) and not (files.isdir(out_dir) and not files.listdir(out_dir)):
        raise ValueError(
            f"Output directory {out_dir} already exists and is not empty; "
            "choose a new directory (conversion never overwrites)."
        )


def write_dir(out_dir, write):
    """Calls `write(tmp_dir)`, then renames the result to `out_dir`.

    The files land in a sibling temporary directory first, so a failure while
    writing leaves no partial `out_dir` behind.
    """
    check_output_dir(out_dir)
    parent = files.parent_dir(out_dir)
    files.makedirs(parent)
    tmp_dir = files.make_temp_dir(".albert-tf-convert-", parent)
    try:
        write(tmp_dir)
        if files.isdir(out_dir):
            files.rmtree(out_dir)  # empty, checked above
        files.move(tmp_dir, out_dir, ENTRY_FILES)
    except BaseException:
        files.rmtree(tmp_dir, ignore_errors=True)
        raise
