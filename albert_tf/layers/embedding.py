"""ALBERT's factorized embedding: word, position and segment tables in E."""

import keras
from keras import ops

from albert_tf.layers.common import layer_norm, truncated_normal
from albert_tf.layers.graph_forms import normalize
from albert_tf.layers.lora import LoraEmbedding


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertEmbedding(keras.layers.Layer):
    """Sums word, position and segment embeddings of width E, then LayerNorm and dropout.

    The E -> H projection is not here: it belongs to the encoder
    (`embedding_hidden_mapping_in` in the original), where the backbone applies it.

    Args:
        vocab_size: V.
        embedding_size: E.
        max_position_embeddings: longest accepted sequence.
        type_vocab_size: number of segment ids.
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_eps: LayerNorm epsilon.
        dropout: dropout rate after the LayerNorm.

    Call arguments:
        token_ids: int tensor (batch, seq).
        segment_ids: int tensor (batch, seq).

    Returns:
        Float tensor (batch, seq, E).
    """

    def __init__(
        self,
        vocab_size,
        embedding_size,
        max_position_embeddings,
        type_vocab_size,
        *,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dropout_rate = dropout
        init = truncated_normal(initializer_range)
        # The MLM head reads `word_embeddings.embeddings` as its tied decoder.
        # A `LoraEmbedding` saves exactly what an Embedding saves unless LoRA is enabled.
        self.word_embeddings = LoraEmbedding(
            vocab_size, embedding_size, embeddings_initializer=init, dtype=self.dtype_policy, name="word_embeddings"
        )
        self.position_embeddings = keras.layers.Embedding(
            max_position_embeddings, embedding_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="position_embeddings",
        )
        self.token_type_embeddings = keras.layers.Embedding(
            type_vocab_size, embedding_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="token_type_embeddings",
        )
        self.layer_norm = layer_norm(epsilon=layer_norm_eps, name="layer_norm", dtype=self.dtype_policy)
        self.dropout = keras.layers.Dropout(rate=dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.word_embeddings.build()
        self.position_embeddings.build()
        self.token_type_embeddings.build()
        self.layer_norm.build((None, None, self.embedding_size))
        self.built = True

    def call(self, token_ids, segment_ids, training=None):
        seq_len = ops.shape(token_ids)[1]
        positions = ops.expand_dims(ops.arange(seq_len, dtype="int32"), 0)  # (1, seq)
        x = (
            self.word_embeddings(token_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(segment_ids)
        )  # (batch, seq, E)
        return self.dropout(normalize(self.layer_norm, x), training=training)

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return tuple(token_ids_shape) + (self.embedding_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            initializer_range=self.initializer_range,
            layer_norm_eps=self.layer_norm_eps,
            dropout=self.dropout_rate,
        )
        return config
