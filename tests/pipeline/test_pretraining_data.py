"""Statistics of the pretraining examples on real text (IMDB reviews).

Tolerances are 4.5 standard errors of the sampled proportion, so a correct
implementation fails about once in 100,000 runs and a wrong one fails.
"""

import numpy as np
import pytest

from input_pipeline import features
from data_fixtures import imdb_documents, long_document_corpus, review_corpus, small_tokenizer
from input_pipeline.pretraining.examples import (
    PairStats,
    PretrainingDataConfig,
    TokenizedCorpus,
    _truncate_pair,
    instances_of_documents,
    lay_out,
    make_example,
    mask_tokens,
)
from input_pipeline.tokenizer import CLS_ID, MASK_ID, SEP_ID


def assert_proportion(successes, trials, p, extra=0.0):
    tolerance = 4.5 * np.sqrt(p * (1 - p) / trials) + extra
    assert abs(successes / trials - p) <= tolerance, (successes / trials, p, tolerance)


def draw(corpus, config, seed=0):
    instances = instances_of_documents(corpus, range(corpus.num_documents), config, (seed,))
    return instances, [make_example(corpus, i, config) for i in instances]


CONFIG_128 = PretrainingDataConfig(max_seq_length=128)


@pytest.fixture(scope="module")
def drawn():
    return draw(long_document_corpus(), CONFIG_128)


def test_layout_segments_and_padding(drawn):
    instances, examples = drawn
    for instance, ex in zip(instances, examples):
        n, len_a = int(ex[features.PADDING_MASK].sum()), instance.a_end - instance.a_start
        assert 5 <= n <= 128 and len_a >= 1 and instance.b_end - instance.b_start >= 1
        np.testing.assert_array_equal(ex[features.PADDING_MASK], np.arange(128) < n)
        tokens = ex[features.TOKEN_IDS].copy()
        tokens[ex[features.MASK_POSITIONS][ex[features.MASK_WEIGHTS] > 0]] = ex[features.MASK_IDS][ex[features.MASK_WEIGHTS] > 0]
        assert tokens[0] == CLS_ID and tokens[len_a + 1] == SEP_ID and tokens[n - 1] == SEP_ID
        assert np.sum(tokens == SEP_ID) == 2 and np.sum(tokens == CLS_ID) == 1 and not tokens[n:].any()
        expected_segments = (np.arange(128) > len_a + 1) & (np.arange(128) < n)
        np.testing.assert_array_equal(ex[features.SEGMENT_IDS], expected_segments)


def test_masking_budget_and_specials_never_masked(drawn):
    instances, examples = drawn
    filled = 0
    for ex in examples:
        n = int(ex[features.PADDING_MASK].sum())
        budget = min(20, max(1, round(n * 0.15)))
        weights = ex[features.MASK_WEIGHTS]
        num_masked = int(weights.sum())
        assert 1 <= num_masked <= budget and weights[:num_masked].all() and not weights[num_masked:].any()
        positions = ex[features.MASK_POSITIONS][:num_masked]
        assert np.all(np.diff(positions) > 0) and positions.max() < n - 1 and positions.min() > 0
        assert not np.isin(ex[features.MASK_IDS][:num_masked], [CLS_ID, SEP_ID, 0]).any()
        filled += num_masked == budget
    # The budget is missed only when every remaining word overlaps a span.
    assert filled / len(examples) > 0.99
    masked = sum(e[features.MASK_WEIGHTS].sum() for e in examples)
    real = sum(e[features.PADDING_MASK].sum() for e in examples)
    assert abs(masked / real - 0.15) < 0.01


def test_replacements_follow_80_10_10(drawn):
    _, examples = drawn
    outcome = {"mask": 0, "same": 0, "random": 0}
    for ex in examples:
        num = int(ex[features.MASK_WEIGHTS].sum())
        shown = ex[features.TOKEN_IDS][ex[features.MASK_POSITIONS][:num]]
        original = ex[features.MASK_IDS][:num]
        outcome["mask"] += int(np.sum(shown == MASK_ID))
        outcome["same"] += int(np.sum(shown == original))
        outcome["random"] += int(np.sum((shown != MASK_ID) & (shown != original)))
    total = sum(outcome.values())
    assert_proportion(outcome["mask"], total, 0.8)
    # A random replacement equals the original id with probability ~1/vocab.
    assert_proportion(outcome["same"], total, 0.1, extra=0.002)
    assert_proportion(outcome["random"], total, 0.1, extra=0.002)


def test_ngram_lengths_follow_one_over_n():
    corpus, config = long_document_corpus(), PretrainingDataConfig(max_seq_length=512)
    instances = instances_of_documents(corpus, range(corpus.num_documents), config, (1,))
    first_spans, all_spans = [], []
    for seed in range(4):  # Several masks per instance for a larger sample.
        for instance in instances:
            tokens, starts, _ = lay_out(corpus, instance)
            if len(tokens) < 200:
                continue
            spans = mask_tokens(tokens, starts, config, corpus.vocab_size, np.random.default_rng((seed, instance.mask_seed))).spans
            first_spans.append(spans[0][1])
            all_spans.extend(n for _, n in spans)
    # The first span of a long sequence is accepted as drawn: it tests p(n) exactly.
    for n, p in zip((1, 2, 3), (6 / 11, 3 / 11, 2 / 11)):
        assert_proportion(first_spans.count(n), len(first_spans), p)
    # Later spans shorten to fit the budget's last slots and skip overlaps, as in the
    # original, so all accepted spans skew short (about 0.62 / 0.25 / 0.13 here).
    counts = np.bincount(all_spans, minlength=4)[1:] / len(all_spans)
    assert counts[0] > 6 / 11 and counts[1] > 0.2 and counts[2] > 0.1


def test_sop_labels_balanced_and_swaps_are_real(drawn):
    instances, _ = drawn
    corpus = long_document_corpus()
    doc_of_token = lambda t: np.searchsorted(corpus.sentence_splits[corpus.document_splits], t, side="right") - 1
    same_doc = [i for i in instances if doc_of_token(i.a_start) == doc_of_token(i.b_start)]
    swapped = sum(i.label for i in same_doc)
    assert_proportion(swapped, len(same_doc), 0.5)
    assert all(i.a_start > i.b_start for i in same_doc if i.label == 1)
    assert all(i.a_start < i.b_start for i in same_doc if i.label == 0)
    # One-sentence chunks take B from another document (label 1), as the original does.
    assert all(i.label == 1 for i in instances if i not in same_doc)
    # Those fallbacks (about 5% at length 128) tilt the overall labels above 0.5 by half their share.
    fallback = 1 - len(same_doc) / len(instances)
    assert fallback < 0.1
    assert_proportion(sum(i.label for i in instances), len(instances), 0.5 + fallback / 2)


def test_pair_stats_count_one_sentence_documents_and_labels(drawn):
    instances, _ = drawn
    stats = PairStats.of(long_document_corpus(), instances)
    assert stats.num_single_sentence_documents == 0 and stats.num_documents == long_document_corpus().num_documents
    assert stats.label_counts == (sum(i.label == 0 for i in instances), sum(i.label for i in instances))
    assert not stats.pairs_cannot_form("sop")
    # Each review as one sentence (a text per line, read line by line): every SOP label is 1.
    whole = TokenizedCorpus.from_documents([[" ".join(d)] for d in imdb_documents()[:200]], small_tokenizer())
    dead = PairStats.of(whole, instances_of_documents(whole, range(whole.num_documents), CONFIG_128, (0,)))
    assert (dead.num_single_sentence_documents, dead.label_counts[0], dead.label_1_share) == (200, 0, 1.0)
    assert dead.pairs_cannot_form("sop") and dead.pairs_cannot_form("nsp") and not dead.pairs_cannot_form("single")
    assert (dead + stats).num_documents == 200 + stats.num_documents
    assert dead.describe().startswith("200 of 200 documents (100.0%) have one sentence; sentence_order_label 0/1: 0/")


def test_about_ten_percent_short_sequences(drawn):
    instances, examples = drawn
    corpus = long_document_corpus()
    short = sum(e[features.PADDING_MASK].sum() < 128 for e in examples)
    # Besides short targets, a document's last instance may fall short.
    document_ends = corpus.num_documents / len(examples)
    assert_proportion(short, len(examples), 0.1, extra=document_ends)
    assert short / len(examples) > 0.1 - 4.5 * np.sqrt(0.09 / len(examples))


def test_nsp_and_single_segment_modes():
    corpus = review_corpus()
    nsp, examples = draw(corpus, PretrainingDataConfig(max_seq_length=128, task="nsp"))
    assert_proportion(sum(i.label for i in nsp), len(nsp), 0.5, extra=0.05)
    single, examples = draw(corpus, PretrainingDataConfig(max_seq_length=128, task="single"))
    for instance, ex in zip(single, examples):
        assert instance.label == 0 and ex[features.SENTENCE_ORDER_LABEL] == 0
        assert not ex[features.SEGMENT_IDS].any() and ex[features.PADDING_MASK].sum() <= 128


def test_same_seed_same_examples_different_seed_different():
    corpus = review_corpus()
    a, b, c = (draw(corpus, CONFIG_128, seed)[1][:50] for seed in (7, 7, 8))
    for name in a[0]:
        assert all(np.array_equal(x[name], y[name]) for x, y in zip(a, b))
    assert not all(np.array_equal(x[features.TOKEN_IDS], y[features.TOKEN_IDS]) for x, y in zip(a, c))


def test_truncation_matches_one_token_at_a_time():
    rng = np.random.default_rng(0)
    for _ in range(500):
        len_a, len_b, limit = rng.integers(1, 300), rng.integers(1, 300), rng.integers(2, 300)
        a, b = _truncate_pair((0, len_a), (1000, 1000 + len_b), limit, rng)
        # The original: drop a token from the longer segment (B on ties) until it fits.
        ra, rb = len_a, len_b
        while ra + rb > limit:
            if ra > rb:
                ra -= 1
            else:
                rb -= 1
        assert (a[1] - a[0], b[1] - b[0]) == (ra, rb) and 0 <= a[0] and a[1] <= len_a and 1000 <= b[0]


def test_config_validation():
    with pytest.raises(ValueError, match="task"):
        PretrainingDataConfig(task="mlm")
    with pytest.raises(ValueError, match="max_predictions_per_seq"):
        PretrainingDataConfig(max_seq_length=16, max_predictions_per_seq=20)
