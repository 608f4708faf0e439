"""`AlbertTokenizer`: a SentencePiece unigram model plus ALBERT's text preprocessing.

The same preprocessing runs in Python (`encode`) and in the TensorFlow graph
(`tf_encode`), so a SavedModel that tokenizes raw strings produces exactly the
ids the training data was made with. A tokenizer directory holds `spiece.model`
(the SentencePiece model, embeddable in exports; it also says whether unknown
characters fall back to bytes) and `tokenizer.json` (the language, the
preprocessing steps and, for apps, byte_fallback; a file without a language is
"en").

The English default gives the ids of the original ALBERT `FullTokenizer`
(`preprocess_text`, then `encode_pieces`), which re-splits every piece that
ends in a digit and a comma after SentencePiece has run. That re-split depends
on the piece alone, so it is a table from piece id to replacement ids, built
when the tokenizer loads and applied to SentencePiece's ids in Python and in
the graph alike.

English tokenizers trained here carry their preprocessing inside
`spiece.model` as well (`input_pipeline.spiece_normalizer`), so that a bare
SentencePiece runtime given raw text gives the same ids; albert-tf still
preprocesses itself, which leaves the ids unchanged.
"""

import dataclasses
import io
import json
import os
import re

import numpy as np
import sentencepiece as spm
from google.protobuf.message import DecodeError

from input_pipeline import byte_fallback as byte_fallback_lib
from albert_tf.utils import files
from input_pipeline import spiece_normalizer
from input_pipeline.text_normalization import (
    DEFAULT_BYTE_FALLBACK,
    DEFAULT_CHARACTER_COVERAGE,
    UNSPACED_SCRIPT_CHARS,
    AccentStrippingGuard,
    Preprocessing,
    check_language,
    is_digit_comma_piece,
)
from albert_tf.utils.errors import UserError

# TensorFlow is imported inside the in-graph methods only: data-writer worker
# processes that just encode in Python then start fast and stay small.

# ALBERT's special-piece layout (the released models use the same ids).
PAD_PIECE, UNK_PIECE, CLS_PIECE, SEP_PIECE, MASK_PIECE = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL_IDS = 5
WORD_START = "\u2581"  # SentencePiece's '▁': a piece starting with it begins a word.
_UNSPACED_START = re.compile(f"[{UNSPACED_SCRIPT_CHARS}]")

MODEL_FILE = "spiece.model"
CONFIG_FILE = "tokenizer.json"

class NoTrainingText(UserError):
    """`AlbertTokenizer.train` got no sentence with text in it."""


class AlbertTokenizer:
    """SentencePiece tokenizer with ALBERT's special ids and preprocessing.

    Args:
        model_proto: bytes of a trained SentencePiece model whose first five
            pieces are <pad>, <unk>, [CLS], [SEP], [MASK].
        preprocessing: a `Preprocessing`; defaults to the preset of `language`.
        language: one of `LANGUAGES`, the language the tokenizer was trained for.
    """

    def __init__(self, model_proto, preprocessing=None, language="en"):
        check_language(language)
        self.model_proto = bytes(model_proto)
        self.language = language
        self.preprocessing = preprocessing or Preprocessing.for_language(language)
        # What albert-tf segments with: a model that carries its preprocessing has its
        # digit-comma pieces unused, for bare runtimes; here they are normal and re-split.
        self._segmenting_proto = spiece_normalizer.segmenting_model(self.model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._segmenting_proto)
        pieces = tuple(self._sp.id_to_piece(i) for i in range(NUM_SPECIAL_IDS))
        expected = (PAD_PIECE, UNK_PIECE, CLS_PIECE, SEP_PIECE, MASK_PIECE)
        if pieces != expected:
            raise UserError(
                f"The SentencePiece model must start with the pieces {expected}. Received: {pieces}"
            )
        # {piece id: (ids, pieces) it is re-split into}; empty when the preprocessing does not split.
        self._splits = digit_comma_splits(self._sp) if self.preprocessing.split_digit_comma else {}
        self._tf_tokenizer = None

    # ---- construction and persistence -------------------------------------------------

    @classmethod
    def train(
        cls,
        sentences,
        vocab_size=30000,
        *,
        language="en",
        preprocessing=None,
        character_coverage=None,
        byte_fallback=None,
        input_sentence_size=10_000_000,
        seed=0,
        num_threads=None,
    ):
        """Trains a unigram model on an iterable of raw sentences.

        Sentences are preprocessed as they stream in; SentencePiece keeps a seeded
        reservoir sample of at most `input_sentence_size` of them, so memory is
        bounded whatever the corpus size. When the preprocessing strips accents
        (the "en" preset), a guard counts the characters whose meaning that
        changes (kana voicing marks, Hangul syllables, Indic vowel signs): from
        1% of the text on training is refused with a ValueError naming them and
        the `language` to use; below that it warns.

        Args:
            sentences: iterable of raw (unpreprocessed) strings, one sentence each.
            vocab_size: size of the vocabulary, special pieces included.
            language: one of `LANGUAGES`; picks the preprocessing preset and the
                default `character_coverage`, and is saved with the tokenizer.
            preprocessing: a `Preprocessing` replacing the preset of `language`.
            character_coverage: fraction of characters covered by the vocabulary;
                None takes `DEFAULT_CHARACTER_COVERAGE[language]`.
            byte_fallback: encode characters outside the vocabulary as their UTF-8
                bytes (256 extra pieces) instead of <unk>, so decoding gives the
                text back; None takes `DEFAULT_BYTE_FALLBACK[language]`. With
                NFKC preprocessing (the non-"en" presets) SentencePiece's own
                normalization is then off, so that `tf_encode` can reproduce
                the byte pieces (`input_pipeline.byte_fallback`). Without byte
                fallback, the English presets' model carries the preprocessing
                (`embed_preprocessing`).
            input_sentence_size: cap on the number of sentences sampled for training.
            seed: seed of SentencePiece's sampling, so training is reproducible.
            num_threads: trainer threads; None keeps SentencePiece's default.

        Returns:
            The trained `AlbertTokenizer`.
        """
        check_language(language)
        if vocab_size <= NUM_SPECIAL_IDS:
            raise UserError(f"`vocab_size` must be larger than {NUM_SPECIAL_IDS}. Received: vocab_size={vocab_size}")
        preprocessing = preprocessing or Preprocessing.for_language(language)
        if character_coverage is None:
            character_coverage = DEFAULT_CHARACTER_COVERAGE[language]
        if byte_fallback is None:
            byte_fallback = DEFAULT_BYTE_FALLBACK[language]
        guard = AccentStrippingGuard() if preprocessing.strip_accents else None

        num_texts = 0
        # What the sentence iterator raised: it reaches us wrapped in SentencePiece's RuntimeError.
        failure = None

        def processed():
            nonlocal num_texts, failure
            try:
                for sentence in sentences:
                    if guard is not None:
                        guard.observe(sentence)
                    text = preprocessing.apply(sentence)
                    if text:
                        num_texts += 1
                        yield text
                # SentencePiece reads the whole stream before it trains, so the guard
                # stops a doomed run before the expensive part.
                if guard is not None:
                    guard.check()
            except Exception as e:
                failure = e
                raise

        model = io.BytesIO()
        options = _trainer_options(vocab_size, character_coverage, input_sentence_size, num_threads, byte_fallback)
        if byte_fallback and preprocessing.normalization == "NFKC":
            # SentencePiece's default nmt_nfkc is NFKC (done) plus dropping control
            # characters: skipping it keeps every character (decode gives the
            # preprocessed text back) and lets the graph see what SentencePiece sees.
            options["normalization_rule_name"] = "identity"
        spm.set_random_generator_seed(seed)
        try:
            spm.SentencePieceTrainer.train(sentence_iterator=processed(), model_writer=model, **options)
        except RuntimeError as e:
            if failure is not None:  # the input's own error (bad UTF-8, the accent guard), not SentencePiece's
                raise failure from None
            # SentencePiece reports unusable input as RuntimeError: that is bad input, so a ValueError.
            raise _training_error(e, num_texts, vocab_size, character_coverage, byte_fallback) from e
        tokenizer = cls(model.getvalue(), preprocessing, language)
        return tokenizer.with_embedded_preprocessing() if tokenizer.can_embed_preprocessing else tokenizer

    @classmethod
    def load(cls, directory, require_config=False):
        """Loads a tokenizer saved by `save` (`spiece.model` + `tokenizer.json`).

        Tokenizers saved before languages existed have no "language" (and no
        "normalization" step) in `tokenizer.json`: they load as "en".

        A lone `spiece.model` loads with the English default preprocessing: a
        bare SentencePiece model (a hub download, the original release's
        model) has no `tokenizer.json`. albert-tf never leaves one alone (`save`
        publishes the directory whole, `tokenizer.json` written first), so
        where a directory is albert-tf's own (`require_config`: the `tokenizer/`
        of a run, a model or a data directory), a lone `spiece.model` is the
        remnant of an unfinished write, and loading it with the wrong
        preprocessing would give wrong ids silently: it is refused.

        Args:
            directory: the tokenizer directory, local or a URL.
            require_config: refuse `spiece.model` without `tokenizer.json`.

        Raises:
            UserError: one line naming the file that is missing, corrupt or truncated.
        """
        model_path = os.path.join(directory, MODEL_FILE)
        if not files.isfile(model_path):
            raise UserError(f"No tokenizer in {directory!r}: {MODEL_FILE} is missing.")
        config_path = os.path.join(directory, CONFIG_FILE)
        has_config = files.isfile(config_path)
        if require_config and not has_config:
            raise UserError(
                f"{directory} holds {MODEL_FILE} without {CONFIG_FILE}, which albert-tf always writes with it "
                "(a write that did not finish): write the tokenizer again, or remove the directory."
            )
        try:
            config = json.loads(files.read_text(config_path)) if has_config else {}
            language = config.get("language", "en")
            preprocessing = Preprocessing.from_config(config["preprocessing"], language) if has_config else None
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{config_path} is not a readable {CONFIG_FILE} ({type(e).__name__}: {e}).") from None
        try:
            tokenizer = cls(files.read_bytes(model_path), preprocessing, language)
        except (DecodeError, RuntimeError, IndexError) as e:  # protobuf's, sentencepiece's: bytes that are no model
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"{model_path} is not a SentencePiece model (corrupt or truncated): {reason}") from None
        if config.get("byte_fallback", tokenizer.byte_fallback) != tokenizer.byte_fallback:
            raise UserError(
                f"{config_path} says byte_fallback={config['byte_fallback']} but {model_path} has "
                f"byte_fallback={tokenizer.byte_fallback}: the two files come from different tokenizers."
            )
        return tokenizer

    def save(self, directory):
        """Writes the tokenizer into `directory`, so that no reader ever pairs files of two tokenizers.

        A directory of its own (new, or holding a tokenizer only) is published
        whole (`files.publish`): a reader sees the old tokenizer or the new
        one, never `spiece.model` without the `tokenizer.json` that says how
        to preprocess for it. A directory shared with other files (a model
        directory, an export) keeps them: an old `spiece.model` goes first,
        then `write` puts `tokenizer.json` and `spiece.model` in, each whole,
        so a reader in between finds no tokenizer (`load` says which file is
        missing) rather than a mix.
        """
        own = (MODEL_FILE, CONFIG_FILE)
        if files.isdir(directory) and any(name not in own for name in files.listdir(directory)):
            model_path = os.path.join(directory, MODEL_FILE)
            if files.exists(model_path):
                files.remove(model_path)
            self.write(directory)
            return
        with files.publish(directory, (MODEL_FILE,)) as staging:
            self.write(staging)

    def write(self, directory):
        """Writes `tokenizer.json`, then `spiece.model`, into `directory`, a staging directory the caller publishes.

        `spiece.model` comes last (and is copied last at a URL, as an entry
        file of `files.publish`), so a directory albert-tf wrote never holds
        it alone; see `load`.
        """
        config = {
            "vocab_size": self.vocab_size,
            "language": self.language,
            # Informs apps that tokenize on device; spiece.model itself is what decides.
            "byte_fallback": self.byte_fallback,
            "preprocessing": dataclasses.asdict(self.preprocessing),
        }
        files.write_text(os.path.join(directory, CONFIG_FILE), json.dumps(config, indent=2, ensure_ascii=False))
        files.write_bytes(os.path.join(directory, MODEL_FILE), self.model_proto)

    # ---- vocabulary ---------------------------------------------------------------------

    @property
    def vocab_size(self):
        return self._sp.get_piece_size()

    pad_id = property(lambda self: PAD_ID)
    unk_id = property(lambda self: UNK_ID)
    cls_id = property(lambda self: CLS_ID)
    sep_id = property(lambda self: SEP_ID)
    mask_id = property(lambda self: MASK_ID)

    def id_to_piece(self, token_id):
        return self._sp.id_to_piece(int(token_id))

    @property
    def byte_fallback(self):
        """Whether characters outside the vocabulary are encoded as UTF-8 byte pieces."""
        # SentencePiece puts the 256 byte pieces right after the special ones.
        return self.vocab_size > NUM_SPECIAL_IDS and self._sp.is_byte(NUM_SPECIAL_IDS)

    def word_start_table(self):
        """bool [vocab_size]: True for pieces that begin a word, the unit of whole-word masking.

        A word starts at a piece beginning with '▁' (SentencePiece's mark for a
        preceding space). Japanese and Chinese put no spaces between words, so
        SentencePiece marks only the start of a whole unspaced run; there every
        piece beginning with a Han, kana or CJK-punctuation character is a word
        of its own (a "word" is a piece), while Latin words inside such text
        still start at '▁'.
        """
        pieces = [self._sp.id_to_piece(i) for i in range(self.vocab_size)]
        return np.array(
            [p.startswith(WORD_START) or bool(_UNSPACED_START.match(p)) for p in pieces], dtype=bool
        )

    # ---- the model for bare SentencePiece runtimes ----------------------------------------

    @property
    def can_embed_preprocessing(self):
        """Whether `with_embedded_preprocessing` works: the English presets without byte fallback."""
        return not self.byte_fallback and self.preprocessing.normalization is None

    @property
    def carries_preprocessing(self):
        """Whether `model_proto` applies the preprocessing itself (`embed_preprocessing`)."""
        return spiece_normalizer.carries_preprocessing(self.model_proto)

    def with_embedded_preprocessing(self):
        """This tokenizer with its preprocessing built into `spiece.model`: the same ids here,
        and those ids from raw text in any SentencePiece runtime (`embed_preprocessing`).

        Raises:
            ValueError: not `can_embed_preprocessing`.
        """
        if self.carries_preprocessing:
            return self
        proto = spiece_normalizer.embed_preprocessing(self.model_proto, self.preprocessing)
        return type(self)(proto, self.preprocessing, self.language)

    def standalone_model_proto(self):
        """The `spiece.model` bytes to ship to apps (HF directories, TFLite metadata): with the
        preprocessing built in where `can_embed_preprocessing`, else `model_proto` as it is."""
        return self.with_embedded_preprocessing().model_proto if self.can_embed_preprocessing else self.model_proto

    @property
    def processor(self):
        """The `sentencepiece.SentencePieceProcessor` albert-tf segments with (before the digit-comma re-split)."""
        return self._sp

    def check_vocab_size(self, model_vocab_size):
        """Raises ValueError unless a model's `vocab_size` equals this tokenizer's."""
        if int(model_vocab_size) != self.vocab_size:
            raise UserError(
                f"The tokenizer has {self.vocab_size} pieces but the model config has "
                f"vocab_size={model_vocab_size}. Use a model config with vocab_size={self.vocab_size}."
            )

    # ---- Python encoding ---------------------------------------------------------------

    def encode(self, text):
        """Preprocesses and tokenizes one string. Returns: list[int] of piece ids."""
        return self.split_ids(self._sp.encode(self.preprocessing.apply(text), out_type=int))

    def encode_batch(self, texts, num_threads=1):
        """Tokenizes a list of strings. Returns: list[list[int]]."""
        processed = [self.preprocessing.apply(t) for t in texts]
        encoded = self._sp.encode(processed, out_type=int, num_threads=num_threads)
        return [self.split_ids(ids) for ids in encoded] if self._splits else encoded

    def tokenize(self, text):
        """Preprocesses and splits one string into pieces. Returns: list[str]."""
        pieces = self._sp.encode(self.preprocessing.apply(text), return_type="proto").pieces
        return [q for p in pieces for q in (self._splits[p.id][1] if p.id in self._splits else (p.piece,))]

    def split_ids(self, ids):
        """SentencePiece's ids with each digit-comma piece re-split (`Preprocessing.split_digit_comma`).

        Args:
            ids: list[int], one text's ids as SentencePiece gives them.

        Returns:
            list[int]: `ids` itself when nothing splits.
        """
        if not self._splits:
            return ids
        return [j for i in ids for j in (self._splits[i][0] if i in self._splits else (i,))]

    def decode(self, ids):
        """Turns ids back into text; special pieces decode to nothing."""
        return self._sp.decode([int(i) for i in ids])

    # ---- in-graph encoding -------------------------------------------------------------

    def tf_encode(self, texts):
        """Tokenizes in the TensorFlow graph, with the same ids as `encode`.

        Args:
            texts: tf.string tensor, shape (batch,) or scalar.

        Returns:
            int32 RaggedTensor (batch, None) of ids, or a 1-D tensor for a scalar.
        """
        fast, known = self._tf()
        texts = self.preprocessing.tf_apply(texts)
        if known is not None:
            texts = byte_fallback_lib.tf_fast_op_input(texts, known)
        ids = fast.tokenize(texts)
        return self._tf_split_ids(ids) if self._splits else ids

    def _tf_split_ids(self, ids):
        """`split_ids` in-graph: int32 (batch, None) ragged or (n,) ids -> the same kind, re-split."""
        import tensorflow as tf

        keys = np.array(sorted(self._splits), np.int32)
        replacements = [self._splits[k][0] for k in keys]
        lengths = np.array([len(r) for r in replacements], np.int32)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
        values = np.array([i for r in replacements for i in r], np.int32)
        flat = ids.flat_values if isinstance(ids, tf.RaggedTensor) else ids
        position = tf.minimum(tf.searchsorted(keys, flat), len(keys) - 1)
        hit = tf.gather(keys, position) == flat
        count = tf.where(hit, tf.gather(lengths, position), 1)
        # Each id becomes a run of indices into [replacement values..., the ids themselves...].
        start = tf.where(hit, tf.gather(starts, position), len(values) + tf.range(tf.size(flat)))
        split = tf.gather(tf.concat([values, flat], 0), tf.ragged.range(start, start + count).flat_values)
        if not isinstance(ids, tf.RaggedTensor):
            return split
        row_lengths = tf.math.unsorted_segment_sum(count, ids.value_rowids(), ids.nrows())
        return tf.RaggedTensor.from_row_lengths(split, tf.cast(row_lengths, ids.row_splits.dtype))

    def tf_decode(self, ids):
        """Turns an int32 (Ragged)Tensor (batch, None) of ids into tf.string (batch,)."""
        fast, known = self._tf()
        texts = fast.detokenize(ids)
        return texts if known is None else byte_fallback_lib.tf_bytes_to_text(texts)

    def _tf(self):
        """(FastSentencepieceTokenizer, known code points or None without byte fallback)."""
        if self._tf_tokenizer is None:
            import tensorflow as tf
            import tensorflow_text as tf_text

            proto, known = self._segmenting_proto, None
            if self.byte_fallback:
                proto, known = byte_fallback_lib.fast_op_model(self._segmenting_proto)
            # FastSentencepieceTokenizer, not SentencepieceTokenizer: the latter bundles
            # an older SentencePiece whose Viterbi breaks score ties differently (runs
            # like "...." or "000" split in another order), while the fast one gives
            # the ids of the sentencepiece library and also runs in TFLite. It has no
            # byte fallback: `input_pipeline.byte_fallback` spells the bytes around it.
            # Created outside any tf.function being traced, so its resource outlives it.
            with tf.init_scope():
                self._tf_tokenizer = (tf_text.FastSentencepieceTokenizer(proto), known)
        return self._tf_tokenizer


def digit_comma_splits(sp):
    """What the original `encode_pieces` turns each digit-comma piece into.

    A piece longer than one character that ends in a digit (`str.isdigit`) and
    a comma is re-encoded without its comma and with every '▁' removed, then
    followed by ','. The original runs under Python 3: its test for a leading
    '▁' (to drop it from a piece inside a word) compares str with bytes and
    never holds, so `000,` in `1,000,000,` becomes `▁` `000` `,` or the like,
    as the goldens in tests/fixtures/original_tokenizer show. Only pieces
    SentencePiece can emit are looked at; an unknown run of characters is one
    <unk> whatever it holds (the original would re-split one ending in a digit
    and a comma, possible only when ',' itself has no piece).

    Args:
        sp: a `sentencepiece.SentencePieceProcessor`.

    Returns:
        dict {piece id: (tuple of ids, tuple of pieces)}.
    """
    splits = {}
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if is_digit_comma_piece(piece) and not (
            sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i)
        ):
            pieces = tuple(sp.encode(piece[:-1].replace(WORD_START, ""), out_type=str)) + (",",)
            splits[i] = (tuple(sp.piece_to_id(p) for p in pieces), pieces)
    return splits


def _training_error(error, num_texts, vocab_size, character_coverage, byte_fallback):
    """SentencePiece's RuntimeError as a UserError naming the argument (and flag) to change."""
    message = str(error)
    if num_texts == 0:
        return NoTrainingText(
            "There is no text to train on: every sentence of the corpus (`sentences`, `--input`) is empty "
            "after preprocessing."
        )
    too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if too_small:
        needed = int(too_small.group(1))
        extra = NUM_SPECIAL_IDS + (256 if byte_fallback else 0)
        return UserError(
            f"`vocab_size` (`--vocab-size`) is too small for the corpus: the {needed - extra} characters that "
            f"cover {character_coverage} of its text (character_coverage), {NUM_SPECIAL_IDS} special pieces"
            f"{' and 256 byte pieces' if byte_fallback else ''} need at least {needed}. Received: "
            f"vocab_size={vocab_size}. Use vocab_size >= {needed} or a lower `character_coverage` "
            f"(`--character-coverage`)."
        )
    too_large = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", message)
    if too_large:
        return UserError(
            f"`vocab_size` (`--vocab-size`) is larger than the corpus has pieces for: at most "
            f"{too_large.group(1)}. Received: vocab_size={vocab_size}. Use a smaller vocab_size or more text."
        )
    return UserError(f"SentencePiece training failed: {message}")


def _trainer_options(vocab_size, character_coverage, input_sentence_size, num_threads, byte_fallback=False):
    """SentencePiece trainer flags matching the original ALBERT vocabulary."""
    options = dict(
        model_type="unigram",
        vocab_size=vocab_size,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=-1,
        eos_id=-1,
        # Control symbols get fixed ids right after <pad>/<unk> and, unlike
        # user-defined symbols, are never produced from plain text.
        control_symbols=[CLS_PIECE, SEP_PIECE, MASK_PIECE],
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        byte_fallback=byte_fallback,
        minloglevel=2,
    )
    if num_threads is not None:
        options["num_threads"] = num_threads
    return options
