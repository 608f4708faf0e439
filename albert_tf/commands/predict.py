"""`albert-tf predict`: run a fine-tuned task model on a file or stdin, one JSON line per input.

    albert-tf predict --model runs/sst2 --input test.tsv
    echo "a gorgeous, witty film" | albert-tf predict --model runs/sst2
    printf 'A man plays.\\tA man is playing.\\n' | albert-tf predict --model runs/stsb

--model is a `finetune` output directory (or its best/). A file or stdin whose
first line is a header naming the task's text column(s) (`sentence` for SST-2,
--text-column for a CSV task) is read like the task's training data, without
labels; any other text, file or stdin alike, is one text per line (a pair as
two tab-separated texts). JSON(L) files are read as the task's JSON. Tagging
reads its file format, or from stdin one whitespace-tokenized sentence per
line; SQuAD and RACE need a file (SQuAD questions need no answers).

Every input row (line, or SQuAD/RACE question) gives exactly one output line,
in input order, with its 0-based "index" (and "id" where the input has one):
a prediction, or {"index": i, "error": "..."} for a blank or invalid row.
Texts longer than the model's max_seq_length are cut, as the exported
`serve_text` signatures cut them. The output is strict JSON (a non-finite
score is null).
"""

import csv
import json
import math
import os
import sys

from albert_tf.commands.flags import add_command, add_mixed_precision_flag
from albert_tf.commands.outputs import add_overwrite_flag
from albert_tf.hub import resolve_model
from albert_tf.precision import choose_precision
from albert_tf.recipes.names import MULTILABEL_TASK
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from input_pipeline.finetuning.examples import BlankLine, ReadResult, Skipped, TextExample
from input_pipeline.finetuning.tagging import TaggedExample

_FILE_ONLY_TASKS = ("squad", "squad_v2", "race")


def add_parser(subparsers):
    parser = add_command(subparsers, "predict", description=__doc__)
    parser.add_argument("--model", required=True, metavar="DIR", help="A `finetune` output directory.")
    parser.add_argument("--input", default="-", metavar="FILE", help="Data file, or - for stdin.")
    parser.add_argument("--output", default="-", metavar="FILE", help="JSON-lines output, or - for stdout.")
    add_overwrite_flag(parser, "--output")
    parser.add_argument("--batch-size", type=int, default=64, help="Examples per forward pass.")
    add_mixed_precision_flag(parser)
    parser.add_argument("--null-score-diff-threshold", type=float, metavar="X",
                        help="squad_v2: answer \"\" when the null score beats the best span by more than this "
                        "(default: the best_f1_threshold finetune found on dev, else the run's setting).")
    parser.add_argument("--threshold", type=float, metavar="X",
                        help="multilabel: predict every label whose probability is at least X, in (0, 1) "
                        "(default: each label's threshold tuned on dev, kept in the model's config).")
    return parser


def run(args):
    # Deferred for start-up: these import TensorFlow, and the flags are read (their errors reported) before.
    from albert_tf.inference import CompiledPredictions, FrozenPredictions
    from albert_tf.models.pretrained import with_dtype_policy
    from albert_tf.recipes import get_recipe, load_run

    # --input and --output were checked before this module loaded (`early_checks`), not after minutes of predictions.
    config, model, tokenizer, record = load_run(resolve_model(args.model))
    choice = choose_precision("predict", args.mixed_precision, model.backbone.config.hidden_size)
    model = with_dtype_policy(model, choice.precision)
    if choice.compile_step == "forward":
        model, weights = CompiledPredictions(model), "variables, compiled by XLA per shape bucket"
    else:
        # Weights frozen into the graph: its casts to bfloat16 are folded once, not redone every batch.
        model = FrozenPredictions(model)
        weights = "frozen" if model.forward.frozen else "variables (too large to freeze)"
    recipe = get_recipe(config.task)
    # Bad rows become error records and long texts are cut, never a failure of the whole input.
    # fixed_shapes=False: predict runs on one device, where batches padded to their own longest are fastest.
    config = config.replace(eval_batch_size=args.batch_size, skip_invalid=True, truncate=True, fixed_shapes=False,
                            null_score_diff_threshold=_threshold(args, config, record),
                            **_label_threshold(args, config))
    result = _read(args.input, recipe, config, model.label_names)
    encoded = recipe.encode_read(result, tokenizer, config, model.label_names, labelled=False)
    predictions = iter(recipe.predictions(model, encoded, config) if encoded.inputs else [])
    records = [{"index": index, **_record(row, predictions)} for index, row in enumerate(_answered(result.rows))]
    if args.output == "-":
        _write(sys.stdout, records)
    else:
        with files.publish_output(args.output, args.overwrite, name="--output", directory=False) as staging:
            with files.open_file(staging, "w") as f:
                _write(f, records)
    errors = sum("error" in r for r in records)
    # Printed with the summary, once nothing can fail: a user error stays one line.
    print(f"Precision: {choice.describe()}; weights: {weights}", file=sys.stderr)
    print("; ".join(encoded.notes) + (f"; {errors} row{'s' if errors > 1 else ''} gave an error record" if errors else ""), file=sys.stderr)


def _input_lines(path):
    """The lines of --input (a file, or stdin for -), without their line ends.

    Lines end at "\n" (or "\r\n") only: `str.splitlines` would also split at
    U+0085, U+2028, form feeds and lone carriage returns, which real sentences
    hold (14 Rotten Tomatoes sentences contain U+0085), and an input of N lines
    would give more than N outputs. Read as bytes, so no newline translation
    happens before the split either.
    """
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        text = stream.read().decode("utf-8") if stream is not None else sys.stdin.read()
    else:
        with files.open_text(path, newline="") as f:
            text = f.read()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the end of the last line, not an empty line after it
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _is_table(recipe, config, lines):
    """Whether `lines` are the task's table: a CSV/TSV header naming its text column(s) comes first.

    CoLA's files have no header; its rows are recognized by their field count.
    """
    first = next((line for line in lines if line.strip()), "")
    glue = getattr(recipe, "glue", None)
    if glue is not None:
        if glue.implicit_header and len(first.split("\t")) == len(glue.implicit_header):
            return True
        columns = (glue.text_a, glue.text_b)
    else:
        columns = (config.text_column, config.text_pair_column)
    fields = set(first.split("\t")) | set(next(csv.reader([first]), []))
    return all(column in fields for column in columns if column)


def _threshold(args, config, record):
    if args.null_score_diff_threshold is not None:
        return args.null_score_diff_threshold
    best = record.get("best_epoch")
    found = record["history"][best - 1].get("best_f1_threshold") if best else None
    return config.null_score_diff_threshold if found is None else found


def _label_threshold(args, config):
    """{"threshold": --threshold} for a multilabel model, {} where none is given."""
    if args.threshold is None:
        return {}
    if config.task != MULTILABEL_TASK:
        raise UserError(f"--threshold applies to --task {MULTILABEL_TASK} models; this one is {config.task}.")
    if not 0.0 < args.threshold < 1.0:
        raise UserError(f"--threshold must be in (0, 1), exclusive. Received: {args.threshold}")
    return {"threshold": args.threshold}


def _read(path, recipe, config, label_names):
    """The rows of --input as the task reads them (a `ReadResult`), in input order."""
    if config.task in _FILE_ONLY_TASKS:
        if path == "-":
            raise UserError(f"--task {config.task} reads JSON: pass --input FILE.")
        return recipe.read(path, config, labelled=False, label_names=label_names)
    if config.task == "tagging":
        if path == "-":
            return _plain_rows(_input_lines("-"), "<stdin>", tagging=True)
        return recipe.read(path, config, labelled=False, label_names=label_names)
    if path != "-" and os.path.splitext(path)[1].lower() in (".json", ".jsonl"):
        return recipe.read(path, config, labelled=False, label_names=label_names)
    lines = _input_lines(path)
    name = "<stdin>" if path == "-" else path
    if not _is_table(recipe, config, lines):
        return _plain_rows(lines, name)
    # A table (a file, or a file piped in): read like the task's training data; piped in, a tab in
    # its first line makes it a TSV.
    fmt = ("tsv" if "\t" in lines[0] else "csv") if path == "-" else None
    return recipe.read(name, config, labelled=False, label_names=label_names, lines=lines, fmt=fmt)


def _plain_rows(lines, name, tagging=False):
    """Plain text, one row per line: a text, or a pair as two tab-separated texts (for tagging, words).

    A blank or malformed line is a `Skipped` row in its place, answered by an
    error record; it is no skipped row of a table, so `skipped` stays empty.
    """
    rows = []
    for number, line in enumerate(lines, 1):
        source = f"{name}:{number}"
        if not line.strip():
            rows.append(Skipped(source, "blank line"))
        elif tagging:
            rows.append(TaggedExample(tuple(line.split()), None, source))
        else:
            texts = line.split("\t")
            if len(texts) > 2:
                rows.append(Skipped(source, f"expected one text or two tab-separated texts, got {len(texts)}"))
            else:
                rows.append(TextExample(texts[0], texts[1] if len(texts) > 1 else None, None, source))
    if not tagging:
        _pairs_or_singles(rows)
    return ReadResult([row for row in rows if not isinstance(row, Skipped)], [], rows)


def _pairs_or_singles(rows):
    """Turns a single text into an error row when other lines are pairs (a model takes one or the other)."""
    if any(isinstance(row, TextExample) and row.text_b is not None for row in rows):
        for i, row in enumerate(rows):
            if isinstance(row, TextExample) and row.text_b is None:
                # The words of the table reader these lines once went through, kept for the same output.
                rows[i] = Skipped(row.source, "missing value for column(s) ['text_b']")


def _answered(rows):
    """The rows answered by one output line each: all but the blank lines before a table's first row."""
    first = next((i for i, row in enumerate(rows) if not isinstance(row, BlankLine)), len(rows))
    return rows[first:]


def _record(row, predictions):
    """The output of one row: its prediction (the next of `predictions`) or its error."""
    if isinstance(row, BlankLine):
        return {"error": "blank line"}
    if isinstance(row, Skipped):
        return {"error": row.reason}
    qas_id = getattr(row, "qas_id", None)
    return {**({} if qas_id is None else {"id": qas_id}), **next(predictions)}


def _write(out, records):
    for record in records:
        out.write(json.dumps(_finite(record), allow_nan=False) + "\n")


def _finite(value):
    """`value` with NaN and infinities as None, so the line is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
