"""LoRA on the shared attention projections (and the word embeddings): what trains, what is saved, what merging gives."""

import math

import keras
import numpy as np
import pytest

from albert_tf import AlbertBackbone, load_pretrained
from albert_tf.models import AlbertClassifier
from albert_tf.recipes import FinetuneConfig
from albert_tf.recipes.config import LORA_LEARNING_RATE_FACTOR, default_learning_rate
from helpers import assert_keras_archive_round_trip, assert_pretrained_round_trip, backbone_batch, max_abs_diff
from helpers import run_on_jax, tiny_config

RANK, CLASSES = 4, 3


def count(variables):
    return sum(math.prod(v.shape) for v in variables)


def lora_classifier(embedding_rank=0, **overrides):
    backbone = AlbertBackbone(tiny_config(classifier_dropout=0.0, **overrides))
    model = AlbertClassifier(backbone, CLASSES)
    backbone.enable_lora(RANK, embedding_rank=embedding_rank)
    return model


def randomize_factors(backbone, seed=0):
    """B starts at zero; give it (and A) values so that merging has something to fold."""
    rng = np.random.default_rng(seed)
    for v in backbone.trainable_weights:
        v.assign(rng.normal(scale=0.2, size=v.shape).astype("float32"))


@pytest.mark.parametrize("overrides, distinct_attention", [
    ({}, 1),  # full sharing: one set of factors for all 3 layers
    ({"num_hidden_groups": 3}, 3),
    ({"num_hidden_groups": 1, "inner_group_num": 2}, 2),
    ({"sharing": "attention"}, 1),
    ({"sharing": "ffn"}, 3),
    ({"sharing": "none"}, 3),
])
def test_trainable_count_is_the_formula(overrides, distinct_attention):
    model = lora_classifier(**overrides)
    h = model.backbone.config.hidden_size
    per_attention = 4 * RANK * (h + h)  # query, key, value, output: A (H, r) and B (r, H) each
    assert count(model.backbone.trainable_weights) == per_attention * distinct_attention
    head = h * CLASSES + CLASSES
    assert count(model.trainable_weights) == per_attention * distinct_attention + head
    # Nothing else of the backbone trains: not the kernels, biases, LayerNorms, embeddings or pooler.
    assert all("lora_kernel" in v.path for v in model.backbone.trainable_weights)


def test_embedding_rank_adds_the_tables_factors_to_the_count():
    model = lora_classifier(embedding_rank=2)
    c = model.backbone.config
    attention = 4 * RANK * (c.hidden_size + c.hidden_size)
    table = c.vocab_size * 2 + 2 * c.embedding_size  # A (V, r) and B (r, E)
    assert count(model.backbone.trainable_weights) == attention + table
    assert {v.path.rsplit("/", 1)[-1] for v in model.backbone.trainable_weights} == {
        "lora_kernel_a", "lora_kernel_b", "lora_embeddings_a", "lora_embeddings_b"}
    assert model.backbone.get_config()["lora_embedding_rank"] == 2
    # The table itself stays frozen; only its factors train.
    assert not model.backbone.word_embeddings._embeddings.trainable


def test_groups_get_their_own_factors():
    model = lora_classifier(num_hidden_groups=3)
    paths = [v.path for v in model.backbone.trainable_weights]
    for g in range(3):
        assert sum(f"group_{g}_inner_0_attention/" in p for p in paths) == 8, paths


def test_outputs_are_unchanged_right_after_enable_lora():
    backbone = AlbertBackbone(tiny_config())
    inputs = backbone_batch(backbone.config)
    before = backbone(inputs)
    backbone.enable_lora(RANK, lora_alpha=16)
    assert max_abs_diff(before, backbone(inputs)) == 0.0


@pytest.mark.slow
def test_training_changes_only_factors_and_head():
    model = lora_classifier()
    inputs = backbone_batch(model.backbone.config, batch=4)
    labels = np.array([0, 1, 2, 1], "int32")
    before = {v.path: np.array(v) for v in model.weights}
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.fit(inputs, labels, batch_size=4, epochs=3, verbose=0)
    changed = {v.path for v in model.weights if not np.array_equal(before[v.path], np.array(v))}
    trainable = {v.path for v in model.trainable_weights}
    assert changed == trainable, (changed ^ trainable)
    assert any("lora_kernel_b" in p for p in changed) and any(p.startswith("classifier/") for p in changed)


@pytest.mark.slow
@pytest.mark.parametrize("embedding_rank", [0, 2])
def test_merged_model_equals_the_unmerged_one(embedding_rank):
    model = lora_classifier(embedding_rank=embedding_rank, num_hidden_groups=3)
    inputs = backbone_batch(model.backbone.config)
    base = model.backbone(inputs)
    randomize_factors(model.backbone)
    unmerged, unmerged_logits = model.backbone(inputs), model(inputs)["logits"]
    assert max_abs_diff(base, unmerged) > 1e-2, "the factors must change the outputs for the test to mean anything"
    model.backbone.merge_lora()
    assert max_abs_diff(unmerged, model.backbone(inputs)) <= 1e-5
    assert max_abs_diff(unmerged_logits, model(inputs)["logits"]) <= 1e-5
    assert not any("lora" in v.path for v in model.weights)
    assert model.backbone.lora_rank is None and model.backbone.get_config()["lora_rank"] is None
    assert model.backbone.get_config()["lora_embedding_rank"] is None
    # A plain backbone again: every weight trains.
    assert count(model.backbone.trainable_weights) == model.backbone.count_params()


@pytest.mark.slow
def test_predict_after_merge_lora_runs_the_merged_model():
    model = lora_classifier()
    backbone = model.backbone
    inputs = backbone_batch(backbone.config)
    randomize_factors(backbone)
    model.predict(inputs, verbose=0)  # traces the predict functions with the factors
    backbone.predict(inputs, verbose=0)
    backbone.merge_lora()
    assert max_abs_diff(model.predict(inputs, verbose=0)["logits"], model(inputs)["logits"]) <= 1e-5
    assert max_abs_diff(backbone.predict(inputs, verbose=0), backbone(inputs)) <= 1e-5


@pytest.mark.slow
def test_evaluate_predict_and_fit_after_enable_lora_use_the_factors():
    model = AlbertClassifier(AlbertBackbone(tiny_config(classifier_dropout=0.0)), CLASSES)
    inputs = backbone_batch(model.backbone.config, batch=4)
    labels = np.array([0, 1, 2, 1], "int32")
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.predict(inputs, verbose=0)
    model.evaluate(inputs, labels, verbose=0)
    model.backbone.enable_lora(RANK)
    randomize_factors(model.backbone)
    logits = model(inputs)["logits"]
    assert max_abs_diff(model.predict(inputs, verbose=0)["logits"], logits) <= 1e-5
    loss = float(model.compute_loss(inputs, labels, model(inputs)))
    assert model.evaluate(inputs, labels, verbose=0, return_dict=True)["loss"] == pytest.approx(loss, abs=1e-5)
    frozen = {v.path: np.array(v) for v in model.non_trainable_weights}
    model.fit(inputs, labels, batch_size=4, epochs=2, verbose=0)
    assert all(np.array_equal(frozen[v.path], np.array(v)) for v in model.non_trainable_weights)
    assert max_abs_diff(model(inputs)["logits"], logits) > 1e-3


@pytest.mark.slow
def test_merge_uses_the_alpha_over_rank_scale():
    backbone = AlbertBackbone(tiny_config())
    backbone.enable_lora(RANK, lora_alpha=2 * RANK)
    query = backbone.attention_layers()[0].query
    randomize_factors(backbone)
    expected = np.array(query._kernel) + 2.0 * np.array(query.lora_kernel_a) @ np.array(query.lora_kernel_b)
    backbone.merge_lora()
    np.testing.assert_allclose(np.array(query.kernel), expected, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("embedding_rank", [0, 3])
def test_save_and_reload_keep_the_factors_exactly(tmp_path, embedding_rank):
    model = lora_classifier(embedding_rank=embedding_rank, num_hidden_groups=2)
    randomize_factors(model.backbone)
    inputs = backbone_batch(model.backbone.config)
    for loaded in (assert_pretrained_round_trip(model, inputs, tmp_path),
                   assert_keras_archive_round_trip(model, inputs, tmp_path)):
        assert loaded.backbone.lora_rank == RANK
        assert loaded.backbone.lora_embedding_rank == (embedding_rank or None)
        assert [v.path for v in loaded.trainable_weights] == [v.path for v in model.trainable_weights]
        for saved, reloaded in zip(model.weights, loaded.weights):
            np.testing.assert_array_equal(np.array(saved), np.array(reloaded))


def test_plain_checkpoints_keep_their_layout(tmp_path):
    """Without LoRA the projections save what a Keras Dense saves, so old directories load."""
    model = AlbertClassifier(AlbertBackbone(tiny_config()), CLASSES)
    model.save_pretrained(str(tmp_path / "plain"))
    import h5py

    with h5py.File(tmp_path / "plain" / "model.weights.h5") as f:
        names = []
        f.visit(names.append)
    query = [n for n in names if n.endswith("/query/vars/0") or n.endswith("/query/vars/2")]
    assert len(query) == 1 and query[0].endswith("vars/0"), query
    table = [n for n in names if "/word_embeddings/vars/" in n]
    assert len(table) == 1 and table[0].endswith("vars/0"), table
    assert load_pretrained(str(tmp_path / "plain")).backbone.lora_rank is None


@pytest.mark.parametrize("call, message", [
    (lambda b: b.enable_lora(0), "`rank` must be a positive integer"),
    (lambda b: b.enable_lora(2.0), "`rank` must be a positive integer"),
    (lambda b: b.enable_lora(33), "at most hidden_size (32)"),
    (lambda b: b.enable_lora(2, lora_alpha=-1), "`lora_alpha` must be a positive number"),
    (lambda b: (b.enable_lora(2), b.enable_lora(2)), "already enabled"),
    (lambda b: b.enable_lora(2, embedding_rank=-1), "`embedding_rank` must be a non-negative integer"),
    (lambda b: b.enable_lora(2, embedding_rank=True), "`embedding_rank` must be a non-negative integer"),
    (lambda b: b.enable_lora(2, embedding_rank=10_000), "at most embedding_size"),
    (lambda b: AlbertBackbone(b.config, lora_embedding_rank=2), "need a `lora_rank`"),
    (lambda b: b.merge_lora(), "no LoRA factors to merge"),
])
def test_bad_calls_are_clear_errors(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(AlbertBackbone(tiny_config()))


def test_finetune_config_lora_rank():
    config = tiny_config()
    assert FinetuneConfig(task="sst2").resolved(config).learning_rate == default_learning_rate(32)
    lora = FinetuneConfig(task="sst2", lora_rank=8).resolved(config)
    assert lora.learning_rate == pytest.approx(LORA_LEARNING_RATE_FACTOR * default_learning_rate(32))
    assert FinetuneConfig(task="sst2", lora_rank=8, learning_rate=1e-3).resolved(config).learning_rate == 1e-3
    with pytest.raises(ValueError, match="`lora_rank` must be a non-negative integer"):
        FinetuneConfig(task="sst2", lora_rank=-1)
    assert FinetuneConfig(task="sst2").lora_embedding_rank == 2
    with pytest.raises(ValueError, match="`lora_embedding_rank` must be a non-negative integer"):
        FinetuneConfig(task="sst2", lora_rank=8, lora_embedding_rank=-2)


def test_conversion_to_hf_writes_the_merged_weights(tmp_path):
    from albert_tf.convert.hf import from_hf, to_hf

    backbone = AlbertBackbone(tiny_config())
    backbone.enable_lora(RANK)
    randomize_factors(backbone)
    inputs = backbone_batch(backbone.config)
    to_hf(backbone, str(tmp_path / "hf"))
    assert max_abs_diff(backbone(inputs), from_hf(str(tmp_path / "hf"))(inputs)) <= 1e-6


JAX_SCRIPT = """
unmerged = np.asarray(model(inputs)["sequence_output"])
model.merge_lora()
np.savez(sys.argv[3], unmerged=unmerged, merged=np.asarray(model(inputs)["sequence_output"]))
"""


@pytest.mark.slow
def test_lora_model_loads_and_merges_on_jax(tmp_path):
    backbone = AlbertBackbone(tiny_config(num_hidden_groups=2))
    backbone.enable_lora(RANK)
    randomize_factors(backbone)
    inputs = backbone_batch(backbone.config)
    jax_out = run_on_jax(backbone, inputs, tmp_path, JAX_SCRIPT)
    expected = np.asarray(backbone(inputs)["sequence_output"])
    np.testing.assert_allclose(jax_out["unmerged"], expected, atol=1e-5)
    np.testing.assert_allclose(jax_out["merged"], expected, atol=1e-5)
