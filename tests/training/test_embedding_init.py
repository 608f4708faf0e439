"""PPMI-SVD word vectors, checked against a dense transcription, and their use as the Trainer's start."""

import numpy as np
import pytest

from albert_tf.training import Trainer, initial_word_embeddings, ppmi_svd_vectors
from input_pipeline import TokenizedCorpus
from training_helpers import TINY_MODEL, array_dataset_fn, synthetic_examples, tiny_trainer_config

VOCAB = 12


def corpus_of(sentences, vocab_size=VOCAB):
    lengths = [len(s) for s in sentences]
    return TokenizedCorpus(
        token_ids=np.concatenate(sentences).astype(np.int32),
        sentence_splits=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        document_splits=np.array([0, len(sentences)], np.int64),
        word_starts=np.ones(vocab_size, bool),
    )


def random_sentences(seed=0, count=300):
    # Pieces 2-5 and 6-9 are two "topics" that never share a sentence; 10 and 11 never occur.
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 6, rng.integers(2, 9)) + 4 * (i % 2) for i in range(count)]


def dense_ppmi(sentences, window, smoothing):
    """PPMI written out pair by pair, independently of the sparse implementation."""
    counts = np.zeros((VOCAB, VOCAB))
    for sentence in sentences:
        for i in range(len(sentence)):
            for j in range(i + 1, min(i + window + 1, len(sentence))):
                counts[sentence[i], sentence[j]] += 1 / (j - i)
                counts[sentence[j], sentence[i]] += 1 / (j - i)
    piece = counts.sum(1)
    context = piece ** smoothing
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(counts * context.sum() / np.outer(piece, context))
    return np.where(np.isfinite(pmi) & (pmi > 0), pmi, 0.0)


def test_vectors_factor_the_ppmi_matrix_of_a_dense_transcription():
    sentences = random_sentences()
    vectors, counts = ppmi_svd_vectors(corpus_of(sentences), dim=4, window=3, context_smoothing=0.75)
    reference = dense_ppmi(sentences, window=3, smoothing=0.75)
    # vectors = U * sqrt(S): the squared column norms are the top singular values.
    top = np.linalg.svd(reference, compute_uv=False)[:4]
    np.testing.assert_allclose(np.sort(np.sum(vectors.astype(np.float64) ** 2, 0))[::-1], top, rtol=1e-4)
    np.testing.assert_allclose(counts, dense_ppmi_counts(sentences, 3))
    assert vectors.shape == (VOCAB, 4) and vectors.dtype == np.float32
    assert not vectors[[0, 1, 10, 11]].any(), "pieces that never occur get no vector"
    # Signs are fixed (each column's largest entry positive), so the start is reproducible.
    assert np.all(vectors[np.abs(vectors).argmax(axis=0), np.arange(4)] > 0)


def dense_ppmi_counts(sentences, window):
    counts = np.zeros(VOCAB)
    for sentence in sentences:
        for i in range(len(sentence)):
            for j in range(i + 1, min(i + window + 1, len(sentence))):
                counts[sentence[i]] += 1 / (j - i)
                counts[sentence[j]] += 1 / (j - i)
    return counts


def test_pieces_that_share_contexts_get_close_vectors():
    vectors, _ = ppmi_svd_vectors(corpus_of(random_sentences()), dim=2, window=5)
    unit = vectors[2:10] / np.linalg.norm(vectors[2:10], axis=1, keepdims=True)
    cosine = unit @ unit.T
    same_topic = np.mean([cosine[i, j] for i in range(8) for j in range(8) if i != j and i // 4 == j // 4])
    other_topic = np.mean([cosine[i, j] for i in range(8) for j in range(8) if i // 4 != j // 4])
    assert same_topic > 0.9 and other_topic < 0.1, (same_topic, other_topic)


def test_pairs_never_cross_a_sentence_boundary():
    # Two one-topic sentences: if pairs crossed the boundary, 5 and 6 would co-occur.
    _, counts = ppmi_svd_vectors(corpus_of([np.array([2, 3, 4, 5]), np.array([6, 7, 8, 9])]), dim=2, window=5)
    assert np.isclose(counts[5], 1 + 1 / 2 + 1 / 3) and np.isclose(counts[6], 1 + 1 / 2 + 1 / 3)


def test_bad_arguments_say_what_was_received():
    corpus = corpus_of(random_sentences())
    with pytest.raises(ValueError, match="Received: dim=12, vocab_size=12"):
        ppmi_svd_vectors(corpus, dim=12)
    with pytest.raises(ValueError, match="Received: window=0"):
        ppmi_svd_vectors(corpus, dim=2, window=0)
    with pytest.raises(ValueError, match="no two pieces in one sentence"):
        ppmi_svd_vectors(corpus_of([np.array([2]), np.array([3])]), dim=2)
    with pytest.raises(ValueError, match=r"Received: shape=\(11, 4\), vocab_size=12"):
        initial_word_embeddings(corpus, np.zeros((11, 4)))


def test_initial_table_keeps_the_random_rows_of_unseen_pieces_and_the_requested_scale():
    corpus = corpus_of(random_sentences())
    random_table = np.random.default_rng(1).normal(0, 0.02, (VOCAB, 4)).astype(np.float32)
    table = initial_word_embeddings(corpus, random_table, rms=0.05, window=3)
    np.testing.assert_array_equal(table[[0, 1, 10, 11]], random_table[[0, 1, 10, 11]])
    assert np.isclose(np.sqrt(np.mean(table[2:10] ** 2)), 0.05, rtol=1e-5)
    vectors, _ = ppmi_svd_vectors(corpus, 4, window=3)
    np.testing.assert_allclose(table[2:10] / table[2:10, :1], vectors[2:10] / vectors[2:10, :1], rtol=1e-4)


@pytest.mark.slow
def test_trainer_starts_from_the_given_table_and_does_not_reapply_it_on_resume(tmp_path):
    examples = synthetic_examples()
    table = np.random.default_rng(2).normal(0, 0.1, (TINY_MODEL.vocab_size, TINY_MODEL.embedding_size))
    calls = []

    def init(random_table):
        calls.append(random_table.shape)
        return table

    fresh = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=2, checkpoint_every=1), str(tmp_path),
                    array_dataset_fn(examples), word_embeddings_init=init, print_fn=lambda *_: None)
    np.testing.assert_allclose(fresh.runner.model.backbone.word_embeddings.embeddings.numpy(), table, rtol=1e-6)
    fresh.train()
    trained = fresh.runner.model.backbone.word_embeddings.embeddings.numpy()
    assert calls == [(TINY_MODEL.vocab_size, TINY_MODEL.embedding_size)]

    resumed = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=3, checkpoint_every=1), str(tmp_path),
                      array_dataset_fn(examples), word_embeddings_init=init, print_fn=lambda *_: None)
    assert len(calls) == 1, "a resumed run keeps its checkpoint's table"
    resumed.restore()
    np.testing.assert_array_equal(resumed.runner.model.backbone.word_embeddings.embeddings.numpy(), trained)

    with pytest.raises(ValueError, match=r"Received: shape=\(3, 3\), expected \(64, 8\)"):
        Trainer(TINY_MODEL, tiny_trainer_config(), str(tmp_path / "bad"), array_dataset_fn(examples),
                word_embeddings_init=lambda _: np.zeros((3, 3)), print_fn=lambda *_: None)
