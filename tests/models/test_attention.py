"""The fused-QKV attention (one transpose for the heads) computes what the per-head transpose formulation did."""

import keras
import numpy as np
import pytest

from albert_tf.layers import SelfAttention


def transpose_formulation(layer, x, bias):
    """The previous `SelfAttention.call`, in numpy: three projections, split heads, merge heads."""
    batch, seq, hidden = x.shape
    heads, size = layer.num_heads, layer.head_size

    def dense(d, t):
        return t @ d.kernel.numpy() + d.bias.numpy()

    def split(t):  # (batch, seq, H) -> (batch, heads, seq, head_size)
        return t.reshape(batch, seq, heads, size).transpose(0, 2, 1, 3)

    q, k, v = (split(dense(d, x)) for d in (layer.query, layer.key, layer.value))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    y = x + dense(layer.output_dense, context)
    mean, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    norm = layer.layer_norm
    return (y - mean) / np.sqrt(var + layer.layer_norm_eps) * norm.gamma.numpy() + norm.beta.numpy()


@pytest.mark.parametrize("hidden, heads", [(32, 4), (48, 3)])
def test_attention_equals_transpose_formulation_on_random_weights(hidden, heads):
    keras.utils.set_random_seed(3)
    layer = SelfAttention(hidden, heads)
    layer.build((2, 7, hidden))
    rng = np.random.default_rng(0)
    # Random (not initializer-sized) weights, so every term of the sum matters.
    for variable in layer.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    x = rng.normal(size=(2, 7, hidden)).astype("float32")
    bias = np.zeros((2, 1, 1, 7), "float32")
    bias[1, ..., 5:] = -10000.0
    expected = transpose_formulation(layer, x, bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x, bias)), expected, atol=2e-5, rtol=1e-4)

