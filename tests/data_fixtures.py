"""Real-text fixtures for the input-pipeline tests, built once per session.

A small tokenizer (1,000 pieces) trained on 1,500 IMDB reviews keeps the tests
fast while still exercising real English text.
"""

import functools

import pytest

from input_pipeline import AlbertTokenizer, TokenizedCorpus, movie_reviews

VOCAB_SIZE = 1000


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
