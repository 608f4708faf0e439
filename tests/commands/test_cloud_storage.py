"""Paths at a URL (gs://): `albert_tf.utils.files` on TensorFlow's in-memory ram://, and
the whole command-line journey with inputs and outputs there and nothing on local disk."""

import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.commands import outputs
from albert_tf.model_dirs import ENTRY_FILES
from albert_tf.utils import files, layout
from cli_helpers import user_environment
from input_pipeline import movie_reviews, tokenizer
from journey_fixtures import write_sentences_corpus, write_sst2

WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cloud_storage_worker.py")


@pytest.fixture
def bucket():
    root = f"ram://test-{uuid.uuid4().hex[:8]}"
    files.makedirs(root)
    yield root
    files.rmtree(root, ignore_errors=True)


def tree(root):
    return {os.path.join(top, n)[len(root) + 1:]: files.read_text(os.path.join(top, n))
            for top, _, names in files.walk(root) for n in names}


def test_reads_and_writes_at_a_url(bucket):
    files.makedirs(f"{bucket}/a/b")
    files.write_text(f"{bucket}/a/b/x.json", '{"k": 1}')
    files.write_bytes(f"{bucket}/a/y.bin", b"\x00\x01")
    assert files.read_text(f"{bucket}/a/b/x.json") == '{"k": 1}' and files.read_bytes(f"{bucket}/a/y.bin") == b"\x00\x01"
    assert files.isdir(f"{bucket}/a/b") and files.isfile(f"{bucket}/a/y.bin") and not files.isfile(f"{bucket}/a/b")
    assert sorted(files.listdir(f"{bucket}/a")) == ["b", "y.bin"]
    assert [(root, names) for root, _, names in files.walk(f"{bucket}/a") if names] == [
        (f"{bucket}/a", ["y.bin"]), (f"{bucket}/a/b", ["x.json"])]
    files.rmtree(f"{bucket}/a")
    assert not files.exists(f"{bucket}/a") and not files.exists(f"{bucket}/a/b/x.json")
    files.rmtree(f"{bucket}/a", ignore_errors=True)
    with pytest.raises(FileNotFoundError, match="x.json"):
        files.read_text(f"{bucket}/a/b/x.json")


def test_a_rewritten_file_holds_the_new_content_only(bucket):
    # ram:// appends on rewrite where a bucket replaces: both writers must replace.
    path = f"{bucket}/log.jsonl"
    files.write_text(path, "one\ntwo\n")
    files.write_text(path, "three\n")
    assert files.read_text(path) == "three\n"
    with files.open_file(path, "w") as f:
        f.write("four\n")
    with files.open_file(path, "a") as f:
        f.write("five\n")
    assert files.read_text(path) == "four\nfive\n"
    files.write_text(f"{bucket}/new.txt", "x")
    files.replace(f"{bucket}/new.txt", path)
    assert files.read_text(path) == "x" and files.listdir(bucket) == ["log.jsonl"]


def test_a_moved_directory_gets_its_entry_files_last_and_loses_them_first(bucket, monkeypatch):
    for path in ("model.weights.h5", "config.json", "albert_tf.json", "tokenizer/spiece.model",
                 "tokenizer/tokenizer.json", "assets.extra/meta.json", "assets/vocab.txt"):
        files.makedirs(os.path.dirname(f"{bucket}/src/{path}"))
        files.write_text(f"{bucket}/src/{path}", path)
    before = tree(f"{bucket}/src")
    events = []
    copy, remove = tf.io.gfile.copy, tf.io.gfile.remove
    monkeypatch.setattr(tf.io.gfile, "copy", lambda a, b, *r, **k: (events.append(("copy", b)), copy(a, b, *r, **k)))
    monkeypatch.setattr(tf.io.gfile, "remove", lambda a: (events.append(("remove", a)), remove(a)))
    files.move(f"{bucket}/src", f"{bucket}/dst", ENTRY_FILES)
    assert tree(f"{bucket}/dst") == before and not files.exists(f"{bucket}/src")
    copied = [p[len(f"{bucket}/dst/"):] for kind, p in events if kind == "copy"]
    removed = [p[len(f"{bucket}/src/"):] for kind, p in events if kind == "remove"]
    # A nested entry file (the tokenizer's) before the directory's own, each in ENTRY_FILES order.
    assert copied[-3:] == ["tokenizer/spiece.model", "config.json", "albert_tf.json"]
    assert removed[:3] == ["albert_tf.json", "config.json", "tokenizer/spiece.model"]
    assert events.index(("copy", f"{bucket}/dst/albert_tf.json")) < events.index(("remove", f"{bucket}/src/albert_tf.json"))


def test_local_paths_move_by_one_rename(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "f").write_text("x")
    inode = (tmp_path / "src" / "sub" / "f").stat().st_ino
    files.move(str(tmp_path / "src"), str(tmp_path / "dst"), ("f",))
    assert (tmp_path / "dst" / "sub" / "f").stat().st_ino == inode and not (tmp_path / "src").exists()
    assert files.parent_dir("out") == os.getcwd() and files.parent_dir("gs://b/runs/x/") == "gs://b/runs"
    assert files.normpath("gs://b//c/") == "gs://b//c" and files.normpath("a//b/") == "a/b"


def test_publish_output_at_a_url_is_whole_or_absent(bucket):
    with files.publish_output(f"{bucket}/out", False, outputs.ENTRY_FILES) as staging:
        files.write_text(os.path.join(staging, "metadata.json"), "{}")
    assert files.listdir(bucket) == ["out"] and files.listdir(f"{bucket}/out") == ["metadata.json"]
    with pytest.raises(ValueError, match="--overwrite"):
        with files.publish_output(f"{bucket}/out", False, outputs.ENTRY_FILES):
            pass
    with pytest.raises(RuntimeError):
        with files.publish_output(f"{bucket}/failed", False, outputs.ENTRY_FILES) as staging:
            files.write_text(os.path.join(staging, "half"), "x")
            raise RuntimeError
    assert files.listdir(bucket) == ["out"]


def test_entry_file_names_are_the_modules_own():
    assert set(ENTRY_FILES) <= set(outputs.ENTRY_FILES)
    assert {tokenizer.MODEL_FILE, layout.DATA_METADATA_FILE, layout.FINETUNE_RUN_FILE, layout.SAVED_MODEL_FILE,
            layout.TFLITE_MODEL_FILE} <= set(outputs.ENTRY_FILES)


@pytest.mark.slow
@pytest.mark.timeout(300)  # a long journey (tests/README.md)
def test_the_journey_runs_in_a_bucket_and_leaves_local_disk_alone(tmp_path):
    inputs = tmp_path / "inputs"
    write_sentences_corpus(str(inputs / "corpus"), movie_reviews.imdb_documents("pretrain", limit=300))
    everything = movie_reviews.rotten_tomatoes_sentences()
    order = np.random.default_rng(0).permutation(len(everything))
    rows = [(everything[i][0], everything[i][1]) for i in order[:96]]
    write_sst2(str(inputs / "train.tsv"), rows[:64])
    write_sst2(str(inputs / "dev.tsv"), rows[64:])
    cwd, home, tmp = (tmp_path / name for name in ("cwd", "home", "tmp"))
    for directory in (cwd, home, tmp):
        directory.mkdir()

    done = subprocess.run(
        [sys.executable, WORKER, str(inputs / "corpus" / "reviews.txt"), str(inputs / "train.tsv"),
         str(inputs / "dev.tsv")],
        cwd=cwd, capture_output=True, text=True, timeout=900,
        env=user_environment(HOME=str(home), TMPDIR=str(tmp)),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1].removeprefix("REPORT "))

    # Ctrl-C at step 6 kept the step-4 checkpoint and no final/; the rerun resumed from it.
    assert report["interrupted_code"] == 130
    assert "checkpoints/ckpt-4.index" in report["after_interrupt"]
    assert not any(p.startswith("final/") for p in report["after_interrupt"])
    assert "Resumed from ram://bucket/runs/base/checkpoints/ckpt-4 at step 4." in done.stdout
    assert report["log_steps"] == [2, 4, 6, 8]
    assert {"final/model.weights.h5", "final/config.json", "final/tokenizer/spiece.model",
            "checkpoints/ckpt-8.index"} <= set(report["run"])
    assert any(p.startswith("tensorboard/events.out.tfevents") for p in report["run"])
    assert {"best/model.weights.h5", "finetune.json"} <= set(report["finetune"])
    assert report["predictions"] == report["dev_rows"] == 32
    assert "serve_text" in report["signatures"] and report["tflite_inputs"] == 3
    # `serve` answered from the bucket's export and from the bucket's run directory.
    assert report["served"][0] == report["served"][1] and {"label_ids", "labels", "probabilities"} <= set(
        report["served"][0]), report["served"]
    assert {"metrics.json", "loss_curve.png", "final/model.weights.h5"} <= set(report["demo"])
    # No staging or moved-aside leftovers anywhere in the bucket.
    assert not [p for p in report["everything"] if any(part.startswith(".") for part in p.split("/"))]

    # Nothing written locally: the working directory and TMPDIR stay empty (the
    # TFLite converter's and predict's scratch directories are deleted); HOME
    # holds only Keras' and matplotlib's own settings and font cache.
    assert list(cwd.iterdir()) == [] and list(tmp.iterdir()) == []
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert all(p == ".keras/keras.json" or p.startswith(".cache/matplotlib/") for p in written), written
