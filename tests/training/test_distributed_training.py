"""The training loop under MirroredStrategy, MultiWorkerMirroredStrategy, and across a SIGKILL.

Each run happens in fresh processes (tests/training_worker.py): logical CPUs
and TF_CONFIG must be set before TensorFlow starts. Every run must end with
the weights of the same steps taken on one device.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import Trainer, checkpoints
from cli_helpers import free_ports, start_program
from training_helpers import (
    TINY_MODEL, array_dataset_fn, fit_weights, kill_once_written, max_difference, synthetic_examples, tiny_trainer_config,
    weights_of,
)

WORKER = str(pathlib.Path(__file__).parents[1] / "training_worker.py")
REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
TOLERANCE = 1e-5


def one_device_weights(run_dir, steps=3):
    config = tiny_trainer_config(num_steps=steps)
    trainer = Trainer(TINY_MODEL, config, str(run_dir), array_dataset_fn(synthetic_examples()),
                      print_fn=lambda *_: None)
    trainer.train()
    return weights_of(trainer.runner.model)


def worker(args, tf_config=None, **environment):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3", **environment)
    env.pop("TF_CONFIG", None)
    if tf_config:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return start_program([sys.executable, WORKER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(process, timeout=90):
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


def saved_weights(path):
    arrays = np.load(path)
    return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]


@pytest.mark.slow
def test_mirrored_on_two_logical_cpus_matches_one_device(tmp_path):
    process = worker(["--strategy", "mirrored", "--run-dir", str(tmp_path / "mirrored"),
                      "--out", str(tmp_path / "mirrored.npz")])
    expected = one_device_weights(tmp_path / "one")
    # XLA cannot compile the replica step over several CPU devices (docs/pretraining.md): auto picks forward.
    assert "compile_step: forward" in finish(process)
    assert max_difference(saved_weights(tmp_path / "mirrored.npz"), expected) < TOLERANCE
    refused = worker(["--strategy", "mirrored", "--compile-step", "whole", "--run-dir", str(tmp_path / "whole")])
    output, _ = refused.communicate(timeout=90)
    assert refused.returncode != 0 and "compile_step='whole'" in output and "use 'forward'" in output, output[-3000:]


@pytest.mark.slow
def test_keras_fit_under_mirrored_matches_fit_on_one_device(tmp_path):
    process = worker(["--strategy", "mirrored", "--fit", "--run-dir", str(tmp_path), "--out", str(tmp_path / "fit.npz")])
    expected = fit_weights(tf.distribute.get_strategy(), steps=3)
    finish(process)
    mirrored = saved_weights(tmp_path / "fit.npz")
    assert max_difference(mirrored, expected) < TOLERANCE
    # Three steps moved the weights: equality is not two runs that did nothing.
    assert max_difference(mirrored, fit_weights(tf.distribute.get_strategy(), steps=0)) > 1e-3


@pytest.mark.slow
def test_multi_worker_on_two_processes_matches_one_device(tmp_path):
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    processes = [
        worker(["--strategy", "multi_worker", "--run-dir", str(tmp_path / "multi"),
                "--out", str(tmp_path / f"worker{index}.npz")],
               tf_config={"cluster": cluster, "task": {"type": "worker", "index": index}})
        for index in range(2)
    ]
    expected = one_device_weights(tmp_path / "one")
    for process in processes:
        finish(process)
    for index in range(2):
        assert max_difference(saved_weights(tmp_path / f"worker{index}.npz"), expected) < TOLERANCE
    # Only the chief writes the run directory's checkpoints.
    assert sorted(os.listdir(tmp_path / "multi" / "checkpoints"))[0] == "checkpoint"
    assert not [name for name in os.listdir(tmp_path / "multi") if name.startswith(".worker")]


@pytest.mark.slow
def test_a_stop_asked_by_one_worker_stops_every_worker_at_the_same_checkpointed_step(tmp_path):
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    processes = [
        worker(["--strategy", "multi_worker", "--run-dir", str(tmp_path / "multi"), "--steps", "8",
                "--steps-per-loop", "1", "--stop-at-step", "3"],
               tf_config={"cluster": cluster, "task": {"type": "worker", "index": index}})
        for index in range(2)
    ]
    outputs = [finish(process, timeout=180) for process in processes]
    # Worker 1 alone asked; the chief (worker 0) stops with it, after the same step, and writes the checkpoint.
    for output in outputs:
        assert "stopped at step 3, saved" in output, output[-3000:]
    assert (tmp_path / "multi" / "checkpoints" / "ckpt-3.index").exists()


@pytest.mark.slow
def test_a_preemption_notice_to_one_worker_stops_every_worker_at_the_same_checkpointed_step(tmp_path):
    # TensorFlow's PreemptionCheckpointHandler: worker 1 alone gets the notice, and agrees with the chief, through
    # the coordination service, on the loop after which both save (the trainer's checkpoint) and stop.
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    processes = [
        worker(["--strategy", "multi_worker", "--run-dir", str(tmp_path / "multi"), "--steps", "8",
                "--steps-per-loop", "1", "--notice-on-worker-1"],
               tf_config={"cluster": cluster, "task": {"type": "worker", "index": index}}, GCE_METADATA_IP="127.0.0.1:9")
        for index in range(2)
    ]
    outputs = [finish(process, timeout=180) for process in processes]
    steps = {re.search(r"stopped at step (\d+), saved \S+, by the cluster's preemption notice", output)[1]
             for output in outputs}
    assert len(steps) == 1, outputs
    assert checkpoints.checkpoint_steps(str(tmp_path / "multi" / "checkpoints")) == [int(steps.pop())]


@pytest.mark.slow
def test_run_killed_after_a_checkpoint_resumes_to_the_same_weights(tmp_path):
    run_dir = tmp_path / "killed"
    # The plain step, as one_device_weights takes it: killed inside a compiled loop is test_training_loop.py's.
    args = ["--run-dir", str(run_dir), "--steps", "6", "--checkpoint-every", "2", "--compile-step", "none",
            "--out", str(tmp_path / "w.npz")]
    # Slow input (0.5 s a batch) so the kill lands between checkpoints.
    process = worker(args + ["--seconds-per-batch", "0.5"])
    kill_once_written(process, run_dir / "checkpoints" / "ckpt-2.index", timeout=90)
    assert not (tmp_path / "w.npz").exists()
    finish(worker(args))
    assert max_difference(saved_weights(tmp_path / "w.npz"), one_device_weights(tmp_path / "one", steps=6)) < TOLERANCE
