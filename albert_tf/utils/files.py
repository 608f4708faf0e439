"""File operations that take local paths and URLs (gs://, ram://, ...) alike.

A local path goes through `os`, `shutil` and the built-in `open`, exactly as
before URLs were allowed (fsync, atomic `os.replace`). A path with a scheme
("gs://bucket/run") goes through `tf.io.gfile`, imported only then, so the
modules that touch local files only (the data-writer workers, the tokenizer)
never load TensorFlow.

Written whole or not at all on object stores: a single object appears only
when its upload completes, and `tf.io.gfile.rename` of one object (a server-
side copy, then a delete) shows readers the old object or the new one. A
directory has no atomic rename there, so `move` copies it file by file and
the directory's entry files (those a reader needs before any other:
metadata.json, spiece.model, config.json, ...) come last into the new place
and leave the old place first: a reader that finds the entry files finds
every other file beside them, and a directory without them is incomplete.

`publish` is how every output is written whole, at a path or a URL, and
`publish_output` how a command writes one that must be new (or --overwrite).
Inside a staging path the enclosing `publish` will put in place whole, they
write plainly: a library function given a staging path (a converter called by
a command, `write_text` of a file in a model directory being published)
neither checks nor publishes a second time.
"""

import builtins
import contextlib
import errno
import os
import shutil
import tempfile
import threading
import uuid

from albert_tf.utils.errors import UserError

_SCHEME = "://"


def is_url(path):
    """Whether `path` names a file through a file system scheme (gs://, ram://, ...)."""
    return _SCHEME in os.fspath(path)


def _gfile():
    import tensorflow as tf  # heavy: only for URLs

    return tf.io.gfile


def open_file(path, mode="r", encoding="utf-8", newline=None):
    """Opens a file; URLs through `tf.io.gfile.GFile` (text in UTF-8)."""
    if not is_url(path):
        return builtins.open(path, mode, encoding=None if "b" in mode else encoding, newline=newline)
    gfile = _gfile()
    if mode.startswith("w") and gfile.exists(path):
        # An object store replaces an object on write; TensorFlow's ram:// appends to it instead.
        gfile.remove(path)
    return gfile.GFile(path, mode)


@contextlib.contextmanager
def open_text(path, newline=None):
    """Opens UTF-8 text file `path` for reading; bytes that are not UTF-8 raise a UserError naming it."""
    with open_file(path, "r", newline=newline) as f:
        try:
            yield f
        except UnicodeDecodeError as e:
            bad = e.object[e.start:e.start + 4]
            raise UserError(f"{path} is not UTF-8 text ({e.reason}: {bad!r}); save it as UTF-8.") from None


def read_bytes(path):
    """The bytes of file `path`; a missing or unreadable URL raises OSError, as a local path does."""
    with _as_os_errors(path), open_file(path, "rb") as f:
        return f.read()


def read_text(path):
    """The text of UTF-8 file `path` (OSError as `read_bytes`, UnicodeDecodeError for bad bytes)."""
    if not is_url(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return read_bytes(path).decode("utf-8")


@contextlib.contextmanager
def _as_os_errors(path):
    """Turns `tf.errors.OpError` of a URL into the OSError a local path would raise."""
    if not is_url(path):
        yield
        return
    import tensorflow as tf

    try:
        yield
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(errno.ENOENT, e.message, path) from e
    except tf.errors.OpError as e:
        raise OSError(errno.EIO, e.message, path) from e


def write_bytes(path, data):
    """Writes file `path` whole (`publish`): a reader sees the old file or the new one, never half of it.

    Inside a staging path (`in_staging`) it writes plainly: the enclosing `publish` makes it whole.
    """
    with publish(path, directory=False) as staging, open_file(staging, "wb") as f:
        f.write(data)


def write_text(path, text):
    """`write_bytes` of UTF-8 text."""
    write_bytes(path, text.encode("utf-8"))


def size(path):
    """The size of file `path` in bytes."""
    return _gfile().stat(path).length if is_url(path) else os.path.getsize(path)


def exists(path):
    return _gfile().exists(path) if is_url(path) else os.path.exists(path)


def isdir(path):
    return _gfile().isdir(path) if is_url(path) else os.path.isdir(path)


def isfile(path):
    if not is_url(path):
        return os.path.isfile(path)
    gfile = _gfile()
    return gfile.exists(path) and not gfile.isdir(path)


def makedirs(path):
    """Creates `path` and its parents; an existing directory is fine."""
    if is_url(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def listdir(path):
    """The names in directory `path` (without trailing slashes), in no set order.

    A missing path raises FileNotFoundError, a URL's too.
    """
    if not is_url(path):
        return os.listdir(path)
    with _as_os_errors(path):
        return [name.rstrip("/") for name in _gfile().listdir(path)]


def walk(path):
    """Yields (root, dirs, files) as `os.walk` does (top-down; `dirs` may be pruned in place)."""
    if not is_url(path):
        yield from os.walk(path)
        return
    gfile = _gfile()
    for root, dirs, names in gfile.walk(path):
        dirs[:] = [d.rstrip("/") for d in dirs]
        # Only what exists: TensorFlow's ram:// lists by name prefix, so `assets/`
        # also "holds" `.extra/...` when `assets.extra/` is beside it.
        yield root, dirs, [name for name in names if gfile.exists(os.path.join(root, name))]


def remove(path):
    """Deletes the file `path`."""
    if is_url(path):
        _gfile().remove(path)
    else:
        os.remove(path)


def rmtree(path, ignore_errors=False):
    """Deletes directory `path` and everything under it."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=ignore_errors)
        return
    gfile = _gfile()
    try:
        gfile.rmtree(path)
    except Exception:  # tf.errors.OpError, e.g. NotFound
        if not ignore_errors:
            raise


def replace(source, target):
    """Renames file `source` to `target`, replacing it: readers see the old or the new file."""
    if is_url(source) or is_url(target):
        _gfile().rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def move(source, target, entry_files=()):
    """Renames `source` (a file, or a directory) to `target`, which must not exist.

    Locally one `os.rename`. At a URL a directory is copied file by file: the
    files named in `entry_files` (base names; deeper ones first) are copied
    last and deleted from `source` first, so each place either has its entry
    files and everything with them, or lacks them (see the module docstring).
    """
    if not (is_url(source) or is_url(target)):
        os.rename(source, target)
        return
    gfile = _gfile()
    if not gfile.isdir(source):
        gfile.rename(source, target)
        return
    source = source.rstrip("/")
    relative = sorted(
        os.path.join(root, name)[len(source) + 1:] for root, _, names in walk(source) for name in names
    )

    def order(path):
        name = os.path.basename(path)
        if name not in entry_files:
            return (0, 0, 0)
        return (1, -path.count("/"), entry_files.index(name))

    relative.sort(key=order)
    for path in relative:
        gfile.makedirs(os.path.dirname(os.path.join(target, path)))
        gfile.copy(os.path.join(source, path), os.path.join(target, path))
    for path in reversed(relative):
        gfile.remove(os.path.join(source, path))
    rmtree(source, ignore_errors=True)


# Hidden names of unfinished publishing; whatever carries them after a kill is debris.
STAGING_PREFIX = ".staging-"
PREVIOUS_PREFIX = ".previous-"

# The staging paths of the `publish` blocks running in this process (any thread).
_staging = set()
_staging_lock = threading.Lock()


def _place(path):
    """`path` as `_staging` holds it: absolute for a local path, as written for a URL."""
    return normpath(path) if is_url(path) else os.path.abspath(path)


def in_staging(path):
    """Whether `path` is, or is under, the staging path of a `publish` block running in this process.

    Such a path is new and this process's own, and the enclosing block puts
    it in place whole: it needs no check and no publishing of its own.
    """
    place = _place(path)
    with _staging_lock:
        return any(place == s or place.startswith(s + "/") for s in _staging)


@contextlib.contextmanager
def publish(target, entry_files=(), directory=True, name=None, replace=True):
    """Yields a staging path beside `target`; when the block succeeds, it replaces `target` whole.

    The one way every command and the trainer write an output that readers
    must see whole: a model directory, a SavedModel version, a run's best/ or
    final/, a predictions file, a run file. The block writes the staging
    path (a directory created here, or a file path it creates); on success
    that becomes `target`, which readers then see complete, and on an
    exception it is deleted and an old `target` stays as it was. Everything
    is created with the process's umask, as any file a user writes (0755 /
    0644 under umask 022), never tempfile's private 0700 / 0600.

    A file replaces a file with one rename. A directory takes two: an old
    `target` is moved aside first, and put back when the second rename
    fails (Ctrl-C, a failed copy); a SIGKILL between them leaves no `target`
    (never a partial one) and hidden debris named with `STAGING_PREFIX` /
    `PREVIOUS_PREFIX`. At a URL each directory rename is `move`, which
    writes `entry_files` (base names) last.

    Args:
        target: the path to publish, local or a URL.
        entry_files: names a reader needs before any other file of the directory.
        directory: whether the block writes a directory (True) or a file (False).
        name: the flag or argument that named `target`, for the error
            raised when its place cannot be written.
        replace: whether an existing `target` (a file, a non-empty
            directory) may be replaced. False refuses, and deletes the
            staging path, when another writer published `target` while the
            block ran: locally one rename that fails where `target` holds
            anything, so of two writers exactly one wins.

    Raises:
        UserError: naming `target` (and `name`) when its place cannot be
            written: a read-only or unwritable directory, a file where a
            directory is needed.
    """
    if in_staging(target):  # The enclosing block publishes it whole.
        if directory:
            makedirs(target)
        yield target
        return
    target = normpath(target)
    parent, base = os.path.split(target)
    suffix = f"{base}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging = os.path.join(parent, STAGING_PREFIX + suffix)
    with _unwritable_as_user_error(target, name):
        makedirs(parent or ".")
        if directory:
            makedirs(staging)
        else:  # created here, so that an unwritable place fails before the block's work
            open_file(staging, "wb").close()
    with _staging_lock:
        _staging.add(_place(staging))
    try:
        yield staging
    except BaseException as error:
        _delete(staging)
        reason = _write_failure(error)
        if reason is not None:
            raise UserError(f"{name + ' ' if name else ''}{target}: cannot write there ({reason}); nothing was "
                            "written.") from None
        raise
    finally:
        with _staging_lock:
            _staging.discard(_place(staging))
    if not replace:
        _put_in_place_if_new(staging, target, name, entry_files)
        return
    _put_in_place(staging, target, os.path.join(parent, PREVIOUS_PREFIX + suffix), entry_files)


# Why a write fails that the user, not the program, must fix: a full disk or quota, a file too large for the
# file system, a refused permission, a read-only file system. TensorFlow's file system reports them as these
# status codes (tsl's ErrnoToCode).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS)
_TF_RESOURCE_EXHAUSTED, _TF_PERMISSION_DENIED = 8, 7


def _write_failure(error):
    """The reason (one line) of a failed write the user must fix, or None for any other error.

    An OSError of `_WRITE_ERRNOS`, or TensorFlow's error for one (`tf.errors.OpError`, recognized by its
    `error_code` without importing TensorFlow here).
    """
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
        return error.strerror or os.strerror(error.errno)
    if getattr(error, "error_code", None) in (_TF_RESOURCE_EXHAUSTED, _TF_PERMISSION_DENIED) and hasattr(
            error, "message"):
        return (error.message.strip().splitlines() or [type(error).__name__])[0]
    return None


def _put_in_place_if_new(staging, target, name, entry_files):
    """Moves `staging` to `target` unless `target` is a file or a non-empty directory; refuses then."""
    taken = UserError(f"{name + ' ' if name else ''}{target} was written by another process while this one ran; "
                      "nothing was replaced (pass --overwrite to replace it, or choose another output).")
    try:
        if is_url(target):  # object stores have no rename that fails on an existing name: checked just before
            if exists(target) and not (isdir(target) and not listdir(target)):
                raise taken
            move(staging, target, entry_files)
            return
        if not isdir(staging):
            with open(staging, "rb") as f:  # on disk before the name points to it
                os.fsync(f.fileno())
            try:
                os.link(staging, target)  # fails where `target` exists, unlike a rename
            except FileExistsError:
                raise taken from None
            return
        try:
            os.rename(staging, target)  # fails where `target` is a file or a non-empty directory
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise taken from None
            raise
    finally:
        _delete(staging)


@contextlib.contextmanager
def _unwritable_as_user_error(target, name):
    """Turns the OSError of creating something at `target` into a UserError naming it."""
    try:
        with _as_os_errors(target):
            yield
    except OSError as e:
        reason = e.strerror or str(e)
        if e.filename and normpath(os.fspath(e.filename)) != target:
            reason += f": {e.filename}"
        raise UserError(f"{name + ' ' if name else ''}{target}: cannot write there ({reason}).") from None


@contextlib.contextmanager
def write_failures_as_user_errors(path, name="--out"):
    """Turns a failed write under `path` that the user must fix (`_write_failure`: a full disk or quota, a
    refused permission, a read-only place) into a UserError naming the file it failed on and `name`; other
    errors pass on, and so does the UserError of a `publish` block inside, which names its own target.

    For a block whose writes all go under `path`: what it leaves there is its own to clean up (`publish`
    deletes its staging path on any exception)."""
    try:
        yield
    except Exception as e:
        reason = _write_failure(e)
        if reason is None:
            raise
        # A failed write() names no file; a failed open() does.
        where = os.fspath(e.filename) if getattr(e, "filename", None) else "there"
        raise UserError(f"{name + ' ' if name else ''}{path}: cannot write {where} ({reason}).") from None


def check_new_output(path, overwrite, name="--out", directory=True):
    """Refuses an output that exists (a non-empty directory, a file) unless `overwrite`, and one of the wrong kind.

    Args:
        path: the output, local or a URL.
        overwrite: whether an existing output may be replaced.
        name: the flag (`--out`) or argument (`out_dir`) that named it, for the messages.
        directory: whether the output is a directory (else a file).

    A path inside a running `publish` block's staging path is new by
    construction (`in_staging`): nothing to check.

    Raises:
        UserError: one line naming `name` and `path`.
    """
    if in_staging(path):
        return
    how = "pass --overwrite" if name.startswith("-") else "pass overwrite=True"
    if directory and isfile(path):
        raise UserError(f"{name} {path} is a file, expected a directory.")
    if not directory and isdir(path):
        raise UserError(f"{name} {path} is a directory, expected a file.")
    check_writable(path, name)
    if overwrite:
        return
    if isfile(path):
        raise UserError(f"{name} {path} exists; {how} to replace it.")
    if isdir(path) and listdir(path):
        raise UserError(f"{name} {path} is not empty; {how} to replace it, or choose a new {name}.")


def check_writable(path, name="--out", inside=False):
    """Refuses an output whose place cannot be written, before any work: a read-only or
    unwritable directory, or a file where a directory is needed.

    The nearest existing directory where the output will be written (beside
    `path`, where `publish` stages it; or, with `inside`, in `path` itself,
    for a run directory written in place) is tried with a directory made and
    removed at once, which also tells a read-only file system (or one that
    refuses root) from a writable one. An object store answers only on
    write: there `publish` reports the same one line.

    Raises:
        UserError: one line naming `name`, `path` and what stands in the way.
    """
    if is_url(path):
        return
    existing = os.path.abspath(path) if inside else os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{name} {path}: {existing} is a file, expected a directory.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=existing))
    except OSError as e:
        raise UserError(f"{name} {path}: cannot write in {existing} ({e.strerror or e}).") from None


def publish_output(path, overwrite, entry_files=(), name="--out", directory=True):
    """`publish` of an output that must be new or empty unless `overwrite` (`check_new_output`).

    The one way a command (or a library function given an output directory)
    writes its output: refused at once when it exists, then written whole.
    Arguments as `check_new_output` and `publish`.
    """
    check_new_output(path, overwrite, name, directory)
    return publish(path, entry_files, directory, name, replace=overwrite)


def _put_in_place(staging, target, previous, entry_files):
    placed = False
    try:
        if not isdir(staging) and not isdir(target):
            if not is_url(staging):
                with open(staging, "rb") as f:  # on disk before the name points to it
                    os.fsync(f.fileno())
            replace(staging, target)
            placed = True
            return
        if exists(target):
            move(target, previous, entry_files)
        move(staging, target, entry_files)
        placed = True
    finally:
        if not placed and exists(previous):
            _delete(target)  # a partial copy at a URL
            move(previous, target, entry_files)
        _delete(staging)
        _delete(previous)


def _delete(path):
    """Deletes file or directory `path` when it exists."""
    if isdir(path):
        rmtree(path, ignore_errors=True)
    elif exists(path):
        remove(path)


def parent_dir(path):
    """The directory holding `path`: absolute for a local path, as written for a URL."""
    if is_url(path):
        return os.path.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


def normpath(path):
    """`os.path.normpath`, except that a URL keeps its "//" (only trailing slashes go)."""
    return path.rstrip("/") if is_url(path) else os.path.normpath(path)
