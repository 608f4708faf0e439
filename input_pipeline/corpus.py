"""Streaming corpus readers: files in, documents (lists of sentences) out.

Formats:
    "sentences": the original ALBERT/BERT format, one sentence per line and a
        blank line between documents.
    "lines": one document per line (a review, an article: one text per
        line, no blank lines); with `split_sentences` each line is split
        into sentences, so that sentence pairs form inside it.
    "text": plain text; each file is one document, split into sentences.
    "csv", "jsonl": one document per row, taken from a named column/field and
        split into sentences.

Files are read line by line, so memory holds one document at a time whatever
the corpus size. Empty or whitespace-only documents (a text file, row or
record with no text) are skipped and counted; in the "sentences" format any
run of blank lines is one separator.

`split_sentences=True` also splits each line of the "sentences" and "lines"
formats with the rule-based splitter below: a corpus of one text per line (a
review, an article) then gives documents of several sentences, which
sentence-order prediction needs (a one-sentence document can only be paired
with another document, so its examples always have label 1).

A "sentences" file of many lines and no blank line at all reads as one
document, which is seldom what its writer meant: `Corpus.notes` says so and
names the "lines" format.
"""

import csv
import os
import re

from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from input_pipeline.jsonl import read_jsonl
from input_pipeline.text_normalization import UNSPACED_SCRIPT_CHARS

FORMATS = ("auto", "sentences", "lines", "text", "csv", "jsonl")
# A "sentences" file of at least this many lines and no blank line gets a note (`Corpus.notes`).
_ONE_DOCUMENT_LINES = 100

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e no vol fig mt ft approx dept".split()
)
# A sentence ends at ., ! or ? (plus closing quotes/brackets) followed by space
# (English, and Korean "...다. "), or at a CJK full stop 。！？｡ (plus closing
# brackets), which needs no space after it: Japanese and Chinese put none.
_CJK_CLOSERS = "\u300d\u300f\uff09\u3015\u3011\u3009\u300b"  # 」』）〕】〉》
_SENTENCE_END = re.compile(
    r"(?P<latin>[.!?]+[\"'\u201d\u2019)\]]*\s+)"
    rf"|(?P<cjk>[\u3002\uff01\uff1f\uff61]+(?P<closers>[{_CJK_CLOSERS}\"'\u201d\u2019)\]]*)\s*)"
)
_HIRAGANA = re.compile("[\u3040-\u309f]")
# A line break next to a character of an unspaced script is no word break.
_UNSPACED_LINE_BREAK = re.compile(
    rf"(?<=[{UNSPACED_SCRIPT_CHARS}])[^\S\n]*\n\s*|[^\S\n]*\n\s*(?=[{UNSPACED_SCRIPT_CHARS}])"
)
# 「『（( and 」』）): real text mixes full- and half-width parentheses ("(50）").
_CJK_BRACKETS = ("\u300c\u300e\uff08(", "\u300d\u300f\uff09)")
# An unclosed bracket (a typo) must not glue a whole document into one sentence.
_MAX_BRACKETED_SENTENCE = 512


def _open_cjk_brackets(text):
    """Whether `text` leaves a 「『（ quotation or bracket open: its full stops end no sentence."""
    opened = sum(text.count(c) for c in _CJK_BRACKETS[0]) > sum(text.count(c) for c in _CJK_BRACKETS[1])
    return opened and len(text) <= _MAX_BRACKETED_SENTENCE


def split_sentences(text):
    """Splits a paragraph into sentences with a light rule-based splitter.

    A Latin-punctuation break needs ., ! or ? followed by whitespace and a word
    that does not start in lowercase; common abbreviations ("Mr.", "e.g.") and
    single initials ("J. Smith") do not end a sentence. This also ends Korean
    sentences ("...했다. 다음"), Hangul having no case. A CJK full stop (。！？)
    ends a sentence with or without a space after it, except inside a quotation
    or bracket (「...。...」) and when a hiragana particle follows the closing
    bracket ("「行く。」と言った" goes on).

    Returns:
        list[str] of stripped, non-empty sentences.
    """
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if end >= len(text):
            continue
        if match.group("cjk"):
            if match.group("closers") and _HIRAGANA.match(text[end]):
                continue
            if _open_cjk_brackets(text[start:end]):
                continue
        else:
            if text[end].islower():
                continue
            last_word = text[start : match.start() + 1].rsplit(None, 1)[-1].rstrip(".")
            # Initials are single cased letters; a one-syllable Hangul word ("것.") is not one.
            is_initial = len(last_word) == 1 and last_word.isalpha() and last_word.lower() != last_word.upper()
            if last_word.lower() in _ABBREVIATIONS or is_initial:
                continue
        sentences.append(text[start:end].strip())
        start = end
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def split_paragraphs_into_sentences(text):
    """Splits text into paragraphs at blank lines, then each into sentences.

    Lines are joined with a space, except next to a character of a script
    written without spaces (Japanese, Chinese), where a line break is only wrapping.
    """
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = _UNSPACED_LINE_BREAK.sub("", paragraph)
        sentences.extend(split_sentences(" ".join(paragraph.split())))
    return sentences


class Corpus:
    """An iterable of documents read from files and directories.

    Iterating yields each document as a list[str] of sentences. After (or during)
    iteration, `num_documents` and `num_empty_skipped` count what was read.

    Args:
        paths: file or directory paths (a single str is accepted). Directories
            are walked recursively in sorted order; hidden files are skipped.
        format: one of `FORMATS`. "auto" picks csv/jsonl by file extension and
            "sentences" (the original format) otherwise.
        column: the CSV column or JSONL field holding the text (csv/jsonl only).
        split_sentences: also split each line of the "sentences" and "lines"
            formats into sentences (`split_sentences`); the other formats are
            always split.

    Attributes:
        notes: lines on how files were read that their writer may not expect
            (a "sentences" file read as one document), for the caller to show.
    """

    def __init__(self, paths, format="auto", column=None, split_sentences=False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        if format not in FORMATS:
            raise UserError(f"`format` must be one of {FORMATS}. Received: format={format!r}")
        self.files = _list_files(paths)
        self.format = format
        self.column = column
        self.split_sentences = split_sentences
        for path in self.files:
            if self._format_of(path) in ("csv", "jsonl") and not column:
                raise UserError(f"{path} is {self._format_of(path)}: pass `column` naming the text field.")
        self.num_documents = 0
        self.num_empty_skipped = 0
        self.notes = []

    def __iter__(self):
        self.num_documents = self.num_empty_skipped = 0
        self.notes = []
        for path in self.files:
            for document in self._read(path):
                if document:
                    self.num_documents += 1
                    yield document
                else:
                    self.num_empty_skipped += 1

    def sentences(self):
        """Yields every sentence of every document (e.g. to train a tokenizer)."""
        for document in self:
            yield from document

    def _format_of(self, path):
        if self.format != "auto":
            return self.format
        extension = os.path.splitext(path)[1].lower()
        return {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(extension, "sentences")

    def _read(self, path):
        fmt = self._format_of(path)
        if fmt == "sentences":
            return self._read_sentence_lines(path)
        if fmt == "lines":
            return _read_lines(path, self.split_sentences)
        return {"text": _read_plain_text, "csv": _read_csv, "jsonl": _read_jsonl}[fmt](path, self.column)

    def _read_sentence_lines(self, path):
        num_documents = num_lines = 0
        for document in _read_sentence_lines(path):
            num_documents, num_lines = num_documents + 1, len(document)
            yield [s for line in document for s in split_sentences(line)] if self.split_sentences else document
        if num_documents == 1 and num_lines >= _ONE_DOCUMENT_LINES:
            self.notes.append(
                f"{path}: {num_lines} lines and no blank line, read as one document (the sentences format puts a "
                'blank line between documents); for one text per line, use the "lines" format.'
            )


def _list_files(paths):
    found = []
    for path in paths:
        path = os.fspath(path)
        if files.isdir(path):
            for root, dirs, names in files.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(os.path.join(root, n) for n in sorted(names) if not n.startswith("."))
        elif files.isfile(path):
            found.append(path)
        else:
            raise UserError(f"Input path does not exist: {path!r}")
    if not found:
        raise UserError(f"{', '.join(map(os.fspath, paths))}: no input files (a directory's hidden files are "
                        "not read).")
    return found


def _decoded_lines(path):
    """Yields the lines of a UTF-8 file (newline stripped), naming the byte offset of bad bytes."""
    offset = 0
    with files.open_file(path, "rb") as f:
        for raw in f:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{path}: invalid UTF-8 at byte offset {offset + e.start} "
                    f"({raw[e.start:e.start + 4]!r}); the corpus must be UTF-8 text."
                ) from None
            offset += len(raw)
            yield line.rstrip("\r\n")


def _read_sentence_lines(path):
    # Any run of blank (or whitespace-only) lines is one document separator.
    document = []
    for line in _decoded_lines(path):
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def _read_lines(path, split):
    for line in _decoded_lines(path):
        line = line.strip()
        yield (split_sentences(line) if split else [line]) if line else []


def _read_plain_text(path, column):
    yield split_paragraphs_into_sentences("\n".join(_decoded_lines(path)))


def _read_csv(path, column):
    rows = csv.DictReader(line + "\n" for line in _decoded_lines(path))
    if rows.fieldnames is None or column not in rows.fieldnames:
        raise UserError(f"{path}: no column {column!r}. Columns: {rows.fieldnames}")
    for row in rows:
        yield split_paragraphs_into_sentences(row[column] or "")


def _read_jsonl(path, column):
    for line_number, record in read_jsonl(_decoded_lines(path), path, require_object=False):
        if not isinstance(record, dict) or column not in record:
            raise UserError(f"{path}:{line_number}: no field {column!r} in the record.")
        yield split_paragraphs_into_sentences(str(record[column] or ""))
