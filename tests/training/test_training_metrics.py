"""Metrics on the device, read once per loop; held-out evaluation during pretraining (`pretrain --eval-data`)."""

import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops

from albert_tf.training import Trainer, evaluate_pretraining, read_log
from albert_tf.utils.errors import RunStopped
from albert_tf.training.step_runner import EVAL_METRICS
from cli_helpers import run_cli
from data_fixtures import imdb_documents, small_tokenizer
from journey_fixtures import TINY_MODEL as TINY_FLAGS, assert_one_line_error, write_sentences_corpus
from training_helpers import TINY_MODEL, array_dataset_fn, synthetic_examples, tiny_trainer_config

EXAMPLES = synthetic_examples()
HELD_OUT = synthetic_examples(num_examples=32, seed=5)


def trainer(run_dir, eval_data=None, **overrides):
    return Trainer(TINY_MODEL, tiny_trainer_config(**overrides), str(run_dir), array_dataset_fn(EXAMPLES),
                   eval_dataset_fn=eval_data and array_dataset_fn(eval_data), print_fn=lambda *_: None)


# ------------------------------------------------------------ metrics on the device
def host_reads_of_a_run(run_dir, steps, monkeypatch):
    """Device-to-host reads (every EagerTensor's value goes through `_numpy`) while one loop of `steps` trains."""
    # No XLA (faster to build): what the host reads does not depend on it.
    run = trainer(run_dir, num_steps=steps, steps_per_loop=steps, log_every=steps, checkpoint_every=steps,
                  compile_step="none")
    reads = []
    read = ops._EagerTensorBase._numpy
    with monkeypatch.context() as patch:
        patch.setattr(ops._EagerTensorBase, "_numpy", lambda tensor: reads.append(1) or read(tensor))
        run.train()
    return len(reads)


@pytest.mark.slow
def test_metrics_are_read_once_per_loop_however_many_steps_it_runs(tmp_path, monkeypatch):
    # A per-step read (a host loop over steps, a metric fetched each step) adds reads with each step.
    assert host_reads_of_a_run(tmp_path / "two", 2, monkeypatch) == host_reads_of_a_run(tmp_path / "six", 6,
                                                                                          monkeypatch)


def test_a_loop_of_any_length_reads_its_metrics_once(tmp_path, monkeypatch):
    # One run whose loops are 6 steps, then 2: each loop is one call and one read, and a loop of 6
    # steps reads no more than a loop of 2.
    run = trainer(tmp_path, num_steps=8, steps_per_loop=6, log_every=8, checkpoint_every=8)
    loops, reads = [], []
    run_loop = run.runner.run_loop

    def counted(iterator, steps):
        before = len(reads)
        result = run_loop(iterator, steps)
        loops.append((steps, len(reads) - before))
        return result

    read = ops._EagerTensorBase._numpy
    monkeypatch.setattr(run.runner, "run_loop", counted)
    monkeypatch.setattr(ops._EagerTensorBase, "_numpy", lambda tensor: reads.append(1) or read(tensor))
    run.train()
    assert loops == [(6, 1), (2, 1)]


def test_a_non_finite_loss_stops_the_graph_loop_and_is_reported_at_its_end(tmp_path):
    run = trainer(tmp_path, num_steps=8, steps_per_loop=8, log_every=8, checkpoint_every=8, learning_rate=1e30,
                  compile_step="none")
    loops = []
    run_loop = run.runner.run_loop
    run.runner.run_loop = lambda iterator, steps: loops.append(run_loop(iterator, steps)) or loops[-1]
    with pytest.raises(RunStopped, match=r"^diverged at step (\d+).*found at the end of the loop of steps 1-8") as raised:
        run.train()
    assert raised.value.saved is None and "starts again from step 0" in raised.value.then
    [(done, _, last)] = loops
    # The loop stopped inside the graph at the first non-finite loss, before its 8 steps.
    assert done < 8 and not np.isfinite(last["loss"]) and run.step == done


# ------------------------------------------------------------ held-out evaluation
# Without XLA a few seconds; the compiled batch sums once more.
@pytest.mark.parametrize("compile_step", ["none", pytest.param("auto", marks=pytest.mark.slow)])
def test_evaluation_reads_the_same_batches_each_time_and_matches_evaluate_pretraining(tmp_path, compile_step):
    # 2 of the 4 held-out batches: an evaluation that went on where the last stopped would score others.
    run = trainer(tmp_path, HELD_OUT, eval_every=100, eval_steps=2, compile_step=compile_step)
    first, second = run.evaluate(), run.evaluate()
    assert first == second
    batches = array_dataset_fn(HELD_OUT)(8, tf.distribute.InputContext(), 0)
    expected = evaluate_pretraining(run.runner.model, batches, 2)
    for name in EVAL_METRICS:
        assert first[name] == pytest.approx(expected[name.removeprefix("eval_")], rel=1e-5)


@pytest.mark.slow
def test_evaluations_join_the_log_records_of_their_steps_and_the_last_step(tmp_path):
    run = trainer(tmp_path, HELD_OUT, num_steps=5, log_every=2, eval_every=4, eval_steps=1, compile_step="none")
    run.train()
    records = {r["step"]: r for r in read_log(tmp_path)}
    assert sorted(records) == [2, 4, 5]
    assert [s for s, r in records.items() if EVAL_METRICS[0] in r] == [4, 5]
    # The last record holds the evaluation of the weights the run ended with.
    assert {name: records[5][name] for name in EVAL_METRICS} == pytest.approx(run.evaluate(), rel=1e-6)


def test_evaluation_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match="eval_every=3, log_every=2"):
        tiny_trainer_config(log_every=2, eval_every=3)
    with pytest.raises(ValueError, match="eval_dataset_fn"):
        trainer(tmp_path, eval_every=100)
    with pytest.raises(ValueError, match="needs held-out data"):
        trainer(tmp_path / "none").evaluate()


# ------------------------------------------------------------ pretrain --eval-data
def event_tags(run_dir):
    """{tag: [(step, value)]} of the TensorBoard event files of a run."""
    tags = {}
    for path in sorted(tf.io.gfile.glob(str(run_dir / "tensorboard" / "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return tags


@pytest.mark.slow
def test_pretrain_evaluates_held_out_text_under_mirrored_and_resumes(tmp_path):
    documents = imdb_documents()
    write_sentences_corpus(tmp_path / "train", documents[:200])
    write_sentences_corpus(tmp_path / "held", documents[200:260])
    small_tokenizer().save(str(tmp_path / "tok"))
    flags = ["pretrain", *TINY_FLAGS, "--data", "train/reviews.txt", "--tokenizer", "tok", "--max-seq-length", "32",
             "--max-predictions-per-seq", "5", "--batch-size", "8", "--log-every", "2", "--checkpoint-every", "2",
             "--eval-data", "held/reviews.txt", "--eval-every", "2", "--eval-steps", "2", "--strategy", "mirrored",
             "--logical-cpus", "2", "--compile-step", "none", "--out", "run"]  # XLA's own tests are elsewhere
    done = run_cli(*flags, "--steps", "4", cwd=tmp_path)
    assert len([line for line in done.stdout.splitlines() if " | eval mlm_acc " in line]) == 2, done.stdout
    resumed = run_cli(*flags, "--steps", "6", "--eval-steps", "3", cwd=tmp_path)
    assert "Resumed from" in resumed.stdout and "eval_steps: 2 -> 3" in resumed.stdout

    records = read_log(str(tmp_path / "run"))
    assert [r["step"] for r in records] == [2, 4, 6]
    tags = event_tags(tmp_path / "run")
    for name in EVAL_METRICS:
        assert [step for step, _ in tags[name]] == [2, 4, 6]
        assert [value for _, value in tags[name]] == pytest.approx([r[name] for r in records])
    for record in records:
        assert 0 < record["eval_mlm_loss"] < 2 * np.log(small_tokenizer().vocab_size)
    saved = json.loads((tmp_path / "run" / "training_config.json").read_text())
    assert saved["eval_data"] == {"paths": ["held/reviews.txt"], "seed": 0}


def test_pretrain_refuses_bad_eval_flags_with_one_line(tmp_path):
    (tmp_path / "data").mkdir()
    common = ["pretrain", "--data", "data", "--out", "run"]
    assert_one_line_error(run_cli(*common, "--eval-data", "missing/", "--eval-every", "2", cwd=tmp_path,
                                  expect_rc=2), "--eval-data missing/")
    assert_one_line_error(run_cli(*common, "--eval-every", "2", cwd=tmp_path, expect_rc=2), "--eval-every needs --eval-data")
    assert_one_line_error(run_cli(*common, "--eval-data", "data", cwd=tmp_path, expect_rc=2), "--eval-data needs --eval-every")
    assert_one_line_error(run_cli(*common, "--eval-data", "data", "--eval-every", "3", "--log-every", "2",
                                  cwd=tmp_path, expect_rc=2), "eval_every=3, log_every=2")
    assert not (tmp_path / "run").exists()
