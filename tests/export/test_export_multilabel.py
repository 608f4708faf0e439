"""A multilabel model's exports answer as `predict` does: per-label sigmoid scores and the labels over threshold."""

import json
import os

import numpy as np
import pytest

import export_fixtures
import multilabel_fixtures
from cli_helpers import run_cli
from helpers import max_abs_diff

TEXTS = ["pizza and cheese today", "a song on the piano", "football goal with bread", "we saw tennis and drums",
         "the soup", "drums"]


def _random_model(thresholds=(0.01, 0.5, 0.99)):
    """A random-init multilabel model with the export tests' tokenizer, its head spread so scores differ."""
    from albert_tf import AlbertBackbone
    from albert_tf.export import pack_texts
    from albert_tf.models import AlbertMultiLabelClassifier

    model = AlbertMultiLabelClassifier(AlbertBackbone(export_fixtures.config()), 3,
                                       label_names=multilabel_fixtures.LABELS, thresholds=list(thresholds))
    packed = pack_texts(export_fixtures.tokenizer(), TEXTS, max_length=export_fixtures.MAX_LENGTH)
    export_fixtures.spread_apart(model, packed)
    return model, packed


def _sigmoid(z):
    return 1 / (1 + np.exp(-np.asarray(z, "float64")))


def test_the_signatures_post_processing_is_a_sigmoid_per_label_with_its_threshold():
    from albert_tf.export.signatures import describe_model, label_scores

    model, packed = _random_model()
    logits = np.asarray(model(packed)["logits"])
    outputs = label_scores(describe_model(model), logits)
    assert max_abs_diff(outputs["probabilities"], _sigmoid(logits)) <= 1e-6
    over = _sigmoid(logits) >= np.array([0.01, 0.5, 0.99])
    assert (np.asarray(outputs["predicted"]) == over).all()
    assert [[s.decode() for s in row if s] for row in np.asarray(outputs["labels"])] == [
        [n for n, o in zip(multilabel_fixtures.LABELS, row) if o] for row in over]


@pytest.mark.slow
def test_saved_model_signatures_return_sigmoid_scores_and_the_labels_over_threshold(tmp_path):
    from albert_tf.export import export_saved_model
    from albert_tf.utils.layout import EXPORT_METADATA_FILE
    from albert_tf.export.serving import ServingModel
    from albert_tf.export.batching_parameters import BatchingParameters

    model, packed = _random_model()
    expected = _sigmoid(model(packed)["logits"])
    assert expected.min() < 0.3 and expected.max() > 0.7  # not all near 0.5: a softmax would differ
    export_saved_model(model, str(tmp_path), tokenizer=export_fixtures.tokenizer(),
                       max_length=export_fixtures.MAX_LENGTH)
    metadata = json.loads((tmp_path / "1" / EXPORT_METADATA_FILE).read_text())
    assert metadata["thresholds"] == [0.01, 0.5, 0.99]
    serving = ServingModel(str(tmp_path), batching=BatchingParameters(max_batch_size=8, batch_timeout_micros=1000,
                                                                      num_batch_threads=1))
    try:
        assert serving.warmup_requests > 0
        text = serving.run("serve_text", {"text": np.array(TEXTS, object)})
        ids = serving.run("serving_default", packed)
        for outputs in (text, ids):
            assert max_abs_diff(outputs["probabilities"], expected) <= 1e-5
            over = expected >= np.array([0.01, 0.5, 0.99])
            assert (outputs["predicted"] == over).all()
            names = np.array(multilabel_fixtures.LABELS, object)
            assert [list(r) for r in outputs["labels"].astype(str)] == [
                [n if o else "" for n, o in zip(names, row)] for row in over]
        classify = serving.classify({"signature_name": "serve_examples", "examples": [{"text": t} for t in TEXTS]})
        assert [[label for label, _ in row] for row in classify["results"]] == [multilabel_fixtures.LABELS] * len(TEXTS)
        assert max_abs_diff(np.array([[s for _, s in row] for row in classify["results"]]), expected) <= 1e-5
    finally:
        serving.close()


def test_tflite_returns_the_sigmoid_scores_and_carries_the_labels(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    from albert_tf.export import export_tflite

    model, packed = _random_model()
    expected = _sigmoid(model(packed)["logits"])
    path = export_tflite(model, str(tmp_path / "tflite"), tokenizer=export_fixtures.tokenizer(),
                         max_length=export_fixtures.MAX_LENGTH)
    metadata = json.loads((tmp_path / "tflite" / "export.json").read_text())
    assert metadata["kind"] == "multilabel" and metadata["thresholds"] == [0.01, 0.5, 0.99]
    assert metadata["label_names"] == multilabel_fixtures.LABELS
    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    padded = {k: np.pad(v, [(0, 0), (0, export_fixtures.MAX_LENGTH - v.shape[1])]) for k, v in packed.items()}
    scores = np.concatenate([runner(**{k: v[i:i + 1] for k, v in padded.items()})["probabilities"]
                             for i in range(len(TEXTS))])
    assert max_abs_diff(scores, expected) <= 1e-5


@pytest.mark.slow
def test_every_export_of_a_finetuned_run_answers_as_predict(tmp_path):
    """predict -> SavedModel (serve_text, :classify) and TFLite through MediaPipe's TextClassifier."""
    from albert_tf.export.serving import ServingModel

    out, _ = multilabel_fixtures.finetuned()
    done = run_cli("predict", "--model", out, input="".join(t + "\n" for t in TEXTS))
    predicted = [json.loads(line) for line in done.stdout.splitlines()]
    names = list(predicted[0]["probabilities"])
    expected = np.array([[p["probabilities"][n] for n in names] for p in predicted])
    run_cli("export", "--model", out, "--format", "saved_model", "--out", tmp_path / "sm", "--max-length", "48")
    serving = ServingModel(str(tmp_path / "sm"))
    text = serving.run("serve_text", {"text": np.array(TEXTS, object)})
    assert max_abs_diff(text["probabilities"], expected) <= 1e-5
    assert [[s for s in row.astype(str) if s] for row in text["labels"]] == [p["labels"] for p in predicted]
    classify = serving.classify({"signature_name": "serve_examples", "examples": [{"text": t} for t in TEXTS]})
    assert max_abs_diff(np.array([[s for _, s in row] for row in classify["results"]]), expected) <= 1e-5
    run_cli("export", "--model", out, "--format", "tflite", "--out", tmp_path / "tflite", "--max-length", "48")
    heads = export_fixtures.run_mediapipe(str(tmp_path / "tflite" / "model.tflite"), TEXTS)
    mediapipe = np.array([[heads[i][0]["scores"][str(j)][1] for j in range(len(names))] for i in range(len(TEXTS))])
    assert [heads[0][0]["scores"][str(j)][0] for j in range(len(names))] == names
    assert max_abs_diff(mediapipe, expected) <= 1e-4


def _transformers_probabilities(hf_dir, packed):
    import torch
    import transformers

    hf = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    assert type(hf).__name__ == "AlbertForSequenceClassification"
    assert hf.config.problem_type == "multi_label_classification"
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor(packed["token_ids"], dtype=torch.long),
                    token_type_ids=torch.tensor(packed["segment_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(packed["padding_mask"], dtype=torch.long)).logits
    return hf, torch.sigmoid(logits).numpy()


def test_the_hf_config_and_tensors_are_a_multi_label_sequence_classifiers():
    from albert_tf import AlbertBackbone
    from albert_tf.convert.hf import hf_config, hf_tensors
    from albert_tf.models import AlbertMultiLabelClassifier

    model = AlbertMultiLabelClassifier(AlbertBackbone(export_fixtures.config()), 3, pooling="cls",
                                       label_names=multilabel_fixtures.LABELS)
    config, tensors = hf_config(model), hf_tensors(model)
    assert config["architectures"] == ["AlbertForSequenceClassification"]
    assert config["problem_type"] == "multi_label_classification"
    assert config["id2label"] == {"0": "food", "1": "music", "2": "sports"}
    assert tensors["classifier.weight"].shape == (3, export_fixtures.config().hidden_size)
    assert all(name.startswith("albert.") for name in tensors if not name.startswith("classifier."))


@pytest.mark.slow
def test_to_hf_writes_a_multi_label_sequence_classifier_that_transformers_loads(tmp_path):
    from albert_tf.convert import to_hf

    model, packed = _random_model()
    with pytest.raises(ValueError, match="--pooling cls"):  # the tiny model pools the mean token by default
        to_hf(model, tmp_path / "refused")
    from albert_tf import AlbertBackbone
    from albert_tf.models import AlbertMultiLabelClassifier

    model = AlbertMultiLabelClassifier(AlbertBackbone(export_fixtures.config()), 3, pooling="cls",
                                       label_names=multilabel_fixtures.LABELS, thresholds=[0.2, 0.5, 0.8])
    export_fixtures.spread_apart(model, packed)
    to_hf(model, tmp_path / "hf")
    hf, probabilities = _transformers_probabilities(tmp_path / "hf", packed)
    assert hf.config.id2label == dict(enumerate(multilabel_fixtures.LABELS))
    # PyTorch's float32 kernels against TensorFlow's: the converters' HF parity bound (docs/architecture.md).
    assert max_abs_diff(probabilities, _sigmoid(model(packed)["logits"])) <= 1e-4


@pytest.mark.slow
def test_convert_to_hf_of_a_finetuned_run_gives_predicts_scores_in_transformers(tmp_path):
    from albert_tf.export import pack_texts

    out, _ = multilabel_fixtures.finetuned()
    done = run_cli("predict", "--model", out, input="".join(t + "\n" for t in TEXTS))
    predicted = [json.loads(line) for line in done.stdout.splitlines()]
    run_cli("convert", "--to", "hf", "--model", out, "--out", tmp_path / "hf")
    hf, probabilities = _transformers_probabilities(tmp_path / "hf", pack_texts(export_fixtures.tokenizer(), TEXTS,
                                                                                  max_length=48))
    names = [hf.config.id2label[i] for i in range(len(hf.config.id2label))]
    expected = np.array([[p["probabilities"][n] for n in names] for p in predicted])
    assert max_abs_diff(probabilities, expected) <= 1e-4
