"""Shared test base: tiny configs, batches, and the round-trip checks every model gets."""

import os
import subprocess
import sys

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


def run_layer_test(cls, init_kwargs, inputs, expected_output_shape, shared_kwargs=None,
                   mixed_output_dtype="bfloat16", mixed_init_kwargs=None):
    """The checks every layer gets (after keras-hub's `run_layer_test`).

    1. `get_config()` holds every constructor argument, and `from_config`
       rebuilds a layer whose config is the same (the round trip is idempotent)
       and which, given the same weights, computes the same outputs.
    2. The output has `expected_output_shape`, as `compute_output_shape` says.
    3. Under "mixed_bfloat16" the variables stay float32 and the output is
       `mixed_output_dtype` (heads return float32 logits).
    4. One training step changes every trainable weight.

    Args:
        cls: the layer class.
        init_kwargs: constructor arguments (keyword only).
        inputs: tuple of arrays, the layer's positional call arguments.
        expected_output_shape: tuple.
        shared_kwargs: constructor arguments that are layers shared with a
            model (e.g. the tied word embeddings), absent from the config by
            design and passed again to `from_config`.
        mixed_output_dtype: the output dtype under "mixed_bfloat16".
        mixed_init_kwargs: arguments that replace `init_kwargs` under
            "mixed_bfloat16" (sublayers built with that policy too).
    """
    import keras
    import tensorflow as tf

    shared_kwargs = shared_kwargs or {}
    layer = cls(**init_kwargs, **shared_kwargs)
    outputs = layer(*inputs)
    assert tuple(outputs.shape) == tuple(expected_output_shape), (outputs.shape, expected_output_shape)
    shapes = [tuple(np.shape(x)) for x in inputs]
    assert tuple(layer.compute_output_shape(*shapes)) == tuple(expected_output_shape)

    config = layer.get_config()
    missing = [name for name in init_kwargs if name not in config]
    assert not missing, f"get_config() lacks constructor arguments {missing}"
    for name, value in init_kwargs.items():
        if not isinstance(value, keras.layers.Layer):
            assert config[name] == value, (name, config[name], value)
    rebuilt = cls.from_config({**config, **shared_kwargs})
    assert rebuilt.get_config() == config
    rebuilt(*inputs)
    rebuilt.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(rebuilt(*inputs)), np.asarray(outputs), atol=1e-6)

    mixed = cls(**{**init_kwargs, **(mixed_init_kwargs or {}), "dtype": "mixed_bfloat16"}, **shared_kwargs)
    mixed_outputs = mixed(*inputs)
    assert keras.backend.standardize_dtype(mixed_outputs.dtype) == mixed_output_dtype, mixed_outputs.dtype
    own_variables = [v for v in mixed.weights if not any(v is w for s in shared_kwargs.values() for w in s.weights)]
    assert own_variables and all(v.dtype == "float32" for v in own_variables), [v.dtype for v in own_variables]

    before = [np.array(v.numpy()) for v in layer.trainable_variables]
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    # A random linear loss: the mean square of a LayerNorm output is constant,
    # so it would give the weights before the norm no gradient.
    direction = np.random.default_rng(0).normal(size=expected_output_shape).astype("float32")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(*inputs, training=True), tf.float32) * direction)
    optimizer.apply(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables)
    unchanged = [v.path for v, old in zip(layer.trainable_variables, before) if np.array_equal(v.numpy(), old)]
    assert layer.trainable_variables and not unchanged, f"a training step left {unchanged} unchanged"


# What every script run by `run_on_jax` starts with: `model` and `inputs` loaded on JAX.
JAX_PRELUDE = """
import sys, numpy as np
import albert_tf, keras
assert keras.backend.backend() == "jax", keras.backend.backend()
model = albert_tf.load_pretrained(sys.argv[1])
inputs = dict(np.load(sys.argv[2]))
"""


def run_on_jax(model, inputs, directory, script):
    """Saves `model` and `inputs`, reloads them in a fresh process on the JAX backend, runs `script`.

    `script` continues `JAX_PRELUDE` and must `np.savez(sys.argv[3], ...)`; the
    arrays it saves are returned as a dict.
    """
    model.save_pretrained(str(directory / "model"))
    np.savez(directory / "inputs.npz", **inputs)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    subprocess.run(
        [sys.executable, "-c", JAX_PRELUDE + script, str(directory / "model"), str(directory / "inputs.npz"),
         str(directory / "out.npz")],
        check=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return dict(np.load(directory / "out.npz"))
