"""Shared test base: tiny configs, batches, and the round-trip checks every model gets."""

import numpy as np

from albert_tf.config import AlbertConfig
from input_pipeline import features

TINY = dict(
    vocab_size=120,
    embedding_size=16,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)


def tiny_config(**overrides):
    return AlbertConfig(**{**TINY, **overrides})


def backbone_batch(config, batch=3, seq=12, seed=0, pad=True):
    """Random token ids with a second segment and, if `pad`, padding in all but row 0."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, config.vocab_size, (batch, seq)).astype("int32")
    segment_ids = np.zeros((batch, seq), "int32")
    segment_ids[:, seq // 2 :] = 1
    padding_mask = np.ones((batch, seq), "int32")
    if pad:
        for row in range(1, batch):
            padding_mask[row, seq - 2 * row :] = 0
    token_ids *= padding_mask
    segment_ids *= padding_mask
    return {
        features.TOKEN_IDS: token_ids,
        features.SEGMENT_IDS: segment_ids,
        features.PADDING_MASK: padding_mask,
    }


def pretraining_batch(config, batch=3, seq=12, predictions=4, seed=0):
    """(inputs, labels) as the input pipeline yields them; the last prediction slot is padding."""
    rng = np.random.default_rng(seed + 1)
    inputs = backbone_batch(config, batch, seq, seed)
    inputs[features.MASK_POSITIONS] = rng.integers(1, seq - 2 * batch, (batch, predictions)).astype(
        "int32"
    )
    weights = np.ones((batch, predictions), "float32")
    weights[:, -1] = 0.0
    labels = {
        features.MASK_IDS: rng.integers(5, config.vocab_size, (batch, predictions)).astype("int32")
        * weights.astype("int32"),
        features.MASK_WEIGHTS: weights,
        features.SENTENCE_ORDER_LABEL: rng.integers(0, 2, (batch,)).astype("int32"),
    }
    inputs[features.MASK_POSITIONS] *= weights.astype("int32")
    return inputs, labels


def max_abs_diff(a, b):
    """Max |a - b| over matching keys of two output dicts (or two arrays)."""
    if isinstance(a, dict):
        return max(max_abs_diff(a[k], b[k]) for k in a)
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def assert_same_outputs(model_a, model_b, inputs, atol=0.0):
    diff = max_abs_diff(model_a(inputs), model_b(inputs))
    assert diff <= atol, f"outputs differ by {diff} (allowed {atol})"


def assert_keras_archive_round_trip(model, inputs, tmp_path):
    """`.keras` save -> load gives the same class, count and outputs."""
    import keras

    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert loaded.count_params() == model.count_params()
    assert_same_outputs(model, loaded, inputs)
    return loaded


def assert_pretrained_round_trip(model, inputs, tmp_path):
    """`save_pretrained` -> `load_pretrained` gives the same class and outputs."""
    from albert_tf import load_pretrained

    directory = str(tmp_path / "pretrained")
    model.save_pretrained(directory)
    loaded = load_pretrained(directory)
    assert type(loaded) is type(model)
    assert_same_outputs(model, loaded, inputs)
    return loaded
