"""`[CLS] A [SEP] (B [SEP])`: the layout of every model input, in Python and in TensorFlow.

One text is packed as `[CLS] A [SEP]`, a pair as `[CLS] A [SEP] B [SEP]`, with
segment ids 0 up to and including the first [SEP], then 1. A pair longer than
its budget is truncated as BERT's `truncate_seq_pair`: the longer text loses
one piece at a time (B on a tie), so a short text keeps all of its pieces.
Which pieces a text loses is `truncate_from`: "end" (BERT's), "start" (keep
the end, as HF's `truncation_side="left"`) or "middle" (keep the first quarter
and the end: the head + tail truncation of Sun et al. 2019, "How to Fine-Tune
BERT for Text Classification?", best on IMDB there).

The Python functions (`pack`, `truncate_pair`) are the reference; `tf_pack` and
`tf_truncate` are their in-graph twins (the exported `serve_text` signatures),
and a test checks that both agree. TensorFlow is imported inside the twins
only: data-writer workers lay out examples in Python and start without it.
"""

import numpy as np

from input_pipeline import features
from albert_tf.utils.config_base import check_choice
from input_pipeline.tokenizer import CLS_ID, PAD_ID, SEP_ID


def pack(ids_a, ids_b=None):
    """Lays out one example: `[CLS] A [SEP]`, or `[CLS] A [SEP] B [SEP]` when `ids_b` is given.

    Args:
        ids_a: int sequence (len_a,).
        ids_b: optional int sequence (len_b,).

    Returns:
        dict of int32 arrays (seq,): token_ids, segment_ids, padding_mask
        (all ones: padding is the batcher's job).
    """
    parts = [[CLS_ID], ids_a, [SEP_ID]] if ids_b is None else [[CLS_ID], ids_a, [SEP_ID], ids_b, [SEP_ID]]
    token_ids = np.concatenate(parts).astype("int32")
    segment_ids = np.zeros(len(token_ids), "int32")
    segment_ids[len(ids_a) + 2 :] = 1  # B and its [SEP]; empty for one text
    return {
        features.TOKEN_IDS: token_ids,
        features.SEGMENT_IDS: segment_ids,
        features.PADDING_MASK: np.ones(len(token_ids), "int32"),
    }


TRUNCATE_FROM = ("end", "start", "middle")


def check_truncate_from(truncate_from):
    check_choice("truncate_from", truncate_from, TRUNCATE_FROM)


def head_length(length):
    """Pieces kept from the start when `truncate_from="middle"` keeps `length` (a quarter, rounded down)."""
    return length // 4


def keep_pieces(ids, length, truncate_from="end"):
    """`ids` cut to `length` pieces, dropping them from its end, start or middle (a list)."""
    check_truncate_from(truncate_from)
    ids = list(ids)
    if len(ids) <= length:
        return ids
    if truncate_from == "end":
        return ids[:length]
    head = 0 if truncate_from == "start" else head_length(length)
    return ids[:head] + ids[len(ids) - (length - head) :]


def truncate_pair(ids_a, ids_b, max_pieces, truncate_from="end"):
    """Drops pieces from the longer text until both fit in `max_pieces`.

    The original `_truncate_seq_pair`: one piece at a time from the longer
    text (from B on a tie), so a short text keeps all of its pieces; the
    original drops them from the end, `truncate_from` may say "start" or
    "middle" instead (`keep_pieces`).

    Args:
        ids_a: int sequence; ids_b: int sequence or None (one text).
        max_pieces: pieces the two texts may hold together (specials excluded).
        truncate_from: "end", "start" or "middle".

    Returns:
        (ids_a, ids_b) as lists.
    """
    ids_a, ids_b = list(ids_a), list(ids_b or [])  # keep_pieces checks truncate_from
    len_a, len_b = truncated_lengths(len(ids_a), len(ids_b), max_pieces)
    return keep_pieces(ids_a, len_a, truncate_from), keep_pieces(ids_b, len_b, truncate_from)


def truncated_lengths(len_a, len_b, budget):
    """Lengths of A and B after `truncate_pair` to `budget` pieces (Python ints).

    Closed form of `_truncate_seq_pair`'s loop (one piece at a time from the
    longer text, B on a tie): the shorter text keeps its length when the longer
    still gets at least as much; otherwise A gets ceil(budget / 2), B the rest.
    """
    if len_a + len_b <= budget:
        return len_a, len_b
    new_a = min(len_a, max(budget - len_b, (budget + 1) // 2))
    return new_a, budget - new_a


def split_windows(ids, window):
    """`ids` split into the fewest windows of at most `window` pieces, of near-equal length.

    A text of n pieces becomes k = ceil(n / window) consecutive windows,
    window i holding pieces [i * n // k, (i + 1) * n // k): lengths differ by
    at most one, so no window is a short leftover. Long-text classification
    (`max_windows`) reads a text this way.

    Args:
        ids: int sequence (n,), n >= 1.
        window: Python int >= 1, the most pieces a window holds.

    Returns:
        list of k lists, in order; together they are `ids`.
    """
    ids = list(ids)
    if window < 1:
        raise ValueError(f"`window` must be at least 1. Received: window={window}")
    count = max(1, -(-len(ids) // window))
    bounds = [i * len(ids) // count for i in range(count + 1)]
    return [ids[bounds[i] : bounds[i + 1]] for i in range(count)]


def tf_split_windows(ids, window):
    """In-graph `split_windows` of a batch.

    Args:
        ids: int ragged tensor (batch, None), every row non-empty.
        window: Python int >= 1.

    Returns:
        (windows, text_index): int ragged (num_windows, None), every text's
        windows in order, texts in order; int64 (num_windows,), the row of
        `ids` each window came from (sorted, for `tf.math.segment_mean`).
    """
    import tensorflow as tf

    ids = ids.with_row_splits_dtype(tf.int64)
    n = ids.row_lengths()  # (batch,)
    count = (n + window - 1) // window  # (batch,) windows per text
    text_index = tf.repeat(tf.range(tf.size(n, out_type=tf.int64)), count)  # (num_windows,)
    i = tf.ragged.range(count).flat_values  # (num_windows,) position of each window in its text
    n_w, count_w = tf.gather(n, text_index), tf.gather(count, text_index)
    offset = tf.gather(ids.row_starts(), text_index)
    positions = tf.ragged.range(offset + i * n_w // count_w, offset + (i + 1) * n_w // count_w)
    return tf.gather(ids.flat_values, positions), text_index


def tf_truncate(segments, budget, truncate_from="end"):
    """In-graph `truncate_pair`: one or two ragged texts cut to `budget` pieces together.

    Args:
        segments: list of 1 or 2 int ragged tensors (batch, None).
        budget: Python int, pieces per row over all segments (specials excluded).
        truncate_from: "end", "start" or "middle", as in `keep_pieces`.

    Returns:
        The list of truncated ragged tensors.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    check_truncate_from(truncate_from)
    # Round robin from A (one piece to A, one to B, ...) keeps exactly the
    # pieces that popping from the longer text (B on a tie) keeps.
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
    if truncate_from == "end":
        return trimmed
    kept = []
    for segment, cut in zip(segments, trimmed):
        total, length = segment.row_lengths(), cut.row_lengths()
        head = tf.zeros_like(length) if truncate_from == "start" else head_length(length)
        index = tf.concat(
            [tf.ragged.range(tf.zeros_like(head), head), tf.ragged.range(total - (length - head), total)], axis=1
        )
        kept.append(tf.gather(segment, index, batch_dims=1))
    return kept


def tf_pack(segments):
    """In-graph `pack` of a batch, padded to its longest row.

    Args:
        segments: list of 1 or 2 int ragged tensors (batch, None): A and optionally B.

    Returns:
        dict of int32 tensors (batch, seq): token_ids (padded with PAD_ID),
        segment_ids, padding_mask.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    ids, segment_ids = tf_text.combine_segments(segments, start_of_sequence_id=CLS_ID, end_of_segment_id=SEP_ID)
    token_ids = tf.cast(ids.to_tensor(default_value=PAD_ID), tf.int32)  # (batch, seq)
    return {
        features.TOKEN_IDS: token_ids,
        features.SEGMENT_IDS: tf.cast(segment_ids.to_tensor(default_value=0), tf.int32),
        features.PADDING_MASK: tf.sequence_mask(ids.row_lengths(), maxlen=tf.shape(token_ids)[1], dtype=tf.int32),
    }
