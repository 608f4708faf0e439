"""Pretraining examples: SOP/NSP pairs with whole-word n-gram masking, in NumPy.

This follows the original `create_pretraining_data.py` (see `create_instances`
and `mask_tokens` for the few documented departures), with one difference in
spirit: every random choice comes from a NumPy Generator derived from one seed,
so the same seed always gives the same examples.

Documents are tokenized once into a `TokenizedCorpus` (flat id arrays), and an
instance is just four token offsets into it, so laying out and masking an
example costs a few NumPy calls.
"""

import bisect
import collections
import dataclasses
import io
import os

import numpy as np

from albert_tf.utils import files
from input_pipeline import features
from albert_tf.utils.config_base import JsonConfig, check_choice, check_fraction, check_int_in, check_positive_int, doc
from albert_tf.utils.errors import UserError
from input_pipeline.packing import pack
from input_pipeline.tokenizer import CLS_ID, MASK_ID, NUM_SPECIAL_IDS, SEP_ID

TASKS = ("sop", "nsp", "single")


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig(JsonConfig):
    """How examples are cut and masked; defaults are the original's.

    Each field's meaning is its `help` below (also the command line's help).
    """

    max_seq_length: int = doc(512, "Tokens per example, [CLS] and [SEP]s included.")
    max_predictions_per_seq: int = doc(20, "Cap on masked tokens (the MLM label slots).")
    masked_lm_prob: float = doc(0.15, "Fraction of tokens to mask.")
    short_seq_prob: float = doc(0.1, "Probability that an example aims at a random shorter length.")
    max_ngram: int = doc(3, "Longest masked span, in words; p(n) is proportional to 1/n.", flag="ngram")
    task: str = doc("sop", "sop (sentence order), nsp (random-document B) or single (one segment, label "
                    "always 0; for ablations).", choices=TASKS)

    def __post_init__(self):
        check_choice("task", self.task, TASKS)
        check_int_in("max_seq_length", self.max_seq_length, 5, 1 << 20)
        check_int_in("max_predictions_per_seq", self.max_predictions_per_seq, 1, self.max_seq_length,
                     high_name="max_seq_length")
        check_fraction("masked_lm_prob", self.masked_lm_prob, low_open=True, high_open=True)
        check_fraction("short_seq_prob", self.short_seq_prob)
        check_positive_int("max_ngram", self.max_ngram)

    @property
    def max_num_tokens(self):
        """Tokens left for the segments after [CLS] and the [SEP]s."""
        return self.max_seq_length - (2 if self.task == "single" else 3)


@dataclasses.dataclass(frozen=True)
class TokenizedCorpus:
    """Documents tokenized once, as flat arrays.

    Attributes:
        token_ids: int32 [num_tokens], every sentence of every document in order.
        sentence_splits: int64 [num_sentences + 1]; sentence i is
            token_ids[sentence_splits[i]:sentence_splits[i + 1]].
        document_splits: int64 [num_documents + 1]; document d is sentences
            document_splits[d] to document_splits[d + 1] (exclusive).
        word_starts: bool [vocab_size]; True for pieces that begin a word.
    """

    token_ids: np.ndarray
    sentence_splits: np.ndarray
    document_splits: np.ndarray
    word_starts: np.ndarray

    _ARRAYS = ("token_ids", "sentence_splits", "document_splits", "word_starts")

    @property
    def vocab_size(self):
        return len(self.word_starts)

    @property
    def num_documents(self):
        return len(self.document_splits) - 1

    @classmethod
    def from_documents(cls, documents, tokenizer, batch_size=512):
        """Tokenizes an iterable of documents (lists of sentences).

        Sentences that tokenize to nothing are dropped, then documents left empty.
        """
        id_chunks, sentence_lengths, document_lengths = [], [], []
        batch = []
        for document in documents:
            batch.append(document)
            if len(batch) == batch_size:
                _tokenize_batch(batch, tokenizer, id_chunks, sentence_lengths, document_lengths)
                batch = []
        _tokenize_batch(batch, tokenizer, id_chunks, sentence_lengths, document_lengths)
        if not document_lengths:
            raise UserError("The corpus has no non-empty documents.")
        return cls(
            token_ids=np.concatenate(id_chunks).astype(np.int32),
            sentence_splits=np.concatenate([[0], np.cumsum(sentence_lengths)]).astype(np.int64),
            document_splits=np.concatenate([[0], np.cumsum(document_lengths)]).astype(np.int64),
            word_starts=tokenizer.word_start_table(),
        )

    def save(self, directory):
        """Writes one .npy file per array (memory-mappable by `load`), the directory whole (`files.publish`)."""
        with files.publish(directory) as staging:
            for name in self._ARRAYS:
                with files.open_file(os.path.join(staging, name + ".npy"), "wb") as f:
                    np.save(f, getattr(self, name))

    @classmethod
    def load(cls, directory, mmap=True):
        """Reads a saved corpus, from a local directory or a URL (gs://...).

        With `mmap` a local corpus's arrays stay on disk until used; a URL's
        are read whole into memory (an object store cannot be memory-mapped).
        """
        paths = {name: os.path.join(directory, name + ".npy") for name in cls._ARRAYS}
        missing = [p for p in paths.values() if not files.isfile(p)]
        if missing:
            raise UserError(f"{directory!r} is not a saved TokenizedCorpus; missing {missing}")
        if files.is_url(directory):
            return cls(**{name: np.load(io.BytesIO(files.read_bytes(path))) for name, path in paths.items()})
        mode = "r" if mmap else None
        return cls(**{name: np.load(path, mmap_mode=mode) for name, path in paths.items()})


def _tokenize_batch(documents, tokenizer, id_chunks, sentence_lengths, document_lengths):
    if not documents:
        return
    sentences = [s for document in documents for s in document]
    encoded = iter(tokenizer.encode_batch(sentences))
    for document in documents:
        kept = 0
        for ids in (next(encoded) for _ in document):
            if ids:
                id_chunks.append(np.asarray(ids, dtype=np.int32))
                sentence_lengths.append(len(ids))
                kept += 1
        if kept:
            document_lengths.append(kept)


# An instance: segments A and B as [start, end) offsets into `token_ids` (B is
# empty in "single" mode), the sentence-order label, and the seed of its masking.
Instance = collections.namedtuple("Instance", "a_start a_end b_start b_end label mask_seed")


def create_instances(corpus, document, config, rng):
    """Cuts one document into instances, as the original does.

    Sentences are accumulated to a target length, split into A and B at a
    random sentence boundary, and (SOP) swapped with probability 0.5. A chunk of
    one sentence, and half of all chunks in NSP mode, take B from a random other
    document (label 1); the unused sentences go back to the document.

    Departure: the target length (max_num_tokens, or with probability
    `short_seq_prob` a random length in [2, max_num_tokens]) is drawn for every
    instance. The original draws it once per document, so a document that draws
    short is cut entirely into short instances and far more than 10% of the
    sequences end up short.

    Args:
        corpus: a `TokenizedCorpus`.
        document: index of the document in `corpus`.
        config: a `PretrainingDataConfig`.
        rng: numpy Generator; consumed in a fixed order, so it determines the result.

    Returns:
        list of `Instance`.
    """
    bounds = corpus.sentence_splits
    first, last = int(corpus.document_splits[document]), int(corpus.document_splits[document + 1])
    instances = []
    chunk_start, i = first, first
    target = _target_length(config, rng)
    while i < last:
        if i == last - 1 or bounds[i + 1] - bounds[chunk_start] >= target:
            num_sentences = i + 1 - chunk_start
            if config.task == "single":
                a, b, label = (bounds[chunk_start], bounds[i + 1]), (0, 0), 0
            else:
                a_end = chunk_start + (int(rng.integers(1, num_sentences)) if num_sentences >= 2 else 1)
                a = (bounds[chunk_start], bounds[a_end])
                if num_sentences == 1 or (config.task == "nsp" and rng.random() < 0.5):
                    b = _random_document_segment(corpus, document, target - (a[1] - a[0]), rng)
                    label = 1
                    i = a_end - 1  # Put the sentences B did not use back.
                elif config.task == "sop" and rng.random() < 0.5:
                    a, b, label = (bounds[a_end], bounds[i + 1]), a, 1
                else:
                    b, label = (bounds[a_end], bounds[i + 1]), 0
            a, b = _truncate_pair(a, b, config.max_num_tokens, rng)
            instances.append(Instance(a[0], a[1], b[0], b[1], label, int(rng.integers(2**63))))
            chunk_start = i + 1
            target = _target_length(config, rng)
        i += 1
    return instances


def _target_length(config, rng):
    if rng.random() < config.short_seq_prob:
        return int(rng.integers(2, config.max_num_tokens + 1))
    return config.max_num_tokens


def _random_document_segment(corpus, document, target_length, rng):
    """Sentences from a random other document, from a random start up to `target_length` tokens."""
    for _ in range(10):  # As the original: give up avoiding `document` after 10 tries.
        other = int(rng.integers(corpus.num_documents))
        if other != document:
            break
    first, last = int(corpus.document_splits[other]), int(corpus.document_splits[other + 1])
    start = int(rng.integers(first, last))
    bounds = corpus.sentence_splits
    b_start = bounds[start]
    # The first sentence end at or past the target, taking at least one sentence.
    end = int(np.searchsorted(bounds[start + 1 : last + 1], b_start + target_length)) + start + 1
    return b_start, bounds[min(end, last)]


def _truncate_pair(a, b, max_num_tokens, rng):
    """Trims the longer segment, from the front or the back at random, until the pair fits.

    The original removes one token at a time from the longer segment (B on ties),
    choosing front or back with a coin flip each time. Here the number of tokens
    removed from each segment is computed in closed form and the number taken
    from the front is Binomial(removed, 0.5): the same distribution.
    """
    len_a, len_b = a[1] - a[0], b[1] - b[0]
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return a, b
    if len_a > len_b:
        first = min(excess, len_a - len_b)
        cut_a, cut_b = first + (excess - first) // 2, (excess - first + 1) // 2
    else:
        first = min(excess, len_b - len_a)
        cut_a, cut_b = (excess - first) // 2, first + (excess - first + 1) // 2
    front_a, front_b = rng.binomial(cut_a, 0.5), rng.binomial(cut_b, 0.5)
    return (a[0] + front_a, a[1] - (cut_a - front_a)), (b[0] + front_b, b[1] - (cut_b - front_b))


MaskedLm = collections.namedtuple("MaskedLm", "token_ids positions labels spans")


def mask_tokens(tokens, is_word_start, config, vocab_size, rng):
    """Whole-word n-gram masking with 80/10/10 replacement, as the original.

    Words are runs of pieces starting at a word-start piece ('▁', or in
    unspaced Japanese/Chinese every piece: `AlbertTokenizer.word_start_table`);
    [CLS]/[SEP] are never candidates. Words are visited in random order; each draws n in 1..max_ngram
    with p(n) ∝ 1/n (limited to the words left in the sequence), shortens the
    n-gram while it would overflow the budget, and is skipped if it still does
    or overlaps an earlier span.

    Departures: a segment's first piece always starts a word, so a word never
    spans a [SEP] (front truncation can leave a segment starting mid-word); the
    random replacement is drawn from ordinary pieces only (ids >= 5), never a
    special piece.

    Args:
        tokens: int32 [length], the laid-out example ([CLS] A [SEP] B [SEP]).
        is_word_start: bool [length], False at [CLS]/[SEP], True at each word's first piece.
        config: a `PretrainingDataConfig`.
        vocab_size: size of the vocabulary, for random replacements.
        rng: numpy Generator.

    Returns:
        `MaskedLm`: token_ids int32 [length] after replacement; positions int
        [num_masked] sorted; labels int32 [num_masked], the original ids;
        spans, a list of (first_word, n) in the order they were chosen.
    """
    length = len(tokens)
    budget = min(config.max_predictions_per_seq, max(1, int(round(length * config.masked_lm_prob))))
    is_special = (tokens == CLS_ID) | (tokens == SEP_ID)
    word_first = np.flatnonzero(is_word_start)
    boundaries = np.flatnonzero(is_word_start | is_special)
    # Each word ends at the next word start or special piece; the final [SEP] bounds the last one.
    word_end = boundaries[np.searchsorted(boundaries, word_first, side="right")]
    pieces_before = np.concatenate([[0], np.cumsum(word_end - word_first)])
    num_words = len(word_first)

    # The loop runs on Python lists: per-element NumPy calls would dominate its cost.
    cdfs = _ngram_cdfs(config.max_ngram)
    draws = rng.random(num_words).tolist()
    pieces_before = pieces_before.tolist()
    covered = [False] * num_words
    spans, num_masked = [], 0
    for k, word in enumerate(rng.permutation(num_words).tolist()):
        if num_masked >= budget:
            break
        max_n = min(config.max_ngram, num_words - word)
        n = min(bisect.bisect_right(cdfs[max_n], draws[k]) + 1, max_n)
        while n > 1 and num_masked + pieces_before[word + n] - pieces_before[word] > budget:
            n -= 1
        size = pieces_before[word + n] - pieces_before[word]
        if num_masked + size > budget or any(covered[word : word + n]):
            continue
        covered[word : word + n] = [True] * n
        num_masked += size
        spans.append((word, n))

    chosen = np.flatnonzero(covered)
    positions = np.concatenate(
        [np.arange(word_first[w], word_end[w]) for w in chosen] or [np.zeros(0, np.int64)]
    )
    labels = tokens[positions]
    replace = rng.random(len(positions))
    random_ids = rng.integers(NUM_SPECIAL_IDS, vocab_size, size=len(positions))
    output = tokens.copy()
    output[positions] = np.where(replace < 0.8, MASK_ID, np.where(replace < 0.9, labels, random_ids))
    return MaskedLm(output, positions, labels, spans)


_CDF_CACHE = {}


def _ngram_cdfs(max_ngram):
    """cdfs[m]: cumulative p(n) ∝ 1/n over n = 1..m, for every m <= max_ngram."""
    if max_ngram not in _CDF_CACHE:
        weights = 1.0 / np.arange(1, max_ngram + 1)
        _CDF_CACHE[max_ngram] = [None] + [
            (np.cumsum(weights[:m]) / weights[:m].sum()).tolist() for m in range(1, max_ngram + 1)
        ]
    return _CDF_CACHE[max_ngram]


def lay_out(corpus, instance):
    """[CLS] A [SEP] B [SEP] (or [CLS] A [SEP]) with word starts.

    Returns:
        (tokens int32 [length], is_word_start bool [length], length of A).
    """
    a = corpus.token_ids[instance.a_start : instance.a_end]
    b = corpus.token_ids[instance.b_start : instance.b_end]
    tokens = pack(a, b if len(b) else None)[features.TOKEN_IDS]
    is_word_start = corpus.word_starts[tokens]
    # A segment's first piece starts a word even if truncation cut into a word.
    is_word_start[1] = True
    if len(b):
        is_word_start[len(a) + 2] = True
    is_word_start[[0, len(a) + 1, len(tokens) - 1]] = False
    return tokens, is_word_start, len(a)


def make_example(corpus, instance, config):
    """Builds the padded feature dict of one instance (see `input_pipeline.features`).

    Returns:
        dict: token_ids, segment_ids, padding_mask int32 [max_seq_length];
        mask_positions, mask_ids int32 [max_predictions_per_seq]; mask_weights
        float32 [max_predictions_per_seq]; sentence_order_label int32 scalar.
    """
    tokens, is_word_start, len_a = lay_out(corpus, instance)
    masked = mask_tokens(tokens, is_word_start, config, corpus.vocab_size, np.random.default_rng(instance.mask_seed))
    seq, preds, length, num_masked = config.max_seq_length, config.max_predictions_per_seq, len(tokens), len(masked.positions)
    token_ids = np.zeros(seq, np.int32)
    token_ids[:length] = masked.token_ids
    segment_ids = np.zeros(seq, np.int32)
    if instance.b_end > instance.b_start:
        segment_ids[len_a + 2 : length] = 1  # 0 through the first [SEP], then 1.
    padding_mask = np.zeros(seq, np.int32)
    padding_mask[:length] = 1
    mask_positions = np.zeros(preds, np.int32)
    mask_positions[:num_masked] = masked.positions
    mask_ids = np.zeros(preds, np.int32)
    mask_ids[:num_masked] = masked.labels
    mask_weights = np.zeros(preds, np.float32)
    mask_weights[:num_masked] = 1.0
    return {
        features.TOKEN_IDS: token_ids,
        features.SEGMENT_IDS: segment_ids,
        features.PADDING_MASK: padding_mask,
        features.MASK_POSITIONS: mask_positions,
        features.MASK_IDS: mask_ids,
        features.MASK_WEIGHTS: mask_weights,
        features.SENTENCE_ORDER_LABEL: np.int32(instance.label),
    }


@dataclasses.dataclass(frozen=True)
class PairStats:
    """What a corpus makes of the sentence-pair task (SOP or NSP).

    A document of one sentence cannot be cut into two segments, so each of its
    instances takes B from a random other document with label 1, as in the
    original: a corpus of one text per line, read one line per sentence, gives
    label 1 on every example and an SOP task with nothing to learn.

    Attributes:
        num_documents: documents of the corpus (after tokenization).
        num_single_sentence_documents: those of exactly one sentence.
        label_counts: (label 0, label 1) over the instances counted.
    """

    num_documents: int
    num_single_sentence_documents: int
    label_counts: tuple = (0, 0)

    # Shares past which the pair task is mostly (or wholly) one label.
    _SINGLE_SHARE_LIMIT = 0.5
    _SOP_LABEL_1_LIMIT = 0.75

    @classmethod
    def of(cls, corpus, instances):
        """The stats of a `TokenizedCorpus` (all its documents) and some of its `Instance`s."""
        sentences_per_document = np.diff(corpus.document_splits)
        ones = sum(instance.label for instance in instances)
        return cls(corpus.num_documents, int(np.sum(sentences_per_document == 1)), (len(instances) - ones, ones))

    def __add__(self, other):
        return PairStats(
            self.num_documents + other.num_documents,
            self.num_single_sentence_documents + other.num_single_sentence_documents,
            tuple(a + b for a, b in zip(self.label_counts, other.label_counts)),
        )

    @property
    def single_sentence_share(self):
        return self.num_single_sentence_documents / max(self.num_documents, 1)

    @property
    def label_1_share(self):
        return self.label_counts[1] / max(sum(self.label_counts), 1)

    def describe(self):
        """One line: the one-sentence documents and the label balance."""
        zeros, ones = self.label_counts
        return (
            f"{self.num_single_sentence_documents} of {self.num_documents} documents "
            f"({100 * self.single_sentence_share:.1f}%) have one sentence; sentence_order_label 0/1: "
            f"{zeros}/{ones} ({100 * (1 - self.label_1_share):.1f}%/{100 * self.label_1_share:.1f}%)"
        )

    def pairs_cannot_form(self, task):
        """Whether the pair task is mostly label 1 for want of multi-sentence documents."""
        if task == "single":
            return False
        return self.single_sentence_share >= self._SINGLE_SHARE_LIMIT or (
            task == "sop" and self.label_1_share >= self._SOP_LABEL_1_LIMIT
        )


def instances_of_documents(corpus, documents, config, seed_key):
    """Instances of several documents, in document order.

    Document d draws its layout from the Generator seeded with (*seed_key, d),
    so its instances depend only on the seed key and d, never on which other
    documents are processed alongside.

    Args:
        corpus: a `TokenizedCorpus`.
        documents: iterable of document indices.
        config: a `PretrainingDataConfig`.
        seed_key: tuple of non-negative ints, e.g. (seed, epoch).

    Returns:
        list of `Instance`.
    """
    instances = []
    for document in documents:
        rng = np.random.default_rng((*seed_key, int(document)))
        instances.extend(create_instances(corpus, int(document), config, rng))
    return instances
