"""Word embeddings from co-occurrence counts (PPMI + truncated SVD), to start pretraining from.

A few CPU minutes of masked-LM pretraining leave a small model near the
unigram plateau: it has seen "awful" as a target ~170 times and has not
learned what it means (docs/pretraining.md, "What a short run learns").
Counting which pieces occur near which is a single pass over the same text,
and the factorization of the positive pointwise mutual information (PPMI)
matrix gives vectors in which "awful" sits next to "terrible" and
"dreadful" (Levy, Goldberg and Dagan, 2015; the classic recipe: window 5,
1/distance weights, context counts smoothed by ** 0.75, vectors U * sqrt(S)).
The demo's 6.3 M pieces take ~5 s on 2 cores. ALBERT's factorized embedding
makes this cheap to use: the V x E table is exactly such a low-rank
factor, and E is small.

This is an initialization only: the embedding table keeps training with
the rest of the model, and the MLM head, which is tied to it, starts from
the same vectors.
"""

import time

import numpy as np
from albert_tf.utils.errors import UserError


_MAX_TOKENS = 20_000_000


def ppmi_svd_vectors(corpus, dim, window=5, context_smoothing=0.75, max_tokens=_MAX_TOKENS):
    """Word vectors of every piece from a tokenized corpus.

    Pairs of pieces up to `window` apart within a sentence are counted with
    weight 1 / distance, in both directions. PPMI(i, j) = max(0, log(p(i, j) /
    (p(i) p_c(j)))) with context probabilities p_c smoothed by
    `context_smoothing`; the vectors are U * sqrt(S) of its rank-`dim`
    truncated SVD.

    Args:
        corpus: an `input_pipeline.TokenizedCorpus`.
        dim: the vectors' size (the model's embedding size E).
        window: largest distance counted.
        context_smoothing: exponent applied to context counts.
        max_tokens: only the corpus' first `max_tokens` pieces are counted
            (the counts and their memory grow with the text; a few million
            pieces already give stable vectors for frequent pieces).

    Returns:
        (vectors, counts): float32 (V, dim) and float64 (V,) weighted
        co-occurrence counts; a piece with count 0 never occurred and its
        vector is 0.

    Raises:
        ValueError: `dim` not below the vocabulary size, `window` < 1, or a
            corpus with no pair of neighbouring pieces.
    """
    from scipy import sparse
    from scipy.sparse.linalg import svds

    vocab_size = corpus.vocab_size
    if not 0 < dim < vocab_size:
        raise UserError(f"`dim` must be between 1 and vocab_size - 1. Received: dim={dim}, vocab_size={vocab_size}")
    if window < 1:
        raise UserError(f"`window` must be at least 1. Received: window={window}")
    ids = np.asarray(corpus.token_ids[:max_tokens], np.int64)
    sentence_of = np.repeat(np.arange(len(corpus.sentence_splits) - 1), np.diff(corpus.sentence_splits))
    sentence_of = sentence_of[: len(ids)]

    # One distance at a time, summed as sparse matrices: the pairs of all
    # distances at once would take ~24 bytes x 2 x window x tokens.
    counts = sparse.csr_matrix((vocab_size, vocab_size))
    for distance in range(1, window + 1):
        same_sentence = sentence_of[:-distance] == sentence_of[distance:]
        pairs = (ids[:-distance][same_sentence], ids[distance:][same_sentence])
        # The COO -> CSR conversion sums duplicate pairs.
        counts = counts + sparse.coo_matrix(
            (np.full(len(pairs[0]), 1.0 / distance), pairs), shape=(vocab_size, vocab_size)
        ).tocsr()
    if not counts.nnz:
        raise UserError("The corpus has no two pieces in one sentence: nothing to count.")
    counts = counts + counts.T  # both directions
    piece_counts = np.asarray(counts.sum(axis=1)).ravel()
    context = piece_counts ** context_smoothing

    pairs = counts.tocoo()
    pmi = np.log(pairs.data * context.sum() / (piece_counts[pairs.row] * context[pairs.col]))
    positive = pmi > 0
    ppmi = sparse.csr_matrix(
        (pmi[positive], (pairs.row[positive], pairs.col[positive])), shape=(vocab_size, vocab_size)
    )
    # svds starts from a random vector; a fixed one makes the vectors reproducible.
    start = np.random.default_rng(0).standard_normal(vocab_size)
    u, s, _ = svds(ppmi, k=dim, v0=start)
    # A singular vector's sign is arbitrary, and last-bit changes in the counts
    # flip it; fixing it (largest entry positive) keeps a run's start reproducible.
    u *= np.sign(u[np.abs(u).argmax(axis=0), np.arange(dim)])
    vectors = u * np.sqrt(s)
    vectors[piece_counts == 0] = 0.0
    return vectors.astype(np.float32), piece_counts


def initial_word_embeddings(corpus, random_table, rms=0.02, **kwargs):
    """The V x E table to start from: PPMI-SVD vectors where a piece occurred, `random_table` elsewhere.

    Args:
        corpus: an `input_pipeline.TokenizedCorpus` with the model's vocabulary.
        random_table: (V, E) array, the model's freshly initialized table;
            its rows stay for pieces the corpus never holds ([CLS], [SEP],
            [MASK], <pad>, unused pieces).
        rms: root mean square the vectors are scaled to; the default is the
            initializer's (truncated normal, std 0.02), so the table starts
            at the scale of the position and token-type embeddings it is
            added to before the embedding LayerNorm.
        **kwargs: passed to `ppmi_svd_vectors` (window, context_smoothing,
            max_tokens).

    Returns:
        float32 (V, E) array.

    Raises:
        ValueError: the table's shape does not match the corpus' vocabulary.
    """
    random_table = np.asarray(random_table)
    if random_table.ndim != 2 or random_table.shape[0] != corpus.vocab_size:
        raise ValueError(
            "`random_table` must have one row per piece of the corpus' vocabulary. "
            f"Received: shape={random_table.shape}, vocab_size={corpus.vocab_size}"
        )
    vectors, piece_counts = ppmi_svd_vectors(corpus, random_table.shape[1], **kwargs)
    seen = piece_counts > 0
    table = random_table.astype(np.float32).copy()
    table[seen] = vectors[seen] * (rms / np.sqrt(np.mean(vectors[seen] ** 2)))
    return table


def ppmi_svd_init(corpus, print_fn=print, **kwargs):
    """A `Trainer(word_embeddings_init=...)` function: `initial_word_embeddings` on `corpus`, timed.

    Args:
        corpus: the pretraining text, an `input_pipeline.TokenizedCorpus`.
        print_fn: where the one line saying what was done goes.
        **kwargs: passed to `initial_word_embeddings` (rms, window, ...).
    """

    def init(random_table):
        start = time.perf_counter()
        table = initial_word_embeddings(corpus, random_table, **kwargs)
        print_fn(f"Word embeddings start from PPMI-SVD vectors of the pretraining text "
                 f"({min(len(corpus.token_ids), kwargs.get('max_tokens', _MAX_TOKENS)):,} pieces counted, "
                 f"{time.perf_counter() - start:.1f} s)")
        return table

    return init
