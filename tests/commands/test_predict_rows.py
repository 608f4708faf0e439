"""`albert-tf predict`'s rows: read in memory, each answered in its place.

Whatever the input form (plain lines, a table piped in, a task file), every
row is a `ReadResult.rows` entry in input order (an example, a skipped row, a
blank line), and the n-th example takes the n-th prediction. No model here:
the predictions are stand-ins numbered in order, so a row out of place shows.
"""

import io
import json
import sys

from albert_tf.commands import predict
from albert_tf.recipes import FinetuneConfig, get_recipe


def _records(path, task_name, label_names=("0", "1"), **config):
    """predict's records for `path`, each example answered by {"p": k}, the k-th prediction."""
    config = FinetuneConfig(task=task_name, skip_invalid=True, **config)
    result = predict._read(path, get_recipe(task_name), config, list(label_names))
    predictions = iter({"p": k} for k in range(len(result.examples)))
    return [{"index": i, **predict._record(row, predictions)} for i, row in enumerate(predict._answered(result.rows))]


def _stdin(monkeypatch, text):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))


def test_plain_lines_from_stdin_keep_their_places(monkeypatch):
    _stdin(monkeypatch, "\na film\none\ttwo\tthree\nanother film\n")
    assert _records("-", "sst2") == [
        {"index": 0, "error": "blank line"},
        {"index": 1, "p": 0},
        {"index": 2, "error": "expected one text or two tab-separated texts, got 3"},
        {"index": 3, "p": 1},
    ]


def test_a_table_piped_in_answers_its_rows_not_its_header(monkeypatch):
    # A blank line before the first row belongs to the header; those after it are rows of their own.
    _stdin(monkeypatch, "sentence\tlabel\n\na film\t1\n\nanother\t0\n\n")
    assert _records("-", "sst2") == [
        {"index": 0, "p": 0}, {"index": 1, "error": "blank line"}, {"index": 2, "p": 1},
        {"index": 3, "error": "blank line"},
    ]


def test_a_csv_file_with_a_quoted_multi_line_field_is_one_row(tmp_path):
    (tmp_path / "t.csv").write_text('text\n"two\nlines"\n\nlast\n')
    assert _records(str(tmp_path / "t.csv"), "classification") == [
        {"index": 0, "p": 0}, {"index": 1, "error": "blank line"}, {"index": 2, "p": 1},
    ]


def test_a_bad_squad_question_is_answered_in_its_place(tmp_path):
    context = "The film was made in Paris."
    questions = [{"id": "a", "question": "Where?"}, {"id": "b"}, {"id": "c", "question": "What?"}]
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": questions}]}]}))
    assert _records(str(path), "squad_v2", label_names=()) == [
        {"index": 0, "id": "a", "p": 0}, {"index": 1, "error": "missing field(s) ['question']"},
        {"index": 2, "id": "c", "p": 1},
    ]


def test_conll_sentences_are_the_rows_and_blank_lines_only_separate_them(tmp_path):
    (tmp_path / "t.conll").write_text("John O\nlives O\n\nMary O\n\n\nRome O\n")
    assert _records(str(tmp_path / "t.conll"), "tagging", label_names=("O",)) == [
        {"index": 0, "p": 0}, {"index": 1, "p": 1}, {"index": 2, "p": 2},
    ]
