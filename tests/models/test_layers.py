"""Every layer of albert_tf.layers through the shared layer checks (`helpers.run_layer_test`)."""

import keras
import numpy as np

from albert_tf.layers import (
    AlbertEmbedding, FeedForward, MaskedLMHead, SelfAttention, SentenceOrderHead, TransformerBlock,
)
from helpers import run_layer_test

BATCH, SEQ, H, E, V = 2, 6, 16, 8, 30
rng = np.random.default_rng(0)
hidden = rng.normal(size=(BATCH, SEQ, H)).astype("float32")
bias = np.zeros((BATCH, 1, 1, SEQ), "float32")
bias[1, ..., -2:] = -10000.0  # padding in row 1
ids = rng.integers(0, V, (BATCH, SEQ)).astype("int32")
segments = (np.arange(SEQ) >= SEQ // 2).astype("int32")[None].repeat(BATCH, 0)
ATTENTION = dict(hidden_size=H, num_heads=4, initializer_range=0.02, layer_norm_eps=1e-12, dropout=0.1,
                 attention_dropout=0.1)
FFN = dict(hidden_size=H, intermediate_size=32, activation="gelu_new", initializer_range=0.02,
           layer_norm_eps=1e-12, dropout=0.1)


def test_embedding():
    kwargs = dict(vocab_size=V, embedding_size=E, max_position_embeddings=16, type_vocab_size=2,
                  initializer_range=0.02, layer_norm_eps=1e-12, dropout=0.1)
    run_layer_test(AlbertEmbedding, kwargs, (ids, segments), (BATCH, SEQ, E))


def test_self_attention():
    run_layer_test(SelfAttention, ATTENTION, (hidden, bias), (BATCH, SEQ, H))


def test_feed_forward():
    run_layer_test(FeedForward, FFN, (hidden,), (BATCH, SEQ, H))


def test_transformer_block():
    def sublayers(dtype=None):
        return dict(attention=SelfAttention(**ATTENTION, dtype=dtype), feed_forward=FeedForward(**FFN, dtype=dtype))

    run_layer_test(TransformerBlock, sublayers(), (hidden, bias), (BATCH, SEQ, H),
                   mixed_init_kwargs=sublayers("mixed_bfloat16"))


def test_masked_lm_head():
    embeddings = keras.layers.Embedding(V, E)
    embeddings.build()
    positions = np.array([[1, 2, 0], [3, 0, 0]], "int32")
    kwargs = dict(activation="gelu_new", initializer_range=0.02, layer_norm_eps=1e-12)
    run_layer_test(MaskedLMHead, kwargs, (rng.normal(size=(BATCH, SEQ, E)).astype("float32"), positions),
                   (BATCH, 3, V), shared_kwargs={"word_embeddings": embeddings}, mixed_output_dtype="float32")


def test_sentence_order_head():
    run_layer_test(SentenceOrderHead, dict(initializer_range=0.02), (hidden[:, 0],), (BATCH, 2),
                   mixed_output_dtype="float32")
