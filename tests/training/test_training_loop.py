"""The training step under XLA, with no host work inside it, and many steps per call into TensorFlow.

Whole-step XLA (`compile_step="whole"`) must give the weights of the plain
step; the traced loop must hold no host-only op; `steps_per_loop` must not
change the weights, the logs, the checkpoints, or a resume after a kill.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import Trainer, read_log
from albert_tf.training.progress import METRICS
from albert_tf.utils.layout import TRAINING_CONFIG_FILE
from albert_tf.training.trainer import loop_length, resolve_run_precision
from cli_helpers import run_program, start_program
from training_helpers import (
    TINY_MODEL, array_dataset_fn, kill_once_written, max_difference, synthetic_examples, tiny_trainer_config, weights_of,
)

EXAMPLES = synthetic_examples()
TESTS = pathlib.Path(__file__).parents[1]


def trainer(run_dir, strategy=None, **overrides):
    return Trainer(TINY_MODEL, tiny_trainer_config(**overrides), str(run_dir), array_dataset_fn(EXAMPLES),
                   strategy=strategy, print_fn=lambda *_: None)


def trained_weights(run_dir, **overrides):
    run = trainer(run_dir, **overrides)
    run.train()
    return weights_of(run.runner.model)


# ------------------------------------------------------------ whole-step XLA
# Four of the 2 x 2 x 2 combinations, in which every value of each setting meets every value of
# each other setting once (each compile takes seconds); the quick loop keeps the default's.
XLA_CASES = [(1, "float32", "default"), (2, "mixed_bfloat16", "default"),
             (1, "mixed_bfloat16", "one-device mirrored"), (2, "float32", "one-device mirrored")]
QUICK_XLA_CASES = set(XLA_CASES[:1])


@pytest.mark.parametrize("accumulation_steps,precision,strategy", [
    pytest.param(*case, marks=() if case in QUICK_XLA_CASES else pytest.mark.slow) for case in XLA_CASES])
def test_whole_step_xla_gives_the_weights_of_the_plain_step(tmp_path, strategy, precision, accumulation_steps):
    def weights(mode):
        chosen = tf.distribute.MirroredStrategy(["/cpu:0"]) if strategy != "default" else None
        run = trainer(tmp_path / mode, chosen, compile_step=mode, mixed_precision=precision,
                      accumulation_steps=accumulation_steps, num_steps=4)
        run.train()
        assert run.compile_step == mode
        return weights_of(run.runner.model)

    plain, whole = weights("none"), weights("whole")
    start = weights_of(trainer(tmp_path / "start").runner.model)
    assert max_difference(plain, start) > 1e-2
    if precision == "float32":
        assert max_difference(plain, whole) < 1e-5
    else:
        # XLA's bfloat16 kernels round differently, and LAMB's first steps
        # amplify a flipped sign of a near-zero gradient to a full step: the
        # forward-only XLA step differs from the plain one by the same ~2% of
        # the distance moved. Compared as a share of that distance.
        flat = [np.concatenate([w.ravel() for w in ws]) for ws in (plain, whole, start)]
        assert np.linalg.norm(flat[0] - flat[1]) < 0.05 * np.linalg.norm(flat[0] - flat[2])


def test_auto_compiles_the_whole_step_on_one_device(tmp_path):
    assert trainer(tmp_path / "default", compile_step="auto").compile_step == "whole"
    assert trainer(tmp_path / "mirrored", tf.distribute.MirroredStrategy(["/cpu:0"]),
                   compile_step="auto").compile_step == "whole"
    assert trainer(tmp_path / "forced", compile_step="forward").compile_step == "forward"


def test_auto_leaves_whole_step_off_where_keras_merge_call_cannot_run_on_a_gpu():
    # No GPU here: the rule is checked with the device named. Keras' optimizer
    # increments its iteration counter with a merge call, which TensorFlow
    # refuses inside a compiled replica function on GPUs under MirroredStrategy.
    config, mirrored = tiny_trainer_config(compile_step="auto"), tf.distribute.MirroredStrategy(["/cpu:0"])
    assert resolve_run_precision(config, TINY_MODEL, mirrored, device="gpu").compile_step == "forward"
    assert resolve_run_precision(config, TINY_MODEL, mirrored, device="cpu").compile_step == "whole"
    # The default strategy makes no merge call: one GPU without --strategy keeps the whole step.
    assert resolve_run_precision(config, TINY_MODEL, tf.distribute.get_strategy(), device="gpu").compile_step == "whole"
    with pytest.raises(ValueError, match="merge call"):
        resolve_run_precision(tiny_trainer_config(compile_step="whole"), TINY_MODEL, mirrored, device="gpu")


# ------------------------------------------------------- no host work inside
# Ops that run on the host or have shapes known only at run time: neither
# compiles into one TPU program.
HOST_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "StringFormat", "PrintV2", "Print", "Assert",
            "Where", "Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2", "ListDiff", "DynamicPartition"}
# The input pipeline's get-next: the one host op a step may hold, outside strategy.run.
GET_NEXT_OPS = {"IteratorGetNext", "IteratorGetNextAsOptional", "OptionalGetValue", "OptionalHasValue",
                "MultiDeviceIteratorGetNextFromShard"}


def host_ops(graph):
    """["function/node: op", ...] for every host-only op in `graph` and its function library (loop bodies, branches)."""
    graph_def = graph.as_graph_def()
    bodies = [("graph", graph_def.node)] + [(f.signature.name, f.node_def) for f in graph_def.library.function]
    found = []
    for where, nodes in bodies:
        for node in nodes:
            types = {value.type for value in node.attr.values()} | {t for value in node.attr.values() for t in value.list.type}
            string_op = tf.string.as_datatype_enum in types or "String" in node.op or "Regex" in node.op
            if node.op in HOST_OPS or string_op:
                found.append(f"{where}/{node.name}: {node.op}")
    return found


def get_next_ops(graph):
    """{function name: [get-next ops]} and the set of functions XLA must compile."""
    graph_def = graph.as_graph_def()
    ops = {f.signature.name: [n.op for n in f.node_def if n.op in GET_NEXT_OPS] for f in graph_def.library.function}
    ops["graph"] = [n.op for n in graph_def.node if n.op in GET_NEXT_OPS]
    compiled = {f.signature.name for f in graph_def.library.function if f.attr["_XlaMustCompile"].b}
    return {name: found for name, found in ops.items() if found}, compiled


@pytest.mark.slow
@pytest.mark.parametrize("compile_step", ["whole", "forward", "none"])
def test_the_traced_training_loop_holds_no_host_op(tmp_path, compile_step):
    run = trainer(tmp_path, compile_step=compile_step, accumulation_steps=2)
    graph = run.runner.step_graph(run.input_iterator(0))
    assert host_ops(graph) == []
    readers, compiled = get_next_ops(graph)
    # Two micro-batches a step, read by the loop body, never by a compiled function.
    assert sorted(op for ops in readers.values() for op in ops) == ["IteratorGetNext"] * 2
    assert not set(readers) & compiled
    assert bool(compiled) == (compile_step != "none")


# Ops that write a variable: the optimizer's update (and the step counter).
WRITE_OPS = {"AssignVariableOp", "AssignSubVariableOp", "AssignAddVariableOp"}


# Traced, not compiled: a few seconds. Accumulation adds a loop to the same placement.
@pytest.mark.parametrize("accumulation_steps", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_the_whole_compiled_step_holds_the_update_and_only_metrics_leave_it(tmp_path, accumulation_steps):
    run = trainer(tmp_path, compile_step="whole", accumulation_steps=accumulation_steps)
    graph_def = run.runner.step_graph(run.input_iterator(0)).as_graph_def()
    functions = {f.signature.name: f for f in graph_def.library.function}
    compiled = [name for name, f in functions.items() if f.attr["_XlaMustCompile"].b]
    assert len(compiled) == 1
    step = functions[compiled[0]]
    # Only the six scalar metrics come out: the gradients never leave the XLA
    # program, so their all-reduce (the identity on one replica, a
    # CrossReplicaSum on a TPU), the clipping and LAMB all run inside it.
    assert len(step.signature.output_arg) == len(METRICS)
    # Every weight, both LAMB moments of each and the iteration count are written in it...
    written = {node.input[0] for node in step.node_def if node.op in WRITE_OPS}
    assert len(written) >= 3 * len(run.runner.model.trainable_variables) + 1
    # ...and nothing outside it (and the loops it calls: the micro-batch
    # accumulation) writes a variable but the trainer's step counter.
    inside = called_functions(functions, compiled[0])
    outside = [node.op for node in graph_def.node if node.op in WRITE_OPS] + [
        node.op for name, f in functions.items() if name not in inside for node in f.node_def if node.op in WRITE_OPS
    ]
    assert outside == ["AssignAddVariableOp"]


def called_functions(functions, name):
    """`name` and every library function its nodes call (loop bodies, branches), transitively."""
    found, pending = set(), [name]
    while pending:
        current = pending.pop()
        if current in found or current not in functions:
            continue
        found.add(current)
        for node in functions[current].node_def:
            for value in node.attr.values():
                pending += [value.func.name] + [f.name for f in value.list.func]
    return found


def test_the_host_op_check_finds_host_ops():
    @tf.function
    def step(x):
        tf.print("x", x)
        y = tf.py_function(lambda v: v * 2, [x], tf.float32)
        return tf.boolean_mask(x, x > 0), y, tf.strings.as_string(x)

    found = " ".join(host_ops(step.get_concrete_function(tf.TensorSpec([3])).graph))
    for op in ("PrintV2", "EagerPyFunc", "Where", "AsString"):
        assert op in found, found


# --------------------------------------------------------------- steps per loop
def test_loops_end_at_checkpoints_logs_and_the_last_step():
    config = tiny_trainer_config(num_steps=10, steps_per_loop=3, checkpoint_every=4, log_every=5)
    ends, step = [], 0
    while step < config.num_steps:
        step += loop_length(step, config)
        ends.append(step)
    assert ends == [3, 4, 5, 8, 10]


@pytest.mark.slow
def test_steps_per_loop_changes_neither_weights_nor_logs_nor_checkpoints(tmp_path):
    one = trainer(tmp_path / "one", num_steps=8, steps_per_loop=1, log_every=1, checkpoint_every=6)
    one.train()
    four = trainer(tmp_path / "four", num_steps=8, steps_per_loop=4, log_every=3, checkpoint_every=6)
    loops = []
    run_loop = four.runner.run_loop
    four.runner.run_loop = lambda iterator, steps: loops.append(steps) or run_loop(iterator, steps)
    four.train()

    assert loops == [3, 3, 2]
    assert max_difference(weights_of(one.runner.model), weights_of(four.runner.model)) < 1e-6
    assert sorted(p.name for p in (tmp_path / "four" / "checkpoints").glob("*.index")) == [
        "ckpt-6.index", "ckpt-8.index"]
    per_step = {r["step"]: r for r in read_log(tmp_path / "one")}
    records = read_log(tmp_path / "four")
    assert [r["step"] for r in records] == [3, 6, 8]
    for record, first in zip(records, (1, 4, 7)):
        window = [per_step[s] for s in range(first, record["step"] + 1)]
        # Metrics are the mean over the steps since the last line, whatever the loop length.
        assert record["loss"] == pytest.approx(np.mean([r["loss"] for r in window]), rel=1e-5)
        assert record["learning_rate"] == pytest.approx(per_step[record["step"]]["learning_rate"])


@pytest.mark.slow
def test_old_run_directories_with_jit_compile_resume(tmp_path):
    trainer(tmp_path, num_steps=2, checkpoint_every=2).train()
    path = tmp_path / TRAINING_CONFIG_FILE
    saved = json.loads(path.read_text())
    for name in ("compile_step", "steps_per_loop"):
        del saved["trainer"][name]
    saved["trainer"]["jit_compile"] = True
    path.write_text(json.dumps(saved))
    assert trainer(tmp_path, num_steps=4, checkpoint_every=2).train()["step"] == 4


@pytest.mark.slow
def test_run_killed_inside_a_loop_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    run_dir = tmp_path / "killed"
    args = [sys.executable, str(TESTS / "training_worker.py"), "--run-dir", str(run_dir), "--steps", "8",
            "--checkpoint-every", "4", "--steps-per-loop", "4", "--out", str(tmp_path / "w.npz")]
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent), CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    # Slow input (0.5 s a batch): the loop of steps 5-8 takes 2 s, and the kill lands inside it.
    process = start_program(args + ["--seconds-per-batch", "0.5"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    kill_once_written(process, run_dir / "checkpoints" / "ckpt-4.index", timeout=120)
    assert not (run_dir / "checkpoints" / "ckpt-8.index").exists()

    done = run_program(args, env=env, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    arrays = np.load(tmp_path / "w.npz")
    resumed = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
    expected = trained_weights(tmp_path / "uninterrupted", num_steps=8, steps_per_loop=1)
    assert max_difference(resumed, expected) < 1e-5
