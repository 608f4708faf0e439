"""Real-text fixtures for the input-pipeline tests, built once per session.

A small tokenizer (1,000 pieces) trained on 1,500 IMDB reviews keeps the tests
fast while still exercising real English text.
"""

import functools

import numpy as np
import pytest

from input_pipeline import AlbertTokenizer, PretrainingDataConfig, TokenizedCorpus, movie_reviews
from input_pipeline.tokenizer import NUM_SPECIAL_IDS

VOCAB_SIZE = 1000
# For `ordered_corpus`: no short targets, so every pair is a document's two sentences, swappable.
ORDERED_CONFIG = PretrainingDataConfig(max_seq_length=16, max_predictions_per_seq=2, short_seq_prob=0.0)


@functools.lru_cache(maxsize=None)
def imdb_documents(limit=1500):
    return tuple(tuple(d) for d in movie_reviews.imdb_documents("pretrain", limit=limit))


@functools.lru_cache(maxsize=None)
def small_tokenizer():
    sentences = (s for document in imdb_documents() for s in document)
    return AlbertTokenizer.train(sentences, VOCAB_SIZE, num_threads=2)


@functools.lru_cache(maxsize=None)
def long_document_corpus(reviews_per_document=10):
    """Reviews concatenated into long documents, so few instances end at a document end."""
    docs = imdb_documents()
    merged = [
        [s for d in docs[i : i + reviews_per_document] for s in d] for i in range(0, len(docs), reviews_per_document)
    ]
    return TokenizedCorpus.from_documents(merged, small_tokenizer())


@functools.lru_cache(maxsize=None)
def review_corpus():
    return TokenizedCorpus.from_documents(imdb_documents(), small_tokenizer())


@pytest.fixture
def tokenizer():
    return small_tokenizer()


def ordered_corpus(num_documents, sentence_length=3):
    """Documents of two sentences whose token ids rise through the corpus: the ids say where a segment came from.

    Document d is ids NUM_SPECIAL_IDS + 2 * sentence_length * d onwards, its first sentence before its second.
    """
    num_tokens = num_documents * 2 * sentence_length
    return TokenizedCorpus(
        token_ids=np.arange(NUM_SPECIAL_IDS, NUM_SPECIAL_IDS + num_tokens, dtype=np.int32),
        sentence_splits=np.arange(0, num_tokens + 1, sentence_length, dtype=np.int64),
        document_splits=np.arange(0, 2 * num_documents + 1, 2, dtype=np.int64),
        word_starts=np.ones(NUM_SPECIAL_IDS + num_tokens, bool),
    )
