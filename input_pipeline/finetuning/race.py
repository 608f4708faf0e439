"""RACE-style multiple choice: an article, questions, and lettered options.

RACE ships one JSON object per file: {"id", "article", "questions": [...],
"options": [[...], ...], "answers": ["A", ...]}. A directory of such files, a
.json file with one object (or a list of them), or a .jsonl file with one per
line are all read.
"""

import dataclasses
import json
import os

import numpy as np

from albert_tf.utils import files
from input_pipeline import features
from albert_tf.utils.errors import UserError
from input_pipeline.finetuning.examples import RowLog
from input_pipeline.jsonl import read_jsonl
from input_pipeline.packing import pack, truncate_pair


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    context: str
    question: str
    options: tuple
    label: int | None
    source: str


def _documents(path):
    """Yields (source, object) for every RACE object under `path`."""
    if files.isdir(path):
        for root, dirs, names in files.walk(path):
            dirs.sort()
            for name in sorted(names):
                if not name.startswith("."):
                    yield from _documents(os.path.join(root, name))
        return
    with files.open_text(path) as f:
        if path.endswith(".jsonl"):
            for number, obj in read_jsonl(f, path, require_object=False):
                yield f"{path}:{number}", obj
            return
        data = _load(f.read(), path)
    for i, obj in enumerate(data if isinstance(data, list) else [data]):
        yield (f"{path}[{i}]" if isinstance(data, list) else path), obj


def _load(text, source):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{source}: not valid JSON: {e}") from e


def read_race(path, labelled=True, on_error="raise"):
    """Reads RACE-style questions. Returns: `ReadResult` of `ChoiceExample`s."""
    log = RowLog(on_error)
    for source, obj in _documents(path):
        missing = [k for k in ("article", "questions", "options") + (("answers",) if labelled else ())
                   if k not in obj]
        if missing:
            log.bad_row(source, f"missing field(s) {missing}")
            continue
        for q, question in enumerate(obj["questions"]):
            where = f"{source} question {q}"
            options = obj["options"][q] if q < len(obj["options"]) else None
            if not options:
                log.bad_row(where, "no options")
                continue
            label = None
            if labelled:
                letter = obj["answers"][q] if q < len(obj["answers"]) else None
                letters = [chr(ord("A") + i) for i in range(len(options))]
                if letter not in letters:
                    log.bad_row(where, f"answer {letter!r} is not one of the options {letters}")
                    continue
                label = letters.index(letter)
            log.keep(ChoiceExample(obj["article"], question, tuple(options), label, where))
    return log.result()


class ChoiceEncoder:
    """Encodes each option as `[CLS] article [SEP] question+option [SEP]`.

    A cloze question ("... _ ...") has the option written into the blank,
    otherwise the option follows the question, as the original `run_race.py`.
    Articles longer than the room left are cut (RACE articles routinely
    are); `num_truncated` counts the examples that lost pieces.

    Args:
        tokenizer: an `AlbertTokenizer`.
        max_seq_length: length of each option's input.
        max_qa_length: most pieces kept for question + option.
    """

    def __init__(self, tokenizer, max_seq_length=512, max_qa_length=128):
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.max_qa_length = max_qa_length
        self.num_truncated = 0

    def encode(self, example):
        """Returns: dict of int32 arrays (num_choices, seq)."""
        article = self.tokenizer.encode(example.context)
        rows, truncated = [], False
        for option in example.options:
            qa_text = (example.question.replace("_", option) if "_" in example.question
                       else f"{example.question} {option}")
            qa = self.tokenizer.encode(qa_text)
            room = self.max_seq_length - 3
            if len(qa) > self.max_qa_length:
                qa, truncated = qa[-self.max_qa_length:], True
            if len(article) + len(qa) > room:
                truncated = True
            a, b = truncate_pair(article, qa, room)
            rows.append(pack(a, b))
        self.num_truncated += truncated
        width = max(len(r[features.TOKEN_IDS]) for r in rows)
        return {
            name: np.stack([np.pad(r[name], (0, width - len(r[name]))) for r in rows]).astype("int32")
            for name in features.BACKBONE_INPUTS
        }

    def encode_all(self, examples):
        return [self.encode(example) for example in examples]
