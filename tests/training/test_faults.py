"""Runs that die or find damaged files: kills during saves, garbage state files, corrupt checkpoints,
and resuming with another setup.

The kills happen in real processes (tests/fault_worker.py SIGKILLs itself in
the middle of a save); the rerun must resume where the files say, finish, and
leave a complete `final/` and no debris.
"""

import contextlib
import os
import pathlib
import sys

import pytest
import tensorflow as tf

from albert_tf.loading import load_pretrained
from albert_tf.training import Trainer, checkpoints
from albert_tf.utils.errors import RunStopped
from cli_helpers import run_program
from training_helpers import TINY_MODEL, array_dataset_fn, max_difference, synthetic_examples, tiny_trainer_config, weights_of

TESTS = pathlib.Path(__file__).parents[1]
EXAMPLES = synthetic_examples()


def run_worker(run_dir, steps, kill_in=None, out=None):
    """Runs a tiny training in its own process; returns (exit status, output)."""
    script = ["fault_worker.py", "--kill-in", kill_in] if kill_in else ["training_worker.py"]
    # The plain step, as `trainer` below takes it: the weights are compared bit for bit.
    args = ["--run-dir", str(run_dir), "--steps", str(steps), "--checkpoint-every", "2", "--compile-step", "none"]
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent), CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    done = run_program([sys.executable, str(TESTS / script[0]), *script[1:], *args, *(["--out", str(out)] if out else [])],
               env=env, timeout=300)
    return done.returncode, done.stdout + done.stderr


def trainer(run_dir, **overrides):
    return Trainer(TINY_MODEL, tiny_trainer_config(**{"checkpoint_every": 2, **overrides}), str(run_dir),
                   array_dataset_fn(EXAMPLES), print_fn=lambda *_: None)


def debris(run_dir):
    """Leftovers of unfinished writes anywhere under `run_dir`."""
    return [str(p) for p in pathlib.Path(run_dir).rglob("*") if p.name.startswith(".") or p.name.endswith("_temp")]


def assert_final_holds(run_dir, weights):
    model = load_pretrained(run_dir / "final")
    assert max_difference(weights_of(model), weights) == 0


def reference_weights(tmp_path, steps):
    uninterrupted = trainer(tmp_path / "uninterrupted", num_steps=steps)
    uninterrupted.train()
    return weights_of(uninterrupted.runner.model)


@pytest.mark.slow
def test_kill_during_the_final_save_then_rerun_rebuilds_final(tmp_path):
    run_dir = tmp_path / "run"
    status, output = run_worker(run_dir, 4, kill_in="final")
    assert status == -9, output[-3000:]
    # The half-written model never appears as final/; the checkpoint of step 4 is complete.
    assert not (run_dir / "final").exists()
    assert tf.train.latest_checkpoint(run_dir / "checkpoints").endswith("ckpt-4")

    status, output = run_worker(run_dir, 4, out=tmp_path / "w.npz")
    assert status == 0, output[-3000:]
    assert "is complete (4/4 steps)" in output and "rebuilding it" in output
    assert_final_holds(run_dir, reference_weights(tmp_path, 4))
    assert not debris(run_dir)


@pytest.mark.slow
def test_kill_during_a_checkpoint_write_then_rerun_resumes_from_the_previous_one(tmp_path):
    run_dir = tmp_path / "run"
    status, output = run_worker(run_dir, 6, kill_in="checkpoint-4")
    assert status == -9, output[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.index")) == ["ckpt-2.index"]

    status, output = run_worker(run_dir, 6)
    assert status == 0, output[-3000:]
    assert "Resumed from" in output and "ckpt-2 at step 2" in output
    assert_final_holds(run_dir, reference_weights(tmp_path, 6))
    assert not debris(run_dir)


@pytest.mark.slow
def test_garbage_state_file_does_not_restart_from_step_zero(tmp_path):
    trainer(tmp_path, num_steps=4).train()
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "checkpoint").write_bytes(b"\x00garbage{{ not a state file")
    # What killed saves of older versions left: TensorFlow's shard directory and a shard without its index.
    (checkpoints / "ckpt-6_temp").mkdir()
    (checkpoints / "ckpt-6_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (checkpoints / "ckpt-8.data-00000-of-00001").write_bytes(b"x")
    messages = []
    resumed = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=6, checkpoint_every=2), str(tmp_path),
                      array_dataset_fn(EXAMPLES), print_fn=messages.append)
    assert resumed.restore() == 4
    assert any("ckpt-4 at step 4" in m for m in messages)
    assert not debris(tmp_path) and not (checkpoints / "ckpt-8.data-00000-of-00001").exists()
    # The state file is rewritten for TensorFlow's own tools.
    assert tf.train.latest_checkpoint(checkpoints).endswith("ckpt-4")
    resumed.train()
    assert sorted(p.name for p in checkpoints.glob("*.index")) == [
        "ckpt-2.index", "ckpt-4.index", "ckpt-6.index"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["index", "data", "truncated"])
def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage):
    first = trainer(tmp_path, num_steps=2)
    first.train()
    at_step_2 = weights_of(first.runner.model)
    trainer(tmp_path, num_steps=4).train()
    if damage == "index":
        path = tmp_path / "checkpoints" / "ckpt-4.index"
        path.write_bytes(path.read_bytes()[:20])
    elif damage == "truncated":  # TensorFlow's reader raises IndexError: Read less bytes than requested
        path = next((tmp_path / "checkpoints").glob("ckpt-4.data-*"))
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path = next((tmp_path / "checkpoints").glob("ckpt-4.data-*"))
        data = bytearray(path.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
        path.write_bytes(bytes(data))
    messages = []
    resumed = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=4, checkpoint_every=2), str(tmp_path),
                      array_dataset_fn(EXAMPLES), print_fn=messages.append)
    assert resumed.restore() == 2
    assert any("ckpt-4 is unreadable" in m and "falling back" in m for m in messages), messages
    assert max_difference(weights_of(resumed.runner.model), at_step_2) == 0

    # With every checkpoint damaged the run refuses to start over on top of them.
    (tmp_path / "checkpoints" / "ckpt-2.index").write_bytes(b"")
    with pytest.raises(ValueError, match="No checkpoint .* can be restored"):
        trainer(tmp_path, num_steps=4).restore()


def test_any_error_reading_the_newest_checkpoint_falls_back_with_one_line_naming_it(tmp_path):
    class Reader:  # reads ckpt-2; ckpt-4 fails as a truncated data shard does
        def read(self, path):
            if path.endswith("ckpt-4"):
                raise IndexError("Read less bytes than requested")
            return self

        def assert_existing_objects_matched(self):
            pass

    for step in (2, 4):
        (tmp_path / f"ckpt-{step}.index").write_bytes(b"")
    messages = []
    assert checkpoints.restore_newest_readable(Reader(), str(tmp_path), messages.append) == str(tmp_path / "ckpt-2")
    assert messages == [f"Checkpoint {tmp_path / 'ckpt-4'} is unreadable (IndexError: Read less bytes than "
                        "requested); falling back to the previous one."]


@pytest.mark.slow
def test_resuming_with_a_different_setup_is_refused_field_by_field(tmp_path):
    data = {"data": {"kind": "tfrecords", "paths": ["/data/a"], "config": {"max_seq_length": 32}}}
    Trainer(TINY_MODEL, tiny_trainer_config(num_steps=2), str(tmp_path), array_dataset_fn(EXAMPLES),
            run_info=data, print_fn=lambda *_: None).train()

    def resume(model=TINY_MODEL, run_info=data, **overrides):
        return Trainer(model, tiny_trainer_config(**{"num_steps": 2, **overrides}), str(tmp_path),
                       array_dataset_fn(EXAMPLES), run_info=run_info, print_fn=lambda *_: None)

    with pytest.raises(ValueError) as error:
        resume(global_batch_size=16, seed=3)
    message = str(error.value)
    assert "different trainer config" in message
    assert "trainer.global_batch_size: 8 -> 16" in message and "trainer.seed: 0 -> 3" in message

    other_data = {"data": {"kind": "tfrecords", "paths": ["/data/b"], "config": {"max_seq_length": 64}}}
    with pytest.raises(ValueError) as error:
        resume(TINY_MODEL.replace(hidden_size=32), run_info=other_data)
    message = str(error.value)
    assert "different model and data source" in message
    assert "model.hidden_size: 16 -> 32" in message
    assert "data.paths: ['/data/a'] -> ['/data/b']" in message and "data.config.max_seq_length: 32 -> 64" in message

    # Extending the run and lowering the learning rate are resumes, not new runs.
    resumed = resume(num_steps=4, learning_rate=0.001, run_info={**data, "strategy": "mirrored"})
    assert resumed.train()["step"] == 4


def _damage_config_bytes(directory):
    path = directory / "config.json"
    path.write_bytes(b'{"hidden_size": 16, "name": "caf\xe9"}')


def _damage_config_json(directory):
    (directory / "config.json").write_text('{"hidden_size": 16,')


def _damage_model_bytes(directory):
    (directory / "albert_tf.json").write_bytes(b"\xff\xfe\x00garbage")


def _truncate_weights(directory):
    path = directory / "model.weights.h5"
    path.write_bytes(path.read_bytes()[:1000])


def _garbage_weights(directory):
    (directory / "model.weights.h5").write_bytes(b"not an hdf5 file at all")


def _other_model_weights(directory):
    from albert_tf import AlbertBackbone
    from helpers import tiny_config

    other = directory.parent / "other"
    AlbertBackbone(tiny_config(hidden_size=48, intermediate_size=96)).save_pretrained(other)
    (directory / "model.weights.h5").write_bytes((other / "model.weights.h5").read_bytes())


@pytest.mark.parametrize("damage, file, what", [
    (_damage_config_bytes, "config.json", "is not UTF-8 text: byte 0xe9 at offset 32"),
    (_damage_config_json, "config.json", "is not valid JSON"),
    (_damage_model_bytes, "albert_tf.json", "is not UTF-8 text"),
    (_truncate_weights, "model.weights.h5", "is not a readable HDF5 weights file"),
    (_garbage_weights, "model.weights.h5", "is not a readable HDF5 weights file"),
    (_other_model_weights, "model.weights.h5", "the weights do not match the model"),
])
def test_damaged_pretrained_files_give_a_value_error_naming_the_file(tmp_path, damage, file, what):
    from albert_tf import AlbertBackbone
    from helpers import tiny_config

    directory = tmp_path / "model"
    AlbertBackbone(tiny_config()).save_pretrained(directory)
    damage(directory)
    with pytest.raises(ValueError) as error:
        load_pretrained(directory)
    message = str(error.value)
    assert str(directory / file) in message and what in message, message


def test_a_kill_while_a_runs_checkpoints_are_removed_leaves_only_checkpoints_that_restore(tmp_path, monkeypatch):
    # Fine-tuning removes its resume/ checkpoints at the end of the run: a kill at any file deletion of that.
    checkpoint = tf.train.Checkpoint(value=tf.Variable(1.0))
    deletions, real_unlink = [], os.unlink

    def unlink_then_kill(path, *args, **kwargs):
        if len(deletions) == kill_at:
            raise KeyboardInterrupt
        deletions.append(path)
        real_unlink(path, *args, **kwargs)

    for kill_at in range(8):  # two checkpoints (an index and a shard each) and the state file: 5 deletions
        directory = str(tmp_path / f"resume-{kill_at}")
        for step in (120, 240):
            checkpoints.save_checkpoint(checkpoint, directory, step, keep=2)
        deletions.clear()
        monkeypatch.setattr(os, "unlink", unlink_then_kill)
        monkeypatch.setattr(os, "remove", unlink_then_kill)
        with contextlib.suppress(KeyboardInterrupt):
            checkpoints.remove_checkpoints(directory)
        monkeypatch.undo()
        for step in checkpoints.checkpoint_steps(directory):
            checkpoint.read(checkpoints.checkpoint_path(directory, step)).assert_existing_objects_matched()
    assert not os.path.exists(directory)  # a deletion that ran to its end


@pytest.mark.parametrize("root", ["local", "ram"])
def test_an_interrupt_between_the_two_renames_puts_the_old_directory_back(tmp_path, root, monkeypatch):
    from albert_tf.utils import files

    base = str(tmp_path) if root == "local" else f"ram://{tmp_path.name}-publish"
    target = os.path.join(base, "best")

    def publish(text):
        with files.publish(target, ("weights.txt",)) as staging:
            files.write_text(os.path.join(staging, "weights.txt"), text)

    publish("old")
    moves, real_move = [], files.move

    def move_then_interrupt(source, destination, entry_files=()):
        moves.append((source, destination))
        if len(moves) == 2:  # the second rename: staging -> target
            raise KeyboardInterrupt
        real_move(source, destination, entry_files)

    monkeypatch.setattr(files, "move", move_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        publish("new")
    monkeypatch.setattr(files, "move", real_move)
    assert files.read_text(os.path.join(target, "weights.txt")) == "old"
    assert [name.rstrip("/") for name in files.listdir(base)] == ["best"]  # no staging or set-aside debris


@pytest.mark.parametrize("umask, dir_mode, file_mode", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)])
def test_published_outputs_have_the_modes_the_umask_gives(tmp_path, umask, dir_mode, file_mode):
    from albert_tf.utils import files

    old = os.umask(umask)
    try:
        with files.publish(str(tmp_path / "out"), ("weights.txt",)) as staging:
            files.makedirs(os.path.join(staging, "tokenizer"))
            files.write_text(os.path.join(staging, "tokenizer", "weights.txt"), "new")
        with files.publish(str(tmp_path / "predictions.jsonl"), directory=False) as staging:
            files.write_text(staging, "{}\n")
    finally:
        os.umask(old)
    modes = {p: os.stat(tmp_path / p).st_mode & 0o777 for p in ("out", "out/tokenizer", "out/tokenizer/weights.txt",
                                                                 "predictions.jsonl")}
    assert modes == {"out": dir_mode, "out/tokenizer": dir_mode, "out/tokenizer/weights.txt": file_mode,
                     "predictions.jsonl": file_mode}
    assert sorted(os.listdir(tmp_path)) == ["out", "predictions.jsonl"]  # nothing staged left


def test_a_training_runs_files_have_the_modes_the_umask_gives(tmp_path):
    # umask 027: neither the default's modes (0755 / 0644) nor tempfile's private ones (0700 / 0600).
    old = os.umask(0o027)
    try:
        Trainer(TINY_MODEL, tiny_trainer_config(num_steps=2, checkpoint_every=2, log_every=1, compile_step="none"),
                str(tmp_path / "run"), array_dataset_fn(synthetic_examples()), print_fn=lambda *_: None).train()
    finally:
        os.umask(old)
    paths = [tmp_path / "run", *(tmp_path / "run").rglob("*")]
    wrong = {str(p.relative_to(tmp_path)): f"{p.stat().st_mode & 0o777:04o}" for p in paths
             if p.stat().st_mode & 0o777 != (0o750 if p.is_dir() else 0o640)}
    assert len(paths) > 5 and not wrong, wrong


def test_a_failed_publish_keeps_the_old_output_and_leaves_nothing_staged(tmp_path):
    from albert_tf.utils import files

    for directory, target in ((True, str(tmp_path / "out")), (False, str(tmp_path / "out.txt"))):
        with files.publish(target, directory=directory) as staging:
            files.write_text(os.path.join(staging, "f") if directory else staging, "old")
        with pytest.raises(RuntimeError):
            with files.publish(target, directory=directory) as staging:
                files.write_text(os.path.join(staging, "f") if directory else staging, "half")
                raise RuntimeError
        assert files.read_text(os.path.join(target, "f") if directory else target) == "old"
    assert sorted(os.listdir(tmp_path)) == ["out", "out.txt"]


def test_a_damaged_record_mid_loop_checkpoints_the_steps_before_it_as_they_were_taken(tmp_path):
    # Batches 1-6 read, the 7th meets a record whose bytes changed (tf.data's DataLossError), inside the second
    # loop of 4 steps: steps 5 and 6 of that loop are whole and kept, to the weights of a run of just 6 steps.
    from albert_tf.training import DamagedData
    from input_pipeline.tfrecord_files import RecordWriter

    records = tmp_path / "records.tfrecord"
    with RecordWriter(str(records)) as writer:
        for index in range(10):
            writer.write(b"record %d" % index)
    content = bytearray(records.read_bytes())
    content[6 * 24 + 12] ^= 0xFF  # the data of record 6 (12 bytes of header, 8 of data, 4 of CRC each)
    records.write_bytes(bytes(content))
    clean = array_dataset_fn(EXAMPLES)

    def damaged(global_batch_size, input_context, start_step):
        batches = clean(global_batch_size, input_context, start_step)
        return tf.data.Dataset.zip(batches, tf.data.TFRecordDataset(str(records))).map(lambda batch, _: batch)

    def trainer(run_dir, dataset_fn, steps_per_loop=4):
        return Trainer(TINY_MODEL, tiny_trainer_config(num_steps=12, steps_per_loop=steps_per_loop), str(run_dir),
                       dataset_fn, print_fn=lambda *_: None)

    with pytest.raises(DamagedData) as raised:
        trainer(tmp_path / "run", damaged).train()
    assert (raised.value.step, raised.value.path) == (6, str(tmp_path / "run" / "checkpoints" / "ckpt-6"))
    assert "corrupted record" in raised.value.reason
    assert str(raised.value) == (f"The training data has a damaged record ({raised.value.reason}). Training stopped "
                                 f"after step 6; the newest checkpoint is {raised.value.path}.")
    kept, plain = trainer(tmp_path / "run", clean), trainer(tmp_path / "plain", clean, steps_per_loop=2)
    assert kept.restore() == 6
    with pytest.raises(RunStopped):
        plain.train(stop_requested=lambda: plain.step == 6)
    assert max_difference(weights_of(kept.runner.model), weights_of(plain.runner.model)) < 1e-6
