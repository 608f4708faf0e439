"""Pretraining examples laid out and masked by TensorFlow ops, for any tf.data host.

The same draws as `input_pipeline.pretraining.examples` (whole-word n-gram
masking, p(n) proportional to 1/n, 80/10/10 replacement, a budget of
min(max_predictions_per_seq, max(1, round(length * masked_lm_prob))) pieces,
[CLS]/[SEP] never masked), written as graph ops so a dataset that uses them
holds no Python callback and runs on the hosts of a pod slice or on tf.data
service workers. Every draw is a stateless random op of one `key` (a shape
[2] seed), so an example depends only on its key, never on the order it is
made in; the NumPy Generator of `examples.mask_tokens` gives other numbers
with the same distributions.
"""

import numpy as np
import tensorflow as tf

from input_pipeline.tokenizer import CLS_ID, MASK_ID, NUM_SPECIAL_IDS, SEP_ID


def _ngram_cdf_table(max_ngram):
    """float32 [max_ngram + 1, max_ngram]: row m is the cdf of p(n) ∝ 1/n over n = 1..m, padded with 2."""
    table = np.full((max_ngram + 1, max_ngram), 2.0, np.float32)
    weights = 1.0 / np.arange(1, max_ngram + 1)
    for m in range(1, max_ngram + 1):
        table[m, :m] = np.cumsum(weights[:m]) / weights[:m].sum()
        table[m, m - 1] = 2.0  # Past every draw in [0, 1): n never exceeds m.
    return tf.constant(table)


def mask_tokens(tokens, is_word_start, key, *, max_predictions, masked_lm_prob, max_ngram, vocab_size):
    """Whole-word n-gram masking of one laid-out example (see `examples.mask_tokens`).

    Words are runs of pieces from a word-start piece to the next word start or
    [CLS]/[SEP]. Words are visited in a random order; each draws n in
    1..max_ngram with p(n) ∝ 1/n (limited to the words left), shortens the
    n-gram while it would overflow the budget, and is skipped if it still does
    or overlaps an earlier span.

    Args:
        tokens: int32 [length], [CLS] A [SEP] (B [SEP]).
        is_word_start: bool [length], False at [CLS]/[SEP].
        key: int [2], the stateless seed of every draw.
        max_predictions, masked_lm_prob, max_ngram: as `PretrainingDataConfig`.
        vocab_size: random replacements are drawn from [NUM_SPECIAL_IDS, vocab_size).

    Returns:
        dict: token_ids int32 [length] after replacement; positions int32
        [num_masked], ascending; labels int32 [num_masked], the original ids;
        ngrams int32 [num_words], the n of the span starting at each word (0
        where none starts).
    """
    tokens = tf.convert_to_tensor(tokens, tf.int32)
    length = tf.size(tokens)
    budget = tf.minimum(
        max_predictions, tf.maximum(1, tf.cast(tf.round(tf.cast(length, tf.float64) * masked_lm_prob), tf.int32))
    )
    is_special = tf.equal(tokens, CLS_ID) | tf.equal(tokens, SEP_ID)
    word_first = tf.cast(tf.where(is_word_start)[:, 0], tf.int32)
    boundaries = tf.cast(tf.where(is_word_start | is_special)[:, 0], tf.int32)
    # Each word ends at the next word start or special piece; the final [SEP] bounds the last one.
    word_end = tf.gather(boundaries, tf.searchsorted(boundaries, word_first, side="right"))
    pieces_before = tf.concat([[0], tf.cumsum(word_end - word_first)], 0)
    num_words = tf.size(word_first)

    draw_key, order_key, replace_key, id_key = tf.unstack(tf.random.experimental.stateless_split(key, 4))
    draws = tf.random.stateless_uniform([num_words], draw_key)
    order = tf.argsort(tf.random.stateless_uniform([num_words], order_key))
    cdfs = _ngram_cdf_table(max_ngram)
    ngram_sizes = tf.range(1, max_ngram + 1)
    word_ids = tf.range(num_words)

    def visit(k, num_masked, covered, ngrams):
        word = order[k]
        max_n = tf.minimum(max_ngram, num_words - word)
        n = tf.minimum(tf.reduce_sum(tf.cast(cdfs[max_n] <= draws[k], tf.int32)) + 1, max_n)
        # Shorten while over budget: span sizes grow with n, so the longest n that fits (or 1).
        span_sizes = tf.gather(pieces_before, tf.minimum(word + ngram_sizes, num_words)) - pieces_before[word]
        fits = (ngram_sizes <= n) & ((ngram_sizes == 1) | (num_masked + span_sizes <= budget))
        n = tf.reduce_max(tf.where(fits, ngram_sizes, 1))
        size = pieces_before[word + n] - pieces_before[word]
        span = (word_ids >= word) & (word_ids < word + n)
        take = (num_masked + size <= budget) & ~tf.reduce_any(covered & span)
        covered = tf.where(take, covered | span, covered)
        ngrams = tf.where(take & tf.equal(word_ids, word), n, ngrams)
        return k + 1, tf.where(take, num_masked + size, num_masked), covered, ngrams

    _, _, covered, ngrams = tf.while_loop(
        lambda k, num_masked, *_: (k < num_words) & (num_masked < budget),
        visit,
        (0, 0, tf.zeros([num_words], tf.bool), tf.zeros([num_words], tf.int32)),
    )
    # Piece p belongs to word cumsum(is_word_start)[p] - 1 unless it is [CLS]/[SEP].
    word_of_piece = tf.cumsum(tf.cast(is_word_start, tf.int32)) - 1
    masked = ~is_special & (word_of_piece >= 0) & tf.gather(covered, tf.maximum(word_of_piece, 0))
    positions = tf.cast(tf.where(masked)[:, 0], tf.int32)
    labels = tf.gather(tokens, positions)
    num_masked = tf.size(positions)
    replace = tf.random.stateless_uniform([num_masked], replace_key)
    random_ids = tf.random.stateless_uniform(
        [num_masked], id_key, minval=NUM_SPECIAL_IDS, maxval=vocab_size, dtype=tf.int32
    )
    new_ids = tf.where(replace < 0.8, MASK_ID, tf.where(replace < 0.9, labels, random_ids))
    output = tf.tensor_scatter_nd_update(tokens, positions[:, None], new_ids)
    return {"token_ids": output, "positions": positions, "labels": labels, "ngrams": ngrams}


def lay_out(token_ids, word_starts, a_start, a_end, b_start, b_end):
    """[CLS] A [SEP] B [SEP] (or [CLS] A [SEP] when B is empty) with its word starts (see `examples.lay_out`).

    Args:
        token_ids: int32 [num_tokens], the corpus.
        word_starts: bool [vocab_size].
        a_start, a_end, b_start, b_end: int64 scalars, offsets into `token_ids`.

    Returns:
        (tokens int32 [length], is_word_start bool [length], length of A int32).
    """
    a = token_ids[a_start:a_end]
    b = token_ids[b_start:b_end]
    len_a, len_b = tf.size(a), tf.size(b)
    has_b = tf.minimum(len_b, 1)
    tokens = tf.concat([[CLS_ID], a, [SEP_ID], b, tf.fill([has_b], SEP_ID)], 0)
    length = tf.size(tokens)
    is_word_start = tf.gather(word_starts, tokens)
    # A segment's first piece starts a word even if truncation cut into a word.
    starts = tf.concat([[1], tf.fill([has_b], len_a + 2)], 0)
    is_word_start = tf.tensor_scatter_nd_update(is_word_start, starts[:, None], tf.ones_like(starts, tf.bool))
    specials = tf.stack([0, len_a + 1, length - 1])
    is_word_start = tf.tensor_scatter_nd_update(is_word_start, specials[:, None], tf.zeros([3], tf.bool))
    return tokens, is_word_start, len_a
