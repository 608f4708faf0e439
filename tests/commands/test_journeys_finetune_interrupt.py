"""Ctrl-C in `albert-tf finetune`, as a user presses it: the finished epochs are kept, and the rerun resumes."""

import csv
import json
import os
import signal
import subprocess

import numpy as np
import pytest

from albert_tf import AlbertBackbone
from cli_helpers import albert_tf_command, ctrl_c_reaches_it, run_cli, start_program, user_environment
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import movie_reviews

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """A tiny pretrained run (final/ beside tokenizer/) and a classification CSV of real sentences."""
    root = tmp_path_factory.mktemp("interrupt")
    AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)).save_pretrained(str(root / "pretrained" / "final"))
    small_tokenizer().save(str(root / "pretrained" / "tokenizer"))
    everything = movie_reviews.rotten_tomatoes_sentences()
    order = np.random.default_rng(0).permutation(len(everything))
    for name, rows in (("train.csv", order[:480]), ("eval.csv", order[480:512])):
        with open(root / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows((everything[i][0], ("neg", "pos")[everything[i][1]]) for i in rows)
    return root


def interrupted_finetune(cwd, out, after_line):
    """Starts a 6-epoch finetune, sends SIGINT once stdout shows `after_line`; (returncode, stdout, stderr)."""
    command = albert_tf_command() + ["finetune", "--task", "classification", "--model", "pretrained/final",
                                     "--train", "train.csv", "--eval", "eval.csv", "--out", out,
                                     "--max-seq-length", "64", "--batch-size", "8", "--epochs", "6", "--truncate"]
    process = start_program(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=user_environment(),
                    preexec_fn=ctrl_c_reaches_it)
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith(after_line):
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, "".join(seen) + stdout, stderr


def test_ctrl_c_after_an_epoch_keeps_it_and_the_rerun_resumes(user_dir):
    returncode, stdout, stderr = interrupted_finetune(user_dir, "runs/kept", "epoch 1/6")
    assert returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("albert-tf finetune:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "the newest checkpoint is runs/.unfinished-kept/resume/ckpt-" in lines[0], lines[0]
    assert "rerun the same command to resume it there; it becomes runs/kept when it ends" in lines[0], lines[0]
    assert not (user_dir / "runs" / "kept").exists()
    # Its best epoch so far is a model directory already.
    predicted = run_cli("predict", "--model", "runs/.unfinished-kept", "--input", "eval.csv", cwd=user_dir)
    rows = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert len(rows) == 32 and all(r["label"] in ("neg", "pos") for r in rows)
    resumed = run_cli("finetune", "--task", "classification", "--model", "pretrained/final", "--train",
                      "train.csv", "--eval", "eval.csv", "--out", "runs/kept", "--max-seq-length", "64",
                      "--batch-size", "8", "--epochs", "6", "--truncate", cwd=user_dir)
    assert "Resuming from " in resumed.stdout, resumed.stdout
    run = json.loads((user_dir / "runs" / "kept" / "finetune.json").read_text())
    assert [r["epoch"] for r in run["history"]] == [1, 2, 3, 4, 5, 6]
    assert not [p for p in os.listdir(user_dir / "runs") if p.startswith(".")]


def test_ctrl_c_before_any_epoch_finished_says_nothing_was_kept(user_dir):
    returncode, _, stderr = interrupted_finetune(user_dir, "runs/none", "trainable parameters")
    assert returncode == 130, stderr
    assert "interrupted " in stderr and "; nothing was kept" in stderr and "Traceback" not in stderr, stderr
    assert not (user_dir / "runs" / "none").exists()
    assert not [p for p in os.listdir(user_dir / "runs") if p.startswith(".")]
