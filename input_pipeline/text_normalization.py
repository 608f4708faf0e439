"""Text preprocessing applied before SentencePiece, its per-language presets, and
the guard that stops the English preset from silently rewriting other scripts.

The original ALBERT preprocessing (NFKD, drop combining marks, lowercase) is
right for English and destroys meaning elsewhere: Japanese kana lose their
voicing marks (が -> か, パ -> ハ are different words) and Hangul syllables fall
apart into conjoining jamo. The other presets normalize with NFKC, which keeps
both, and keep case.
"""

import collections
import dataclasses
import functools
import sys
import unicodedata
import warnings
from albert_tf.utils.errors import UserError

LANGUAGES = ("en", "ko", "ja", "zh", "multi")

# SentencePiece's documentation recommends 0.9995 for languages with a rich
# character set (Japanese, Chinese; Hangul has 11,172 syllables) and ~1.0 for
# small ones; 0.99995 is what the English vocabularies here were trained with.
DEFAULT_CHARACTER_COVERAGE = {"en": 0.99995, "ko": 0.9995, "ja": 0.9995, "zh": 0.9995, "multi": 0.9995}

# The 0.05% of characters a rich character set leaves out still occur in any
# real corpus (a rare Hangul syllable or kanji in 2% of lines): byte fallback
# encodes them as their UTF-8 bytes instead of <unk>, as multilingual
# SentencePiece models do, so no character is lost. English keeps the original
# ALBERT vocabulary layout.
DEFAULT_BYTE_FALLBACK = {"en": False, "ko": True, "ja": True, "zh": True, "multi": True}

# Scripts written without spaces between words (Han, kana, CJK punctuation), as
# a regex character class body. SentencePiece puts no '▁' inside such runs, so
# the word-start table and the sentence splitter treat them specially.
UNSPACED_SCRIPT_CHARS = (
    "\u3000-\u303f"  # CJK symbols and punctuation (、。「」)
    "\u3040-\u30ff"  # hiragana, katakana
    "\u31f0-\u31ff"  # katakana phonetic extensions
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han (extension A, unified, compatibility)
    "\U00020000-\U0003134f"  # Han extensions B-G
)

# Exactly the characters Python's `str.split()` treats as whitespace, written as an
# RE2 class so that the in-graph whitespace collapse agrees with the Python one.
_WHITESPACE_CLASS = r"[\t-\r\x{1c}-\x{1f}\x{85}\p{Z}]"
_NORMALIZATIONS = (None, "NFC", "NFKC")


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """Text preprocessing applied before SentencePiece, in Python and in-graph.

    The defaults are the original (English, uncased) ALBERT preprocessing,
    its `preprocess_text`, plus the split its `encode_pieces` applies after
    SentencePiece; `for_language` gives the presets. Text steps run in the
    order normalization, whitespace, accents, case. Unlike XLNet's and HF's,
    the original leaves LaTeX-style quotes (`` and '') as they are.

    Attributes:
        collapse_whitespace: strip and turn every run of whitespace into one space.
        strip_accents: NFKD-decompose, then drop the characters with a nonzero
            canonical combining class, as the original's `unicodedata.combining`
            test. Marks of class 0 (Devanagari's anusvara, most Thai vowels)
            stay; in-graph the same code points form one regex class.
        lower_case: lowercase (the released English models are uncased).
        normalization: None, "NFC" or "NFKC": Unicode normalization applied
            first. NFKC folds compatibility forms (full-width Latin, half-width
            kana, circled digits) without removing any mark.
        split_digit_comma: after SentencePiece, re-split every piece that ends
            in a digit and a comma (`▁10,` -> `▁10` `,`), as the original's
            `encode_pieces`; applied by `AlbertTokenizer`. The released models
            were pretrained with it, so they never saw such pieces. Attributes
            after `lower_case` were added later, so positional construction
            keeps its meaning.
    """

    collapse_whitespace: bool = True
    strip_accents: bool = True
    lower_case: bool = True
    normalization: str | None = None
    split_digit_comma: bool = True

    def __post_init__(self):
        if self.normalization not in _NORMALIZATIONS:
            raise UserError(
                f"`normalization` must be one of {_NORMALIZATIONS}. Received: normalization={self.normalization!r}"
            )

    @classmethod
    def for_language(cls, language):
        """The preset for one of `LANGUAGES`.

        "en" is the original preprocessing. "ko", "ja", "zh" and "multi" apply
        NFKC and neither strip marks nor lowercase: their scripts have no case,
        and Latin words inside them keep theirs, as in cased multilingual BERT.
        They differ in their default `character_coverage` (see
        `DEFAULT_CHARACTER_COVERAGE`), not in their steps, and train with byte
        fallback (`DEFAULT_BYTE_FALLBACK`). Only "en" re-splits digit-comma
        pieces: the original's heuristic for English numbers, with no
        reference to follow elsewhere.
        """
        check_language(language)
        if language == "en":
            return cls()
        return cls(normalization="NFKC", strip_accents=False, lower_case=False, split_digit_comma=False)

    @classmethod
    def from_config(cls, config, language="en"):
        """A `Preprocessing` from `dataclasses.asdict` output; missing steps take `language`'s preset.

        Configs written before a step existed lack it: a "ko" tokenizer saved
        before `split_digit_comma` keeps the "ko" preset's value (False).
        """
        return dataclasses.replace(cls.for_language(language), **config)

    def apply(self, text):
        """Preprocesses one Python string."""
        # NFKC/NFC leave ASCII unchanged: skip the pass for plain ASCII text.
        if self.normalization and not text.isascii():
            text = unicodedata.normalize(self.normalization, text)
        if self.collapse_whitespace:
            text = " ".join(text.split())
        if self.strip_accents and not text.isascii():
            text = unicodedata.normalize("NFKD", text)
            text = "".join(c for c in text if not unicodedata.combining(c))
        if self.lower_case:
            text = text.lower()
        return text

    def tf_apply(self, texts):
        """Preprocesses a tf.string tensor of any shape, in-graph, with the steps of `apply`."""
        import tensorflow as tf
        import tensorflow_text as tf_text

        # ICU's NFKC and lowercasing (used by these ops) agree with Python's on
        # every line of the Korean and Japanese test corpora (tests/pipeline/test_languages.py).
        if self.normalization:
            texts = tf_text.normalize_utf8(texts, self.normalization)
        if self.collapse_whitespace:
            texts = tf.strings.strip(tf.strings.regex_replace(texts, _WHITESPACE_CLASS + "+", " "))
        if self.strip_accents:
            texts = tf_text.normalize_utf8(texts, "NFKD")
            texts = tf.strings.regex_replace(texts, _combining_class(), "")
        if self.lower_case:
            texts = tf.strings.lower(texts, encoding="utf-8")
        return texts


@functools.cache
def _combining_class():
    """An RE2 class of the code points with a nonzero canonical combining class (Python's Unicode)."""
    return character_class([c for c in range(sys.maxunicode + 1) if unicodedata.combining(chr(c))])


def character_class(code_points):
    """An RE2 character class matching exactly `code_points` (sorted ints), as ranges."""
    code_points = list(code_points)
    ranges, start = [], code_points[0]
    for previous, current in zip(code_points, code_points[1:] + [None]):
        if current != previous + 1:
            ranges.append(f"\\x{{{start:x}}}" + (f"-\\x{{{previous:x}}}" if previous != start else ""))
            start = current
    return "[" + "".join(ranges) + "]"


def is_digit_comma_piece(piece):
    """Whether the original's `encode_pieces` re-splits this SentencePiece piece: longer than
    one character, ending in a digit (`str.isdigit`) and a comma, such as `▁10,` or `000,`."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def check_language(language):
    if language not in LANGUAGES:
        raise UserError(f"`language` must be one of {LANGUAGES}. Received: language={language!r}")


# ---- the guard against accent stripping on scripts where marks carry meaning -----------

# Latin marks that (nearly) only Vietnamese uses: horn (ơ, ư) and hook above (ả).
_VIETNAMESE_MARKS = frozenset("\u031b\u0309")
_CASED_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC", "COMBINING")


def _script_damage(char):
    """What accent stripping does to `char` that changes its meaning, or None.

    Returns:
        "Hangul", "kana" or "other" (marks that are letters of their script:
        Indic viramas and nuktas, Thai tone marks and lower vowels, Arabic and
        Hebrew points, Vietnamese tones); None for characters it leaves alone or whose accents the English
        preset means to drop (é -> e).
    """
    if "\uac00" <= char <= "\ud7a3":
        return "Hangul"  # NFKD turns each syllable into 2-3 conjoining jamo.
    decomposed = unicodedata.normalize("NFKD", char)
    marks = [c for c in decomposed if unicodedata.combining(c)]
    if not marks:
        return None
    if not unicodedata.category(decomposed[0]).startswith(("L", "M")):
        return None  # a mark on a space or symbol: the spacing accent ´ used as an apostrophe
    base_name = unicodedata.name(decomposed[0], "")
    # Also catches the bare voicing marks (U+3099, half-width U+FF9E) of decomposed text.
    if "HIRAGANA" in base_name or "KATAKANA" in base_name:
        return "kana"
    if base_name.startswith(_CASED_SCRIPTS):
        if len(marks) > 1 or _VIETNAMESE_MARKS.intersection(marks):
            return "other"
        return None
    return "other"


class AccentStrippingGuard:
    """Counts the characters of a training text that accent stripping would damage.

    `observe` every raw sentence, then `check`: it raises when at least
    `max_share` of the characters would change meaning, and warns when some but
    fewer would.

    Args:
        max_share: fraction of damaged characters from which `check` raises.
    """

    def __init__(self, max_share=0.01):
        self.max_share = max_share
        self.num_chars = 0
        self.damaged = collections.Counter()  # char -> count
        self._damage_of = {}  # char -> kind or None; a corpus has few distinct characters

    def observe(self, text):
        self.num_chars += len(text)
        if text.isascii():
            return
        # Distinct characters first (C speed), counts only for the damaged ones.
        for char in set(text):
            kind = self._damage_of.get(char, False)
            if kind is False:
                kind = self._damage_of[char] = _script_damage(char)
            if kind:
                self.damaged[char] += text.count(char)

    def check(self):
        """Raises ValueError (or warns, below `max_share`) naming the damaged characters."""
        if not self.damaged:
            return
        total = sum(self.damaged.values())
        share = total / max(self.num_chars, 1)
        by_kind = collections.Counter()
        for char, count in self.damaged.items():
            by_kind[self._damage_of[char]] += count
        kind = by_kind.most_common(1)[0][0]
        language = {"Hangul": "ko", "kana": "ja"}.get(kind, "multi")
        examples = ", ".join(f"{c!r} x{n}" for c, n in self.damaged.most_common(8))
        message = (
            f"The English preprocessing (NFKD + accent stripping) would change the meaning of "
            f"{total} of {self.num_chars} characters ({share:.3%}) of the training text: Hangul "
            f"syllables fall apart into jamo, kana lose their voicing marks (が -> か), other scripts "
            f"lose vowel signs or tone marks. Most frequent: {examples}. Train with language="
            f"{language!r} (`--language {language}`), which normalizes with NFKC and keeps them."
        )
        if share >= self.max_share:
            raise UserError(message)
        warnings.warn(message, stacklevel=2)
