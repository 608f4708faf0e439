"""Small pieces shared by the layers: activations and initializers."""

import keras
from keras import ops

# What padding positions add to attention scores and span logits: -10000, as
# the original, rather than -inf, so a row with every key masked still gets a
# finite (uniform) softmax instead of NaN.
PADDING_BIAS = -10000.0


def padding_bias(padding_mask, dtype="float32"):
    """(batch, seq) 1/0 mask -> (batch, seq) additive bias: 0, or PADDING_BIAS where 0."""
    return (1.0 - ops.cast(padding_mask, dtype)) * PADDING_BIAS


def get_activation(name):
    """The activation function named as in `AlbertConfig.hidden_act`."""
    if name == "gelu_new":
        # The original ALBERT's "gelu": 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
        return lambda x: ops.gelu(x, approximate=True)
    if name == "gelu":
        return lambda x: ops.gelu(x, approximate=False)
    if name in ("swish", "silu"):
        return ops.silu
    if name in ("relu", "tanh"):
        return getattr(ops, name)
    raise ValueError(f"Unknown activation. Received: hidden_act={name!r}")


def truncated_normal(stddev):
    """The original's initializer: truncated normal with `initializer_range` stddev."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def dense(units, stddev, name, activation=None, dtype=None):
    return keras.layers.Dense(
        units, activation=activation, kernel_initializer=truncated_normal(stddev),
        dtype=dtype, name=name,
    )


def layer_norm(epsilon, name, dtype=None):
    # Keras computes LayerNormalization in float32 under mixed precision
    # (it upcasts half-precision inputs), which the variance needs.
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)
