"""Every long command, killed at moments spread over its run, in a fresh process: SIGTERM and SIGKILL.

A killed process is the subject here, so each run is a fresh `python -m
albert_tf.cli` (plain `subprocess.Popen`). For each command an uninterrupted
run is recorded first (its output lines and their times); the moments are
taken from it: after its first, middle and next-to-last output line, or, for
a command that prints one line at its end, at 40%, 70% and 90% of its time.
After each kill:

- nothing half-written is readable as valid: the command's own loader reads
  --out whole, or --out is absent;
- SIGTERM ends a command that stops on it (`STOPS_ON_SIGTERM`) with one line and
  exit 143, or the command had already finished (exit 0);
- the same command run again ends the run, saying "Resum..." where it resumed and
  "Starting a new run" where nothing was checkpointed;
- the result equals the uninterrupted run's: the weights where resuming is
  promised (pretrain, finetune, demo), the files where a rerun starts clean.

Tiny configs, XLA off (--compile-step none). SIGKILL at all three moments of
the 8 commands (train-tokenizer, create-data, pretrain on raw text and on
records, finetune, export saved_model and tflite, demo): 24 kills, each
leaving a different state (nothing yet, a run under way, its end being
written). SIGTERM at the early and late moments of the 6 that stop on it: 12
(the middle one leaves what the early one does, a stop at a step boundary,
with more steps), and at the middle moment of the 2 exports, which end on it
at once as SIGKILL ends them: 2. 38 kills in all. Each property also has a
fast in-process test (test_finetune_resume.py, test_preemption.py,
test_faults.py, test_demo.py, test_error_protocol.py,
test_reruns_and_damaged_data.py).
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.loading import load_pretrained
from albert_tf.model_dirs import load_tokenizer
from cli_helpers import run_cli, user_environment
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
MOMENTS = ("early", "middle", "late")


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
                     "32", "--batch-size", "4", "--epochs", "3", "--truncate"],
        "export-saved_model": ["export", "--model", str(root / "finetuned"), "--format", "saved_model", "--out", "OUT"],
        "export-tflite": ["export", "--model", str(root / "finetuned"), "--format", "tflite", "--out", "OUT"],
        "demo": ["demo", "--out", "OUT", *DEMO],
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The inputs every command reads: a corpus, a tokenizer, records, a pretrained run, CSVs, a fine-tuned model."""
    root = tmp_path_factory.mktemp("kill")
    documents = movie_reviews.imdb_documents("pretrain", limit=60)
    (root / "reviews.txt").write_text("\n\n".join("\n".join(d) for d in documents) + "\n")
    rows = movie_reviews.rotten_tomatoes_sentences()
    order = np.random.default_rng(0).permutation(len(rows))
    for name, part in (("train.csv", order[:48]), ("eval.csv", order[48:64])):
        (root / name).write_text("text,label\n" + "".join(
            f"\"{rows[i][0].replace(chr(34), '')}\",{('neg', 'pos')[rows[i][1]]}\n" for i in part))
    table = commands(root)
    run_cli(*_with_out(table["train-tokenizer"], root / "tok"))
    run_cli(*_with_out(table["create-data"], root / "data"))
    run_cli(*_with_out(table["pretrain-text"], root / "pretrain-run"))
    shutil.copytree(root / "pretrain-run" / "final", root / "pretrained")
    run_cli(*_with_out(table["finetune"], root / "finetuned"))
    return root


def _with_out(argv, out):
    return [str(out) if a == "OUT" else a for a in argv]


def _start(argv, cwd):
    return subprocess.Popen([sys.executable, "-m", "albert_tf.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=user_environment(PYTHONUNBUFFERED="1"))


def _lines_with_times(process):
    """[(seconds since start, line)] of the process's output, until it ends."""
    start, lines = time.perf_counter(), []
    for line in process.stdout:
        lines.append((time.perf_counter() - start, line.rstrip("\n")))
    process.wait()
    return lines, time.perf_counter() - start


def _moment(baseline, which):
    """What to wait for: ("line", index) of the baseline's output, or ("seconds", s) when it prints one line."""
    lines, seconds = baseline
    if len(lines) >= 4:
        return "line", {"early": 0, "middle": len(lines) // 2, "late": len(lines) - 2}[which]
    return "seconds", seconds * {"early": 0.4, "middle": 0.7, "late": 0.9}[which]


def _kill_at(argv, cwd, moment, signum):
    """Runs `argv`, sends `signum` at `moment`; returns (exit code, output)."""
    process = _start(argv, cwd)
    kind, at = moment
    seen = []
    if kind == "seconds":
        timer = threading.Timer(at, lambda: process.poll() is None and process.send_signal(signum))
        timer.start()
        seen = [line for line in process.stdout]
        timer.cancel()
    else:
        for line in process.stdout:
            seen.append(line)
            if len(seen) > at:
                process.send_signal(signum)
                break
        seen += list(process.stdout)
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

        for version in os.listdir(out):
            if not version.startswith("."):
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
        return load_pretrained(os.path.join(out, "best")).get_weights()
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
def baseline(root):
    """`baseline(name)`: ((lines with times, seconds), result) of the command's uninterrupted run, fresh, made once."""
    found = {}

    def of(name):
        if name not in found:
            out = root / "baseline" / name
            timed = _lines_with_times(_start(_with_out(commands(root)[name], out), root))
            found[name] = (timed, _result(name, str(out)))
        return found[name]

    return of


STOPS_ON_SIGTERM = {"train-tokenizer", "create-data", "pretrain-text", "pretrain-records", "finetune", "demo"}
RESUMES = {"pretrain-text", "pretrain-records", "finetune", "demo"}
# Run directories written in place (the others publish --out whole, and refuse it once there without --overwrite).
IN_PLACE = {"pretrain-text", "pretrain-records", "demo"}


def kills():
    """(command, signal, moment) of every kill (the module's docstring says why these)."""
    for name in commands(pathlib.Path(".")):
        for signal_name in SIGNALS:
            if signal_name == "SIGKILL":
                moments = MOMENTS
            else:
                moments = ("early", "late") if name in STOPS_ON_SIGTERM else ("middle",)
            yield from ((name, signal_name, which) for which in moments)


@pytest.mark.parametrize("name,signal_name,which", list(kills()), ids=["-".join(kill) for kill in kills()])
def test_a_command_killed_at_any_moment_leaves_nothing_half_written_and_its_rerun_ends_as_an_uninterrupted_run(
        root, baseline, name, signal_name, which, tmp_path):
    argv = _with_out(commands(root)[name], tmp_path / "out")
    timed, expected = baseline(name)
    code, output = _kill_at(argv, root, _moment(timed, which), SIGNALS[signal_name])
    _readable_or_absent(name, str(tmp_path / "out"))
    # Published whole (read above): a kill after the publish, before the process ended, found the work done.
    finished = code == 0 or (name not in IN_PLACE and os.path.exists(tmp_path / "out"))
    # A signal after the command's work ended (its last line printed) meets the default SIGTERM action.
    ended = len([line for line in output.splitlines() if "stopped by SIGTERM" not in line]) >= len(timed[0])
    # A signal in start-up, before `albert-tf` took SIGTERM over (its first tenths of a second: a
    # one-line command's earliest moment), meets the default action; nothing had started.
    in_start_up = code == -signal.SIGTERM and not output.strip() and not os.path.exists(tmp_path / "out")
    if code != 0 and signal_name == "SIGTERM" and name in STOPS_ON_SIGTERM and not ended and not in_start_up:
        said = [line for line in output.splitlines()
                if line.startswith(f"albert-tf {argv[0]}:") and not line.startswith(f"albert-tf {argv[0]}: warning:")]
        assert code == 143 and len(said) == 1 and "stopped by SIGTERM" in said[0], output
        assert "Traceback" not in output, output
    elif code != 0:
        assert code == -SIGNALS[signal_name], output
    checkpointed = any(n.startswith("ckpt-") and n.endswith(".index") for _, _, names in os.walk(tmp_path)
                       for n in names)

    rerun = run_cli(*argv, *(["--overwrite"] if finished and name not in IN_PLACE else []), cwd=root)
    if not finished and name in RESUMES:  # it says which it does
        assert ("Resum" if checkpointed else "Starting a new run") in rerun.stdout, rerun.stdout
    _readable_or_absent(name, str(tmp_path / "out"))
    if expected is not None:
        _assert_same(name, _result(name, str(tmp_path / "out")), expected)
    if name == "finetune":  # the unfinished run was resumed and published, not left beside --out
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".unfinished-")]
