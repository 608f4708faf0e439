"""A stop request in fine-tuning checkpoints the step reached; the same call resumes mid-epoch to the same weights."""

import csv
import json
import os

import keras
import numpy as np
import pytest

from albert_tf import AlbertBackbone
from albert_tf.loading import load_pretrained
from albert_tf.recipes.config import FinetuneConfig
from albert_tf.recipes.finetune import finetune
from albert_tf.utils.layout import RESUME_DIR
from albert_tf.utils.errors import CHECKPOINT, PREEMPTED, RunStopped
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import movie_reviews

# Two epochs of 5 steps (20 rows, batches of 4).
CONFIG = FinetuneConfig(task="classification", epochs=2, batch_size=4, max_seq_length=16, learning_rate=1e-3,
                        truncate=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    everything = movie_reviews.rotten_tomatoes_sentences()
    sentences = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:28]]
    for name, rows in (("train.csv", sentences[:20]), ("eval.csv", sentences[20:])):
        with open(root / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label")] + [(t, "pos" if y else "neg") for t, y in rows])
    return root


def run(data, out, stop_requested=None, log=lambda *_: None):
    # Dropout on: the resumed run must also restore the dropout seeds, which the backbone draws when built.
    keras.utils.set_random_seed(0)
    backbone = AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE, hidden_dropout=0.1, attention_dropout=0.1))
    backbone.set_weights([np.full_like(w, 0.01 * (i % 7 - 3)) for i, w in enumerate(backbone.get_weights())])
    return finetune(CONFIG, backbone, small_tokenizer(), str(data / "train.csv"), str(data / "eval.csv"), str(out),
                    log=log, stop_requested=stop_requested)


def test_a_stop_mid_epoch_resumes_there_and_ends_with_the_weights_of_an_unstopped_run(data, tmp_path):
    asked, said = [], []
    with pytest.raises(RunStopped) as raised:
        # After step 2 of epoch 2.
        run(data, tmp_path / "stopped", lambda: asked.append(1) or len(asked) == 7, log=said.append)
    stop = raised.value
    assert (stop.why, stop.saved, stop.step) == (PREEMPTED, CHECKPOINT, 2)
    assert stop.where == "in epoch 2 of 2, at step 2 of 5"
    assert stop.path == str(tmp_path / "stopped" / RESUME_DIR / "ckpt-7")
    # Each run says whether it starts new or resumes.
    assert f"Starting a new run (no checkpoint in {tmp_path / 'stopped' / RESUME_DIR})." in said, said
    said.clear()
    resumed = run(data, tmp_path / "stopped", log=said.append)
    assert f"Resuming from {stop.path}: epoch 2, step 2" in said and not any("Starting" in m for m in said), said
    assert not (tmp_path / "stopped" / RESUME_DIR).exists()
    expected = run(data, tmp_path / "plain")
    assert [r["epoch"] for r in resumed["history"]] == [1, 2]
    for got, want in zip(resumed["history"], expected["history"]):
        assert got["accuracy"] == want["accuracy"] and got["train_loss"] == pytest.approx(want["train_loss"], 1e-4)
    weights = [load_pretrained(str(tmp_path / name / "best")).get_weights() for name in ("stopped", "plain")]
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(*weights)) < 1e-5
    record = json.loads((tmp_path / "stopped" / "finetune.json").read_text())
    assert record["best_epoch"] == expected["best_epoch"]


def test_a_resume_state_of_other_settings_is_not_resumed(data, tmp_path):
    with pytest.raises(RunStopped):
        run(data, tmp_path / "run", lambda: True)
    assert os.listdir(tmp_path / "run" / RESUME_DIR)
    messages = []
    backbone = AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE))
    with pytest.raises(RunStopped) as raised:  # a step is enough: the choice is made before it
        finetune(CONFIG.replace(epochs=1), backbone, small_tokenizer(), str(data / "train.csv"),
                 str(data / "eval.csv"), str(tmp_path / "run"), log=messages.append, stop_requested=lambda: True)
    assert raised.value.where == "in epoch 1 of 1, at step 1 of 5"
    assert any("Starting a new run: " in m and "holds an unfinished run with other settings" in m for m in messages), messages


@pytest.mark.own_process  # a MultiWorkerMirroredStrategy (conftest.py)
def test_a_cluster_preemption_notice_stops_multi_worker_fine_tuning_at_a_step_and_a_rerun_resumes(
        data, tmp_path, monkeypatch):
    # TensorFlow's PreemptionCheckpointHandler watches the notice (a stand-in, up from the start) under
    # MultiWorkerMirroredStrategy, one local worker here; the run stops at a step and checkpoints as on SIGTERM.
    from albert_tf.distribute import get_strategy
    from albert_tf.training.stop_requests import NOTICE

    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")  # where the handler asks for Google Cloud: no one, at once
    strategy = get_strategy("multi_worker")

    def tune(notice, log=lambda *_: None):
        with strategy.scope():
            backbone = AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE))
        return finetune(CONFIG, backbone, small_tokenizer(), str(data / "train.csv"), str(data / "eval.csv"),
                        str(tmp_path / "run"), log=log, strategy=strategy, preemption_notice=notice)

    with pytest.raises(RunStopped) as raised:
        tune(lambda: True)
    stop = raised.value
    assert (stop.why, stop.saved, stop.cause) == (PREEMPTED, CHECKPOINT, NOTICE)
    assert stop.where.startswith("in epoch 1 of 2, at step ") and os.path.exists(stop.path + ".index")
    said = []
    assert [r["epoch"] for r in tune(lambda: False, said.append)["history"]] == [1, 2]
    assert f"Resuming from {stop.path}: epoch 1, step {stop.step}" in said, said
