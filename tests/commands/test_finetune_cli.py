import csv
import io
import json
import pathlib
import warnings

import numpy as np
import pytest

from albert_tf import AlbertBackbone
from albert_tf.cli import main
from albert_tf.recipes import load_run
from albert_tf.recipes.config import default_learning_rate
from cli_helpers import run_cli
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import movie_reviews

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny 'pretrained' run directory: final/ beside tokenizer/, as the demo writes."""
    root = tmp_path_factory.mktemp("pretrained")
    AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)).save_pretrained(str(root / "final"))
    small_tokenizer().save(str(root / "tokenizer"))
    return str(root / "final")


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return str(path)


def finetune(model_dir, out, train, evaluation, *extra):
    return main(["finetune", "--model", model_dir, "--train", train, "--eval", evaluation,
                 "--out", str(out), "--max-seq-length", "64", "--batch-size", "8", "--epochs", "2",
                 "--learning-rate", "1e-3", *extra])


@pytest.mark.slow
def test_finetune_then_predict_from_file_and_stdin(model_dir, tmp_path, capsys, monkeypatch):
    everything = movie_reviews.rotten_tomatoes_sentences()
    sentences = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:48]]
    labels = {0: "neg", 1: "pos"}
    train = write_csv(tmp_path / "train.csv", [(t, labels[y]) for t, y in sentences[:32]])
    evaluation = write_csv(tmp_path / "eval.csv", [(t, labels[y]) for t, y in sentences[32:]])
    out = tmp_path / "run"
    assert finetune(model_dir, out, train, evaluation, "--task", "classification", "--truncate") == 0
    run = json.loads((out / "finetune.json").read_text())
    assert run["label_names"] == ["neg", "pos"] and len(run["history"]) == 2
    assert {"accuracy", "f1", "train_loss"} <= set(run["history"][0])
    config, model, _, _ = load_run(str(out))
    assert model.label_names == ["neg", "pos"] and config.task == "classification"

    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--input", evaluation]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 16 and all(r["label"] in ("neg", "pos") for r in rows)
    monkeypatch.setattr("sys.stdin", io.StringIO("a gorgeous film\nflat and dull\n"))
    assert main(["predict", "--model", str(out)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.slow
def test_bad_input_is_reported_with_file_and_line(model_dir, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", [("good", "pos"), ("bad", "neg")])
    evaluation = write_csv(tmp_path / "eval.csv", [("fine", "pos"), ("meh", "neutral")])
    out = tmp_path / "run"
    assert finetune(model_dir, out, train, evaluation, "--task", "classification") == 2
    assert f"{evaluation}:3: label 'neutral' is not in the label set ['neg', 'pos']" in capsys.readouterr().err
    long_train = write_csv(tmp_path / "long.csv", [("word " * 100, "pos"), ("bad", "neg")])
    assert finetune(model_dir, out, long_train, train, "--task", "classification") == 2
    assert f"{long_train}:2: 102 pieces, longer than max_seq_length=64" in capsys.readouterr().err
    assert finetune(model_dir, out, train, evaluation, "--task", "classification", "--skip-invalid") == 0
    assert "1 example, 1 skipped (first:" in capsys.readouterr().out


@pytest.mark.slow
def test_squad_v2_end_to_end(model_dir, tmp_path, capsys):
    context = "The film opened in Paris in 1990 and closed in Berlin a year later."
    qas = [{"id": "a", "question": "Where did it open?",
            "answers": [{"text": "Paris", "answer_start": context.index("Paris")}]},
           {"id": "b", "question": "Who sang?", "answers": [], "is_impossible": True}]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
    out = tmp_path / "squad"
    assert finetune(model_dir, out, str(path), str(path), "--task", "squad_v2", "--doc-stride", "8",
                    "--max-query-length", "16") == 0
    run = json.loads((out / "finetune.json").read_text())
    assert {"exact_match", "f1", "no_answer_f1"} <= set(run["history"][-1])
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--input", str(path)]) == 0
    assert [json.loads(l)["id"] for l in capsys.readouterr().out.splitlines()] == ["a", "b"]


@pytest.mark.slow
def test_default_pooling_and_width_rule_reach_the_run(model_dir, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", [("a gorgeous film", "pos"), ("flat and dull", "neg")] * 4)
    out = tmp_path / "run"
    assert main(["finetune", "--model", model_dir, "--train", train, "--eval", train, "--out", str(out),
                 "--task", "classification", "--epochs", "1", "--max-seq-length", "32"]) == 0
    run = json.loads((out / "finetune.json").read_text())
    hidden_size = AlbertBackbone.from_pretrained(model_dir).config.hidden_size
    # No --learning-rate: the width rule's rate is used and recorded.
    assert run["config"]["learning_rate"] == pytest.approx(default_learning_rate(hidden_size))
    printed = capsys.readouterr().out
    assert f"learning rate {default_learning_rate(hidden_size):.3g}" in printed
    # No --pooling: "auto" resolves to mean for this narrow model, is printed and recorded.
    assert hidden_size < 768 and run["config"]["pooling"] == "mean"
    assert "pooling mean" in printed
    _, model, _, _ = load_run(str(out))
    assert model.pooling == "mean"


def test_best_is_saved_without_the_optimizer_and_the_model_trains_on_compiled(tmp_path):
    import h5py
    import keras

    from albert_tf.loading import load_pretrained
    from albert_tf.models import AlbertClassifier
    from albert_tf.recipes.finetune import _save_best
    from input_pipeline import AlbertTokenizer

    # Any tokenizer will do (best/ keeps one beside the model): the original's loads without training.
    tokenizer = AlbertTokenizer((FIXTURES / "original_tokenizer" / "spiece.model").read_bytes())
    model = AlbertClassifier(AlbertBackbone(tiny_config(vocab_size=tokenizer.vocab_size)), num_classes=2)
    model.compile(optimizer=keras.optimizers.AdamW())
    model.optimizer.build(model.trainable_variables)  # two moments per weight, as after an epoch
    _save_best(model, tokenizer, str(tmp_path))
    names = []
    with h5py.File(tmp_path / "best" / "model.weights.h5", "r") as f:
        f.visit(names.append)
    assert names and not [n for n in names if "optimizer" in n], names
    assert not load_pretrained(str(tmp_path / "best")).compiled
    assert model.compiled and model.optimizer.built  # the next epoch trains on the same optimizer


@pytest.mark.slow
def test_best_holds_the_weights_only(model_dir, tmp_path):
    import h5py

    train = write_csv(tmp_path / "train.csv", [("a gorgeous film", "pos"), ("flat and dull", "neg")] * 4)
    out = tmp_path / "run"
    # Two epochs: the second best/ is written by a model whose AdamW moments are not zero.
    assert finetune(model_dir, out, train, train, "--task", "classification", "--max-seq-length", "32") == 0
    path = out / "best" / "model.weights.h5"
    names, stored = [], []

    def visit(name, item):
        names.append(name)
        if isinstance(item, h5py.Dataset):
            stored.append(item.nbytes)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    assert names and not [n for n in names if "optimizer" in n], names
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. Keras' "Skipping variable loading for optimizer"
        _, model, _, _ = load_run(str(out))
    assert not model.compiled
    weight_bytes = sum(np.dtype(v.dtype).itemsize * int(np.prod(v.shape)) for v in model.weights)
    assert sum(stored) == weight_bytes
    # About the weights' size: HDF5's headers on top, not two more copies of them (AdamW's moments).
    assert path.stat().st_size < 1.5 * weight_bytes + 100_000, (path.stat().st_size, weight_bytes)
    # The model still predicts from best/, read from disk; one blank row is "1 row" with an error record.
    (tmp_path / "odd.txt").write_text("a gorgeous film\n\nflat and dull\n")
    done = run_cli("predict", "--model", str(out / "best"), "--input", str(tmp_path / "odd.txt"),
                   "--output", str(tmp_path / "p.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and "error" in rows[1] and "label" in rows[0], rows
    assert "; 1 row gave an error record" in done.stderr, done.stderr
