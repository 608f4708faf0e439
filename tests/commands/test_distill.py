"""`albert-tf distill` through the command line, in the test process: a tiny teacher fine-tuned once per module,
its student's run directory as every reader of a fine-tuning run takes it, the teacher left as it was, and each
bad input refused in one line with nothing written."""

import csv
import hashlib
import json

import numpy as np
import pytest

from albert_tf import AlbertBackbone
from cli_helpers import run_cli
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import movie_reviews

# Short texts, short runs: every command here trains a few steps of a model with H 32.
SHORT = ("--max-seq-length", "16", "--batch-size", "8", "--truncate")


def _write_table(path, rows, labels=("neg", "pos")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("text", "label")] + [(t, labels[y]) for t, y in rows])


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A tiny model (L 4), sentiment tables (40 training rows, 20 evaluation rows), 40 lines of unlabelled text
    and teacher/, that model fine-tuned on them for one epoch."""
    root = tmp_path_factory.mktemp("distill")
    AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE, num_hidden_layers=4)).save_pretrained(str(root / "model"))
    small_tokenizer().save(str(root / "model" / "tokenizer"))
    everything = movie_reviews.rotten_tomatoes_sentences()
    sentences = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:100]]
    _write_table(root / "train.csv", sentences[:40])
    _write_table(root / "eval.csv", sentences[40:60])
    (root / "more.txt").write_text("\n".join(t for t, _ in sentences[60:]) + "\n", encoding="utf-8")
    run_cli("finetune", "--task", "classification", "--model", root / "model", "--train", root / "train.csv",
            "--eval", root / "eval.csv", "--out", root / "teacher", "--epochs", "1", *SHORT)
    return root


def _resumable(root):
    """The student's flags in the fast tests: 80 training rows (40 labelled, 40 the teacher's alone), one epoch of
    10 steps, no report."""
    return ("--unlabeled", root / "more.txt", "--epochs", "1", "--no-report")


@pytest.fixture(scope="module")
def student(root):
    """root/student: teacher/'s student, distilled with `_resumable`'s flags."""
    _distill(root, root / "student", *_resumable(root))
    return root / "student"


def _distill(root, out, *flags, expect_rc=0):
    return run_cli("distill", "--teacher", root / "teacher", "--train", root / "train.csv", "--eval",
                   root / "eval.csv", "--out", out, *SHORT, *flags, expect_rc=expect_rc)


def _bad_input(root, tmp_path, case):
    """(extra flags, the words the error must hold) of one bad input, its files written under `tmp_path`."""
    if case == "not a fine-tuned run":
        return ["--teacher", root / "model"], "is not a fine-tuning output directory"
    if case == "unsupported task":
        import shutil

        shutil.copytree(root / "teacher", tmp_path / "tagger")
        record = json.loads((tmp_path / "tagger" / "finetune.json").read_text())
        record["config"]["task"] = "tagging"
        (tmp_path / "tagger" / "finetune.json").write_text(json.dumps(record))
        return ["--teacher", tmp_path / "tagger"], "was fine-tuned on tagging; distill supports sentence"
    if case == "student not smaller":
        return ["--student", "quarter", "--student-layers", "4"], "--student must be smaller than the teacher"
    if case == "tokenizer mismatch":
        from export_fixtures import tokenizer

        tokenizer().save(str(tmp_path / "other_tokenizer"))
        return ["--tokenizer", tmp_path / "other_tokenizer"], "is not the teacher's tokenizer"
    if case == "empty unlabeled":
        (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
        return ["--unlabeled", tmp_path / "empty.txt"], "holds no text"
    if case == "unreadable unlabeled":
        (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00 not text")
        return ["--unlabeled", tmp_path / "binary.txt"], "binary.txt"
    if case == "other eval labels":
        _write_table(tmp_path / "eval.csv", [("fine", 0), ("so so", 1)], labels=("neg", "meh"))
        return ["--eval", tmp_path / "eval.csv"], "labels the teacher does not know: ['meh']"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["not a fine-tuned run", "unsupported task", "student not smaller",
                                  "tokenizer mismatch", "empty unlabeled", "unreadable unlabeled",
                                  "other eval labels"])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(root, tmp_path, case):
    flags, words = _bad_input(root, tmp_path, case)
    done = _distill(root, tmp_path / "out", *flags, expect_rc=2)
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    assert not [p.name for p in tmp_path.iterdir() if "out" in p.name]


def _digest(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.timeout(300)  # a long journey (tests/README.md)
def test_the_student_is_a_fine_tuning_run_that_every_reader_takes_and_the_teacher_stays_as_it_was(root, tmp_path):
    teacher_files = _digest(root / "teacher")
    done = _distill(root, tmp_path / "student", "--unlabeled", root / "more.txt", "--epochs", "2")
    assert _digest(root / "teacher") == teacher_files
    assert "student L 1, H 16, E 16, heads 2, I 32 (embeddings start)" in done.stdout, done.stdout
    record = json.loads((tmp_path / "student" / "distill.json").read_text())
    assert record["distill"]["temperature"] == 2.0 and record["init"] == "embeddings"
    assert [r["epoch"] for r in record["history"]] == [1, 2] and "accuracy" in record["history"][0]
    assert record["student"]["num_hidden_layers"] == 1 and record["unlabeled"] == [str(root / "more.txt")]
    report = (tmp_path / "student" / "distill_report.md").read_text()
    assert report.splitlines()[2].startswith("| teacher |") and report.splitlines()[3].startswith("| student |")
    assert report in done.stdout
    # predict and the SavedModel export agree on the student: test_the_student_predicts_as_its_export_answers.
    for flags in (["--format", "saved_model", "--xla"], ["--format", "saved_model", "--mixed-precision",
                                                           "mixed_bfloat16"],
                  ["--format", "tflite"], ["--format", "tflite", "--quantize", "dynamic"], ["--format", "web"]):
        run_cli("export", "--model", tmp_path / "student", *flags, "--out", tmp_path / "exports" / flags[-1])
    # convert takes the student's run as it takes its teacher's: both pool the mean token, which HF's sequence
    # head cannot, and a keras-hub preset has no place for a task head.
    for to, words in (("hf", "Fine-tune with --pooling cls"), ("keras-hub", "no place for its task head")):
        for run in (root / "teacher", tmp_path / "student"):
            refused = run_cli("convert", "--to", to, "--model", run, "--out", tmp_path / to, expect_rc=2)
            assert len(refused.stderr.strip().splitlines()) == 1 and words in refused.stderr, refused.stderr


def test_the_student_predicts_as_its_export_answers(student, tmp_path):
    import tensorflow as tf

    from albert_tf.export.saved_model import load_saved_model

    texts = ["a gorgeous, witty film", "flat, dull and far too long", "it is a movie"]
    predicted = run_cli("predict", "--model", student, input="\n".join(texts) + "\n")
    expected = [json.loads(line)["probabilities"] for line in predicted.stdout.splitlines()]
    run_cli("export", "--model", student, "--format", "saved_model", "--out", tmp_path / "sm")
    answer = load_saved_model(str(tmp_path / "sm" / "1")).signatures["serve_text"](text=tf.constant(texts))
    np.testing.assert_allclose(answer["probabilities"].numpy(), expected, atol=1e-5)


def test_sigterm_then_the_same_command_gives_the_uninterrupted_student(root, student, tmp_path, monkeypatch):
    import signal

    import albert_tf.recipes.finetune as recipe
    from albert_tf.loading import load_pretrained

    # `_resumable`'s 10 steps; the signal comes in step 4. `student` ran the same command uninterrupted.
    flags = _resumable(root)
    steps, on_batch_end = [], recipe._StopAtStep.on_train_batch_end

    def signalled_at_step_4(self, batch, logs=None):
        steps.append(batch)
        if len(steps) == 4:
            signal.raise_signal(signal.SIGTERM)
        on_batch_end(self, batch, logs)

    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", signalled_at_step_4)
    stopped = _distill(root, tmp_path / "run", *flags, expect_rc=143)
    assert "stopped by SIGTERM in epoch 1 of 1, at step 4 of 10" in stopped.stderr, stopped.stderr
    monkeypatch.setattr(recipe._StopAtStep, "on_train_batch_end", on_batch_end)
    resumed = _distill(root, tmp_path / "run", *flags)
    assert ": epoch 1, step 4" in resumed.stdout, resumed.stdout
    whole, rerun = (load_pretrained(str(path / "best")).get_weights() for path in (student, tmp_path / "run"))
    for a, b in zip(whole, rerun, strict=True):
        np.testing.assert_array_equal(a, b)
    assert json.loads((tmp_path / "run" / "distill.json").read_text())["history"][0]["epoch"] == 1


def _keyword_rows(rng, n, keywords):
    """`n` five-word texts of neutral words with one keyword; label 1 for the first half of `keywords`."""
    neutral = "the film was a movie it is and of to this that one".split()
    rows = []
    for _ in range(n):
        index = rng.integers(len(keywords))
        words = list(rng.choice(neutral, 4)) + [keywords[index]]
        rng.shuffle(words)
        rows.append((" ".join(words), int(index < len(keywords) // 2)))
    return rows


def test_on_a_task_the_few_labels_underspecify_the_soft_targets_on_unlabelled_text_beat_the_labels_alone(
        root, tmp_path):
    # Eight keywords decide the label; the teacher learned all eight, the student's eight labelled rows show two
    # (great, bad). The teacher's outputs on unlabelled text carry the other six; the labels alone cannot.
    keywords = ["great", "best", "excellent", "good", "bad", "worst", "awful", "boring"]
    rng = np.random.default_rng(0)
    _write_table(tmp_path / "teacher_train.csv", _keyword_rows(rng, 400, keywords))
    _write_table(tmp_path / "eval.csv", _keyword_rows(rng, 80, keywords))
    _write_table(tmp_path / "train.csv", _keyword_rows(rng, 8, ["great", "bad"]))
    (tmp_path / "more.txt").write_text("\n".join(t for t, _ in _keyword_rows(rng, 400, keywords)), encoding="utf-8")
    run_cli("finetune", "--task", "classification", "--model", root / "model", "--train",
            tmp_path / "teacher_train.csv",
            "--eval", tmp_path / "eval.csv", "--out", tmp_path / "teacher", "--epochs", "3", "--learning-rate", "1e-3",
            *SHORT)
    teacher = json.loads((tmp_path / "teacher" / "finetune.json").read_text())
    assert max(r["accuracy"] for r in teacher["history"]) >= 0.9, teacher["history"]
    accuracy = {}
    for name, weight in (("distilled", "0.5"), ("labels_alone", "1.0")):
        # The same rows and steps; a label weight of 1 drops the soft targets, so unlabelled rows teach nothing.
        run_cli("distill", "--teacher", tmp_path / "teacher", "--train", tmp_path / "train.csv", "--eval",
                tmp_path / "eval.csv", "--unlabeled", tmp_path / "more.txt", "--out", tmp_path / name,
                "--student", "quarter", "--student-init", "fresh", "--label-weight", weight, "--epochs", "3", "--learning-rate", "2e-3",
                "--no-report", *SHORT)
        record = json.loads((tmp_path / name / "distill.json").read_text())
        accuracy[name] = max(r["accuracy"] for r in record["history"])
    assert accuracy["distilled"] >= 0.85 and accuracy["distilled"] > accuracy["labels_alone"] + 0.15, accuracy


@pytest.mark.slow
def test_a_pair_regression_teacher_distills_with_unlabelled_pairs(root, tmp_path):
    everything = movie_reviews.rotten_tomatoes_sentences()
    rng = np.random.default_rng(1)
    pairs = [(everything[i][0], everything[j][0], float(everything[i][1] + everything[j][1]))
             for i, j in rng.integers(0, len(everything), (72, 2))]
    for name, part in (("train.csv", pairs[:32]), ("eval.csv", pairs[32:48]), ("more.csv", pairs[48:])):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "text2", "label")] + [(a, b, s) for a, b, s in part])
    pair_flags = ("--text-pair-column", "text2", "--epochs", "1", *SHORT)
    run_cli("finetune", "--task", "regression", "--model", root / "model", "--train", tmp_path / "train.csv",
            "--eval", tmp_path / "eval.csv", "--out", tmp_path / "teacher", *pair_flags)
    done = run_cli("distill", "--teacher", tmp_path / "teacher", "--train", tmp_path / "train.csv", "--eval",
                   tmp_path / "eval.csv", "--unlabeled", tmp_path / "more.csv", "--out", tmp_path / "student",
                   "--no-report", *pair_flags)
    assert "the teacher labels 56 training rows" in done.stdout, done.stdout
    record = json.loads((tmp_path / "student" / "distill.json").read_text())
    assert record["metric"] == "pearson" and "pearson" in record["history"][0]
    predicted = run_cli("predict", "--model", tmp_path / "student", "--input", tmp_path / "eval.csv")
    assert len(predicted.stdout.splitlines()) == 16 and "score" in json.loads(predicted.stdout.splitlines()[0])
