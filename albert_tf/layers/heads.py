"""Pretraining heads: masked-LM (tied to the word embeddings) and sentence order."""

import keras
from keras import ops

from albert_tf.layers.common import dense, get_activation, layer_norm, truncated_normal


@keras.saving.register_keras_serializable(package="albert_tf")
class MaskedLMHead(keras.layers.Layer):
    """Predicts the original tokens at masked positions.

    gather -> dense H->E + activation -> LayerNorm(E) -> x · word_embeddingsᵀ + bias.
    The decoder matrix is the word embedding table itself (tied), so the head
    adds only H·E + E + 2E + V parameters.

    Args:
        word_embeddings: the backbone's `keras.layers.Embedding` (V, E).
        activation: a `hidden_act` name.
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_eps: LayerNorm epsilon.

    Call arguments:
        sequence_output: float tensor (batch, seq, H).
        mask_positions: int tensor (batch, P).

    Returns:
        Float32 logits (batch, P, V).
    """

    def __init__(
        self, word_embeddings, *, activation="gelu_new", initializer_range=0.02,
        layer_norm_eps=1e-12, **kwargs,
    ):
        super().__init__(**kwargs)
        self.word_embeddings = word_embeddings
        self.activation = activation
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        vocab_size, embedding_size = word_embeddings.input_dim, word_embeddings.output_dim
        self.transform = dense(
            units=embedding_size, stddev=initializer_range, name="transform",
            activation=get_activation(activation), dtype=self.dtype_policy,
        )
        self.layer_norm = layer_norm(epsilon=layer_norm_eps, name="layer_norm", dtype=self.dtype_policy)
        self.output_bias = self.add_weight(
            shape=(vocab_size,), initializer="zeros", name="output_bias"
        )

    def build(self, sequence_output_shape, mask_positions_shape=None):
        self.transform.build(sequence_output_shape)
        self.layer_norm.build((None, None, self.word_embeddings.output_dim))
        self.built = True

    def call(self, sequence_output, mask_positions):
        # Gather (batch, P, H) from (batch, seq, H); positions are broadcast over H.
        index = ops.expand_dims(ops.cast(mask_positions, "int32"), -1)  # (batch, P, 1)
        x = ops.take_along_axis(sequence_output, index, axis=1)  # (batch, P, H)
        x = self.layer_norm(self.transform(x))  # (batch, P, E)
        table = ops.cast(self.word_embeddings.embeddings, x.dtype)  # (V, E)
        logits = ops.matmul(x, ops.transpose(table)) + ops.cast(self.output_bias, x.dtype)
        return ops.cast(logits, "float32")  # (batch, P, V); float32 for a stable softmax

    def compute_output_shape(self, sequence_output_shape, mask_positions_shape):
        return tuple(mask_positions_shape) + (self.word_embeddings.input_dim,)

    def get_config(self):
        # The embedding layer is shared with a backbone, so this head is rebuilt
        # by the model that owns both, never from its own config alone.
        config = super().get_config()
        config.update(
            activation=self.activation,
            initializer_range=self.initializer_range,
            layer_norm_eps=self.layer_norm_eps,
        )
        return config


@keras.saving.register_keras_serializable(package="albert_tf")
class SentenceOrderHead(keras.layers.Layer):
    """Two logits from the pooled output: in order (0) or swapped (1).

    No dropout here, as in the original `get_sentence_order_output`.

    Call arguments:
        pooled_output: float tensor (batch, H).

    Returns:
        Float32 logits (batch, 2).
    """

    def __init__(self, *, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2, kernel_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="dense"
        )

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.built = True

    def call(self, pooled_output):
        return ops.cast(self.dense(pooled_output), "float32")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (2,)

    def get_config(self):
        config = super().get_config()
        config.update(initializer_range=self.initializer_range)
        return config
