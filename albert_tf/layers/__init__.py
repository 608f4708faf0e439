"""Keras layers of ALBERT."""

from albert_tf.layers.attention import SelfAttention
from albert_tf.layers.embedding import AlbertEmbedding
from albert_tf.layers.heads import MaskedLMHead, SentenceOrderHead
from albert_tf.layers.transformer_block import FeedForward, TransformerBlock
