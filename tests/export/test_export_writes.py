"""What `export` writes and what it leaves: the user's batching file kept, no silent replace by a concurrent
export, and a failed write as one line naming the path, with nothing half-made."""

import errno
import os

import pytest
import tensorflow as tf

from albert_tf.export.batching_parameters import SUGGESTED
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import BATCHING_PARAMETERS_FILE, TFLITE_MODEL_FILE
from cli_helpers import run_cli
from export_fixtures import config

TUNED = "max_batch_size { value: 16 }\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from albert_tf import AlbertBackbone
    from albert_tf.models import AlbertClassifier

    path = str(tmp_path_factory.mktemp("export_writes") / "model")
    AlbertClassifier(AlbertBackbone(config()), num_classes=2).save_pretrained(path)
    return path


def _export(model_dir, out, *flags, expect_rc=0, fmt="saved_model"):
    return run_cli("export", "--model", model_dir, "--format", fmt, "--out", str(out), "--max-length", "16",
                   *flags, expect_rc=expect_rc)


def _debris(directory):
    """Names in `directory` that a publish left behind (staging or previous copies)."""
    return [n for n in os.listdir(directory) if n.startswith((files.STAGING_PREFIX, files.PREVIOUS_PREFIX))]


def test_a_batching_file_already_there_is_kept_until_overwrite(model_dir, tmp_path):
    base = tmp_path / "served"
    said = _export(model_dir, base).stdout
    batching = base / BATCHING_PARAMETERS_FILE
    assert batching.read_text() == SUGGESTED.to_text() and f"suggested batching parameters in {batching}" in said
    batching.write_text(TUNED)
    said = _export(model_dir, base).stdout
    assert batching.read_text() == TUNED and f"kept the existing {batching}" in said
    assert sorted(os.listdir(base)) == ["1", "2", BATCHING_PARAMETERS_FILE]
    _export(model_dir, base, "--version", "2", "--overwrite")
    assert batching.read_text() == SUGGESTED.to_text()


def test_a_version_another_export_publishes_meanwhile_is_refused_not_replaced(model_dir, tmp_path, monkeypatch):
    from albert_tf.export import saved_model

    base = tmp_path / "served"
    write_warmup_file = saved_model.write_warmup_file

    def other_export_finishes_first(staging, *args):
        (base / "1").mkdir(parents=True)
        (base / "1" / "saved_model.pb").write_bytes(b"the other export's")
        return write_warmup_file(staging, *args)

    monkeypatch.setattr(saved_model, "write_warmup_file", other_export_finishes_first)
    err = _export(model_dir, base, expect_rc=2).stderr
    assert f"{base / '1'} was written by another process while this one ran; nothing was replaced" in err
    assert err.strip().count("\n") == 0
    assert (base / "1" / "saved_model.pb").read_bytes() == b"the other export's" and not _debris(base)


def test_publish_without_replace_refuses_a_target_that_appeared_and_keeps_it(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(UserError, match="was written by another process"):
        with files.publish(str(target), replace=False) as staging:
            open(os.path.join(staging, "mine"), "w").close()
            target.mkdir()
            (target / "theirs").write_text("x")
    assert os.listdir(target) == ["theirs"] and not _debris(tmp_path)
    with files.publish(str(tmp_path / "empty"), replace=False) as staging:  # an empty directory is no output
        os.mkdir(tmp_path / "empty")
        open(os.path.join(staging, "mine"), "w").close()
    assert os.listdir(tmp_path / "empty") == ["mine"]
    with pytest.raises(UserError, match="was written by another process"):
        with files.publish(str(tmp_path / "file"), directory=False, replace=False) as staging:
            (tmp_path / "file").write_text("theirs")
    assert (tmp_path / "file").read_text() == "theirs" and not _debris(tmp_path)


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EACCES, "Permission denied"),
    tf.errors.ResourceExhaustedError(None, None, "save: No space left on device"),
    tf.errors.PermissionDeniedError(None, None, "save: Permission denied"),
])
def test_a_failed_write_in_a_saved_model_export_is_one_line_and_leaves_nothing(model_dir, tmp_path, monkeypatch,
                                                                                error):
    from albert_tf.export import saved_model

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(saved_model.tf.saved_model, "save", fails)
    base = tmp_path / "served"
    err = _export(model_dir, base, expect_rc=2).stderr
    assert f"error: {base / '1'}: cannot write there (" in err and err.strip().count("\n") == 0, err
    assert not os.path.exists(base / "1") and not _debris(base)


def test_a_full_disk_in_a_tflite_export_is_one_line_and_leaves_nothing(model_dir, tmp_path, monkeypatch):
    from albert_tf.export import tflite

    write_bytes = tflite.files.write_bytes

    def full(path, data):
        if path.endswith(TFLITE_MODEL_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_bytes(path, data)

    monkeypatch.setattr(tflite.files, "write_bytes", full)
    out = tmp_path / "lite"
    err = _export(model_dir, out, "--no-metadata", expect_rc=2, fmt="tflite").stderr
    assert "lite: cannot write there (No space left on device); nothing was written." in err, err
    assert err.strip().count("\n") == 0 and not os.path.exists(out) and not _debris(tmp_path)


@pytest.mark.slow
def test_a_second_tflite_export_to_one_out_is_refused(model_dir, tmp_path, monkeypatch):
    from albert_tf.export import tflite

    out = tmp_path / "lite"
    write_text = tflite.files.write_text

    def other_export_finishes_first(path, text):
        if not out.exists():
            out.mkdir()
            (out / TFLITE_MODEL_FILE).write_bytes(b"the other export's")
        return write_text(path, text)

    monkeypatch.setattr(tflite.files, "write_text", other_export_finishes_first)
    err = _export(model_dir, out, "--no-metadata", expect_rc=2, fmt="tflite").stderr
    assert "was written by another process while this one ran" in err
    assert (out / TFLITE_MODEL_FILE).read_bytes() == b"the other export's"


def test_serve_exports_a_model_directory_through_exports_loading_lora_merged(tmp_path, capsys):
    from albert_tf import AlbertBackbone
    from albert_tf.commands import serve
    from albert_tf.model_dirs import find_model_dir
    from albert_tf.models import AlbertClassifier

    path = str(tmp_path / "lora")
    AlbertClassifier(AlbertBackbone(config(), lora_rank=2), num_classes=2).save_pretrained(path)
    base = serve._export(find_model_dir(path), str(tmp_path / "served"))
    assert "Merging the LoRA factors (rank 2) into the attention kernels" in capsys.readouterr().out
    assert sorted(os.listdir(base)) == ["1", BATCHING_PARAMETERS_FILE]
