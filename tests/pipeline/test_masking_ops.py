"""The TensorFlow-op masking draws with the statistics of the NumPy masking create-data uses."""

import numpy as np
import pytest
import tensorflow as tf

from data_fixtures import review_corpus
from input_pipeline import PretrainingDataConfig
from input_pipeline.pretraining import examples, masking_ops
from input_pipeline.tokenizer import CLS_ID, MASK_ID, SEP_ID

CONFIG = PretrainingDataConfig(max_seq_length=64, max_predictions_per_seq=10)
NUM_EXAMPLES = 1500


@pytest.fixture(scope="module")
def laid_out():
    """(corpus, [(tokens, is_word_start)]) of the first NUM_EXAMPLES pairs of the review corpus."""
    corpus = review_corpus()
    instances = examples.instances_of_documents(corpus, range(corpus.num_documents), CONFIG, (0,))
    return corpus, [examples.lay_out(corpus, i)[:2] for i in instances[:NUM_EXAMPLES]]


def tf_masks(corpus, laid_out, seed=0):
    """`masking_ops.mask_tokens` of every example, keyed (seed, index), as NumPy dicts."""
    tokens = tf.ragged.constant([t for t, _ in laid_out], dtype=tf.int32)
    starts = tf.ragged.constant([w for _, w in laid_out], dtype=tf.bool)

    def mask(index, t, w):
        key = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0], tf.int64), index)
        return masking_ops.mask_tokens(t, w, key, max_predictions=CONFIG.max_predictions_per_seq,
                                       masked_lm_prob=CONFIG.masked_lm_prob, max_ngram=CONFIG.max_ngram,
                                       vocab_size=corpus.vocab_size)

    dataset = tf.data.Dataset.from_tensor_slices((tf.range(len(laid_out), dtype=tf.int64), tokens, starts))
    masked = dataset.map(mask, num_parallel_calls=tf.data.AUTOTUNE)
    return [{k: v.numpy() for k, v in m.items()} for m in masked]


def statistics(laid_out, masked):
    """Distributions both implementations must share (dict of floats)."""
    spans, kept, replaced, fill, location = [], 0, 0, [], []
    for (tokens, _), m in zip(laid_out, masked):
        budget = min(CONFIG.max_predictions_per_seq, max(1, round(len(tokens) * CONFIG.masked_lm_prob)))
        fill.append(len(m["positions"]) / budget)
        spans.extend(m["spans"])
        after = m["token_ids"][m["positions"]]
        kept += np.sum(after == m["labels"])
        replaced += np.sum(after == MASK_ID)
        location.extend(m["positions"] / len(tokens))
    num_masked = sum(len(m["positions"]) for m in masked)
    spans = np.asarray(spans)
    return {
        "fill": np.mean(fill),
        "mask": replaced / num_masked,
        "keep": kept / num_masked,
        "random": 1 - (replaced + kept) / num_masked,
        **{f"n={n}": np.mean(spans == n) for n in range(1, CONFIG.max_ngram + 1)},
        "location": np.mean(location),
    }


def check_masks(tokens, is_word_start, m):
    """Whole words, never [CLS]/[SEP], ascending, within the budget; labels are the original ids."""
    positions = m["positions"]
    budget = min(CONFIG.max_predictions_per_seq, max(1, round(len(tokens) * CONFIG.masked_lm_prob)))
    assert len(positions) <= budget and np.all(np.diff(positions) > 0)
    assert not np.isin(tokens[positions], [CLS_ID, SEP_ID]).any()
    np.testing.assert_array_equal(m["labels"], tokens[positions])
    unmasked = np.setdiff1d(np.arange(len(tokens)), positions)
    np.testing.assert_array_equal(m["token_ids"][unmasked], tokens[unmasked])
    masked = np.zeros(len(tokens), bool)
    masked[positions] = True
    word = np.cumsum(is_word_start) - 1
    special = np.isin(tokens, [CLS_ID, SEP_ID])
    for w in np.unique(word[masked]):
        assert masked[(word == w) & ~special].all(), "a word is masked in part"


def test_tf_masking_matches_the_numpy_statistics(laid_out):
    corpus, pairs = laid_out
    tf_masked = tf_masks(corpus, pairs)
    for (tokens, is_word_start), m in zip(pairs, tf_masked):
        check_masks(tokens, is_word_start, m)
        m["spans"] = m["ngrams"][m["ngrams"] > 0]
    numpy_masked = []
    for i, (tokens, is_word_start) in enumerate(pairs):
        result = examples.mask_tokens(tokens, is_word_start, CONFIG, corpus.vocab_size, np.random.default_rng(i))
        numpy_masked.append({"token_ids": result.token_ids, "positions": result.positions, "labels": result.labels,
                             "spans": [n for _, n in result.spans]})
    ours, reference = statistics(pairs, tf_masked), statistics(pairs, numpy_masked)
    # ~12,000 masked pieces and ~8,000 spans: standard errors are under 0.006.
    tolerance = {"fill": 0.02, "mask": 0.02, "keep": 0.015, "random": 0.015, "location": 0.02}
    for name, value in reference.items():
        assert abs(ours[name] - value) <= tolerance.get(name, 0.03), (name, ours[name], value)
    # And the targets themselves: 80/10/10, and p(n) ∝ 1/n before the budget shortens spans.
    assert abs(ours["mask"] - 0.8) < 0.02 and abs(ours["keep"] - 0.1) < 0.015
    assert ours["n=1"] > ours["n=2"] > ours["n=3"] > 0.05


def test_tf_masking_is_a_function_of_its_key(laid_out):
    corpus, pairs = laid_out
    first, again, other = (tf_masks(corpus, pairs[:20], seed) for seed in (0, 0, 1))
    for a, b in zip(first, again):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    assert any(not np.array_equal(a["positions"], b["positions"]) for a, b in zip(first, other))
