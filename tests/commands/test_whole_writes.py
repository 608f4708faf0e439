"""Every output is published whole: a kill between two writes leaves the old state or the new one.

A kill is simulated by making the write after the first raise (KeyboardInterrupt,
as Ctrl-C does) and reading what is left, at a local path and at a URL (ram://).
"""

import functools
import json
import os
import uuid

import pytest

from albert_tf import model_dirs
from albert_tf.training import progress
from albert_tf.utils import files
from albert_tf.utils.layout import TFLITE_MODEL_FILE, TRAIN_LOG_FILE
from albert_tf.utils.errors import UserError
from data_fixtures import imdb_documents
from input_pipeline import AlbertTokenizer, Preprocessing


def _root(tmp_path, where):
    return str(tmp_path) if where == "local" else f"ram://whole-{uuid.uuid4().hex[:8]}"


def _killed_at_the_second_write(monkeypatch):
    """Makes `files.write_bytes` raise KeyboardInterrupt on its second call, as a kill between two writes."""
    real, calls = files.write_bytes, []

    def write_bytes(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(files, "write_bytes", write_bytes)
    return calls


@functools.lru_cache(maxsize=None)
def _tokenizer(first_document=0):
    documents = imdb_documents()[first_document:first_document + 100]
    return AlbertTokenizer.train((s for d in documents for s in d), 300, num_threads=2)


def _english():
    return _tokenizer()


def _korean():
    """Another model than `_english`'s, with another preprocessing than the English default:
    its spiece.model loaded alone would give wrong ids silently."""
    return AlbertTokenizer(_tokenizer(100).model_proto, Preprocessing.for_language("ko"), "ko")


@pytest.mark.parametrize("where", ["local", "ram"])
def test_a_kill_between_the_tokenizer_files_leaves_the_old_tokenizer(tmp_path, where, monkeypatch):
    directory = os.path.join(_root(tmp_path, where), "run", model_dirs.TOKENIZER_DIR)
    _english().save(directory)
    calls = _killed_at_the_second_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _korean().save(directory)
    monkeypatch.undo()
    assert len(calls) == 2  # the kill fell between the tokenizer's two files
    old = model_dirs.load_tokenizer(directory)
    assert (old.language, old.model_proto) == ("en", _english().model_proto)  # the old one, whole
    assert sorted(files.listdir(os.path.dirname(directory))) == [model_dirs.TOKENIZER_DIR]  # nothing staged left
    _korean().save(directory)
    new = model_dirs.load_tokenizer(directory)
    assert (new.language, new.model_proto) == ("ko", _korean().model_proto)


def test_a_kill_during_a_first_tokenizer_save_leaves_no_tokenizer(tmp_path, monkeypatch):
    directory = str(tmp_path / "run" / model_dirs.TOKENIZER_DIR)
    _killed_at_the_second_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _korean().save(directory)
    monkeypatch.undo()
    assert not files.exists(directory)
    with pytest.raises(UserError, match="spiece.model is missing"):
        model_dirs.load_tokenizer(directory)


def test_a_lone_spiece_model_is_refused_where_albert_tf_wrote_it_and_read_elsewhere(tmp_path):
    # What an older save, killed between its two files, left: spiece.model without tokenizer.json.
    ours = tmp_path / "run" / model_dirs.TOKENIZER_DIR
    bare = tmp_path / "downloaded"
    for directory in (ours, bare):
        directory.mkdir(parents=True)
        (directory / model_dirs.SPIECE_FILE).write_bytes(_korean().model_proto)
    with pytest.raises(UserError) as refused:
        model_dirs.load_tokenizer(str(ours))
    assert str(refused.value).count("\n") == 0 and "without tokenizer.json" in str(refused.value)
    # A bare SentencePiece model (a hub download, the original release's) reads with the English default.
    assert model_dirs.load_tokenizer(str(bare)).language == "en"


@pytest.mark.parametrize("where", ["local", "ram"])
def test_a_kill_while_a_file_is_written_leaves_the_old_file(tmp_path, where, monkeypatch):
    path = os.path.join(_root(tmp_path, where), "metrics.json")
    files.write_text(path, '{"old": true}')
    real_open, opened = files.open_file, []

    def open_then_kill(target, mode="r", **kwargs):
        f = real_open(target, mode, **kwargs)
        opened.append(target)
        if len(opened) == 2:  # the staged copy (made empty first), half written
            f.write(b'{"ne')
            f.close()
            raise KeyboardInterrupt
        return f

    monkeypatch.setattr(files, "open_file", open_then_kill)
    with pytest.raises(KeyboardInterrupt):
        files.write_text(path, '{"new": true}')
    monkeypatch.undo()
    assert opened[1] != path and json.loads(files.read_text(path)) == {"old": True}
    assert files.listdir(os.path.dirname(path)) == ["metrics.json"]


def _log(run_dir, start, steps, loss):
    """Reports `steps` of a run that starts (or resumes) at `start`, every metric `loss`."""
    logger = progress.ProgressLogger(run_dir, num_steps=1000, examples_per_step=8, log_every=100,
                                     print_fn=lambda _: None)
    logger.start(start)
    for step in steps:
        logger.update(step, dict.fromkeys(progress.METRICS, loss), learning_rate=1e-3, num_steps=50)
    logger.close()


@pytest.mark.parametrize("where", ["local", "ram"])
def test_a_resume_appends_to_the_log_and_readers_drop_the_lost_steps(tmp_path, where):
    run_dir = _root(tmp_path, where)
    path = os.path.join(run_dir, TRAIN_LOG_FILE)
    _log(run_dir, 0, [100, 200, 300], loss=1.0)
    # A kill cut the next line short; the run resumes from its checkpoint at step 250.
    with files.open_file(path, "a") as f:
        f.write('{"step": 40')
    written = files.read_bytes(path)
    _log(run_dir, 250, [300, 400], loss=2.0)
    assert files.read_bytes(path).startswith(written)  # nothing written before was rewritten
    records = progress.read_log(run_dir)
    assert [(r["step"], r["loss"]) for r in records] == [(100, 1.0), (200, 1.0), (300, 2.0), (400, 2.0)]


def test_a_kill_during_a_tflite_export_leaves_the_old_export(tmp_path, monkeypatch):
    from albert_tf.export import export_tflite
    from export_fixtures import classifier

    out = tmp_path / "tflite"
    out.mkdir()
    (out / TFLITE_MODEL_FILE).write_bytes(b"the old export")
    calls = _killed_at_the_second_write(monkeypatch)  # export.json, then model.tflite
    with pytest.raises(KeyboardInterrupt):
        export_tflite(classifier(), str(out), max_length=8, overwrite=True)
    assert os.path.basename(calls[-1]) == TFLITE_MODEL_FILE
    assert os.listdir(out) == [TFLITE_MODEL_FILE] and (out / TFLITE_MODEL_FILE).read_bytes() == b"the old export"
    assert os.listdir(tmp_path) == ["tflite"]


def test_a_tokenizer_saved_beside_other_files_keeps_them_and_is_never_a_mix(tmp_path, monkeypatch):
    # A model directory with its tokenizer files beside the weights: saving keeps the weights.
    (tmp_path / "model.weights.h5").write_bytes(b"weights")
    _english().save(str(tmp_path))
    _killed_at_the_second_write(monkeypatch)  # tokenizer.json written, spiece.model not
    with pytest.raises(KeyboardInterrupt):
        _korean().save(str(tmp_path))
    monkeypatch.undo()
    assert (tmp_path / "model.weights.h5").read_bytes() == b"weights"
    with pytest.raises(UserError, match="spiece.model is missing"):  # no tokenizer, never the old model read the new way
        AlbertTokenizer.load(str(tmp_path))
    _korean().save(str(tmp_path))
    assert AlbertTokenizer.load(str(tmp_path)).language == "ko"
    assert sorted(os.listdir(tmp_path)) == ["model.weights.h5", "spiece.model", "tokenizer.json"]
