"""The transformer block ALBERT shares across layers: attention, then FFN."""

import keras
from keras import ops

from albert_tf.layers.common import dense, get_activation, layer_norm
from albert_tf.layers.graph_forms import normalize


@keras.saving.register_keras_serializable(package="albert_tf")
class FeedForward(keras.layers.Layer):
    """`LayerNorm(x + dropout(W2 · act(W1 x)))`, post-LayerNorm.

    Args:
        hidden_size: H.
        intermediate_size: width of the inner layer.
        activation: a `hidden_act` name (see `AlbertConfig`).
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_eps: LayerNorm epsilon.
        dropout: dropout on the output.

    Call arguments:
        x: float tensor (batch, seq, H).

    Returns:
        Float tensor (batch, seq, H).
    """

    def __init__(
        self,
        hidden_size,
        intermediate_size,
        *,
        activation="gelu_new",
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dropout_rate = dropout
        self.intermediate = dense(
            units=intermediate_size, stddev=initializer_range, name="intermediate",
            activation=get_activation(activation), dtype=self.dtype_policy,
        )
        self.output_dense = dense(
            units=hidden_size, stddev=initializer_range, name="output_dense", dtype=self.dtype_policy
        )
        self.layer_norm = layer_norm(epsilon=layer_norm_eps, name="layer_norm", dtype=self.dtype_policy)
        self.dropout = keras.layers.Dropout(rate=dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.layer_norm.build(input_shape)
        self.built = True

    def call(self, x, training=None):
        # Both matmuls on (batch * seq, H) rows: TensorFlow's oneDNN graph rewrite
        # fuses a 2-D matmul with its bias and GELU into one op, which it cannot
        # do through the reshapes of Keras' 3-D matmul (a tensordot).
        rows = ops.reshape(x, (-1, self.hidden_size))  # (batch * seq, H)
        y = self.dropout(self.output_dense(self.intermediate(rows)), training=training)
        return ops.reshape(normalize(self.layer_norm, rows + y), ops.shape(x))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            activation=self.activation,
            initializer_range=self.initializer_range,
            layer_norm_eps=self.layer_norm_eps,
            dropout=self.dropout_rate,
        )
        return config


@keras.saving.register_keras_serializable(package="albert_tf")
class TransformerBlock(keras.layers.Layer):
    """One encoder layer: `FeedForward(SelfAttention(x))`.

    The two sublayers are passed in, so a backbone can give several blocks
    the same attention (or the same FFN) object: that is how the paper's
    attention-only and FFN-only sharing are built. Under full sharing the
    backbone simply calls one block many times.

    Args:
        attention: a `SelfAttention` layer.
        feed_forward: a `FeedForward` layer.
        remat: keep only the block's input for the backward pass and
            recompute its activations there (`keras.remat`): about one more
            forward pass of compute for activation memory that no longer
            grows with the number of layers the block is applied to.

    Call arguments:
        x: float tensor (batch, seq, H).
        attention_bias: float tensor (batch, 1, 1, seq).

    Returns:
        Float tensor (batch, seq, H).
    """

    def __init__(self, *, attention, feed_forward, remat=False, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(remat, bool):
            raise ValueError(f"`remat` must be True or False. Received: remat={remat!r}")
        self.attention = attention
        self.feed_forward = feed_forward
        self.remat = remat

    def build(self, x_shape, attention_bias_shape=None):
        if not self.attention.built:
            self.attention.build(x_shape)
        if not self.feed_forward.built:
            self.feed_forward.build(x_shape)
        self.built = True

    def call(self, x, attention_bias, training=None):
        def block(x, attention_bias):
            return self.feed_forward(self.attention(x, attention_bias, training=training), training=training)

        if self.remat:
            return keras.remat(block)(x, attention_bias)
        return block(x, attention_bias)

    def compute_output_shape(self, x_shape, attention_bias_shape=None):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            attention=keras.saving.serialize_keras_object(self.attention),
            feed_forward=keras.saving.serialize_keras_object(self.feed_forward),
            remat=self.remat,
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["attention"] = keras.saving.deserialize_keras_object(config["attention"])
        config["feed_forward"] = keras.saving.deserialize_keras_object(config["feed_forward"])
        return cls(**config)
