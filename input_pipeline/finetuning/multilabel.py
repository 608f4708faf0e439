"""Multi-label tables: each row's labels as a JSON list, a separated cell, or one 0/1 column per label.

The three forms users have:
    JSONL          {"text": "...", "labels": ["sports", "politics"]}
    CSV/TSV cell   text,labels / "...",sports|politics   (with `separator="|"`)
    0/1 columns    text,sports,politics / "...",1,1      (with `label_columns`)
A row's label is its multi-hot vector, float32 (num_labels,), in the order of
the label names.
"""

import numpy as np

from albert_tf.utils.errors import UserError
from input_pipeline.finetuning.examples import RowLog, TextExample, check_columns
from input_pipeline.finetuning.tables import iter_rows, row_problem, table_columns

# The cells a 0/1 label column may hold.
_BINARY = {"0": 0.0, "1": 1.0, "0.0": 0.0, "1.0": 1.0, "false": 0.0, "true": 1.0}


def _cell_labels(value, separator):
    """(the labels of one cell, None) or (None, why not)."""
    if isinstance(value, list):
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
            return None, f"labels must be strings. Received: {value!r}"
        return [str(v).strip() for v in value], None
    if separator is None:
        return None, (f"holds one label, {value!r}, not a list: multilabel reads a JSON list (JSON Lines), a cell "
                      "split by --label-separator, or --label-columns; for one label per row use "
                      "--task classification")
    return [part.strip() for part in str(value).split(separator) if part.strip()], None


def read_multilabel_label_set(path, label_column, separator=None, label_columns=None):
    """The label names of a training file: `label_columns` as given, else the labels its rows hold, sorted.

    Raises:
        UserError: a missing column, or a file where every row holds exactly one
            label (a single-label column: --task classification).
    """
    columns = table_columns(path)
    if label_columns:
        check_columns(path, columns, list(label_columns))
        return list(label_columns)
    check_columns(path, columns, [label_column])
    names, counts = set(), set()
    for number, row in iter_rows(path):
        value = row.get(label_column)
        if value is None:
            continue
        labels, reason = _cell_labels(value, separator)
        if reason:
            raise UserError(f"{path}:{number}: column {label_column!r} {reason}")
        names.update(labels)
        counts.add(len(labels))
    if counts == {1}:
        raise UserError(f"{path}: every row of column {label_column!r} holds exactly one label: that is a "
                        "single-label column; use --task classification (or check --label-separator).")
    return sorted(names)


def read_multilabel_table(path, text_column, text_pair_column=None, label_column=None, label_names=None,
                          separator=None, label_columns=None, allow_empty=False, on_error="raise", lines=None,
                          fmt=None):
    """Reads multi-label examples from a CSV/TSV/JSONL file.

    Args:
        path, text_column, text_pair_column, on_error, lines, fmt: as `read_table`'s.
        label_column: the column of each row's labels (a JSON list, or a cell
            split by `separator`); None for unlabelled data.
        label_names: the label set, in output order (needed when labelled).
        separator: splits a label cell (CSV/TSV); None: cells must be JSON lists.
        label_columns: instead of `label_column`, one 0/1 column per label
            (their names are the label names).
        allow_empty: keep rows with no label; otherwise such a row is bad.

    Returns:
        `ReadResult` of `TextExample`s whose label is a float32 multi-hot
        vector (len(label_names),), or None when unlabelled.
    """
    targets = list(label_columns) if label_columns else [label_column] if label_column else []
    check_columns(path, table_columns(path, lines, fmt), [text_column, text_pair_column, *targets])
    index = {name: i for i, name in enumerate(label_names or ())}
    log = RowLog(on_error)
    for number, row in iter_rows(path, lines, fmt, blanks=True):
        source = f"{path}:{number}"
        if row is None:
            log.blank(source)
            continue
        problem = row_problem(row, (text_column, text_pair_column), targets)
        if problem:
            log.bad_row(source, problem)
            continue
        label = None
        if targets:
            label, reason = (_from_columns(row, label_columns) if label_columns
                             else _from_cell(row[label_column], label_column, separator, index, label_names))
            if reason is None and not allow_empty and not label.any():
                reason = "no labels (pass --allow-empty-labels if a text may have none)"
            if reason:
                log.bad_row(source, reason)
                continue
        text_b = str(row[text_pair_column]) if text_pair_column else None
        log.keep(TextExample(str(row[text_column]), text_b, label, source))
    return log.result()


def _from_cell(value, column, separator, index, label_names):
    labels, reason = _cell_labels(value, separator)
    if reason:
        return None, f"column {column!r} {reason}"
    unknown = [label for label in labels if label not in index]
    if unknown:
        return None, f"label(s) {unknown} not in the training labels {list(label_names)}"
    vector = np.zeros(len(index), "float32")
    vector[[index[label] for label in labels]] = 1.0
    return vector, None


def _from_columns(row, label_columns):
    values = [_BINARY.get(str(row[c]).strip().lower()) for c in label_columns]
    bad = [c for c, v in zip(label_columns, values) if v is None]
    if bad:
        return None, f"label column(s) {bad} must hold 0 or 1. Received: {[row[c] for c in bad]}"
    return np.asarray(values, "float32"), None
