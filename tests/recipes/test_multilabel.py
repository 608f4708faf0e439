"""Multi-label fine-tuning: the loss, the class weights, thresholds tuned on dev and applied by predict, bad input."""

import json
import os

import numpy as np
import pytest

import multilabel_fixtures
from cli_helpers import run_cli
from helpers import backbone_batch, tiny_config


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _model(**kwargs):
    from albert_tf.models import AlbertBackbone, AlbertMultiLabelClassifier

    return AlbertMultiLabelClassifier(AlbertBackbone(tiny_config()), 3, label_names=["a", "b", "c"], **kwargs)


TARGETS = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 1]], "float32")


def test_the_loss_is_binary_cross_entropy_on_every_label_not_a_softmax():
    model = _model()
    x = backbone_batch(model.config)
    logits = np.asarray(model(x)["logits"], "float64") * 40.0  # far from 0: sigmoid and softmax disagree
    expected = -np.mean(TARGETS * np.log(_sigmoid(logits)) + (1 - TARGETS) * np.log(1 - _sigmoid(logits)))
    loss = float(model.task_loss(TARGETS, {"logits": logits.astype("float32")}))
    assert loss == pytest.approx(expected, rel=1e-5)
    shifted = logits + 3.0  # a softmax is blind to a shift shared by every label; the sigmoids are not
    assert float(model.task_loss(TARGETS, {"logits": shifted.astype("float32")})) != pytest.approx(loss, rel=1e-3)


def test_positive_weights_multiply_each_labels_positive_term():
    weights = [1.0, 2.5, 4.0]
    model = _model(positive_weights=weights)
    logits = np.array([[0.3, -1.2, 2.0], [1.5, 0.1, -0.7], [-2.0, 0.4, 0.9]])
    p = _sigmoid(logits)
    expected = -np.mean(np.asarray(weights) * TARGETS * np.log(p) + (1 - TARGETS) * np.log(1 - p))
    assert float(model.task_loss(TARGETS, {"logits": logits.astype("float32")})) == pytest.approx(expected, rel=1e-5)


def test_class_weights_multiply_each_examples_cross_entropy_by_its_class_weight():
    from albert_tf.models import AlbertBackbone, AlbertClassifier

    weights = [0.5, 2.0, 3.0]
    model = AlbertClassifier(AlbertBackbone(tiny_config()), 3, class_weights=weights)
    logits = np.array([[0.3, -1.2, 2.0], [1.5, 0.1, -0.7], [-2.0, 0.4, 0.9]])
    labels = np.array([0, 2, 1])
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    expected = np.mean([-weights[y] * log_softmax[i, y] for i, y in enumerate(labels)])
    assert float(model.task_loss(labels, {"logits": logits.astype("float32")})) == pytest.approx(expected, rel=1e-5)
    # Kept in the config: a reloaded model trains with the same loss.
    assert AlbertClassifier.from_config(model.get_config()).class_weights == weights


def test_balanced_and_file_weights_follow_their_formulas(tmp_path):
    from albert_tf.recipes.class_weights import resolve_class_weights

    labels = [0, 0, 0, 1]  # 4 / (2 * 3), 4 / (2 * 1)
    assert resolve_class_weights("balanced", labels, ["x", "y"], multilabel=False) == pytest.approx([2 / 3, 2.0])
    hot = [np.array(v, "float32") for v in ([1, 0], [1, 1], [0, 1], [1, 0])]  # negatives / positives
    assert resolve_class_weights("balanced", hot, ["x", "y"], multilabel=True) == pytest.approx([1 / 3, 1.0])
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({"y": 3}))
    assert resolve_class_weights(str(path), labels, ["x", "y"], multilabel=False) == [1.0, 3.0]
    path.write_text(json.dumps({"z": 3}))
    with pytest.raises(ValueError, match=r"weights.json: label\(s\) \['z'\]"):
        resolve_class_weights(str(path), labels, ["x", "y"], multilabel=False)


def test_each_threshold_maximizes_its_labels_f1_and_is_half_without_a_positive():
    from albert_tf.recipes.multilabel_metrics import scores, tune_thresholds

    targets = np.array([[1, 0], [1, 0], [0, 0], [0, 0]])
    probabilities = np.array([[0.30, 0.9], [0.25, 0.8], [0.20, 0.7], [0.10, 0.6]])
    thresholds = tune_thresholds(targets, probabilities)
    assert thresholds == pytest.approx([0.225, 0.5])  # between the positives' 0.25 and the negatives' 0.20
    assert scores(targets, probabilities, thresholds, ["x", "y"])["per_label"]["x"]["f1"] == 1.0
    assert scores(targets, probabilities, [0.5, 0.5], ["x", "y"])["per_label"]["x"]["f1"] == 0.0


def test_metrics_pool_micro_and_average_macro():
    from albert_tf.recipes.multilabel_metrics import auc, scores

    targets = np.array([[1, 0], [1, 1], [0, 1]])
    probabilities = np.array([[0.9, 0.2], [0.8, 0.1], [0.3, 0.7]])
    result = scores(targets, probabilities, [0.5, 0.5], ["x", "y"])
    # x: tp 2; y: tp 1, fn 1 -> micro 2*3 / (2*3 + 0 + 1); macro (1 + 2/3) / 2; y AUC: 0.7 > 0.2 > 0.1
    assert result["micro_f1"] == pytest.approx(6 / 7)
    assert result["macro_f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert result["exact_match"] == pytest.approx(2 / 3)
    assert result["per_label"]["y"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "auc": 0.5})
    # A tie between a positive and a negative counts half: (0.5 + 1 + 1 + 1) / 4.
    assert auc(np.array([True, False, True, False]), np.array([0.5, 0.5, 0.9, 0.1])) == 0.875


def test_predictions_apply_the_models_thresholds_or_one_given():
    from albert_tf.recipes import FinetuneConfig, get_recipe
    from albert_tf.recipes.encoded import Encoded

    model = _model(thresholds=[0.01, 0.5, 0.99])
    x = backbone_batch(model.config, pad=False)
    inputs = [{k: v[i] for k, v in x.items()} for i in range(3)]
    recipe, config = get_recipe("multilabel"), FinetuneConfig(task="multilabel")
    rows = recipe.predictions(model, Encoded(inputs, None, [None] * 3), config)
    for row in rows:
        p = row["probabilities"]
        assert row["labels"] == [n for n, t in zip("abc", (0.01, 0.5, 0.99)) if p[n] >= t]
        assert "a" in row["labels"] and "c" not in row["labels"]  # a random head's sigmoids sit near 0.5
    rows = recipe.predictions(model, Encoded(inputs, None, [None] * 3), config.replace(threshold=0.999))
    assert all(row["labels"] == [] for row in rows)


def test_each_epoch_is_scored_at_one_half_whatever_thresholds_the_model_holds():
    from albert_tf.recipes import FinetuneConfig, get_recipe
    from albert_tf.recipes.encoded import Encoded
    from albert_tf.recipes.multilabel_metrics import scores
    from input_pipeline.finetuning import TextExample

    model = _model(thresholds=[0.01, 0.02, 0.03])
    x = backbone_batch(model.config, pad=False)
    inputs = [{k: v[i] for k, v in x.items()} for i in range(3)]
    examples = [TextExample("t", None, y, "f:1") for y in TARGETS]
    recipe, config = get_recipe("multilabel"), FinetuneConfig(task="multilabel")
    result = recipe.evaluate(model, Encoded(inputs, list(TARGETS), examples), config)
    probabilities = _sigmoid(np.asarray(model(x)["logits"]))
    assert result["micro_f1"] == pytest.approx(scores(TARGETS, probabilities, [0.5] * 3, "abc")["micro_f1"])
    assert result["thresholds"] != [0.01, 0.02, 0.03]


@pytest.mark.slow
def test_finetune_tunes_thresholds_on_dev_keeps_them_with_the_model_and_predict_applies_them(tmp_path):
    from albert_tf.loading import load_pretrained
    from albert_tf.recipes.multilabel_metrics import tune_thresholds

    out, data = multilabel_fixtures.finetuned()
    record = json.load(open(os.path.join(out, "finetune.json")))
    best = record["history"][record["best_epoch"] - 1]
    model = load_pretrained(os.path.join(out, "best"))
    assert model.thresholds == best["thresholds"] and model.thresholds != [0.5] * 3
    assert best["tuned_micro_f1"] > 0.8  # it learned the labels (at 0.5 three short epochs score less)
    done = run_cli("predict", "--model", out, "--input", os.path.join(data, "dev.jsonl"))
    predicted = [json.loads(line) for line in done.stdout.splitlines()]
    dev = [json.loads(line) for line in open(os.path.join(data, "dev.jsonl"))]
    probabilities = np.array([[p["probabilities"][n] for n in model.label_names] for p in predicted])
    targets = np.array([[n in row["labels"] for n in model.label_names] for row in dev])
    # The thresholds are those that dev's probabilities give.
    assert tune_thresholds(targets, probabilities) == pytest.approx(model.thresholds, abs=1e-5)
    for p in predicted:
        assert p["labels"] == [n for n, t in zip(model.label_names, model.thresholds) if p["probabilities"][n] >= t]
    low = run_cli("predict", "--model", out, "--input", os.path.join(data, "dev.jsonl"), "--threshold", "0.001")
    assert all(json.loads(line)["labels"] == model.label_names for line in low.stdout.splitlines())


def _refused(tmp_path, train_rows, dev_rows, *extra, fmt="jsonl"):
    """The one stderr line of a `finetune --task multilabel` that exits 2 on its data."""
    files = []
    for name, data in (("train", train_rows), ("dev", dev_rows)):
        path = tmp_path / f"{name}.{fmt}"
        path.write_text("".join((json.dumps(r) if fmt == "jsonl" else r) + "\n" for r in data))
        files.append(path)
    done = run_cli("finetune", "--task", "multilabel", "--model", multilabel_fixtures.model_dir(), "--train", files[0],
                   "--eval", files[1], "--out", tmp_path / "run", "--label-column", "labels", "--max-seq-length", "32", *extra,
                   expect_rc=2)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()
    return lines[0]


GOOD = [{"text": "pizza song", "labels": ["food", "music"]}, {"text": "goal", "labels": ["sports"]}]


@pytest.mark.parametrize("train, dev, extra, message", [
    (GOOD + [{"text": "nothing", "labels": []}], GOOD, (), "train.jsonl:3: no labels"),
    (GOOD, GOOD + [{"text": "rain", "labels": ["weather"]}], (),
     "dev.jsonl:3: label(s) ['weather'] not in the training labels"),
    (GOOD, GOOD, ("--labels", "food", "music", "sports", "chess"), "--labels: label(s) ['chess'] are on no row of"),
    (GOOD, GOOD, ("--threshold", "1.5"), "`threshold` must be in (0, 1)"),
    ([{"text": "pizza", "labels": "food"}] + GOOD, GOOD, (), "train.jsonl:1: column 'labels' holds one label"),
])
def test_bad_multilabel_input_is_one_line_naming_the_file_and_row(tmp_path, train, dev, extra, message):
    assert message in _refused(tmp_path, train, dev, *extra)


def test_a_single_label_column_is_named_and_rows_may_be_empty_when_allowed(tmp_path):
    single = ["text,labels", "pizza,food", "goal,sports"]
    line = _refused(tmp_path, single, single, "--label-separator", "|", fmt="csv")
    assert "train.csv: every row of column 'labels' holds exactly one label" in line
    from input_pipeline.finetuning import read_multilabel_table

    path = tmp_path / "rows.csv"
    path.write_text("text,labels\npizza,food|music\nnothing,\n")
    read = read_multilabel_table(str(path), "text", label_column="labels", label_names=["food", "music"],
                                 separator="|", allow_empty=True)
    assert [list(e.label) for e in read.examples] == [[1, 1], [0, 0]]
    path.write_text("text,food,music\npizza,1,0\nsong,0,yes\n")
    with pytest.raises(ValueError, match=r"rows.csv:3: label column\(s\) \['music'\] must hold 0 or 1"):
        read_multilabel_table(str(path), "text", label_names=["food", "music"], label_columns=["food", "music"])


@pytest.mark.slow
def test_predict_refuses_a_threshold_outside_zero_and_one():
    out, _ = multilabel_fixtures.finetuned()
    done = run_cli("predict", "--model", out, "--threshold", "0", input="pizza\n", expect_rc=2)
    assert done.stderr.strip().splitlines() == ["albert-tf predict: error: --threshold must be in (0, 1), exclusive. "
                                                "Received: 0.0"]
