import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.models.pretrainer import pretraining_losses
from input_pipeline import features
from helpers import (
    assert_keras_archive_round_trip,
    assert_pretrained_round_trip,
    pretraining_batch,
    tiny_config,
)


def make_pretrainer(**overrides):
    return AlbertPretrainer(AlbertBackbone(tiny_config(**overrides)))


def test_output_shapes_and_tied_decoder():
    model = make_pretrainer()
    inputs, _ = pretraining_batch(model.config, batch=2, predictions=5)
    outputs = model(inputs)
    assert tuple(outputs["mlm_logits"].shape) == (2, 5, model.config.vocab_size)
    assert tuple(outputs["sop_logits"].shape) == (2, 2)
    # The decoder is the embedding table itself, not a copy.
    assert model.mlm_head.word_embeddings is model.backbone.word_embeddings
    table_ids = {id(v) for v in model.weights if v.shape == (model.config.vocab_size, 16)}
    assert len(table_ids) == 1


def test_mlm_logits_use_the_embedding_table():
    model = make_pretrainer()
    inputs, _ = pretraining_batch(model.config, batch=1, predictions=2)
    table = model.backbone.word_embeddings.embeddings
    before = np.asarray(model(inputs)["mlm_logits"])
    table.assign(table.numpy() * 2.0)
    assert not np.allclose(before, model(inputs)["mlm_logits"])


def test_losses_match_a_numpy_reference():
    model = make_pretrainer()
    inputs, labels = pretraining_batch(model.config, batch=3, predictions=4)
    outputs = model(inputs)
    mlm, sop = pretraining_losses(labels, outputs)

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lp = log_softmax(np.asarray(outputs["mlm_logits"], "float64"))
    ce = -np.take_along_axis(lp, labels[features.MASK_IDS][..., None], -1)[..., 0]
    w = labels[features.MASK_WEIGHTS]
    np.testing.assert_allclose(float(mlm), (ce * w).sum() / (w.sum() + 1e-5), rtol=1e-5)
    lp = log_softmax(np.asarray(outputs["sop_logits"], "float64"))
    sop_ref = -lp[np.arange(3), labels[features.SENTENCE_ORDER_LABEL]].mean()
    np.testing.assert_allclose(float(sop), sop_ref, rtol=1e-5)


@pytest.mark.slow
def test_fit_lowers_the_pretraining_loss():
    keras.utils.set_random_seed(0)
    model = make_pretrainer()
    batches = [pretraining_batch(model.config, batch=4, seq=16, seed=s) for s in range(4)]
    dataset = tf.data.Dataset.from_tensor_slices(
        tf.nest.map_structure(lambda *xs: np.stack(xs), *batches)
    ).repeat()
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = model.fit(dataset, steps_per_epoch=20, epochs=3, verbose=0).history
    assert set(history) >= {"loss", "mlm_loss", "sop_loss", "mlm_accuracy", "sop_accuracy"}
    assert history["loss"][-1] < 0.7 * history["loss"][0]
    results = model.evaluate(dataset, steps=4, verbose=0, return_dict=True)
    assert results["mlm_accuracy"] > 0.2


def test_labels_are_required():
    model = make_pretrainer()
    inputs, labels = pretraining_batch(model.config)
    with pytest.raises(ValueError, match="needs labels"):
        model.compute_loss(inputs, {"mask_ids": labels["mask_ids"]}, model(inputs))


def test_save_and_reload(tmp_path):
    model = make_pretrainer(num_hidden_groups=2, inner_group_num=2)
    inputs, _ = pretraining_batch(model.config)
    loaded = assert_keras_archive_round_trip(model, inputs, tmp_path)
    assert isinstance(loaded.backbone, AlbertBackbone)
    assert_pretrained_round_trip(model, inputs, tmp_path)
    assert type(AlbertBackbone.from_pretrained(str(tmp_path / "pretrained"))) is AlbertBackbone


def test_load_pretrained_rejects_mismatched_weights(tmp_path):
    from albert_tf import load_pretrained

    small = make_pretrainer()
    small.save_pretrained(str(tmp_path / "a"))
    make_pretrainer(hidden_size=48).save_pretrained(str(tmp_path / "b"))
    # Weights of one model under the config of another.
    (tmp_path / "a" / "model.weights.h5").write_bytes((tmp_path / "b" / "model.weights.h5").read_bytes())
    with pytest.raises(ValueError, match="do not match"):
        load_pretrained(str(tmp_path / "a"))
    with pytest.raises(ValueError, match="nothing: no such directory"):
        load_pretrained(str(tmp_path / "nothing"))
