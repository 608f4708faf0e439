"""Raw text -> model inputs, in Python and in the TensorFlow graph, with the same result.

Both paths pack one text as `[CLS] A [SEP]` and a pair as `[CLS] A [SEP] B [SEP]`
(segment ids 0 up to and including the first [SEP], then 1), truncate to the
exported `max_length`, and pad to the longest sequence of the batch (or to
`pad_to`). The Python path (`pack_texts`) is the reference for the in-graph one
(`tf_pack_texts`, used by the `serve_text` signatures) and the recipe for
on-device tokenization next to a TFLite model.

Truncation is BERT's `truncate_seq_pair`, as fine-tuning uses it
(`input_pipeline.finetuning.encoding.truncate_pair`): drop tokens from the end
of the longer segment, one at a time (from B on a tie), until the pair fits;
with `max_first_length` (SQuAD) A is cut to it and B fills the rest. A text
never makes the packed sequence longer than `max_length`: it is cut, not
rejected. Empty texts (empty after whitespace collapse) are an error.
"""

import numpy as np

from input_pipeline.tokenizer import CLS_ID, PAD_ID, SEP_ID


def truncated_lengths(len_a, len_b, budget):
    """Lengths of A and B after `truncate_seq_pair` to `budget` tokens (Python ints).

    Closed form of the loop "pop from the longer, from B on a tie": the shorter
    segment keeps its length when the longer still gets at least as much;
    otherwise A gets ceil(budget / 2) and B the rest.
    """
    if len_a + len_b <= budget:
        return len_a, len_b
    new_a = min(len_a, max(budget - len_b, (budget + 1) // 2))
    return new_a, budget - new_a


def _tf_truncated_lengths(len_a, len_b, budget):
    """`truncated_lengths` on int64 tensors (batch,)."""
    import tensorflow as tf

    fits = len_a + len_b <= budget
    cut_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
    return tf.where(fits, len_a, cut_a), tf.where(fits, len_b, budget - cut_a)


def pack_texts(tokenizer, texts, text_pairs=None, max_length=128, pad_to=None, max_first_length=None):
    """Python reference: raw strings -> padded int32 model inputs.

    Args:
        tokenizer: an `AlbertTokenizer`.
        texts: list of str (segment A).
        text_pairs: optional list of str (segment B), same length as `texts`.
        max_length: longest packed sequence, special tokens included.
        pad_to: pad every row to this length (e.g. a TFLite model's fixed
            length); default: the longest row of the batch.
        max_first_length: instead of `truncate_seq_pair`, cut A to this many
            pieces and give B the rest (SQuAD: the question, then the first
            window of the context).

    Returns:
        dict of int32 arrays (batch, seq): token_ids, segment_ids, padding_mask.
    """
    _check_max_length(max_length, text_pairs is not None)
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise ValueError(
            "`texts` and `text_pairs` must have the same length. "
            f"Received: {len(texts)} and {len(text_pairs)}"
        )
    rows = []
    for i, text in enumerate(texts):
        a = tokenizer.encode(text)
        b = tokenizer.encode(text_pairs[i]) if text_pairs is not None else None
        if not a or (b is not None and not b):
            raise ValueError(f"Text {i} is empty (after whitespace collapse); it has no tokens.")
        if b is None:
            ids = [CLS_ID] + a[: max_length - 2] + [SEP_ID]
            segments = [0] * len(ids)
        else:
            if max_first_length is None:
                new_a, new_b = truncated_lengths(len(a), len(b), max_length - 3)
            else:
                new_a = min(len(a), max_first_length, max_length - 4)
                new_b = min(len(b), max_length - 3 - new_a)
            first = [CLS_ID] + a[:new_a] + [SEP_ID]
            second = b[:new_b] + [SEP_ID]
            ids, segments = first + second, [0] * len(first) + [1] * len(second)
        rows.append((ids, segments))
    length = pad_to if pad_to is not None else max((len(ids) for ids, _ in rows), default=0)
    out = {
        "token_ids": np.full((len(rows), length), PAD_ID, "int32"),
        "segment_ids": np.zeros((len(rows), length), "int32"),
        "padding_mask": np.zeros((len(rows), length), "int32"),
    }
    for i, (ids, segments) in enumerate(rows):
        if len(ids) > length:
            raise ValueError(f"`pad_to` must be at least {len(ids)}. Received: pad_to={pad_to}")
        out["token_ids"][i, : len(ids)] = ids
        out["segment_ids"][i, : len(ids)] = segments
        out["padding_mask"][i, : len(ids)] = 1
    return out


def tf_pack_texts(tokenizer, texts, text_pairs=None, max_length=128, max_first_length=None):
    """In-graph twin of `pack_texts` (padding to the longest row).

    Args:
        tokenizer: an `AlbertTokenizer` (its in-graph SentencePiece model is used).
        texts: tf.string (batch,).
        text_pairs: optional tf.string (batch,).
        max_length: Python int.
        max_first_length: as in `pack_texts`.

    Returns:
        dict of int32 tensors (batch, seq): token_ids, segment_ids, padding_mask.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    _check_max_length(max_length, text_pairs is not None)
    segments = [_tf_encode_nonempty(tokenizer, texts, "text")]
    if text_pairs is None:
        segments[0] = _tf_take(segments[0], tf.minimum(segments[0].row_lengths(), max_length - 2))
    else:
        segments.append(_tf_encode_nonempty(tokenizer, text_pairs, "text_pair"))
        len_a, len_b = segments[0].row_lengths(), segments[1].row_lengths()
        if max_first_length is None:
            new_a, new_b = _tf_truncated_lengths(len_a, len_b, max_length - 3)
        else:
            new_a = tf.minimum(len_a, min(max_first_length, max_length - 4))
            new_b = tf.minimum(len_b, max_length - 3 - new_a)
        segments = [_tf_take(segments[0], new_a), _tf_take(segments[1], new_b)]
    ids, segment_ids = tf_text.combine_segments(
        segments, start_of_sequence_id=CLS_ID, end_of_segment_id=SEP_ID
    )
    token_ids = tf.cast(ids.to_tensor(default_value=PAD_ID), tf.int32)  # (batch, seq)
    return {
        "token_ids": token_ids,
        "segment_ids": tf.cast(segment_ids.to_tensor(default_value=0), tf.int32),
        "padding_mask": tf.sequence_mask(
            ids.row_lengths(), maxlen=tf.shape(token_ids)[1], dtype=tf.int32
        ),
    }


def assert_rank(tensor, rank, name):
    """A runtime rank check that constant folding cannot remove.

    A loaded SavedModel signature (and TF-Serving) only checks dtypes, and the
    static rank in the graph is the signature's, so `tf.rank` would be folded
    to it. The actual shape, padded with -1s, still tells: its first `rank`
    entries must be non-negative and multiply to the size.
    """
    import tensorflow as tf

    dims = tf.concat([tf.shape(tensor), tf.fill([rank], -1)], 0)[:rank]
    ok = tf.reduce_all(dims >= 0) & (tf.reduce_prod(dims) == tf.size(tensor))
    return tf.debugging.Assert(ok, [f"`{name}` must have rank {rank}; received shape:", tf.shape(tensor)])


def _tf_encode_nonempty(tokenizer, texts, name):
    import tensorflow as tf

    with tf.control_dependencies([assert_rank(texts, 1, name)]):
        texts = tf.identity(texts)
    ids = tokenizer.tf_encode(texts).with_row_splits_dtype(tf.int64)  # int32 ragged (batch, None)
    check = tf.debugging.assert_positive(
        ids.row_lengths(),
        message=f"`{name}` must not be empty: every string needs at least one token "
        "after whitespace collapse.",
    )
    with tf.control_dependencies([check]):
        return tf.identity(ids)


def _tf_take(ragged, lengths):
    """The first `lengths[i]` tokens of each row of a ragged (batch, None) tensor."""
    import tensorflow as tf

    keep = tf.ragged.range(ragged.row_lengths()) < tf.expand_dims(lengths, 1)
    return tf.ragged.boolean_mask(ragged, keep)


def _check_max_length(max_length, pair):
    smallest = 5 if pair else 3  # [CLS] A [SEP] (B [SEP]) with one token each
    if int(max_length) < smallest:
        raise ValueError(
            f"`max_length` must be at least {smallest} to fit the special tokens and one "
            f"token per text. Received: max_length={max_length}"
        )
