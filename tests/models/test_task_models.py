import keras
import numpy as np
import pytest

from albert_tf import AlbertBackbone, AlbertConfig
from albert_tf.models import (
    AlbertClassifier, AlbertMultipleChoice, AlbertQuestionAnswerer, AlbertRegressor, AlbertTagger,
)
from albert_tf.models.question_answering import END_POSITIONS, START_POSITIONS
from input_pipeline import features
from input_pipeline.features import IGNORE_LABEL
from helpers import (
    assert_keras_archive_round_trip, assert_pretrained_round_trip, backbone_batch, tiny_config,
)

BATCH, SEQ, CHOICES = 4, 10, 3


def backbone():
    return AlbertBackbone(tiny_config(classifier_dropout=0.0))


def multiple_choice_batch(config):
    flat = backbone_batch(config, batch=BATCH * CHOICES, seq=SEQ)
    return {k: v.reshape(BATCH, CHOICES, SEQ) for k, v in flat.items()}


def labels_for(kind, inputs):
    rng = np.random.default_rng(1)
    if kind == "classifier":
        return rng.integers(0, 3, BATCH).astype("int32")
    if kind == "regressor":
        return rng.normal(size=BATCH).astype("float32")
    if kind == "tagger":
        y = rng.integers(0, 5, (BATCH, SEQ)).astype("int32")
        return np.where(inputs[features.PADDING_MASK] == 1, y, IGNORE_LABEL).astype("int32")
    if kind == "qa":
        return {START_POSITIONS: np.array([1, 2, 0, 3], "int32"),
                END_POSITIONS: np.array([2, 4, 0, 3], "int32")}
    return rng.integers(0, CHOICES, BATCH).astype("int32")


CASES = {
    "classifier": (lambda b: AlbertClassifier(b, 3, label_names=["neg", "neu", "pos"]),
                   {"logits": (BATCH, 3)}),
    "regressor": (lambda b: AlbertRegressor(b), {"predictions": (BATCH,)}),
    "tagger": (lambda b: AlbertTagger(b, 5), {"logits": (BATCH, SEQ, 5)}),
    "qa": (lambda b: AlbertQuestionAnswerer(b),
           {"start_logits": (BATCH, SEQ), "end_logits": (BATCH, SEQ)}),
    "multiple_choice": (lambda b: AlbertMultipleChoice(b), {"logits": (BATCH, CHOICES)}),
}


def make(kind):
    build, shapes = CASES[kind]
    model = build(backbone())
    inputs = (multiple_choice_batch(model.config) if kind == "multiple_choice"
              else backbone_batch(model.config, batch=BATCH, seq=SEQ))
    return model, inputs, shapes


@pytest.mark.parametrize("kind", sorted(CASES))
def test_output_shapes_and_contract(kind):
    model, inputs, shapes = make(kind)
    outputs = model(inputs)
    assert {k: tuple(v.shape) for k, v in outputs.items()} == shapes
    assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in outputs.values())
    assert isinstance(model.backbone, AlbertBackbone)
    assert "label_names" in model.get_config()


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(CASES))
def test_loss_falls_when_fitting(kind):
    model, inputs, _ = make(kind)
    y = labels_for(kind, inputs)
    model.compile(optimizer=keras.optimizers.Adam(5e-3))
    first = model.evaluate(inputs, y, verbose=0, return_dict=True)["loss"]
    model.fit(inputs, y, epochs=10, batch_size=BATCH, verbose=0)
    last = model.evaluate(inputs, y, verbose=0, return_dict=True)["loss"]
    assert last < 0.7 * first, (first, last)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_save_and_load(kind, tmp_path):
    model, inputs, _ = make(kind)
    assert_keras_archive_round_trip(model, inputs, tmp_path)
    loaded = assert_pretrained_round_trip(model, inputs, tmp_path)
    assert loaded.label_names == model.label_names
    # The directory of a task model also gives its backbone alone.
    assert isinstance(AlbertBackbone.from_pretrained(str(tmp_path / "pretrained")), AlbertBackbone)


def test_classifier_from_a_pretrained_backbone_directory(tmp_path):
    source = backbone()
    source.save_pretrained(str(tmp_path))
    model = AlbertClassifier(AlbertBackbone.from_pretrained(str(tmp_path)), 2)
    inputs = backbone_batch(source.config)
    np.testing.assert_allclose(
        model.backbone(inputs)["pooled_output"], source(inputs)["pooled_output"], atol=1e-6)


def test_tagger_ignores_unlabelled_pieces():
    model, inputs, _ = make("tagger")
    outputs = model(inputs)
    y = labels_for("tagger", inputs)
    changed = np.where(y == IGNORE_LABEL, IGNORE_LABEL, y)
    changed[:, 0] = IGNORE_LABEL  # dropping a labelled piece changes the loss ...
    assert float(model.task_loss(changed, outputs, x=inputs)) != float(model.task_loss(y, outputs, x=inputs))
    # ... while padding positions never count, whatever their label.
    noisy = np.where(inputs[features.PADDING_MASK] == 1, y, 3).astype("int32")
    np.testing.assert_allclose(model.task_loss(noisy, outputs, x=inputs), model.task_loss(y, outputs, x=inputs))


def test_question_answerer_masks_padding():
    model, inputs, _ = make("qa")
    outputs = model(inputs)
    padded = inputs[features.PADDING_MASK] == 0
    assert np.all(np.asarray(outputs["start_logits"])[padded] < -1000)


def test_multiple_choice_scores_each_choice_alone():
    model, inputs, _ = make("multiple_choice")
    logits = np.asarray(model(inputs)["logits"])
    swapped = {k: v[:, ::-1].copy() for k, v in inputs.items()}
    np.testing.assert_allclose(np.asarray(model(swapped)["logits"]), logits[:, ::-1], atol=1e-5)


@pytest.mark.parametrize("bad, message", [
    (dict(num_classes=0), "num_classes"),
    (dict(num_classes=2, label_names=["a"]), "one name per class"),
    (dict(num_classes=2, label_names=["a", "a"]), "distinct"),
])
def test_bad_arguments_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        AlbertClassifier(backbone(), **bad)
    with pytest.raises(ValueError, match="no `label_names`"):
        AlbertQuestionAnswerer(backbone(), label_names=["x"])


@pytest.mark.parametrize("cls, args", [(AlbertClassifier, (3,)), (AlbertRegressor, ())])
def test_mean_pooling_reads_the_mean_of_real_tokens(cls, args):
    model = cls(backbone(), *args, pooling="mean")
    inputs = backbone_batch(model.config, batch=BATCH, seq=SEQ)
    inputs[features.PADDING_MASK][0, 3:] = 0  # a padded row: padding must not count
    sequence = np.asarray(model.backbone(inputs)["sequence_output"])
    mask = inputs[features.PADDING_MASK][..., None].astype("float32")
    mean = (sequence * mask).sum(1) / mask.sum(1)
    out = np.asarray(next(iter(model(inputs).values())))
    kernel, bias = (np.asarray(w) for w in model.head.weights)
    np.testing.assert_allclose(out.reshape(BATCH, -1), mean @ kernel + bias, atol=1e-5)
    # Changing a padding token's id changes nothing.
    changed = {k: v.copy() for k, v in inputs.items()}
    changed[features.TOKEN_IDS][0, 5] = (changed[features.TOKEN_IDS][0, 5] + 1) % model.config.vocab_size
    np.testing.assert_allclose(np.asarray(next(iter(model(changed).values()))), out, atol=1e-6)


def test_pooling_survives_save_and_load(tmp_path):
    model = AlbertClassifier(backbone(), 2, pooling="mean")
    assert model.get_config()["pooling"] == "mean"
    inputs = backbone_batch(model.config, batch=BATCH, seq=SEQ)
    loaded = assert_pretrained_round_trip(model, inputs, tmp_path)
    assert loaded.pooling == "mean"
    # The default "auto" resolves by width (mean below H 768) and the config keeps the result.
    assert backbone().config.hidden_size < 768
    assert AlbertClassifier(backbone(), 2).get_config()["pooling"] == "mean"
    assert AlbertRegressor(backbone()).pooling == "mean"
    assert AlbertClassifier(backbone(), 2, pooling="cls").get_config()["pooling"] == "cls"


def test_auto_pooling_reads_cls_from_base_width_up():
    from albert_tf.pooling import resolve_pooling

    assert [resolve_pooling("auto", h) for h in (128, 767, 768, 1024, 4096)] == ["mean"] * 2 + ["cls"] * 3
    assert resolve_pooling("cls", 128) == "cls" and resolve_pooling("mean", 4096) == "mean"
    wide = AlbertBackbone(AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=768, num_hidden_layers=1,
                                       num_attention_heads=12, intermediate_size=16, max_position_embeddings=16))
    assert AlbertClassifier(wide, 2).pooling == "cls"


def test_bad_pooling_is_named():
    with pytest.raises(ValueError, match="pooling='max'"):
        AlbertClassifier(backbone(), 2, pooling="max")
