"""finetune's SIGTERM and Ctrl-C paths through the command line, in the test process: the CLI's SIGTERM handler
sets the stop request, finetune stops at the step it names with that step's checkpoint in `.unfinished-NAME/`, and
the rerun resumes there, counts the steps it trained, and leaves no `.unfinished-*` behind. Ctrl-C keeps the
finished epochs' checkpoint there, and the rerun resumes from it to the weights of a run never stopped.
(tests/commands/test_kill.py and test_journeys_finetune_interrupt.py send the real signals to fresh processes,
slowly.)"""

import csv
import errno
import gc
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertBackbone
import albert_tf.recipes.finetune as recipe
from albert_tf.loading import load_pretrained
from albert_tf.utils import files
from albert_tf.utils.layout import FINETUNE_RUN_FILE, RESUME_DIR
from cli_helpers import run_cli, run_in_process
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import movie_reviews


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny model directory, and CSVs of 20 training rows (5 steps of 4) and 8 evaluation rows."""
    root = tmp_path_factory.mktemp("finetune_sigterm")
    backbone = AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE))
    backbone.save_pretrained(str(root / "model"))
    small_tokenizer().save(str(root / "model" / "tokenizer"))
    everything = movie_reviews.rotten_tomatoes_sentences()
    sentences = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:28]]
    for name, rows in (("train.csv", sentences[:20]), ("eval.csv", sentences[20:])):
        with open(root / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label")] + [(t, "pos" if y else "neg") for t, y in rows])
    return root


def test_sigterm_in_an_epoch_stops_at_the_step_it_names_with_its_checkpoint_and_the_rerun_resumes_there(
        inputs, tmp_path, monkeypatch):
    argv = ["finetune", "--task", "classification", "--model", inputs / "model", "--train", inputs / "train.csv",
            "--eval", inputs / "eval.csv", "--out", tmp_path / "run", "--max-seq-length", "16", "--batch-size", "4",
            "--epochs", "2", "--truncate"]
    steps = []
    on_batch_end = recipe._StopAtStep.on_train_batch_end

    def signalled_at_step_7(self, batch, logs=None):
        # The signal itself, as a preemption sends it, during step 2 of epoch 2: the CLI's handler takes it.
        steps.append(batch)
        if len(steps) == 7:
            signal.raise_signal(signal.SIGTERM)
        on_batch_end(self, batch, logs)

    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", signalled_at_step_7)
    stopped = run_cli(*argv, expect_rc=143)
    work = tmp_path / ".unfinished-run"
    assert stopped.stderr.strip() == (
        f"albert-tf finetune: stopped by SIGTERM in epoch 2 of 2, at step 2 of 5; the newest checkpoint is "
        f"{work / RESUME_DIR / 'ckpt-7'}. The unfinished run is in {work}: rerun the same command to "
        f"resume it there; it becomes {tmp_path / 'run'} when it ends."), stopped.stderr
    assert len(steps) == 7 and not (tmp_path / "run").exists()
    # The checkpoint of the step named: epoch 2, before its step 2 (7 optimizer steps in).
    reader = tf.train.load_checkpoint(str(work / RESUME_DIR / "ckpt-7"))
    assert reader.get_tensor("position/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [2, 2]

    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", on_batch_end)
    resumed = run_cli(*argv)
    assert "Resuming from " in resumed.stdout and ": epoch 2, step 2" in resumed.stdout, resumed.stdout
    (epoch_2,) = [line for line in resumed.stdout.splitlines() if line.startswith("epoch 2/2: train loss ")]
    assert "3 steps, resumed at step 2 of 5)" in epoch_2, epoch_2
    assert (tmp_path / "run" / "best").is_dir()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".unfinished-")]


def _argv(inputs, out):
    return [str(a) for a in ["finetune", "--task", "classification", "--model", inputs / "model", "--train", inputs / "train.csv",
            "--eval", inputs / "eval.csv", "--out", out, "--max-seq-length", "16", "--batch-size", "4",
            "--epochs", "2", "--truncate"]]


def test_ctrl_c_keeps_the_finished_epochs_and_the_rerun_resumes_to_an_unstopped_run_s_weights(
        inputs, tmp_path, monkeypatch):
    steps = []
    on_batch_end = recipe._StopAtStep.on_train_batch_end

    def ctrl_c_at_step_7(self, batch, logs=None):
        steps.append(batch)
        if len(steps) == 7:  # step 2 of epoch 2, in the middle of `fit`
            raise KeyboardInterrupt
        on_batch_end(self, batch, logs)

    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", ctrl_c_at_step_7)
    # The CLI leaves through os._exit after Ctrl-C (see there); here the test goes on.
    monkeypatch.setattr(os, "_exit", lambda code: None)
    stopped = run_in_process(_argv(inputs, tmp_path / "run"))
    work = tmp_path / ".unfinished-run"
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.strip() == (
        f"albert-tf finetune: interrupted in epoch 2 of 2; the newest checkpoint is {work / RESUME_DIR / 'ckpt-5'}. "
        f"The unfinished run is in {work}: rerun the same command to resume it there; it becomes "
        f"{tmp_path / 'run'} when it ends."), stopped.stderr
    assert (work / "best").is_dir() and not (tmp_path / "run").exists()

    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", on_batch_end)
    resumed = run_cli(*_argv(inputs, tmp_path / "run"))
    assert "Resuming from " in resumed.stdout and ": epoch 2, step 0" in resumed.stdout, resumed.stdout
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".unfinished-")]
    run_cli(*_argv(inputs, tmp_path / "plain"))
    weights = [load_pretrained(str(tmp_path / name / "best")).get_weights() for name in ("run", "plain")]
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(*weights)) < 1e-5


def test_ctrl_c_while_an_epoch_is_scored_keeps_that_epoch_whole_and_stops_at_the_next_step(
        inputs, tmp_path, monkeypatch):
    # The signal itself, as a terminal sends it, while epoch 1 is evaluated: the epoch's outputs and the next
    # epoch's checkpoint are all written, and the run stops at the first step after them.
    from albert_tf.recipes.sentence import SentenceRecipe

    evaluate, scored = SentenceRecipe.evaluate, []

    def ctrl_c_then_evaluate(self, *args, **kwargs):
        if not scored:
            signal.raise_signal(signal.SIGINT)
        scored.append(1)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(SentenceRecipe, "evaluate", ctrl_c_then_evaluate)
    monkeypatch.setattr(os, "_exit", lambda code: None)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a program a terminal started
    try:
        stopped = run_in_process(_argv(inputs, tmp_path / "run"))
    finally:
        signal.signal(signal.SIGINT, before)
    work = tmp_path / ".unfinished-run"
    assert stopped.returncode == 130 and scored == [1], stopped.stderr
    assert stopped.stderr.strip().startswith(
        f"albert-tf finetune: interrupted in epoch 2 of 2; the newest checkpoint is {work / RESUME_DIR / 'ckpt-5'}. "
    ), stopped.stderr
    assert "epoch 1/2: train loss " in stopped.stdout and (work / "best").is_dir()


def test_ctrl_c_before_any_epoch_finished_keeps_nothing(inputs, tmp_path, monkeypatch):
    def ctrl_c(self, batch, logs=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", ctrl_c)
    monkeypatch.setattr(os, "_exit", lambda code: None)
    stopped = run_in_process(_argv(inputs, tmp_path / "run"))
    threads = len(os.listdir("/proc/self/task"))
    assert stopped.returncode == 130 and "interrupted in epoch 1 of 2; nothing was kept" in stopped.stderr
    assert not [p.name for p in tmp_path.iterdir()]
    # The in-process run (tests/cli_helpers.py) ended the threads of the iterators the interrupted `fit` left
    # before it gave this process its environment back: a collection now ends none.
    gc.collect()
    assert len(os.listdir("/proc/self/task")) == threads


def test_a_full_disk_is_one_line_naming_out_and_leaves_nothing_behind(inputs, tmp_path, monkeypatch):
    open_file = files.open_file

    class FullDisk:
        """A file whose writes fail as on a full disk: an OSError without a file name."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

        def close(self):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def disk_full_at_the_run_file(path, mode="r", **kwargs):
        f = open_file(path, mode, **kwargs)
        return FullDisk(f) if "w" in mode and FINETUNE_RUN_FILE in os.fspath(path) else f

    monkeypatch.setattr(files, "open_file", disk_full_at_the_run_file)
    done = run_cli(*_argv(inputs, tmp_path / "run"), expect_rc=2)
    # One line naming the file that could not be written (the run file, in the unfinished run beside --out).
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("albert-tf finetune: error: "), done.stderr
    assert f"{tmp_path / '.unfinished-run' / FINETUNE_RUN_FILE}" in line and "(No space left on device)" in line, line
    assert not list(tmp_path.iterdir())
