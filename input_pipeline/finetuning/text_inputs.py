"""Raw text -> model inputs, in Python and in the TensorFlow graph, with the same result.

The one composition of tokenizer and packer: fine-tuning data
(`TextEncoder`), `AlbertPreprocessor`, `albert-tf predict` and the exported
`serve_text` signatures all pack with it. Both paths lay texts out and truncate them with `input_pipeline.packing` (one
text `[CLS] A [SEP]`, a pair `[CLS] A [SEP] B [SEP]`, BERT's `truncate_seq_pair`
as fine-tuning uses it, dropping pieces from the end, start or middle as
`truncate_from` says) to the exported `max_length`, and pad to the longest
sequence of the batch (or to `pad_to`). The Python path (`pack_texts`) is the
reference for the in-graph one (`tf_pack_texts`, used by the `serve_text`
signatures) and the recipe for on-device tokenization next to a TFLite model.

With `max_first_length` (SQuAD) A is cut to it and B fills the rest. A text
never makes the packed sequence longer than `max_length`: it is cut, not
rejected. Empty texts (empty after whitespace collapse) are an error.
"""

import numpy as np

from input_pipeline import features
from input_pipeline.finetuning.batching import pad_batch
from input_pipeline.packing import (
    check_truncate_from, keep_pieces, pack, split_windows, tf_pack, tf_split_windows, tf_truncate, truncate_pair,
)
from input_pipeline.tokenizer import PAD_ID

# The in-graph twins import TensorFlow on use, as `input_pipeline.packing`
# does: fine-tuning data readers run the Python path without it.


def pack_ids(ids_a, ids_b=None, max_length=128, truncate_from="end", max_first_length=None):
    """One text's (or pair's) piece ids -> `[CLS] A [SEP] (B [SEP])`, cut to `max_length`.

    A pair is cut as BERT's `truncate_seq_pair` (longest text first, pieces
    dropped as `truncate_from` says); with `max_first_length` A is cut to it
    and B gets the rest. Ids that fit are packed as they are.

    Returns:
        dict of int32 arrays (seq,), seq <= max_length: token_ids, segment_ids, padding_mask.
    """
    if ids_b is None:
        return pack(truncate_pair(ids_a, None, max_length - 2, truncate_from)[0])
    if max_first_length is None:
        return pack(*truncate_pair(ids_a, ids_b, max_length - 3, truncate_from))
    new_a = min(len(ids_a), max_first_length, max_length - 4)
    return pack(ids_a[:new_a], ids_b[: max_length - 3 - new_a])


def pack_window_ids(ids, max_length, max_windows=1, truncate_from="end"):
    """One text's piece ids -> up to `max_windows` packed windows `[CLS] window [SEP]`.

    The ids are cut to `max_windows * (max_length - 2)` (by `truncate_from`)
    and split into near-equal windows (`input_pipeline.packing.split_windows`).

    Returns:
        list of dicts of int32 arrays (seq,), seq <= max_length.
    """
    window = max_length - 2
    return [pack(part) for part in split_windows(keep_pieces(ids, window * max_windows, truncate_from), window)]


def pack_texts(tokenizer, texts, text_pairs=None, max_length=128, pad_to=None, max_first_length=None,
               truncate_from="end"):
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
        truncate_from: which pieces of a too-long text go: "end", "start"
            or "middle" (`input_pipeline.packing.keep_pieces`).

    Returns:
        dict of int32 arrays (batch, seq): token_ids, segment_ids, padding_mask.
    """
    _check_max_length(max_length, text_pairs is not None)
    check_truncate_from(truncate_from)
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
        packed = pack_ids(a, b, max_length, truncate_from, max_first_length)
        rows.append((packed[features.TOKEN_IDS], packed[features.SEGMENT_IDS]))
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


def pack_windows(tokenizer, texts, max_length=128, max_windows=1, truncate_from="end", pad_to=None):
    """Python reference of `tf_pack_windows`: each text as up to `max_windows` packed windows.

    A text longer than `max_length - 2` pieces is cut to
    `max_windows * (max_length - 2)` (by `truncate_from`) and split into
    near-equal windows (`input_pipeline.packing.split_windows`); run the
    model on every window and average each text's logits. The recipe for
    a TFLite app serving a model fine-tuned with `max_windows`.

    Args:
        tokenizer: an `AlbertTokenizer`.
        texts: list of str.
        max_length: the longest window, special tokens included.
        max_windows: int >= 1.
        truncate_from: which pieces of a text too long for every window go.
        pad_to: pad every row to this length (a TFLite model's fixed
            length); default: the longest window.

    Returns:
        (inputs, text_index): dict of int32 arrays (num_windows, seq), and
        int64 (num_windows,), the text each window belongs to.
    """
    _check_max_length(max_length, False)
    windows, text_index = [], []
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text)
        if not ids:
            raise ValueError(f"Text {i} is empty (after whitespace collapse); it has no tokens.")
        for packed in pack_window_ids(ids, max_length, max_windows, truncate_from):
            windows.append(packed)
            text_index.append(i)
    # PAD_ID is 0, the padding of segment_ids and padding_mask too.
    return pad_batch(windows, PAD_ID, pad_to), np.array(text_index, "int64")


def tf_pack_texts(tokenizer, texts, text_pairs=None, max_length=128, max_first_length=None, truncate_from="end"):
    """In-graph twin of `pack_texts` (padding to the longest row).

    Args:
        tokenizer: an `AlbertTokenizer` (its in-graph SentencePiece model is used).
        texts: tf.string (batch,).
        text_pairs: optional tf.string (batch,).
        max_length: Python int.
        max_first_length, truncate_from: as in `pack_texts`.

    Returns:
        dict of int32 tensors (batch, seq): token_ids, segment_ids, padding_mask.
    """
    import tensorflow as tf

    _check_max_length(max_length, text_pairs is not None)
    check_truncate_from(truncate_from)
    segments = [_tf_encode_nonempty(tokenizer, texts, "text")]
    if text_pairs is None:
        segments = tf_truncate(segments, max_length - 2, truncate_from)
    else:
        segments.append(_tf_encode_nonempty(tokenizer, text_pairs, "text_pair"))
        if max_first_length is None:
            segments = tf_truncate(segments, max_length - 3, truncate_from)
        else:
            new_a = tf.minimum(segments[0].row_lengths(), min(max_first_length, max_length - 4))
            new_b = tf.minimum(segments[1].row_lengths(), max_length - 3 - new_a)
            segments = [_tf_take(segments[0], new_a), _tf_take(segments[1], new_b)]
    return tf_pack(segments)


def tf_pack_windows(tokenizer, texts, max_length=128, max_windows=1, truncate_from="end"):
    """In-graph long-text windows: each text as up to `max_windows` packed windows.

    The twin of `input_pipeline.finetuning.TextEncoder.encode_windows` with
    truncation on: a text is cut to `max_windows * (max_length - 2)` pieces
    (by `truncate_from`), then split into near-equal windows
    (`input_pipeline.packing.split_windows`), each `[CLS] window [SEP]`.

    Args:
        tokenizer: an `AlbertTokenizer`.
        texts: tf.string (batch,).
        max_length: Python int, the longest window, special tokens included.
        max_windows: Python int >= 1.
        truncate_from: as in `pack_texts`.

    Returns:
        (inputs, text_index): dict of int32 tensors (num_windows, seq) padded
        to the longest window, and int64 (num_windows,), the text each
        window belongs to (sorted: `tf.math.segment_mean` averages per text).
    """

    _check_max_length(max_length, False)
    check_truncate_from(truncate_from)
    window = max_length - 2
    ids = tf_truncate([_tf_encode_nonempty(tokenizer, texts, "text")], window * max_windows, truncate_from)[0]
    windows, text_index = tf_split_windows(ids, window)
    return tf_pack([windows]), text_index


def tf_pack_choices(tokenizer, texts, choices, max_length=128):
    """Multiple choice in-graph: each (text, choice) pair packed as `tf_pack_texts` does.

    Args:
        tokenizer: an `AlbertTokenizer`.
        texts: tf.string (batch,), the shared segment A (context).
        choices: tf.string (batch, num_choices), segment B of each choice.
        max_length: Python int.

    Returns:
        dict of int32 tensors (batch, num_choices, seq): token_ids,
        segment_ids, padding_mask, padded to the longest pair of the batch.
    """
    import tensorflow as tf

    shape = tf.shape(choices)  # (batch, num_choices)
    repeated = tf.reshape(tf.repeat(tf.expand_dims(texts, 1), shape[1], axis=1), [-1])
    packed = tf_pack_texts(tokenizer, repeated, tf.reshape(choices, [-1]), max_length)
    return {name: tf.reshape(value, tf.concat([shape, [-1]], 0)) for name, value in packed.items()}


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
