"""SQuAD v1.1 / v2.0: reading the JSON and cutting long contexts into windows.

Answers are given as character offsets into the raw context, while the model
sees SentencePiece pieces of the *preprocessed* (lowercased, accent-stripped)
text. The alignment is exact at the character level: the context is split at
whitespace (SentencePiece never lets a piece cross a space, so piecing word
by word gives the same pieces as piecing the whole context), each word is
preprocessed one character at a time to keep a map back to the raw
characters, and SentencePiece's own byte offsets place each piece inside the
preprocessed word. An answer then starts at the first piece ending after its
first character and ends at the last piece starting before its end, so
"(1990)." still yields the answer "1990" when "1990" is its own piece.
"""

import dataclasses
import json
import re

from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from input_pipeline.finetuning.examples import RowLog
from input_pipeline.packing import pack
from input_pipeline.tokenizer import UNK_ID

# SQuAD's length limits, in pieces (the original run_squad.py's
# max_query_length and max_answer_length): the fine-tuning defaults, and what
# the QA model's preprocessor and its `serve_text` signature use.
MAX_QUESTION_TOKENS = 64
MAX_ANSWER_TOKENS = 30


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question about one context.

    Attributes:
        qas_id: the question's id.
        question, context: raw text.
        answers: tuple of (text, start_char) gold answers; empty when impossible.
        is_impossible: SQuAD v2.0's no-answer flag.
        source: file and position, for messages.
    """

    qas_id: str
    question: str
    context: str
    answers: tuple
    is_impossible: bool
    source: str


@dataclasses.dataclass
class SquadFeature:
    """One window of one example, as the model sees it.

    Attributes:
        example_index: index of its `SquadExample` in the featurized list.
        inputs: dict of int32 arrays (seq,).
        char_spans: {position: (start_char, end_char)} for context pieces, in
            the raw context.
        max_context: {position: bool}, whether this window gives the piece its
            most context among the windows holding it (its answer is only
            trusted there).
        start_position, end_position: the answer's pieces in this window
            (inclusive); 0 ([CLS]) when the answer is not inside the window
            or there is none.
    """

    example_index: int
    inputs: dict
    char_spans: dict
    max_context: dict
    start_position: int
    end_position: int


def read_squad(path, on_error="raise", labelled=True):
    """Reads a SQuAD v1.1 or v2.0 JSON file.

    Every answer must appear in its context at its `answer_start`; an answer
    that does not is a bad row (raised, or skipped and reported). Unless
    `labelled`, questions need no answers (files to predict on).

    Returns:
        `ReadResult` of `SquadExample`s.
    """
    try:
        with files.open_text(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f'{path}: expected a SQuAD file, a JSON object with a "data" list.')
    log = RowLog(on_error)
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            context = paragraph.get("context")
            for q, qa in enumerate(paragraph.get("qas", [])):
                source = f"{path}: data[{a}].paragraphs[{p}].qas[{q}] (id {qa.get('id')!r})"
                example, reason = _parse_qa(qa, context, source, labelled)
                if reason:
                    log.bad_row(source, reason)
                else:
                    log.keep(example)
    return log.result()


def _parse_qa(qa, context, source, labelled=True):
    if not isinstance(context, str):
        return None, 'the paragraph has no "context" string'
    missing = [k for k in ("id", "question") if k not in qa]
    if missing:
        return None, f"missing field(s) {missing}"
    impossible = bool(qa.get("is_impossible", False))
    answers = []
    for answer in qa.get("answers", []):
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not isinstance(start, int):
            return None, f"an answer needs a string 'text' and an int 'answer_start'. Received: {answer}"
        if context[start : start + len(text)] != text:
            found = context.find(text)
            hint = f"; the text occurs at {found}" if found >= 0 else "; the text is not in the context"
            return None, (f"answer {text!r} is not found in the context at answer_start={start} "
                          f"(the context there reads {context[start:start + len(text)]!r}{hint})")
        answers.append((text, start))
    if labelled and not impossible and not answers:
        return None, "the question has no answers and is not marked is_impossible"
    return SquadExample(qa["id"], qa["question"], context, tuple(answers), impossible, source), None


class ContextPieces:
    """Pieces a context and keeps each piece's character span in the raw text.

    Args:
        tokenizer: an `AlbertTokenizer`.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._sp = tokenizer.processor
        self._cache = {}

    def __call__(self, context):
        """Returns: (ids list[int], spans list[(start_char, end_char)]) in raw `context`."""
        if context not in self._cache:
            self._cache = {context: self._piece(context)}  # SQuAD groups questions by context
        return self._cache[context]

    def _piece(self, context):
        ids, spans = [], []
        preprocess = self.tokenizer.preprocessing.apply
        for word in re.finditer(r"\S+", context):
            raw, offset = word.group(), word.start()
            processed = preprocess(raw)
            per_char = [preprocess(c) for c in raw]
            # raw_index[k]: the raw character that processed character k came from.
            if "".join(per_char) == processed:
                raw_index = [i for i, piece in enumerate(per_char) for _ in piece]
            else:  # context-dependent preprocessing: whole-word spans
                raw_index = None
            text = self._sp.encode(processed, return_type="proto")
            byte_to_char = _byte_to_char(processed)
            word_ids = []
            for piece in text.pieces:
                split = self.tokenizer.split_ids([piece.id])  # `▁10,` -> `▁10` `,` (the English default)
                word_ids.extend(split)
                if raw_index is None:
                    spans.extend([(offset, offset + len(raw))] * len(split))
                    continue
                begin, end = byte_to_char[piece.begin], byte_to_char[piece.end]
                if len(split) > 1:  # the digits share the piece's span, the comma has its own
                    digits_end, comma = offset + raw_index[max(end - 2, begin)] + 1, offset + raw_index[end - 1]
                    spans.extend([(offset + raw_index[begin], digits_end)] * (len(split) - 1) + [(comma, comma + 1)])
                elif end > begin:
                    spans.append((offset + raw_index[begin], offset + raw_index[end - 1] + 1))
                else:  # a lone "▁": it covers no character
                    at = offset + (raw_index[begin] if begin < len(raw_index) else len(raw))
                    spans.append((at, at))
            if not word_ids:  # a word preprocessing removes entirely (e.g. only accents)
                word_ids, spans = [UNK_ID], spans + [(offset, offset + len(raw))]
            ids.extend(word_ids)
        return ids, spans


def _byte_to_char(text):
    """Index i of the list: the character holding UTF-8 byte i (and one past the end)."""
    table = []
    for index, char in enumerate(text):
        table.extend([index] * len(char.encode("utf-8")))
    table.append(len(text))
    return table


def answer_piece_span(spans, start_char, end_char):
    """First and last piece (inclusive) covering raw characters [start_char, end_char)."""
    start = next(i for i, (s, e) in enumerate(spans) if e > start_char)
    end = max(i for i, (s, e) in enumerate(spans) if s < end_char and e > s)
    return start, max(start, end)


class SquadFeaturizer:
    """Cuts examples into `[CLS] question [SEP] context window [SEP]` features.

    Args:
        tokenizer: an `AlbertTokenizer`.
        max_seq_length: length of every window, special pieces included.
        doc_stride: pieces between the starts of consecutive windows.
        max_query_length: questions longer than this are cut (and counted in
            `num_truncated_questions`).
    """

    def __init__(self, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=MAX_QUESTION_TOKENS):
        if doc_stride < 1:
            raise UserError(f"`doc_stride` must be positive. Received: doc_stride={doc_stride}")
        if max_seq_length - max_query_length - 3 < 1:
            raise UserError(
                "`max_seq_length` must leave room for the question and some context: "
                f"max_seq_length={max_seq_length}, max_query_length={max_query_length}"
            )
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.context_pieces = ContextPieces(tokenizer)
        self.num_truncated_questions = 0

    def featurize(self, examples):
        """Returns: list of `SquadFeature`, in example order (one or more per example)."""
        out = []
        for index, example in enumerate(examples):
            out.extend(self.featurize_one(example, index))
        return out

    def featurize_one(self, example, example_index=0):
        query = self.tokenizer.encode(example.question)
        if len(query) > self.max_query_length:
            query = query[: self.max_query_length]
            self.num_truncated_questions += 1
        context_ids, spans = self.context_pieces(example.context)
        answer = None
        if example.answers and not example.is_impossible:
            text, start = example.answers[0]
            answer = answer_piece_span(spans, start, start + len(text))

        windows = self._windows(len(context_ids), self.max_seq_length - len(query) - 3)
        offset = len(query) + 2  # where the context starts: after [CLS] question [SEP]
        features_ = []
        for window_index, (start, length) in enumerate(windows):
            packed = pack(query, context_ids[start : start + length])
            char_spans, max_context = {}, {}
            for i in range(length):
                char_spans[offset + i] = spans[start + i]
                max_context[offset + i] = _is_max_context(windows, window_index, start + i)
            start_position = end_position = 0
            if answer and start <= answer[0] and answer[1] < start + length:
                start_position, end_position = answer[0] - start + offset, answer[1] - start + offset
            features_.append(SquadFeature(
                example_index, packed, char_spans, max_context, start_position, end_position,
            ))
        return features_

    def _windows(self, num_pieces, max_pieces):
        """(start, length) of each window over the context, as BERT's `run_squad.py`."""
        windows, start = [], 0
        while True:
            length = min(num_pieces - start, max_pieces)
            windows.append((start, length))
            if start + length >= num_pieces:
                return windows
            start += min(length, self.doc_stride)


def _is_max_context(windows, window_index, position):
    """Whether `windows[window_index]` holds `position` with the most context.

    A piece's context in a window is min(pieces left, pieces right), plus a
    small bonus for longer windows; the original `_check_is_max_context`.
    """
    best, best_index = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best is None or score > best:
            best, best_index = score, index
    return best_index == window_index
