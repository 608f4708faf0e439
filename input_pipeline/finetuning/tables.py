"""Generic labelled text in CSV (with a header row) or JSONL, with named columns."""

import contextlib
import csv
import os

from albert_tf.utils import files
from input_pipeline.finetuning.examples import (
    LabelMap, RowLog, TextExample, check_columns, check_label_name,
)
from albert_tf.utils.errors import UserError
from input_pipeline.jsonl import read_jsonl

TABLE_FORMATS = ("csv", "tsv", "jsonl")


def table_format(path):
    """"csv", "tsv" or "jsonl", from the file extension."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    fmt = {"json": "jsonl", "jsonl": "jsonl", "csv": "csv", "tsv": "tsv"}.get(ext)
    if fmt is None:
        raise UserError(f"{path}: cannot tell the format from the extension; use .csv, .tsv or .jsonl.")
    return fmt


def iter_rows(path, lines=None, fmt=None, blanks=False):
    """Yields (line_number, row dict) from a CSV/TSV with a header, or a JSONL file.

    Args:
        path: the file, or the name of `lines` in messages.
        lines: the file's lines without their line ends, already read (text
            piped in), or None to read `path`.
        fmt: "csv", "tsv" or "jsonl"; None: from `path`'s extension.
        blanks: also yield (line_number, None) for each blank line after the header.

    Raises:
        ValueError: for a JSONL line that is not a JSON object, naming the line.
    """
    fmt = fmt or table_format(path)
    with files.open_text(path, newline="") if lines is None else contextlib.nullcontext() as f:
        if lines is not None:
            # csv reads the line ends: a quoted field may span lines.
            f = (line + "\n" for line in lines)
        if fmt == "jsonl":
            yield from read_jsonl(f, path, blanks=blanks)
            return
        # csv.DictReader's rows, with the blank lines it passes over made visible.
        reader = csv.reader(f, delimiter="\t" if fmt == "tsv" else ",")
        header = next(reader, None)
        for fields in reader:
            # line_num is the line the record ended on (records may span lines).
            if not fields:
                if blanks:
                    yield reader.line_num, None
                continue
            row = dict(zip(header, fields))
            if len(fields) > len(header):
                row[None] = fields[len(header):]
            row.update({name: None for name in header[len(fields):]})
            yield reader.line_num, row


def table_columns(path, lines=None, fmt=None):
    """The column names of a CSV/TSV header, or the keys of a JSONL file's first row."""
    for _, row in iter_rows(path, lines, fmt):
        return list(row)
    raise UserError(f"{path}: the file has no rows.")


def read_label_set(path, label_column):
    """The distinct labels of a file's `label_column`, sorted (numbers numerically)."""
    check_columns(path, table_columns(path), [label_column])
    values = {check_label_name(str(row[label_column]).strip(), f"{path}:{number}")
              for number, row in iter_rows(path) if row.get(label_column) is not None}
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def row_problem(row, text_columns, label_columns=()):
    """Why a table row cannot be read (a value missing, a text empty), or None; None columns are not read."""
    missing = [c for c in (*text_columns, *label_columns) if c is not None and row.get(c) is None]
    if missing:
        return f"missing value for column(s) {missing}"
    # An empty text would train (or be scored) as [CLS] [SEP] alone, a row nobody meant.
    empty = [c for c in text_columns if c is not None and not str(row[c]).strip()]
    if empty:
        return f"empty text in column(s) {empty}"
    return None


def read_table(path, text_column, text_pair_column=None, label_column=None, label_names=None,
               on_error="raise", lines=None, fmt=None):
    """Reads sentence (pair) examples from a CSV/TSV/JSONL file.

    Args:
        path: .csv / .tsv (with a header row) or .jsonl (one object per line).
        text_column: column holding the text (the first text of a pair).
        text_pair_column: column holding the second text, or None.
        label_column: column holding the label, or None for unlabelled data.
        label_names: the label set for classification (class i = label_names[i]),
            or None to read the labels as regression scores.
        on_error: "raise" or "skip"; see `ReadResult`.
        lines, fmt: the file's lines, already read, and their format; see `iter_rows`.

    Returns:
        `ReadResult` of `TextExample`s.
    """
    check_columns(path, table_columns(path, lines, fmt), [text_column, text_pair_column, label_column])
    labels = LabelMap(label_names)
    log = RowLog(on_error)
    for number, row in iter_rows(path, lines, fmt, blanks=True):
        source = f"{path}:{number}"
        if row is None:
            log.blank(source)
            continue
        problem = row_problem(row, (text_column, text_pair_column), (label_column,))
        if problem:
            log.bad_row(source, problem)
            continue
        label = None
        if label_column is not None:
            label, reason = labels.parse(row[label_column])
            if reason:
                log.bad_row(source, reason)
                continue
        text_b = str(row[text_pair_column]) if text_pair_column else None
        log.keep(TextExample(str(row[text_column]), text_b, label, source))
    return log.result()
