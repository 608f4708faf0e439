"""Crash-safe run files: checkpoints and `final/` appear whole or not at all.

A process can be killed at any instant (SIGKILL, preemption, a full disk), so
nothing is written where a reader looks:

* A checkpoint `ckpt-STEP` is written into a hidden staging directory, then
  its data shards are renamed into the checkpoint directory and its `.index`
  file last. An `.index` file is the mark of a complete checkpoint; shards
  without one are leftovers of a killed save and are removed.
* Checkpoints are found from the `.index` files themselves. The `checkpoint`
  state file is rewritten (atomically) for TensorFlow's tools, never trusted:
  a garbage or stale state file cannot send a run back to step 0.
* A directory such as `final/`, and each run file, is published whole
  (`files.publish`, `files.write_text`); a kill between moving an old
  `final/` aside and renaming the new one in leaves no `final/`, which the
  trainer rebuilds from the last checkpoint.
"""

import os
import re

from albert_tf.utils import files
from albert_tf.utils.errors import UserError

PREFIX = "ckpt"
STATE_FILE = "checkpoint"
# Hidden names of unfinished writes; whatever carries them after a crash is debris.
_STAGING = files.STAGING_PREFIX
_PREVIOUS = files.PREVIOUS_PREFIX
_INDEX = re.compile(rf"^{PREFIX}-(\d+)\.index$")
_SHARD = re.compile(rf"^{PREFIX}-(\d+)\.data-\d+-of-\d+$")


class CheckpointUnreadable(UserError):
    """Every checkpoint of a run directory failed to restore."""


def checkpoint_path(directory, step):
    return os.path.join(directory, f"{PREFIX}-{step}")


def checkpoint_steps(directory):
    """Steps of the complete checkpoints in `directory` (those with an `.index` file), ascending."""
    if not files.isdir(directory):
        return []
    return sorted(int(m.group(1)) for m in map(_INDEX.match, files.listdir(directory)) if m)


def newest_checkpoint(directory):
    """The path prefix of the newest complete checkpoint in `directory`, or None."""
    steps = checkpoint_steps(directory)
    return checkpoint_path(directory, steps[-1]) if steps else None


def remove_debris(directory):
    """Deletes what killed writes left in `directory`: staging and `*_temp` directories,
    directories moved aside, and checkpoint shards without an `.index` file."""
    if not files.isdir(directory):
        return
    complete = set(checkpoint_steps(directory))
    for name in files.listdir(directory):
        path = os.path.join(directory, name)
        shard = _SHARD.match(name)
        if name.startswith((_STAGING, _PREVIOUS)) or (name.endswith("_temp") and files.isdir(path)):
            files.rmtree(path, ignore_errors=True)
        elif shard and int(shard.group(1)) not in complete:
            files.remove(path)


def save_checkpoint(checkpoint, directory, step, keep):
    """Writes `checkpoint` as `directory/ckpt-STEP`, keeps the newest `keep`, updates the state file.

    Args:
        checkpoint: a `tf.train.Checkpoint`.
        directory: the checkpoint directory (created if missing).
        step: the step number in the file names.
        keep: how many checkpoints to keep, newest first.

    Returns:
        The checkpoint's path prefix.
    """
    files.makedirs(directory)
    staging = os.path.join(directory, f"{_STAGING}{PREFIX}-{step}-{os.getpid()}")
    files.rmtree(staging, ignore_errors=True)
    target = checkpoint_path(directory, step)
    try:
        checkpoint.write(os.path.join(staging, f"{PREFIX}-{step}"))
        index = f"{PREFIX}-{step}.index"
        shards = [n for n in files.listdir(staging) if _SHARD.match(n) and int(_SHARD.match(n).group(1)) == step]
        # An older checkpoint of the same step (a run resumed from before it)
        # disappears first, so its index never pairs with the new shards.
        if files.exists(target + ".index"):
            files.remove(target + ".index")
        for name in shards + [index]:
            files.replace(os.path.join(staging, name), os.path.join(directory, name))
    finally:
        files.rmtree(staging, ignore_errors=True)
    steps = checkpoint_steps(directory)
    for old in steps[:-keep]:
        _remove_checkpoint(directory, old)
    write_state_file(directory, steps[-keep:])
    return target


def remove_checkpoints(directory):
    """Deletes `directory`, a checkpoint directory, its checkpoints' `.index` files first: a kill part way
    leaves complete checkpoints and debris, never an `.index` file without its shards."""
    for step in checkpoint_steps(directory):
        _remove_checkpoint(directory, step)
    files.rmtree(directory, ignore_errors=True)


def restore_newest_readable(checkpoint, directory, print_fn=print):
    """Restores the newest checkpoint of `directory` that reads back whole.

    An unreadable newest checkpoint (truncated, corrupted, half-deleted: any
    error reading it, TensorFlow's own or its reader's, such as the
    `IndexError` of a truncated data shard) is reported in one line through
    `print_fn`, naming it, and the previous one is tried.

    Returns:
        The restored checkpoint's path prefix, or None when `directory` has no checkpoint.

    Raises:
        CheckpointUnreadable: checkpoints exist but none restores; the run
            must not silently start over from step 0 on top of them.
    """
    import tensorflow as tf

    steps = checkpoint_steps(directory)
    failures = []
    for step in reversed(steps):
        path = checkpoint_path(directory, step)
        try:
            checkpoint.read(path).assert_existing_objects_matched()
        except Exception as e:  # whatever the reader raises for a damaged file
            if isinstance(e, tf.errors.ResourceExhaustedError):
                raise  # out of memory says nothing about the file
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}" if str(e).strip() else type(e).__name__
            failures.append(f"{os.path.basename(path)}: {reason}")
            print_fn(f"Checkpoint {path} is unreadable ({reason}); falling back to the previous one.")
            continue
        return path
    if failures:
        raise CheckpointUnreadable(
            f"No checkpoint in {directory} can be restored, so the run cannot resume:\n  "
            + "\n  ".join(failures)
            + "\nMove the directory away to start over from step 0."
        )
    return None


def write_state_file(directory, steps):
    """Writes TensorFlow's `checkpoint` state file (for `tf.train.latest_checkpoint`), atomically."""
    if not steps:
        return
    lines = [f'model_checkpoint_path: "{PREFIX}-{steps[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{PREFIX}-{s}"' for s in steps]
    files.write_text(os.path.join(directory, STATE_FILE), "\n".join(lines) + "\n")


def _remove_checkpoint(directory, step):
    # The index first: from then on the shards are debris, never a checkpoint.
    prefix = f"{PREFIX}-{step}"
    files.remove(os.path.join(directory, prefix + ".index"))
    for name in files.listdir(directory):
        if name.startswith(prefix + ".data-"):
            files.remove(os.path.join(directory, name))
