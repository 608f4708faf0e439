"""Output directories that are either complete or absent.

A command writes into a temporary directory next to `--out` and renames it
into place only when it succeeded, so a failed or interrupted command leaves
no half-written output; an existing non-empty `--out` is refused unless
`--overwrite`. At a URL (gs://) the directory is moved file by file with its
entry files last (`input_pipeline.files.move`).
"""

import contextlib
import os

from albert_tf import model_dirs
from input_pipeline import files

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
            raise ValueError(f"{flag} {path} exists; pass --overwrite to replace it.")
    elif files.isdir(path) and files.listdir(path) and not overwrite:
        raise ValueError(f"{flag} {path} is not empty; pass --overwrite to replace it, or choose a new {flag}.")


@contextlib.contextmanager
def fresh_output_dir(path, overwrite, flag="--out", keep_when=None):
    """Yields a temporary directory that becomes `path` when the block succeeds.

    Args:
        keep_when: None, or called with an exception leaving the block: True
            when the directory is complete all the same (an interrupted run's
            finished part); it then becomes `path` before the exception goes on.

    Raises:
        ValueError: when `path` is not empty and not `overwrite`.
    """
    check_out(path, overwrite, flag)
    parent = files.parent_dir(path)
    files.makedirs(parent)
    staging = files.make_temp_dir(f".{os.path.basename(files.normpath(path))}.", parent)
    try:
        yield staging
    except BaseException as e:
        if keep_when is not None and keep_when(e):
            _move_into_place(staging, path)
        else:
            files.rmtree(staging, ignore_errors=True)
        raise
    _move_into_place(staging, path)


def _move_into_place(staging, path):
    if files.isdir(path):
        files.rmtree(path)
    elif files.exists(path):
        files.remove(path)
    files.move(staging, path, ENTRY_FILES)


@contextlib.contextmanager
def fresh_output_file(path, overwrite, flag="--output"):
    """Yields a temporary file path that becomes `path` when the block succeeds."""
    check_out(path, overwrite, flag)
    parent = files.parent_dir(path)
    files.makedirs(parent)
    staging = files.make_temp_file(f".{os.path.basename(path)}.", parent)
    try:
        yield staging
    except BaseException:
        files.remove(staging)
        raise
    files.replace(staging, path)
