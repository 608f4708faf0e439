"""Output directories that are either complete or absent.

A command writes into a temporary directory next to `--out` and renames it
into place only when it succeeded, so a failed or interrupted command leaves
no half-written output; an existing non-empty `--out` is refused unless
`--overwrite`.
"""

import contextlib
import os
import shutil
import tempfile


def add_overwrite_flag(parser):
    parser.add_argument("--overwrite", action="store_true", help="Replace a non-empty --out.")


def check_out(path, overwrite, flag="--out"):
    """Refuses a non-empty output directory (or an existing file) unless `overwrite`."""
    if os.path.isfile(path):
        if not overwrite:
            raise ValueError(f"{flag} {path} exists; pass --overwrite to replace it.")
    elif os.path.isdir(path) and os.listdir(path) and not overwrite:
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
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.normpath(path))}.", dir=parent)
    try:
        yield staging
    except BaseException as e:
        if keep_when is not None and keep_when(e):
            _move_into_place(staging, path)
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    _move_into_place(staging, path)


def _move_into_place(staging, path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    os.rename(staging, path)


@contextlib.contextmanager
def fresh_output_file(path, overwrite, flag="--output"):
    """Yields a temporary file path that becomes `path` when the block succeeds."""
    check_out(path, overwrite, flag)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=parent)
    os.close(handle)
    try:
        yield staging
    except BaseException:
        os.remove(staging)
        raise
    os.replace(staging, path)
