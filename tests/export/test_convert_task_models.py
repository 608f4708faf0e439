"""`convert --to hf` of fine-tuned models: sentence heads pooled on [CLS] load in transformers; the rest is refused."""

import json

import numpy as np
import pytest
import torch
import transformers

from albert_tf import AlbertBackbone
from albert_tf.models import AlbertClassifier, AlbertRegressor, AlbertTagger
import export_fixtures
from cli_helpers import run_cli
from helpers import backbone_batch, max_abs_diff, tiny_config


def _convert(model, tmp_path, expect_rc=0):
    model.save_pretrained(tmp_path / "run")
    return run_cli("convert", "--to", "hf", "--model", tmp_path / "run", "--out", tmp_path / "hf", expect_rc=expect_rc)


def _transformers_logits(hf_dir, packed):
    hf = transformers.AlbertForSequenceClassification.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor(packed["token_ids"], dtype=torch.long),
                    token_type_ids=torch.tensor(packed["segment_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(packed["padding_mask"], dtype=torch.long)).logits
    return hf.config, logits.numpy()


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_a_cls_pooled_head_converts_to_a_sequence_classifier_with_the_same_logits(kind, tmp_path):
    backbone = AlbertBackbone(tiny_config())
    if kind == "classifier":
        model = AlbertClassifier(backbone, 3, label_names=["bad", "fine", "good"], pooling="cls", dropout=0.2)
    else:
        model = AlbertRegressor(backbone, label_names=["score"], pooling="cls")
    packed = backbone_batch(backbone.config)
    export_fixtures.spread_apart(model, packed)
    outputs = model(packed)
    expected = np.asarray(outputs["logits"] if kind == "classifier" else outputs["predictions"][:, None])

    done = _convert(model, tmp_path)
    assert "Wrote HF AlbertForSequenceClassification" in done.stdout
    config, logits = _transformers_logits(tmp_path / "hf", packed)
    if kind == "classifier":
        assert config.problem_type == "single_label_classification" and config.num_labels == 3
        assert config.id2label == {0: "bad", 1: "fine", 2: "good"} and config.classifier_dropout_prob == 0.2
    else:
        assert config.problem_type == "regression" and config.num_labels == 1
        assert config.id2label == {0: "score"}
    assert "label_thresholds" not in json.loads((tmp_path / "hf" / "config.json").read_text())
    assert expected.std() > 0.5  # spread: a difference in the head could not hide in near-zero logits
    # PyTorch's float32 kernels against TensorFlow's: the converters' HF parity bound (docs/architecture.md).
    assert logits.shape == expected.shape and max_abs_diff(logits, expected) <= 1e-4


@pytest.mark.parametrize("kind", ["mean-pooled classifier", "tagger"])
def test_other_task_models_are_refused_in_one_line(kind, tmp_path):
    backbone = AlbertBackbone(tiny_config())
    if kind == "tagger":
        model, words = AlbertTagger(backbone, 3), "The model is an AlbertTagger: convert --to hf takes a backbone"
    else:
        model, words = AlbertClassifier(backbone, 2, pooling="mean"), "Fine-tune with --pooling cls"
    refused = _convert(model, tmp_path, expect_rc=2)
    assert len(refused.stderr.strip().splitlines()) == 1 and words in refused.stderr, refused.stderr
    assert "--pooling cls" in refused.stderr
    assert not (tmp_path / "hf").exists()
