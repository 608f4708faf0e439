"""Token classification data: words with one tag each.

Formats: JSONL with `{"tokens": [...], "tags": [...]}` per line (field names
configurable), or CoNLL-style text with one "word ... tag" per line (first
and last whitespace-separated fields) and a blank line between sentences.
"""

import dataclasses

import numpy as np

from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from input_pipeline.features import IGNORE_LABEL
from input_pipeline.finetuning.examples import RowLog, check_label_name
from input_pipeline.jsonl import read_jsonl
from input_pipeline.packing import pack
from input_pipeline.tokenizer import UNK_ID


@dataclasses.dataclass(frozen=True)
class TaggedExample:
    words: tuple
    tags: tuple | None  # tag strings, or None when unlabelled
    source: str


def _conll_sentences(path):
    words, tags, start = [], [], None
    with files.open_text(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    yield start, words, tags
                words, tags, start = [], [], None
                continue
            start = start or number
            words.append(fields[0])
            tags.append(fields[-1] if len(fields) > 1 else None)
    if words:
        yield start, words, tags


def read_tagging(path, labelled=True, tokens_field="tokens", tags_field="tags", on_error="raise"):
    """Reads tagged sentences. Returns: `ReadResult` of `TaggedExample`s."""
    log = RowLog(on_error)
    if path.endswith(".jsonl") or path.endswith(".json"):
        with files.open_text(path) as f:
            # (line, (words, tags)), or (line, None) for a blank line.
            rows = [(number, None if row is None else (row.get(tokens_field), row.get(tags_field)))
                    for number, row in read_jsonl(f, path, blanks=True)]
    else:
        # Blank lines separate the sentences there: they are no rows of their own.
        rows = [(start, (words, tags)) for start, words, tags in _conll_sentences(path)]
    for number, fields in rows:
        source = f"{path}:{number}"
        if fields is None:
            log.blank(source)
            continue
        words, tags = fields
        if not isinstance(words, list) or not words:
            log.bad_row(source, f"missing or empty {tokens_field!r} list")
            continue
        if labelled:
            if not isinstance(tags, list) or None in tags or len(tags) != len(words):
                log.bad_row(source, f"needs one tag per word: {len(words)} words, tags {tags!r}")
                continue
            tags = tuple(str(t) for t in tags)
        log.keep(TaggedExample(tuple(str(w) for w in words), tags if labelled else None, source))
    return log.result()


def tag_set(examples):
    """Sorted distinct tags of labelled examples (`check_label_name`d, naming each one's row)."""
    return sorted({check_label_name(t, e.source) for e in examples for t in e.tags})


class TaggingEncoder:
    """Pieces each word and labels only its first piece.

    Args:
        tokenizer: an `AlbertTokenizer`.
        max_seq_length: longest input, [CLS] and [SEP] included.
        label_names: the tag set (tag i = label_names[i]).
        truncate: False raises on a sentence that does not fit, naming it;
            True drops its last words (their tags are then not predicted)
            and counts it in `num_truncated`.
    """

    def __init__(self, tokenizer, max_seq_length, label_names, truncate=False):
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.label_names = list(label_names)
        self._ids = {t: i for i, t in enumerate(self.label_names)}
        self.truncate = truncate
        self.num_truncated = 0

    def encode(self, example):
        """Returns: (inputs dict of (seq,), labels (seq,) int32, first_piece positions per word)."""
        pieces, labels, first = [], [IGNORE_LABEL], []
        for w, word in enumerate(example.words):
            ids = self.tokenizer.encode(word) or [UNK_ID]
            if len(pieces) + len(ids) > self.max_seq_length - 2:
                if not self.truncate:
                    total = sum(len(self.tokenizer.encode(x) or [0]) for x in example.words) + 2
                    raise UserError(
                        f"{example.source}: {total} pieces, longer than max_seq_length="
                        f"{self.max_seq_length}. Raise --max-seq-length or pass --truncate."
                    )
                self.num_truncated += 1
                break
            first.append(len(pieces) + 1)
            if example.tags is not None:
                tag = example.tags[w]
                if tag not in self._ids:
                    raise UserError(f"{example.source}: tag {tag!r} is not in the tag set {self.label_names}")
                labels.append(self._ids[tag])
            else:
                labels.append(IGNORE_LABEL)
            labels.extend([IGNORE_LABEL] * (len(ids) - 1))
            pieces.extend(ids)
        labels.append(IGNORE_LABEL)
        return pack(pieces), np.asarray(labels, "int32"), first

    def tags_from_logits(self, logits, first_pieces):
        """Tag names of each word from (seq, num_labels) logits."""
        return [self.label_names[int(np.argmax(logits[p]))] for p in first_pieces]
