"""A `spiece.model` that carries albert-tf's preprocessing, for bare SentencePiece runtimes.

albert-tf preprocesses text (whitespace collapse, NFKD, accent stripping,
lowercasing) before SentencePiece, whose own normalizer is plain `nmt_nfkc`.
An app that runs the model alone (MediaPipe Tasks, the TFLite Task Library,
HF's tokenizer, `sentencepiece.SentencePieceProcessor`) then sees other text,
and other ids, wherever accents or capitals occur.

`embed_preprocessing` builds the preprocessing into the model's normalizer:
each rule of the model's precompiled charsmap and each character the
preprocessing changes maps to `normalizer(preprocess(key))`, compiled by
SentencePiece into a new charsmap. SentencePiece applies the charsmap by
longest match, so the rules keep `nmt_nfkc`'s compositions (a conjoining jamo
sequence to its Hangul syllable) and add albert-tf's steps on every character;
SentencePiece itself collapses the spaces. Where albert-tf's result depends on
context (Python lowercases a word-final Σ to ς, a lone one to σ), the rule has
the context-free form.

The original ALBERT re-splits pieces such as `▁10,` after SentencePiece
(`Preprocessing.split_digit_comma`), which no normalizer can express: the
model marks those pieces unused, so a bare runtime never emits them and
segments `10,` with the other pieces, mostly as `▁10` `,` as the original
does. albert-tf itself segments with `segmenting_model`, which turns them back
into normal pieces, so its own ids stay exactly those of the plain model.

A model that carries preprocessing applies it whatever `Preprocessing`
albert-tf pairs it with: keep it with the one it was built from (its
tokenizer.json), as `AlbertTokenizer` does.
"""

import dataclasses
import functools
import hashlib
import os
import sys
import unicodedata

import sentencepiece
from sentencepiece import SentencePieceNormalizer, sentencepiece_model_pb2

from albert_tf.utils.errors import UserError
from input_pipeline.text_normalization import is_digit_comma_piece

# The NormalizerSpec name of a model that carries albert-tf's preprocessing.
NORMALIZER_NAME = "albert_tf"
# Charsmaps computed ahead for the models `AlbertTokenizer.train` makes with the English
# presets (cased and uncased), named by `_charsmap_key`: computing one takes seconds, which
# every `train-tokenizer` paid. A model, preset, Unicode or SentencePiece version without a
# file here is computed as before. `python -m input_pipeline.write_charsmaps` writes them.
SHIPPED_CHARSMAPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "charsmaps")
_NORMAL, _UNUSED = 1, 5  # sentencepiece_model.proto: ModelProto.SentencePiece.Type


def embed_preprocessing(model_proto, preprocessing):
    """A copy of a SentencePiece model that applies `preprocessing` itself.

    Any SentencePiece runtime given the copy and raw text produces the ids
    `AlbertTokenizer(model_proto, preprocessing).encode` does; albert-tf
    gives the same ids with either model. Digit-comma pieces are marked unused
    when `preprocessing.split_digit_comma` (see the module docstring for how
    close a bare runtime then comes to the original's re-split).

    Args:
        model_proto: bytes of a SentencePiece model without byte fallback.
        preprocessing: a `Preprocessing` without `normalization` (the English
            presets, cased or not).

    Returns:
        bytes of the rewritten model: the normalizer's charsmap replaced (its
        name becomes `NORMALIZER_NAME`), digit-comma pieces unused, all else
        unchanged. A model that already carries preprocessing comes back
        rewritten from its own rules, so rewriting twice changes nothing.

    Raises:
        ValueError: the model falls back to bytes or `preprocessing` applies
            Unicode normalization (the ko, ja, zh and multi presets).
    """
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    if model.trainer_spec.byte_fallback:
        raise UserError(
            "A model with byte fallback cannot carry the preprocessing: in-graph byte fallback needs "
            "a model without its own normalization (`input_pipeline.byte_fallback`)."
        )
    if preprocessing.normalization:
        raise UserError(
            "Only preprocessing without `normalization` (the English presets) can be built into the model. "
            f"Received: normalization={preprocessing.normalization!r}"
        )
    spec = model.normalizer_spec
    spec.precompiled_charsmap = _charsmap(spec.SerializeToString(), preprocessing)
    spec.name = NORMALIZER_NAME
    if preprocessing.split_digit_comma:
        for piece in model.pieces:
            if piece.type == _NORMAL and is_digit_comma_piece(piece.piece):
                piece.type = _UNUSED
    return model.SerializeToString()


def carries_preprocessing(model_proto):
    """Whether `embed_preprocessing` wrote this model."""
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    return model.normalizer_spec.name == NORMALIZER_NAME


def segmenting_model(model_proto):
    """The model albert-tf segments with: its digit-comma pieces normal again, so that
    `AlbertTokenizer` re-splits them as the original does. Other models come back as they are."""
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    if model.normalizer_spec.name != NORMALIZER_NAME:
        return model_proto
    for piece in model.pieces:
        if piece.type == _UNUSED and is_digit_comma_piece(piece.piece):
            piece.type = _NORMAL
    return model.SerializeToString()


def _charsmap_key(normalizer_spec, preprocessing):
    """The name of the shipped charsmap of (`normalizer_spec`, `preprocessing`) under this Python's Unicode
    tables and this SentencePiece: everything the computed charsmap depends on."""
    digest = hashlib.sha256()
    for part in (normalizer_spec, repr(preprocessing).encode(), unicodedata.unidata_version.encode(),
                 sentencepiece.__version__.encode()):
        digest.update(len(part).to_bytes(8, "little") + part)
    return digest.hexdigest()[:24] + ".bin"


@functools.lru_cache(maxsize=4)
def _charsmap(normalizer_spec, preprocessing):
    """The precompiled charsmap of `normalizer(preprocess(key))` over the keys of the
    normalizer's rules and the characters `preprocessing` changes: the shipped one
    (`SHIPPED_CHARSMAPS`) where there is one, else computed.

    Cached: every English model trained by one SentencePiece version has the
    same `nmt_nfkc` rules, and compiling them takes seconds.
    """
    shipped = os.path.join(SHIPPED_CHARSMAPS, _charsmap_key(normalizer_spec, preprocessing))
    if os.path.isfile(shipped):
        with open(shipped, "rb") as f:
            return f.read()
    return _compute_charsmap(normalizer_spec, preprocessing)


def _compute_charsmap(normalizer_spec, preprocessing):
    """`_charsmap`, computed."""
    spec = sentencepiece_model_pb2.NormalizerSpec()
    spec.ParseFromString(normalizer_spec)
    # The rules map a key to its normalized form; the spaces are handled after them.
    spec.add_dummy_prefix = spec.remove_extra_whitespaces = spec.escape_whitespaces = False
    normalizer = SentencePieceNormalizer(normalizer_spec=spec.SerializeToString())
    rules = dict(normalizer.Decompile()) if spec.precompiled_charsmap else {}
    changed = _changed_characters(dataclasses.replace(preprocessing, split_digit_comma=False))
    step = dataclasses.replace(preprocessing, collapse_whitespace=False).apply
    keys = sorted(set(rules) | changed)
    touched = [k for k in keys if not changed.isdisjoint(k)]
    # Whitespace becomes a space that SentencePiece then collapses, as albert-tf collapses it.
    values = normalizer.normalize([step("".join(" " if c.isspace() else c for c in k)) for k in touched])
    new = dict(rules) | dict(zip(touched, values))
    # SentencePiece refuses identity rules; without one a key maps character by character.
    table = [(k, v) for k, v in sorted(new.items()) if k != v]
    compiled = sentencepiece_model_pb2.NormalizerSpec()
    compiled.ParseFromString(SentencePieceNormalizer(norm_map=table).serialized_normalizer_spec())
    return compiled.precompiled_charsmap


@functools.cache
def _changed_characters(preprocessing):
    """frozenset of the characters that `preprocessing` (without whitespace collapse) changes, and whitespace."""
    step = dataclasses.replace(preprocessing, collapse_whitespace=False).apply
    changed = set()
    for code_point in range(sys.maxunicode + 1):
        if 0xD800 <= code_point < 0xE000:
            continue  # surrogates are no characters of UTF-8 text
        c = chr(code_point)
        # Only decomposition, combining class and case can change a character here.
        if c.isspace() or (
            (unicodedata.decomposition(c) or unicodedata.combining(c) or c.lower() != c) and step(c) != c
        ):
            changed.add(c)
    return frozenset(changed)

