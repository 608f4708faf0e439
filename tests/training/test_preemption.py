"""A preemption's SIGTERM saves the step reached at the end of the running loop; a rerun resumes to the same weights."""

import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import Trainer, checkpoints
from albert_tf.utils.errors import CHECKPOINT, PREEMPTED, RunStopped
from cli_helpers import albert_tf_command, run_cli, start_program, user_environment
from input_pipeline import movie_reviews
from training_helpers import TINY_MODEL, array_dataset_fn, max_difference, synthetic_examples, tiny_trainer_config

EXIT_PREEMPTED = 143


@pytest.mark.slow
def test_a_stop_request_saves_the_step_of_the_loop_boundary_and_a_rerun_resumes(tmp_path):
    def trainer(run_dir):
        return Trainer(TINY_MODEL, tiny_trainer_config(num_steps=8, steps_per_loop=3), str(run_dir),
                       array_dataset_fn(synthetic_examples()), print_fn=lambda *_: None)

    asked = []
    stopped = trainer(tmp_path / "stopped")
    with pytest.raises(RunStopped) as raised:
        # Asked after each loop; says stop after the second (steps 1-3, 4-6).
        stopped.train(stop_requested=lambda: asked.append(stopped.step) or len(asked) == 2)
    assert asked == [3, 6] and raised.value.step == 6
    assert (raised.value.why, raised.value.saved) == (PREEMPTED, CHECKPOINT)
    assert raised.value.path.endswith("ckpt-6") and (tmp_path / "stopped" / "checkpoints" / "ckpt-6.index").exists()
    resumed = trainer(tmp_path / "stopped")
    assert resumed.train(stop_requested=lambda: False)["step"] == 8
    uninterrupted = trainer(tmp_path / "uninterrupted")
    uninterrupted.train()
    assert max_difference([v.numpy() for v in resumed.runner.model.trainable_variables],
                          [v.numpy() for v in uninterrupted.runner.model.trainable_variables]) < 1e-6


def checkpoint_values(path):
    """{name: array} of every float tensor in a checkpoint (weights and optimizer slots)."""
    reader = tf.train.load_checkpoint(str(path))
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    return {name: value for name, value in values.items() if np.issubdtype(np.asarray(value).dtype, np.floating)}


@pytest.mark.slow
def test_sigterm_in_pretrain_checkpoints_exits_143_and_the_rerun_ends_as_an_uninterrupted_run(tmp_path):
    text = tmp_path / "reviews.txt"
    text.write_text("\n\n".join("\n".join(d) for d in movie_reviews.imdb_documents("pretrain", limit=150)) + "\n")
    run_cli("train-tokenizer", "--input", text, "--vocab-size", "300", "--out", tmp_path / "tok")

    def command(run):
        return ["pretrain", "--data", str(text), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / run),
                "--embedding-size", "8", "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2",
                "--intermediate-size", "32", "--max-seq-length", "32", "--max-predictions-per-seq", "5",
                "--batch-size", "4", "--warmup-steps", "0", "--steps", "12", "--log-every", "1",
                "--checkpoint-every", "100", "--steps-per-loop", "1", "--compile-step", "none"]  # XLA is not the subject

    process = start_program(albert_tf_command() + command("preempted"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    env=user_environment())
    for line in process.stdout:
        if line.startswith("step") and int(line.split()[1].split("/")[0]) >= 3:
            break
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_PREEMPTED, stderr
    lines = [line for line in stderr.splitlines() if "SIGTERM" in line]
    assert len(lines) == 1 and "Rerun the same command to resume." in lines[0] and "Traceback" not in stderr, stderr
    step = int(lines[0].split("stopped by SIGTERM at step ")[1].split()[0])
    assert f"the newest checkpoint is {tmp_path / 'preempted' / 'checkpoints' / f'ckpt-{step}'}." in lines[0], lines[0]
    assert 3 <= step < 12
    assert (tmp_path / "preempted" / "checkpoints" / f"ckpt-{step}.index").exists()

    resumed = run_cli(*command("preempted"))
    assert f"at step {step}" in resumed.stdout
    run_cli(*command("uninterrupted"))
    after, expected = (checkpoint_values(tmp_path / run / "checkpoints" / "ckpt-12") for run in ("preempted",
                                                                                                 "uninterrupted"))
    assert sorted(after) == sorted(expected)
    assert max(float(np.max(np.abs(after[name] - expected[name]))) for name in after) < 1e-5


def test_sigterm_asks_the_trainer_to_stop_and_it_saves_the_step_its_loop_ends_on(tmp_path):
    # The mechanism below the command: SIGTERM sets the stop request instead of killing the process, the trainer
    # reads it after each loop (steps 1-2 here) and saves that step; the signal's handler is put back after.
    from albert_tf.utils.preemption import sigterm_requests_stop

    run = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=4, steps_per_loop=2, compile_step="none"), str(tmp_path),
                  array_dataset_fn(synthetic_examples()), print_fn=lambda *_: None)
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_requests_stop() as stop:
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(RunStopped) as raised:
            run.train(stop_requested=stop.is_set)
    assert signal.getsignal(signal.SIGTERM) is before
    assert (raised.value.why, raised.value.step, raised.value.saved) == (PREEMPTED, 2, CHECKPOINT)
    assert raised.value.path.endswith("ckpt-2")
    assert (tmp_path / "checkpoints" / "ckpt-2.index").exists()


def test_ctrl_c_in_a_loops_host_work_stops_the_run_at_the_boundary_after_it_with_that_work_whole(
        tmp_path, monkeypatch):
    # Ctrl-C as the progress line of step 2 writes its TensorBoard scalars (tensors made from Python floats, where
    # a KeyboardInterrupt raised inside TensorFlow's conversion once killed a demo with SIGSEGV): the scalars, the
    # log's record and step 2's checkpoint are all written, and the run stops there.
    from albert_tf.training import progress
    from albert_tf.utils.errors import INTERRUPTED

    written, write = [], progress._write_scalar

    def ctrl_c_in_the_first_write_of_step_2(name, value, step):
        if step == 2 and not written:
            signal.raise_signal(signal.SIGINT)
        if step == 2:
            written.append(name)
        write(name, value, step)

    monkeypatch.setattr(progress, "_write_scalar", ctrl_c_in_the_first_write_of_step_2)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a program a terminal started
    try:
        run = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=4, log_every=1, checkpoint_every=1), str(tmp_path),
                      array_dataset_fn(synthetic_examples()), print_fn=lambda *_: None)
        with pytest.raises(RunStopped) as raised:
            run.train()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert (raised.value.why, raised.value.step, raised.value.path) == (
        INTERRUPTED, 2, str(tmp_path / "checkpoints" / "ckpt-2"))
    assert len(written) == len(progress.METRICS) + 2  # the metrics, the learning rate and examples per second
    assert [record["step"] for record in progress.read_log(str(tmp_path))] == [1, 2]
    assert checkpoints.checkpoint_steps(str(tmp_path / "checkpoints")) == [1, 2]


def test_a_second_ctrl_c_raises_at_once_and_a_pending_one_is_raised_as_the_block_ends():
    from albert_tf.utils.preemption import ctrl_c_at_step_boundaries

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_at_step_boundaries() as ctrl_c:
                signal.raise_signal(signal.SIGINT)
                assert ctrl_c.pending  # marked, not raised
                signal.raise_signal(signal.SIGINT)
                raise AssertionError("the second Ctrl-C did not raise")
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_at_step_boundaries():
                signal.raise_signal(signal.SIGINT)  # no check came: raised as the block ends
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's: left alone
        with ctrl_c_at_step_boundaries() as ctrl_c:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            ctrl_c.check()
    finally:
        signal.signal(signal.SIGINT, before)


# The quick loop's check of the notice is the command's (test_reruns_and_damaged_data.py), through this Trainer.
@pytest.mark.slow
@pytest.mark.own_process  # a MultiWorkerMirroredStrategy (conftest.py)
def test_a_cluster_preemption_notice_stops_a_multi_worker_run_at_its_own_checkpoint_and_a_rerun_resumes(
        tmp_path, monkeypatch):
    # TensorFlow's PreemptionCheckpointHandler watches the notice (a GCE maintenance event; here a stand-in that
    # is up from the start) under MultiWorkerMirroredStrategy, one local worker here: it agrees on the loop to stop
    # after, saves through the trainer's checkpoint, and the run stops as on SIGTERM.
    from albert_tf.distribute import get_strategy
    from albert_tf.training.stop_requests import NOTICE

    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")  # where the handler asks for Google Cloud: no one, at once
    strategy = get_strategy("multi_worker")
    printed = []

    def trainer():
        return Trainer(TINY_MODEL, tiny_trainer_config(num_steps=8, steps_per_loop=1), str(tmp_path),
                       array_dataset_fn(synthetic_examples()), strategy=strategy, print_fn=printed.append)

    with pytest.raises(RunStopped) as raised:
        trainer().train(preemption_notice=lambda: True)
    stop = raised.value
    assert (stop.why, stop.saved, stop.cause) == (PREEMPTED, CHECKPOINT, NOTICE)
    assert 1 <= stop.step < 8 and stop.path == str(tmp_path / "checkpoints" / f"ckpt-{stop.step}")
    # The run's one checkpoint layout: nothing of the handler's own CheckpointManager.
    assert checkpoints.checkpoint_steps(str(tmp_path / "checkpoints")) == [stop.step]
    assert not [p for p in tmp_path.rglob("*") if "preemption" in p.name or "workertemp" in p.name]
    printed.clear()
    assert trainer().train(preemption_notice=lambda: False)["step"] == 8
    assert f"Resumed from {stop.path} at step {stop.step}." in printed


def test_without_a_cluster_no_handler_watches_a_notice_and_sigterm_is_the_request():
    from albert_tf.training.stop_requests import StopRequests

    stops = StopRequests(tf.distribute.get_strategy(), stop_requested=lambda: False, notice=lambda: True)
    time.sleep(0.1)  # a handler's watcher would have seen the notice, and agreed to stop at the second check
    assert not stops.requested() and not stops.requested()
    assert StopRequests(tf.distribute.get_strategy(), stop_requested=lambda: True).requested()
