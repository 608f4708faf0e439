"""`albert-tf predict`: run a fine-tuned task model on a file or stdin, one JSON line per prediction.

    albert-tf predict --model runs/sst2 --input test.tsv
    echo "a gorgeous, witty film" | albert-tf predict --model runs/sst2
    printf 'A man plays.\\tA man is playing.\\n' | albert-tf predict --model runs/stsb

--model is a `finetune` output directory. Files are read like the task's
training data, without labels. From stdin, sentence tasks take one text per
line (a pair as two tab-separated texts) and tagging one whitespace-tokenized
sentence per line; SQuAD and RACE need a file.
"""

import argparse
import json
import os
import sys
import tempfile

from albert_tf.tasks import get_task, load_run


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "predict", help="Predict with a fine-tuned task model (file or stdin -> JSON lines).",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, metavar="DIR", help="A `finetune` output directory.")
    parser.add_argument("--input", default="-", metavar="FILE", help="Data file, or - for stdin (default).")
    parser.add_argument("--output", default="-", metavar="FILE", help="JSON-lines output, or - for stdout.")
    parser.add_argument("--batch-size", type=int, default=64)
    return parser


def _stdin_file(task_name, directory):
    """Writes stdin as a file the task's reader accepts; returns its path."""
    lines = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if task_name in ("squad", "squad_v2", "race"):
        raise ValueError(f"--task {task_name} reads JSON: pass --input FILE.")
    if task_name == "tagging":
        path = os.path.join(directory, "stdin.jsonl")
        rows = [{"tokens": line.split()} for line in lines]
    else:
        path = os.path.join(directory, "stdin.jsonl")
        rows = []
        for number, line in enumerate(lines, 1):
            texts = line.split("\t")
            if len(texts) > 2:
                raise ValueError(f"<stdin>:{number}: expected one text or two tab-separated texts, got {len(texts)}")
            rows.append({"text": texts[0], "text_b": texts[1] if len(texts) > 1 else None})
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def run(args):
    config, model, tokenizer = load_run(args.model)
    task = get_task(config.task)
    config = config.replace(eval_batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.input
        if path == "-":
            path = _stdin_file(config.task, tmp)
            if config.task not in ("tagging",):
                # stdin rows are generic tables: read them as such, with the run's labels.
                from albert_tf.tasks.registry import SentenceTask

                task = SentenceTask(config.task, regression=getattr(task, "regression", False))
                has_pair = any(json.loads(line)["text_b"] is not None for line in open(path, encoding="utf-8"))
                config = config.replace(text_column="text", text_pair_column="text_b" if has_pair else None)
        encoded = task.encode(path, tokenizer, config, model.label_names, labelled=False)
        rows = task.predictions(model, encoded, config) if encoded.inputs else []
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    try:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    print("; ".join(encoded.notes), file=sys.stderr)
