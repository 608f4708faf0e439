"""Every long command, killed at moments spread over its run, in a process of its own: SIGTERM and SIGKILL.

A killed process is the subject here, so each kill is a process of its own,
forked by a server that imported TensorFlow, Keras and the commands' modules
once and started nothing of TensorFlow's runtime (tests/fork_server.py): the
kernel delivers the real SIGTERM or SIGKILL to it, and the test checks the
status it exits with, as with `python -m albert_tf.cli`, whose
`albert_tf.cli.main` it runs with its own stdio, directory, environment and
signal dispositions; what it skips is the seconds that start-up spends
importing (start-up has its own tests, in fresh processes:
test_quick_journey.py). A kill lands in a phase of the run: the test waits
for a line the command prints once that phase has begun, with work (and, for
SIGTERM, safe points) still ahead of it, then signals; for a command that
prints only at its end, at 40%, 70% or 90% of the time of its uninterrupted
run (one run, timed, forked as the kills are). After each kill:

- nothing half-written is readable as valid: the command's own loader reads
  --out whole, or --out is absent;
- SIGTERM in pretraining (pretrain, the demo) or in a fine-tuning epoch ends
  the command with exit 143 and one line naming the step it stopped at, and
  that step's checkpoint is on disk; in the demo's tokenizer, one line naming
  what it kept; where the moment is a time, the command stops on it (exit 143,
  one line), or had not yet started or had already ended;
- the same command run again ends the run, saying "Resum..." where it resumed
  (from the step the stop named) and "Starting a new run" where nothing was
  checkpointed;
- the result equals the uninterrupted run's: the weights where resuming is
  promised (pretrain, finetune, demo), the files where a rerun starts clean.

Tiny configs, XLA off (--compile-step none; finetune and the exports run
without it by default). SIGKILL at three moments of each of the 8 commands
(train-tokenizer, create-data, pretrain on raw text and on records, finetune,
export saved_model and tflite, demo), each leaving a different state (nothing
yet, a run under way, its end being written): 24. SIGTERM in pretraining
(pretrain twice, the demo), in each of finetune's 2 epochs, in the demo's
tokenizer, and in the middle of the 4 commands timed: 10. 34 kills, and 4
timed runs (train-tokenizer's and create-data's also make the tokenizer and
the records the others read): 38 forked processes. The reruns and the other
uninterrupted runs are in the test process. Each property also has a fast
in-process test (test_finetune_sigterm.py, test_demo_sigterm.py,
test_finetune_resume.py, test_preemption.py, test_faults.py, test_demo.py,
test_error_protocol.py, test_reruns_and_damaged_data.py).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.loading import load_pretrained
from albert_tf.model_dirs import load_tokenizer
from cli_helpers import albert_tf_command, run_cli, start_program, user_environment
from input_pipeline import movie_reviews, read_metadata
from input_pipeline.pretraining.tfrecord_shards import shard_paths

pytestmark = pytest.mark.slow

MODEL = ["--embedding-size", "8", "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2",
         "--intermediate-size", "32"]
TRAIN = ["--batch-size", "4", "--warmup-steps", "0", "--steps", "12", "--log-every", "1", "--checkpoint-every", "4",
         "--steps-per-loop", "1", "--compile-step", "none"]
DEMO = ["--vocab-size", "300", "--tokenizer-documents", "100", "--documents", "100", "--heldout-documents", "20",
        "--max-seq-length", "32", "--max-predictions-per-seq", "5", "--embedding-size", "8", "--hidden-size", "16",
        "--num-layers", "2", "--num-heads", "2", "--intermediate-size", "32", "--batch-size", "4",
        "--warmup-fraction", "0.25", "--checkpoint-every", "4", "--log-every", "1", "--eval-examples", "20",
        "--baseline-batches", "2", "--steps", "12", "--compile-step", "none"]
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
_TIMED = {"early": 0.4, "middle": 0.7, "late": 0.9}
_PRETRAINING = {"start": "Starting a new run", "pretraining": r"step +5/12 ", "end": "step 12/12 "}
# Where a kill lands: the line of the command's output that starts it (a regex), or a fraction of the time of
# the command's uninterrupted run, for the commands that print only at their end.
MOMENTS = {
    "train-tokenizer": _TIMED,
    "create-data": _TIMED,
    "pretrain-text": _PRETRAINING,
    "pretrain-records": _PRETRAINING,
    "finetune": {"epoch1": "Starting a new run", "epoch2": "epoch 1/2: ", "end": "epoch 2/2: "},
    "export-saved_model": _TIMED,
    "export-tflite": _TIMED,
    "demo": {"tokenizer": "Training a 300-piece tokenizer", "pretraining": r"step +5/12 ",
             "evaluation": "Saved the pretrained model"},
}
_AT_A_STEP = r"at step (?P<step>\d+) of 12; the newest checkpoint is (?P<path>\S+)\. "
# What a SIGTERM at a moment with work ahead must say after "stopped by SIGTERM " (step and path: the checkpoint).
SIGTERM_STOPS = {
    ("pretrain-text", "pretraining"): _AT_A_STEP,
    ("pretrain-records", "pretraining"): _AT_A_STEP,
    **{("finetune", f"epoch{epoch}"): rf"in epoch {epoch} of 2, at step (?P<step>\d+) of 120; the newest checkpoint "
                                       r"is (?P<path>\S+)\. " for epoch in (1, 2)},
    ("demo", "tokenizer"): "before tokenizing the pretraining reviews; kept its tokenizer ",
    ("demo", "pretraining"): _AT_A_STEP,
}


def commands(root):
    """{name: (argv with OUT for the output, the fixture outputs it reads)} of the commands killed."""
    text, tok, data = str(root / "reviews.txt"), str(root / "tok"), str(root / "data")
    return {
        "train-tokenizer": ["train-tokenizer", "--input", text, "--vocab-size", "300", "--out", "OUT"],
        "create-data": ["create-data", "--input", text, "--tokenizer", tok, "--out", "OUT", "--max-seq-length", "32",
                        "--max-predictions-per-seq", "5", "--dupe-factor", "2", "--num-workers", "0",
                        "--documents-per-shard", "10"],
        "pretrain-text": ["pretrain", "--data", text, "--tokenizer", tok, "--out", "OUT", "--max-seq-length", "32",
                          "--max-predictions-per-seq", "5", *MODEL, *TRAIN],
        "pretrain-records": ["pretrain", "--data", data, "--out", "OUT", *MODEL, *TRAIN],
        "finetune": ["finetune", "--task", "classification", "--model", str(root / "pretrained"), "--train",
                     str(root / "train.csv"), "--eval", str(root / "eval.csv"), "--out", "OUT", "--max-seq-length",
                     "32", "--batch-size", "4", "--epochs", "2", "--truncate"],
        "export-saved_model": ["export", "--model", str(root / "finetuned"), "--format", "saved_model", "--out", "OUT"],
        "export-tflite": ["export", "--model", str(root / "finetuned"), "--format", "tflite", "--out", "OUT"],
        "demo": ["demo", "--out", "OUT", *DEMO],
    }


def _start(argv, cwd):
    """`albert-tf ARGV` forked (tests/fork_server.py through `start_program`), its stdout and stderr on one pipe."""
    return start_program(albert_tf_command() + argv, cwd=cwd, env=user_environment(PYTHONUNBUFFERED="1"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def uninterrupted():
    """{name: (timed, out)} of the uninterrupted runs made so far: see `baseline`."""
    return {}


@pytest.fixture(scope="module")
def root(tmp_path_factory, uninterrupted):
    """The inputs every command reads: a corpus, a tokenizer, records, a pretrained run, CSVs, a fine-tuned model.

    The tokenizer and the records are the timed runs of train-tokenizer and create-data.
    """
    root = tmp_path_factory.mktemp("kill")
    documents = movie_reviews.imdb_documents("pretrain", limit=60)
    (root / "reviews.txt").write_text("\n\n".join("\n".join(d) for d in documents) + "\n")
    rows = movie_reviews.rotten_tomatoes_sentences()
    order = np.random.default_rng(0).permutation(len(rows))
    # 120 steps of 4 an epoch (about 2 s on 2 busy cores): a signal sent when the line before an epoch shows
    # lands in that epoch, with room for the test to read the line and send it under the suite's load.
    for name, part in (("train.csv", order[:480]), ("eval.csv", order[480:496])):
        (root / name).write_text("text,label\n" + "".join(
            f"\"{rows[i][0].replace(chr(34), '')}\",{('neg', 'pos')[rows[i][1]]}\n" for i in part))
    table = commands(root)
    for name, out in (("train-tokenizer", "tok"), ("create-data", "data")):
        uninterrupted[name] = _lines_with_times(_start(_with_out(table[name], root / out), cwd=root)), root / out
    run_cli(*_with_out(table["pretrain-text"], root / "pretrain-run"))
    uninterrupted["pretrain-text"] = None, root / "pretrain-run"
    shutil.copytree(root / "pretrain-run" / "final", root / "pretrained")
    run_cli(*_with_out(table["finetune"], root / "finetuned"))
    uninterrupted["finetune"] = None, root / "finetuned"
    return root


def _with_out(argv, out):
    return [str(out) if a == "OUT" else a for a in argv]


def _lines_with_times(process):
    """[(seconds since start, line)] of the process's output, until it ends (exit 0), and the seconds it took."""
    start, lines = time.perf_counter(), []
    for line in process.stdout:
        lines.append((time.perf_counter() - start, line.rstrip("\n")))
    assert process.wait() == 0, "\n".join(line for _, line in lines)
    return lines, time.perf_counter() - start


def _kill_at(argv, cwd, at, signum):
    """Runs `argv` in a forked process (`_start`), sends `signum` once it printed a line that `at` (a regex)
    matches, or `at` seconds in.

    Returns:
        (exit code, output).
    """
    process = _start(argv, cwd=cwd)
    seen = []
    if isinstance(at, str):
        for line in process.stdout:
            seen.append(line)
            if re.match(at, line):
                process.send_signal(signum)
                break
        else:
            raise AssertionError(f"{argv[0]} ended before a line that matches {at!r}:\n{''.join(seen)}")
        seen += list(process.stdout)
    else:
        timer = threading.Timer(at, lambda: process.poll() is None and process.send_signal(signum))
        timer.start()
        seen = [line for line in process.stdout]
        timer.cancel()
    process.wait(timeout=600)
    return process.returncode, "".join(seen)


def _readable_or_absent(name, out):
    """Fails when --out exists but its loader cannot read it whole."""
    if not os.path.exists(out):
        return
    if name == "train-tokenizer":
        # Needs the whole tokenizer (spiece.model and tokenizer.json, published together: the writes branch).
        assert os.path.isfile(os.path.join(out, "tokenizer.json")), os.listdir(out)
        load_tokenizer(out)
    elif name == "create-data":
        read_metadata(out)
        for path in shard_paths(out):
            assert sum(1 for _ in tf.data.TFRecordDataset(path)) > 0
        load_tokenizer(os.path.join(out, "tokenizer"))
    elif name.startswith("pretrain") or name == "demo":
        if name == "demo" and os.path.exists(os.path.join(out, "tokenizer")):
            # The run directory's tokenizer whole, never a lone spiece.model that loads with the default
            # preprocessing: a window of two writes today, closed by the writes branch's publish.
            load_tokenizer(os.path.join(out, "tokenizer"))
            assert os.path.isfile(os.path.join(out, "tokenizer", "tokenizer.json"))
        checkpoint_dir = os.path.join(out, "checkpoints")
        for index in (n for n in os.listdir(checkpoint_dir) if n.endswith(".index")) if os.path.isdir(
                checkpoint_dir) else ():
            tf.train.load_checkpoint(os.path.join(checkpoint_dir, index[: -len(".index")]))
        if os.path.exists(os.path.join(out, "final")):
            load_pretrained(os.path.join(out, "final"))
    elif name == "finetune":
        from albert_tf.recipes import load_run

        load_run(out)
    elif name == "export-saved_model":
        from albert_tf.export.saved_model import load_saved_model

        # Every version directory loads (batching_parameters.txt stands beside them).
        for version in os.listdir(out):
            if version.isdigit():
                load_saved_model(os.path.join(out, version))
    elif name == "export-tflite":
        # The TFLite file published whole (the writes branch).
        tf.lite.Interpreter(model_path=os.path.join(out, "model.tflite")).allocate_tensors()


def _result(name, out):
    """What must equal between an interrupted-then-rerun run and an uninterrupted one."""
    if name == "train-tokenizer":
        return open(os.path.join(out, "spiece.model"), "rb").read()
    if name == "create-data":
        return [open(path, "rb").read() for path in shard_paths(out)]
    if name.startswith("pretrain") or name == "demo":
        reader = tf.train.load_checkpoint(os.path.join(out, "checkpoints", "ckpt-12"))
        return {k: reader.get_tensor(k) for k in sorted(reader.get_variable_to_shape_map())
                if k.startswith("model/") and reader.get_tensor(k).dtype.kind == "f"}
    if name == "finetune":
        # The best epoch's weights, and each epoch's training loss and scores: an epoch resumed at the wrong step
        # shows in its loss where the best epoch is an earlier one.
        with open(os.path.join(out, "finetune.json")) as f:
            history = json.load(f)["history"]
        return load_pretrained(os.path.join(out, "best")).get_weights() + [
            np.array([value for key, value in sorted(epoch.items()) if key not in ("epoch", "train_seconds")])
            for epoch in history]
    return None  # an export: loadable is what counts, and an exported graph is not compared byte for byte


def _assert_same(name, got, want):
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        got, want = [got[k] for k in sorted(got)], [want[k] for k in sorted(want)]
    if isinstance(want, list) and want and isinstance(want[0], np.ndarray):
        assert max(float(np.max(np.abs(a - b))) for a, b in zip(got, want)) < 1e-5, name
    else:
        assert got == want, name


@pytest.fixture(scope="module")
def baseline(root, uninterrupted):
    """`baseline(name)`: (timed, result) of the command's uninterrupted run, made once (the `root` fixture's
    where it made one with the same flags).

    timed: for a command whose moments are times, (its lines with their times, seconds), from a process forked
    as the kills are; else None (the run is in the test process).
    """
    found = {}

    def of(name):
        if name not in found:
            if name not in uninterrupted:
                out = root / "baseline" / name
                argv = _with_out(commands(root)[name], out)
                if isinstance(next(iter(MOMENTS[name].values())), str):
                    uninterrupted[name] = None, out
                    run_cli(*argv, cwd=root)
                else:
                    uninterrupted[name] = _lines_with_times(_start(argv, cwd=root)), out
            timed, out = uninterrupted[name]
            found[name] = (timed, _result(name, str(out)))
        return found[name]

    return of


def _assert_checkpoint_of_the_step(name, which, stop, out):
    """Fails unless `stop` (the stop line's match) names a checkpoint on disk of the step it names, in `which`."""
    step, reader = int(stop["step"]), tf.train.load_checkpoint(stop["path"])
    if name == "finetune":
        epoch = int(which.removeprefix("epoch"))
        assert stop["path"].startswith(os.path.join(os.path.dirname(out), ".unfinished-out", "")), stop["path"]
        assert reader.get_tensor("position/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [epoch, step]
    else:  # from the step of the line waited for ("step  5/12"; the loop asks after printing it) on
        assert stop["path"] == os.path.join(out, "checkpoints", f"ckpt-{step}") and 5 <= step < 12, stop["path"]
        assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == step


STOPS_ON_SIGTERM = {"train-tokenizer", "create-data", "pretrain-text", "pretrain-records", "finetune", "demo"}
RESUMES = {"pretrain-text", "pretrain-records", "finetune", "demo"}
# Run directories written in place (the others publish --out whole, and refuse it once there without --overwrite).
IN_PLACE = {"pretrain-text", "pretrain-records", "demo"}


# SIGKILL at every moment; SIGTERM where SIGTERM_STOPS says what it must say, and in the middle of each
# command whose moments are times.
KILLS = [(name, "SIGKILL", which) for name, moments in MOMENTS.items() for which in moments]
KILLS += [(name, "SIGTERM", which) for name, which in SIGTERM_STOPS]
KILLS += [(name, "SIGTERM", "middle") for name, moments in MOMENTS.items() if moments is _TIMED]


@pytest.mark.parametrize("name,signal_name,which", KILLS, ids=["-".join(kill) for kill in KILLS])
def test_a_command_killed_at_any_moment_leaves_nothing_half_written_and_its_rerun_ends_as_an_uninterrupted_run(
        root, baseline, name, signal_name, which, tmp_path):
    argv = _with_out(commands(root)[name], tmp_path / "out")
    timed, expected = baseline(name)
    at = MOMENTS[name][which]
    code, output = _kill_at(argv, root, at if timed is None else timed[1] * at, SIGNALS[signal_name])
    _readable_or_absent(name, str(tmp_path / "out"))
    said = [line for line in output.splitlines()
            if line.startswith(f"albert-tf {argv[0]}:") and not line.startswith(f"albert-tf {argv[0]}: warning:")]
    stop = None
    if signal_name == "SIGTERM" and (name, which) in SIGTERM_STOPS:
        # Sent with work ahead: it stops there, on one line that names where, with what it names on disk.
        assert code == 143 and len(said) == 1 and "Traceback" not in output, output
        stop = re.match(rf"albert-tf {argv[0]}: stopped by SIGTERM {SIGTERM_STOPS[name, which]}", said[0])
        assert stop, said[0]
        if "step" in stop.groupdict():
            _assert_checkpoint_of_the_step(name, which, stop, str(tmp_path / "out"))
    else:
        # A signal after the command's work ended (its last line printed) meets the default action, or none.
        ended = timed is not None and len(
            [line for line in output.splitlines() if "stopped by SIGTERM" not in line]) >= len(timed[0])
        # A signal in start-up, before `albert-tf` took SIGTERM over (its first tenths of a second: a
        # timed command's earliest moment), meets the default action; nothing had started.
        in_start_up = code == -signal.SIGTERM and not output.strip() and not os.path.exists(tmp_path / "out")
        if signal_name == "SIGTERM" and name in STOPS_ON_SIGTERM and not ended and not in_start_up:
            assert code == 143 and len(said) == 1 and "stopped by SIGTERM" in said[0], output
            assert "Traceback" not in output, output
        else:
            assert code == -SIGNALS[signal_name] or (code == 0 and ended), output
    # Published whole (read above): a kill after the publish, before the process ended, found the work done.
    finished = code == 0 or (name not in IN_PLACE and os.path.exists(tmp_path / "out"))
    checkpointed = any(n.startswith("ckpt-") and n.endswith(".index") for _, _, names in os.walk(tmp_path)
                       for n in names)

    rerun = run_cli(*argv, *(["--overwrite"] if finished and name not in IN_PLACE else []), cwd=root)
    if not finished and name in RESUMES:  # it says which it does
        assert ("Resum" if checkpointed else "Starting a new run") in rerun.stdout, rerun.stdout
    if stop is not None and "step" in stop.groupdict():  # from the step the stop named
        resumed = (f"Resuming from {stop['path']}: epoch {which.removeprefix('epoch')}, step {stop['step']}"
                   if name == "finetune" else f"Resumed from {stop['path']} at step {stop['step']}.")
        assert resumed in rerun.stdout, rerun.stdout
    _readable_or_absent(name, str(tmp_path / "out"))
    if expected is not None:
        _assert_same(name, _result(name, str(tmp_path / "out")), expected)
    if name == "finetune":  # the unfinished run was resumed and published, not left beside --out
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".unfinished-")]
