"""A rerun says whether it resumes or starts new; a stopped command says what it kept; a cluster's preemption notice
ends `pretrain` as SIGTERM does; a shard damaged in place is bad input that names it, with the steps before kept."""

import contextlib
import re
import shutil
import threading

import pytest

from albert_tf import cli
from albert_tf.training import checkpoints, stop_requests
from cli_helpers import run_cli
from input_pipeline import movie_reviews
from input_pipeline.tfrecord_files import first_damaged_record
from journey_fixtures import write_sentences_corpus

TINY = ["--embedding-size", "8", "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2",
        "--intermediate-size", "32", "--batch-size", "8", "--warmup-steps", "0", "--compile-step", "none",
        "--log-every", "1", "--steps-per-loop", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A corpus, its tokenizer and create-data's records of it, in several shards."""
    root = tmp_path_factory.mktemp("records")
    write_sentences_corpus(root / "corpus", movie_reviews.imdb_documents("pretrain", limit=120))
    run_cli("train-tokenizer", "--input", "corpus", "--vocab-size", "300", "--out", "tok", cwd=root)
    run_cli("create-data", "--input", "corpus", "--tokenizer", "tok", "--out", "data", "--max-seq-length", "32",
            "--max-predictions-per-seq", "5", "--dupe-factor", "1", "--documents-per-shard", "30",
            "--num-workers", "0", cwd=root)
    return root


def pretrain(data, run, *flags, expect_rc=0):
    return run_cli("pretrain", "--data", data / "data", "--out", run, *TINY, *flags, expect_rc=expect_rc)


@contextlib.contextmanager
def sigterm_received(monkeypatch):
    """The command runs as after a SIGTERM that came while it started: its stop request is up from the start."""
    received = threading.Event()
    received.set()
    monkeypatch.setattr(cli, "sigterm_requests_stop", lambda: contextlib.nullcontext(received))
    yield


def test_pretrain_says_it_starts_a_new_run_and_then_that_it_resumes(data, tmp_path):
    run = tmp_path / "run"
    first = pretrain(data, run, "--steps", "2", "--checkpoint-every", "2")
    assert f"Starting a new run in {run} (no checkpoint in {run / 'checkpoints'})." in first.stdout
    again = pretrain(data, run, "--steps", "3", "--checkpoint-every", "2")
    assert f"Resumed from {run / 'checkpoints' / 'ckpt-2'} at step 2." in again.stdout
    assert "Starting a new run" not in again.stdout


def test_create_data_and_train_tokenizer_stopped_by_sigterm_say_nothing_was_kept(data, tmp_path, monkeypatch):
    with sigterm_received(monkeypatch):
        done = run_cli("create-data", "--input", data / "corpus", "--tokenizer", data / "tok", "--out",
                       tmp_path / "data", "--num-workers", "0", "--documents-per-shard", "30", expect_rc=143)
        assert done.stderr.splitlines() == [
            "albert-tf create-data: stopped by SIGTERM after 0 shards were handed out; nothing was kept. "
            "Rerun the same command to start again."]
        done = run_cli("train-tokenizer", "--input", data / "corpus", "--vocab-size", "300", "--out",
                       tmp_path / "tok", expect_rc=143)
        assert done.stderr.splitlines() == [
            "albert-tf train-tokenizer: stopped by SIGTERM while reading the corpus, after 0 sentences; nothing was "
            "kept. Rerun the same command to start again."]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.own_process  # a MultiWorkerMirroredStrategy (conftest.py)
def test_a_cluster_preemption_notice_ends_multi_worker_pretrain_as_sigterm_does_and_the_rerun_resumes(
        data, tmp_path, monkeypatch):
    # The notice as TensorFlow's handler reads it on a GCE GPU VM, stood in for: up from the start.
    monkeypatch.setattr(stop_requests, "platform_notice", lambda: lambda: True)
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")  # where the handler asks for Google Cloud: no one, at once
    run = tmp_path / "run"
    done = pretrain(data, run, "--strategy", "multi_worker", "--steps", "20", "--checkpoint-every", "100",
                    expect_rc=143)
    said = [line for line in done.stderr.splitlines() if line.startswith("albert-tf")]
    match = re.fullmatch(r"albert-tf pretrain: stopped by the cluster's preemption notice at step (\d+) of 20; the "
                         r"newest checkpoint is (\S+)\. Rerun the same command to resume\.", said[0])
    assert len(said) == 1 and match, done.stderr
    step = int(match[1])
    assert match[2] == str(run / "checkpoints" / f"ckpt-{step}") and 0 < step < 20
    assert checkpoints.checkpoint_steps(str(run / "checkpoints")) == [step]
    monkeypatch.setattr(stop_requests, "platform_notice", lambda: None)
    again = pretrain(data, run, "--strategy", "multi_worker", "--steps", "20", "--checkpoint-every", "100")
    assert f"Resumed from {match[2]} at step {step}." in again.stdout


def test_a_shard_damaged_in_place_is_bad_input_naming_it_and_the_run_keeps_its_checkpoint(data, tmp_path):
    # create-data's shards fit one shuffle window here, so the damaged record is met in a run's first loop: a run
    # of 2 steps first, then the damage (the library test in tests/training/test_faults.py meets it mid-run).
    records, run = tmp_path / "data", tmp_path / "run"
    shutil.copytree(data / "data", records)
    run_cli("pretrain", "--data", records, "--out", run, *TINY, "--steps", "2")
    shard = sorted(records.glob("*.tfrecord"))[1]
    content = bytearray(shard.read_bytes())
    content[len(content) // 2] ^= 0xFF  # one byte of a record changed; the size, which metadata.json holds, not
    shard.write_bytes(bytes(content))
    done = run_cli("pretrain", "--data", records, "--out", run, *TINY, "--steps", "20", expect_rc=2)
    assert done.stderr.splitlines() == [
        f"albert-tf pretrain: error: {shard} has a damaged record at byte "
        f"{first_damaged_record(str(shard))} (its checksum does not match: the file changed after create-data wrote "
        f"it); rerun create-data. Training stopped after step 2; the newest checkpoint is "
        f"{run / 'checkpoints' / 'ckpt-2'}."]
    assert checkpoints.checkpoint_steps(str(run / "checkpoints")) == [2]
