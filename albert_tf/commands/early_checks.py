"""Checks of a command line that need no model, made before the command's module loads.

A command's module builds its parser without TensorFlow, which loads only
when the command runs (seconds). A missing input file, a model directory that
holds no model or a non-empty --out is known before either: `check_paths`
reads the flags that name paths from the command line with a small parser of
its own and raises the ValueError the command would raise later, so that
such errors come back at once.

Only these flags are read here; everything else (a mistyped flag, a bad
value, a missing required flag) is left to the command's own parser, which
reads the whole line once its module loads, still before TensorFlow. A flag
written in a form this parser cannot read is skipped, never guessed, and a
word that looks like one of these flags mistyped (`--modle`) leaves the whole
line to the command's parser, which names the mistyped flag first.
"""

import argparse
import codecs
import difflib

from albert_tf import hub, model_dirs
from albert_tf.utils import files
from albert_tf.utils.errors import UserError

# The kinds of path a flag names.
PATHS = "paths"  # one or more files or directories that exist
FILE = "file"  # a file that exists ("-": standard input)
DIR = "dir"  # a directory that exists
MODEL = "model"  # a model directory, a run holding one, a HF directory (`model_dirs.resolve_model_dir`), a hub handle
OUT = "out"  # an output that must be new or empty unless --overwrite ("-": standard output)
RUN = "run"  # a run directory: new, or one to resume; its place must be writable

# Command -> {flag: kind}, in the order the flags are checked (the first
# problem is reported). tests/commands/test_journeys_errors.py checks that every flag
# is the command's own, with the number of values it takes.
FLAGS = {
    "train-tokenizer": {"--input": PATHS, "--out": OUT},
    "create-data": {"--input": PATHS, "--tokenizer": DIR, "--out": OUT},
    "pretrain": {"--data": PATHS, "--eval-data": PATHS, "--tokenizer": DIR, "--config": FILE, "--out": RUN},
    "demo": {"--out": RUN},
    "finetune": {"--train": FILE, "--eval": FILE, "--model": MODEL, "--tokenizer": DIR, "--out": OUT},
    "distill": {"--teacher": DIR, "--train": FILE, "--eval": FILE, "--unlabeled": PATHS, "--out": OUT},
    "predict": {"--input": FILE, "--model": DIR, "--output": OUT},
    "export": {"--calibration-text": FILE, "--model": MODEL, "--tokenizer": DIR, "--out": OUT},
}
# Flags whose values decide whether --out is checked (`out_checked_early`).
_CONTEXT_FLAGS = {"finetune": ("--strategy",), "distill": ("--strategy",), "export": ("--format",)}


def check_paths(command, argv):
    """Raises ValueError naming the flag for the first path of `argv` the command would refuse.

    Args:
        command: the command's name (a key of `FLAGS`; others are not checked).
        argv: the command's words, after its name.
    """
    if command not in FLAGS or "-h" in argv or "--help" in argv:
        return
    args = _read_flags(command, FLAGS[command], argv)
    if args is None or _mistyped(FLAGS[command], args.unread):
        return
    for flag, kind in FLAGS[command].items():
        value = getattr(args, _dest(flag))
        if value is None or (kind in (DIR, MODEL) and flag == "--model" and hub.is_hub_spec(value)):
            continue  # A hub handle (hf://, kaggle://) is downloaded when the command runs.
        if kind == PATHS:
            for path in value:
                if not files.exists(path):
                    raise UserError(f"{flag} {path}: no such file or directory.")
        elif kind == FILE and value != "-":
            _check_file(flag, value)
        elif kind == DIR:
            _check_dir(flag, value)
        elif kind == MODEL:
            try:
                model_dirs.resolve_model_dir(value)
            except ValueError as e:
                raise UserError(f"{flag} {e}") from None
        elif kind == OUT and value != "-" and out_checked_early(command, args):
            files.check_new_output(value, args.overwrite, flag, directory=command != "predict")
        elif kind == OUT and value != "-" or kind == RUN:
            files.check_writable(value, flag, inside=True)  # a run directory, or versions under --out


def out_checked_early(command, args):
    """Whether `check_paths` refuses a non-empty output of `command` as a whole, before it runs.

    The command checks its output itself only where this says no: the check
    is made once. `args`: the command line, read here or by the command.
    """
    if command in ("finetune", "distill") and args.strategy == "multi_worker":
        return False  # Only the chief writes --out, and before TensorFlow no worker knows whether it is the chief.
    if command == "export" and args.format not in ("tflite", "web"):
        return False  # A SavedModel goes into a new numbered version directory under --out.
    return True


def _check_dir(flag, path):
    if files.isfile(path):
        what = " holding spiece.model" if flag == "--tokenizer" else ""
        raise UserError(f"{flag} {path}: is a file, expected a directory{what}.")
    if not files.isdir(path):
        raise UserError(f"{flag} {path}: no such directory.")


def _check_file(flag, path):
    if files.isdir(path):
        raise UserError(f"{flag} {path}: is a directory, expected a file.")
    if not files.isfile(path):
        raise UserError(f"{flag} {path}: no such file or directory.")
    if not files.is_url(path):
        try:
            offset = _first_non_utf8(path)
        except PermissionError:
            raise UserError(f"{flag} {path}: permission denied.") from None
        if offset is not None:
            raise UserError(f"{flag} {path}: not UTF-8 text (byte offset {offset}); save it as UTF-8.")


def _first_non_utf8(path, chunk_size=1 << 20):
    """The file offset of the first bytes of `path` that are not UTF-8, or None."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(chunk_size)
            pending = len(decoder.getstate()[0])  # bytes of a character begun in the chunk before
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                return offset - pending + e.start
            if not chunk:
                return None
            offset += len(chunk)


class _Unread(Exception):
    pass


class _LenientParser(argparse.ArgumentParser):
    def error(self, message):
        raise _Unread(message)


def _read_flags(command, flags, argv):
    """The values of `flags`, --overwrite and `_CONTEXT_FLAGS` in `argv`, or None if unreadable.

    Abbreviations are read as argparse reads them: these flags are a subset of
    the command's, so a prefix that names one flag here names at most the
    same flag there.
    """
    parser = _LenientParser(add_help=False, exit_on_error=False)
    for flag, kind in flags.items():
        parser.add_argument(flag, dest=_dest(flag), nargs="+" if kind == PATHS else None)
    if OUT in flags.values():
        parser.add_argument("--overwrite", action="store_true")
    for flag in _CONTEXT_FLAGS.get(command, ()):
        parser.add_argument(flag, dest=_dest(flag))
    try:
        args, unread = parser.parse_known_args(argv)
    except (_Unread, argparse.ArgumentError):
        return None
    args.unread = unread
    return args


def _mistyped(flags, unread):
    """Whether an unread word looks like one of `flags` mistyped (`--modle`): the command's parser names it first."""
    words = [word.split("=", 1)[0].replace("_", "-") for word in unread if word.startswith("--")]
    return any(difflib.get_close_matches(word, list(flags), n=1, cutoff=0.8) for word in words)


def _dest(flag):
    return flag.lstrip("-").replace("-", "_")
