"""The fused-QKV attention, in either of its head layouts, computes what the per-head transpose formulation did."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

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


# float32 splits q, k, v before their transposes; a mixed policy transposes them together (the tolerance: bfloat16).
@pytest.mark.parametrize("hidden, heads, policy, atol", [
    (32, 4, "float32", 2e-5), (48, 3, "float32", 2e-5), (32, 4, "mixed_bfloat16", 0.1),
])
def test_attention_equals_transpose_formulation_on_random_weights(hidden, heads, policy, atol):
    keras.utils.set_random_seed(3)
    layer = SelfAttention(hidden, heads, dtype=policy)
    layer.build((2, 7, hidden))
    rng = np.random.default_rng(0)
    # Random (not initializer-sized) weights, so every term of the sum matters.
    for variable in layer.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    x = rng.normal(size=(2, 7, hidden)).astype("float32")
    bias = np.zeros((2, 1, 1, 7), "float32")
    bias[1, ..., 5:] = -10000.0
    expected = transpose_formulation(layer, x, bias)
    actual = keras.ops.convert_to_numpy(keras.ops.cast(layer(x, bias), "float32"))
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=1e-4)



def _transposed_elements(hlo):
    """Elements the transposes of an optimized HLO module write, in or out of fusions."""
    total = 0
    for dims in re.findall(r"= f32\[([\d,]*)\]\S* transpose\(", hlo):
        total += int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


def test_float32_attention_under_xla_transposes_each_element_once():
    """XLA copies a transpose into each of its consumers: one transpose of the fused (3, ...) q/k/v
    tensor became three, where transposing q, k and v apart writes each element once."""
    batch, seq, hidden = 2, 8, 32
    layer = SelfAttention(hidden, 4)
    layer.build((batch, seq, hidden))
    compiled = tf.function(lambda x, bias: layer(x, bias), jit_compile=True)
    args = (tf.zeros((batch, seq, hidden)), tf.zeros((batch, 1, 1, seq)))
    hlo = compiled.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    # q, k, v and the merged heads: one (batch, seq, H) transpose each.
    assert _transposed_elements(hlo) <= 4 * batch * seq * hidden
