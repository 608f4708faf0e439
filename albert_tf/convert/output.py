"""Writing a converted model's directory all at once, or not at all."""

import os
import shutil
import tempfile


def check_output_dir(out_dir):
    """Raises a ValueError unless `out_dir` is absent or an empty directory."""
    if os.path.exists(out_dir) and not (os.path.isdir(out_dir) and not os.listdir(out_dir)):
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
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=".albert-tf-convert-", dir=parent)
    try:
        write(tmp_dir)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty, checked above
        os.replace(tmp_dir, out_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
