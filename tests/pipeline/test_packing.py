"""`input_pipeline.packing`: the Python packer and its TensorFlow twin agree."""

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import features
from input_pipeline.packing import TRUNCATE_FROM, keep_pieces, pack, split_windows, tf_pack, tf_split_windows, tf_truncate
from input_pipeline.packing import truncate_pair
from input_pipeline.packing import truncated_lengths
from input_pipeline.tokenizer import CLS_ID, PAD_ID, SEP_ID


def _python_batch(rows, budget, truncate_from="end"):
    """Python reference of a batch: truncate, pack, pad to the longest row."""
    packed = [pack(*truncate_pair(a, b, budget, truncate_from)) if b is not None
              else pack(truncate_pair(a, None, budget, truncate_from)[0]) for a, b in rows]
    width = max(len(p[features.TOKEN_IDS]) for p in packed)
    return {
        name: np.stack([np.pad(p[name], (0, width - len(p[name])), constant_values=PAD_ID if name == features.TOKEN_IDS else 0)
                        for p in packed])
        for name in features.BACKBONE_INPUTS
    }


def _tf_batch(rows, budget, truncate_from="end"):
    segments = [tf.ragged.constant([a for a, _ in rows], dtype=tf.int32, row_splits_dtype=tf.int64)]
    if rows[0][1] is not None:
        segments.append(tf.ragged.constant([b for _, b in rows], dtype=tf.int32, row_splits_dtype=tf.int64))
    return {name: t.numpy() for name, t in tf_pack(tf_truncate(segments, budget, truncate_from)).items()}


def _texts(length, first_id):
    return list(range(first_id, first_id + length))  # distinct ids show which pieces survive


@pytest.mark.slow
@pytest.mark.parametrize("truncate_from", TRUNCATE_FROM)
def test_pairs_agree_on_thousands_of_lengths(truncate_from):
    checked = 0
    for max_length in range(5, 26):
        budget = max_length - 3
        rows = [(_texts(la, 100), _texts(lb, 500)) for la in range(1, 30) for lb in range(1, 30)]
        expected, got = _python_batch(rows, budget, truncate_from), _tf_batch(rows, budget, truncate_from)
        for name in features.BACKBONE_INPUTS:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{name}, max_length={max_length}")
        checked += len(rows)
    assert checked > 10_000


@pytest.mark.parametrize("truncate_from", TRUNCATE_FROM)
def test_single_texts_agree(truncate_from):
    for max_length in range(3, 20):
        rows = [(_texts(la, 100), None) for la in range(1, 30)]
        expected = _python_batch(rows, max_length - 2, truncate_from)
        got = _tf_batch(rows, max_length - 2, truncate_from)
        for name in features.BACKBONE_INPUTS:
            np.testing.assert_array_equal(got[name], expected[name])


def test_layout_and_segment_ids():
    packed = pack([7, 8], [9])
    assert packed[features.TOKEN_IDS].tolist() == [CLS_ID, 7, 8, SEP_ID, 9, SEP_ID]
    assert packed[features.SEGMENT_IDS].tolist() == [0, 0, 0, 0, 1, 1]
    assert pack([7])[features.SEGMENT_IDS].tolist() == [0, 0, 0]


def _truncate_seq_pair(ids_a, ids_b, max_pieces):
    """The original's loop, transcribed: pop from the end of the longer text (B on a tie)."""
    ids_a, ids_b = list(ids_a), list(ids_b)
    while len(ids_a) + len(ids_b) > max_pieces:
        (ids_a if len(ids_a) > len(ids_b) else ids_b).pop()
    return ids_a, ids_b


def test_truncation_keeps_the_short_text_and_cuts_b_on_a_tie():
    assert truncate_pair([1, 2, 3, 4, 5], [6], 4) == ([1, 2, 3], [6])
    assert truncate_pair([1, 2, 3], [4, 5, 6], 5) == ([1, 2, 3], [4, 5])
    for budget in range(0, 12):
        for la in range(0, 14):
            for lb in range(0, 14):
                a, b = truncate_pair(range(la), range(lb), budget)
                assert (a, b) == _truncate_seq_pair(range(la), range(lb), budget)
                assert truncated_lengths(la, lb, budget) == (len(a), len(b))


def test_truncate_from_says_which_pieces_go():
    ids = list(range(10))
    assert keep_pieces(ids, 4, "end") == [0, 1, 2, 3]
    assert keep_pieces(ids, 4, "start") == [6, 7, 8, 9]
    assert keep_pieces(ids, 8, "middle") == [0, 1, 4, 5, 6, 7, 8, 9]  # a quarter from the head, the rest the tail
    assert keep_pieces(ids, 3, "middle") == [7, 8, 9]  # a quarter of 3 rounds down to no head
    assert keep_pieces(ids, 12, "middle") == ids
    # Pairs: the lengths are truncate_seq_pair's whatever the side.
    assert truncate_pair(ids, [20, 21], 6, "start") == ([6, 7, 8, 9], [20, 21])
    assert truncate_pair(ids, list(range(20, 30)), 8, "middle") == ([0, 7, 8, 9], [20, 27, 28, 29])
    with pytest.raises(ValueError, match="truncate_from.*Received: truncate_from='left'"):
        truncate_pair(ids, None, 4, "left")
    with pytest.raises(ValueError, match="truncate_from"):
        tf_truncate([tf.ragged.constant([[1, 2]])], 1, "left")


def test_windows_cover_a_text_in_order_with_near_equal_lengths():
    for n in range(1, 60):
        for window in (1, 2, 3, 5, 14):
            windows = split_windows(range(n), window)
            lengths = [len(w) for w in windows]
            assert sum(windows, []) == list(range(n))
            assert len(windows) == -(-n // window)  # the fewest that fit
            assert max(lengths) <= window and max(lengths) - min(lengths) <= 1, (n, window, lengths)
    assert split_windows([1, 2, 3, 4, 5], 4) == [[1, 2], [3, 4, 5]]  # not [1, 2, 3, 4] and a leftover [5]
    with pytest.raises(ValueError, match="window=0"):
        split_windows([1], 0)


def test_tf_windows_agree_with_python():
    rows = [list(range(100, 100 + n)) for n in (1, 4, 5, 13, 3, 40, 8)]
    for window in (1, 3, 4, 7):
        windows, text_index = tf_split_windows(tf.ragged.constant(rows, dtype=tf.int32), window)
        expected = [(i, w) for i, row in enumerate(rows) for w in split_windows(row, window)]
        assert windows.to_list() == [w for _, w in expected]
        assert text_index.numpy().tolist() == [i for i, _ in expected]
