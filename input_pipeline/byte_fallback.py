"""Byte fallback in the TensorFlow graph, with the ids of the sentencepiece library.

With byte fallback, SentencePiece encodes a character that has no piece as its
UTF-8 bytes (pieces <0x00> ... <0xFF>) instead of <unk>. tensorflow-text's
FastSentencepieceTokenizer does not implement it (it emits <unk>), and its
SentencepieceTokenizer, which does, bundles an older SentencePiece whose Viterbi
breaks score ties differently (runs like "-----" split in another order: 19 of
10,247 Korean test strings). So the graph spells bytes itself and keeps the
fast op:

  1. every character without a piece becomes one private-use character per
     UTF-8 byte (U+F0000 + byte), `tf_fast_op_input`;
  2. the fast op runs on a copy of the model whose byte pieces are those
     private-use characters (`fast_op_model`): same ids, and since no other
     piece contains them, the rest of the text is segmented as before;
  3. decoding runs the other way, `tf_bytes_to_text`.

Step 1 must see the characters SentencePiece sees, so this needs a model
without SentencePiece's own normalization (`normalization_rule_name="identity"`:
the preprocessing has applied NFKC already; see `AlbertTokenizer.train`).
"""

import numpy as np
from sentencepiece import sentencepiece_model_pb2

from albert_tf.utils.errors import UserError
from input_pipeline.text_normalization import character_class

# Supplementary Private Use Area-A: no text means anything by these, and a
# model never has them as pieces unless trained on them (checked below).
PRIVATE_USE_BASE = 0xF0000
_NORMAL, _BYTE = 1, 6  # sentencepiece_model.proto: ModelProto.SentencePiece.Type


def parse(model_proto):
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    return model


def has_byte_fallback(model):
    return model.trainer_spec.byte_fallback


def normalizes(model):
    """Whether SentencePiece itself rewrites the text before segmenting it (e.g. nmt_nfkc)."""
    return bool(model.normalizer_spec.precompiled_charsmap) or model.normalizer_spec.name not in ("identity", "")


def fast_op_model(model_proto):
    """A byte-fallback model as the fast op can run it.

    Returns:
        (model_proto, known): the serialized copy whose byte pieces are the
        private-use characters U+F0000 + byte (normal pieces, same ids), and
        a sorted int32 array of the code points that have a piece of their
        own (the space included, which SentencePiece writes as '▁').

    Raises:
        ValueError: the model normalizes text itself, or has private-use pieces.
    """
    model = parse(model_proto)
    if normalizes(model):
        raise UserError(
            f"In-graph byte fallback needs a SentencePiece model without its own normalization; this "
            f"one applies {model.normalizer_spec.name!r}, which the graph cannot reproduce exactly. "
            "Retrain the tokenizer: byte-fallback tokenizers of the ko, ja, zh and multi presets skip it "
            "(their preprocessing applies NFKC)."
        )
    floor = min(p.score for p in model.pieces if p.type == _NORMAL)
    known = {ord(" ")}
    for piece in model.pieces:
        if piece.type == _BYTE:
            # The score is irrelevant to the segmentation: every path passes through these pieces.
            piece.piece, piece.type, piece.score = chr(PRIVATE_USE_BASE + int(piece.piece[3:5], 16)), _NORMAL, floor
        elif piece.type == _NORMAL:
            if any(PRIVATE_USE_BASE <= ord(c) < PRIVATE_USE_BASE + 256 for c in piece.piece):
                raise UserError(
                    f"In-graph byte fallback reserves U+F0000-U+F00FF, but piece {piece.piece!r} uses them."
                )
            if len(piece.piece) == 1:
                known.add(ord(piece.piece))
    model.trainer_spec.byte_fallback = False
    return model.SerializeToString(), np.array(sorted(known), np.int32)


def tf_fast_op_input(texts, known):
    """Preprocessed text as the fast op must see it: each character outside `known`
    replaced by its UTF-8 bytes as private-use characters, and no trailing '▁'.

    Args:
        texts: tf.string of any shape.
        known: sorted int32 array of code points to keep (`fast_op_model`).

    Returns:
        tf.string, the shape of `texts`.
    """
    import tensorflow as tf

    # SentencePiece strips trailing whitespace after escaping it as '▁', so a '▁'
    # written in the text goes too there (and only there); the fast op keeps it.
    flat = tf.strings.regex_replace(tf.reshape(texts, [-1]), "[ \u2581]+$", "")
    # Most texts have a piece for every character: find the others with one
    # regex (a DFA pass, ~1/6 of the fast op's time) and spell only those.
    needs = tf.where(~tf.strings.regex_full_match(flat, character_class(known) + "*"))  # (n, 1)
    spelled = tf.tensor_scatter_nd_update(flat, needs, _spell(tf.gather_nd(flat, needs), known))
    return tf.reshape(spelled, tf.shape(texts))


def _spell(texts, known):
    """Each character outside `known` as private-use bytes: tf.string (n,) -> (n,)."""
    import tensorflow as tf

    chars = tf.strings.unicode_decode(texts, "UTF-8")  # int32 ragged (n, chars)
    cps = chars.flat_values
    known = tf.constant(known)
    is_known = tf.gather(known, tf.minimum(tf.searchsorted(known, cps), tf.size(known) - 1)) == cps
    # UTF-8: 1 byte below U+0080, 2 below U+0800, 3 below U+10000, else 4.
    length = 1 + sum(tf.cast(cps >= bound, tf.int32) for bound in (0x80, 0x800, 0x10000))
    shift, low6 = tf.bitwise.right_shift, lambda x: tf.bitwise.bitwise_and(x, 0x3F)
    lead = tf.where(length == 1, cps, tf.where(length == 2, 0xC0 | shift(cps, 6),
                                               tf.where(length == 3, 0xE0 | shift(cps, 12), 0xF0 | shift(cps, 18))))
    # Continuation bytes carry 6 bits each, the last one the lowest; unused slots are cut below.
    second = 0x80 | low6(shift(cps, 6 * tf.maximum(length - 2, 0)))
    third = 0x80 | low6(shift(cps, 6 * tf.maximum(length - 3, 0)))
    spelled = PRIVATE_USE_BASE + tf.stack([lead, second, third, 0x80 | low6(cps)], axis=1)  # (chars, 4)
    kept = tf.pad(tf.expand_dims(cps, 1), [[0, 0], [0, 3]])
    count = tf.where(is_known, 1, length)
    out = tf.RaggedTensor.from_tensor(tf.where(tf.expand_dims(is_known, 1), kept, spelled), lengths=count)
    row_lengths = tf.math.unsorted_segment_sum(count, chars.value_rowids(), chars.nrows())
    return tf.strings.unicode_encode(tf.RaggedTensor.from_row_lengths(out.flat_values, row_lengths), "UTF-8")


def tf_bytes_to_text(texts):
    """Undoes `tf_fast_op_input` on decoded text: private-use bytes back to UTF-8.

    Bytes that are not valid UTF-8 (ids cut inside a character) become one
    U+FFFD each, as sentencepiece decodes them.

    Args:
        texts: tf.string of any shape.

    Returns:
        tf.string, the shape of `texts`.
    """
    import tensorflow as tf

    flat = tf.reshape(texts, [-1])
    chars = tf.strings.unicode_split(flat, "UTF-8")  # tf.string ragged (batch, chars)
    offset = tf.strings.unicode_decode(flat, "UTF-8").flat_values - PRIVATE_USE_BASE
    is_byte = (offset >= 0) & (offset < 256)
    single_bytes = tf.constant([bytes([b]) for b in range(256)])
    raw = tf.where(is_byte, tf.gather(single_bytes, tf.clip_by_value(offset, 0, 255)), chars.flat_values)
    joined = tf.strings.reduce_join(chars.with_flat_values(raw), axis=1)  # UTF-8, or not quite
    # ICU replaces a maximal invalid run by one U+FFFD; its width in bytes gives
    # sentencepiece's count. A U+FFFD that was in the text spans its own 3 bytes.
    cps, starts = tf.strings.unicode_decode_with_offsets(joined, "UTF-8", errors="replace")
    rows = cps.value_rowids()
    is_last = tf.range(tf.size(rows, out_type=tf.int64)) == tf.gather(cps.row_limits(), rows) - 1
    next_start = tf.concat([starts.flat_values[1:], tf.zeros([1], tf.int64)], 0)[: tf.size(rows)]
    ends = tf.where(is_last, tf.gather(tf.cast(tf.strings.length(joined), tf.int64), rows), next_start)
    widths = ends - starts.flat_values
    genuine = tf.strings.substr(tf.gather(joined, rows), starts.flat_values, widths) == "\ufffd".encode()
    count = tf.where((cps.flat_values == 0xFFFD) & ~genuine, widths, 1)
    out = tf.RaggedTensor.from_row_lengths(
        tf.repeat(cps.flat_values, count), tf.math.unsorted_segment_sum(count, rows, cps.nrows())
    )
    return tf.reshape(tf.strings.unicode_encode(out, "UTF-8"), tf.shape(texts))
