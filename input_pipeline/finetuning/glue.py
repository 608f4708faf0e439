"""GLUE TSV files (as the GLUE download script writes them).

Columns are found by header name; CoLA's train/dev files have no header and
get the one its README describes. Test files (no label column) read with
`labelled=False`. TSV fields are split on tabs with no quoting, as GLUE's
own readers do (MNLI and QQP texts contain unbalanced quotes).
"""

import dataclasses

from albert_tf.utils import files
from input_pipeline.finetuning.examples import (
    LabelMap, RowLog, TextExample, check_columns,
)
from albert_tf.utils.errors import UserError


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Where a GLUE task keeps its texts and labels.

    Attributes:
        text_a, text_b: header names of the text columns (text_b None for
            single-sentence tasks).
        label: header name of the label column.
        label_names: the label set, or None for regression (STS-B).
        metrics: names from `albert_tf.recipes.metrics`; the first picks the best epoch.
        implicit_header: column names for files without a header row (CoLA).
    """

    text_a: str
    text_b: str | None
    label: str
    label_names: tuple | None
    metrics: tuple
    implicit_header: tuple | None = None


GLUE_TASKS = {
    "cola": GlueTask("sentence", None, "label", ("0", "1"), ("matthews_corrcoef", "accuracy"),
                     implicit_header=("source", "label", "original_label", "sentence")),
    "sst2": GlueTask("sentence", None, "label", ("0", "1"), ("accuracy",)),
    "mrpc": GlueTask("#1 String", "#2 String", "Quality", ("0", "1"), ("f1", "accuracy")),
    "stsb": GlueTask("sentence1", "sentence2", "score", None, ("pearson", "spearman")),
    "qqp": GlueTask("question1", "question2", "is_duplicate", ("0", "1"), ("f1", "accuracy")),
    # One task for matched and mismatched: evaluate on dev_matched.tsv or dev_mismatched.tsv.
    "mnli": GlueTask("sentence1", "sentence2", "gold_label",
                     ("contradiction", "entailment", "neutral"), ("accuracy",)),
    "qnli": GlueTask("question", "sentence", "label", ("entailment", "not_entailment"), ("accuracy",)),
    "rte": GlueTask("sentence1", "sentence2", "label", ("entailment", "not_entailment"), ("accuracy",)),
    "wnli": GlueTask("sentence1", "sentence2", "label", ("0", "1"), ("accuracy",)),
}


def read_glue(path, task, labelled=True, on_error="raise", lines=None):
    """Reads one GLUE TSV file.

    Args:
        path: a train/dev/test .tsv file of `task`.
        task: a key of `GLUE_TASKS` ("mnli" reads both dev_matched and dev_mismatched).
        labelled: False for test files, whose examples get label None.
        on_error: "raise" or "skip"; see `ReadResult`.
        lines: the file's lines without their line ends, already read (text
            piped in); then `path` only names them in messages.

    Returns:
        `ReadResult` of `TextExample`s.
    """
    if task not in GLUE_TASKS:
        raise UserError(f"Unknown GLUE task {task!r}. Valid tasks: {sorted(GLUE_TASKS)}")
    spec = GLUE_TASKS[task]
    labels = LabelMap(spec.label_names)
    log = RowLog(on_error)
    if lines is None:
        with files.open_text(path) as f:
            lines = [line.rstrip("\r\n") for line in f]
    if not lines:
        raise UserError(f"{path}: the file is empty.")
    first = lines[0].split("\t")
    if spec.implicit_header and spec.text_a not in first:
        header, start = list(spec.implicit_header), 0
    else:
        header, start = first, 1
    check_columns(path, header, [spec.text_a, spec.text_b, spec.label if labelled else None])
    column = {name: i for i, name in enumerate(header)}
    needed = max(column[n] for n in (spec.text_a, spec.text_b, spec.label if labelled else None)
                 if n is not None) + 1
    for number, line in enumerate(lines[start:], start + 1):
        source = f"{path}:{number}"
        if not line.strip():
            log.blank(source)
            continue
        fields = line.split("\t")
        if len(fields) < needed:
            log.bad_row(source, f"expected {len(header)} tab-separated fields, found {len(fields)}")
            continue
        empty = [n for n in (spec.text_a, spec.text_b) if n is not None and not fields[column[n]].strip()]
        if empty:
            log.bad_row(source, f"empty text in column(s) {empty}")
            continue
        label = None
        if labelled:
            label, reason = labels.parse(fields[column[spec.label]])
            if reason:
                log.bad_row(source, reason)
                continue
        text_b = fields[column[spec.text_b]] if spec.text_b else None
        log.keep(TextExample(fields[column[spec.text_a]], text_b, label, source))
    return log.result()
