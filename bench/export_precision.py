"""A bf16 export against the float32 export of one sentiment classifier, on the Rotten Tomatoes test split.

Exports the classifier twice with `albert-tf export --mixed-precision float32` and
`--mixed-precision mixed_bfloat16`, runs every test sentence through each export's
`serve_text` (loaded with `tf.saved_model.load`, as TF-Serving runs it),
and reports each one's accuracy, how many sentences get the same label from
both, and the largest difference of a probability. The test split is
bench/finetune_sentiment.py's (Rotten Tomatoes sentences, seeded 80/10/10),
so a classifier it fine-tuned never saw these sentences.

    python bench/finetune_sentiment.py --pretrained runs/demo/final --out runs/sentiment
    python bench/export_precision.py --model runs/sentiment/pretrained

or, fine-tuning here first (one run, the best epoch on dev):

    python bench/export_precision.py --pretrained runs/demo/final --out runs/export_precision [--epochs 2]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, split_rows, task_rows, write_csv

PRECISIONS = ("float32", "mixed_bfloat16")
BATCH = 64


def albert_tf_command():
    script = os.path.join(os.path.dirname(sys.executable), "albert-tf")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "albert_tf.cli"]


def finetune_classifier(pretrained, out, split, args):
    """Fine-tunes `pretrained` on the split's train part (best epoch on dev); returns the run directory."""
    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.models import AlbertBackbone
    from albert_tf.recipes import FinetuneConfig, finetune

    os.makedirs(out, exist_ok=True)
    paths = {name: write_csv(os.path.join(out, f"{name}.csv"), rows) for name, rows in split.items()}
    config = FinetuneConfig(
        task="classification", max_seq_length=args.max_seq_length, batch_size=args.batch_size, epochs=args.epochs,
        learning_rate=args.learning_rate, seed=args.seed, truncate=True, label_names=("negative", "positive"),
    )
    run_dir = os.path.join(out, "run")
    finetune(config, AlbertBackbone.from_pretrained(pretrained), find_tokenizer(pretrained), paths["train"],
             paths["dev"], run_dir)
    return run_dir


def export(model, out, precision):
    """`albert-tf export --mixed-precision PRECISION`; returns (version directory, the command's precision line)."""
    done = subprocess.run(albert_tf_command() + ["export", "--model", model, "--format", "saved_model", "--out", out,
                                                 "--mixed-precision", precision], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"albert-tf export --mixed-precision {precision} failed:\n{done.stdout}\n{done.stderr}")
    line = next((l for l in done.stdout.splitlines() if l.startswith("Precision:")), "")
    return os.path.join(out, "1"), line


def predict(version_dir, texts):
    """(labels, probabilities (n, 2)) of serve_text over `texts`, in batches."""
    import tensorflow as tf

    from albert_tf.export import load_saved_model

    signature = load_saved_model(version_dir).signatures["serve_text"]
    labels, probabilities = [], []
    for start in range(0, len(texts), BATCH):
        out = signature(text=tf.constant(texts[start : start + BATCH]))
        labels += [label.decode() for label in out["labels"].numpy()]
        probabilities.append(out["probabilities"].numpy())
    return labels, np.concatenate(probabilities)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="A fine-tuned Rotten Tomatoes classifier (run directory).")
    source.add_argument("--pretrained", help="A pretrained directory to fine-tune first (e.g. runs/demo/final).")
    parser.add_argument("--out", default="runs/export_precision", help="--pretrained: where the fine-tuning goes.")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED)
    parser.add_argument("--limit", type=int, default=None, help="--pretrained: use only this many sentences.")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    split = split_rows(task_rows("rt"), args.split_seed, limit=args.limit)
    model = args.model or finetune_classifier(args.pretrained, args.out, split, args)
    texts = [text for text, _ in split["test"]]
    gold = ["positive" if label else "negative" for _, label in split["test"]]
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for precision in PRECISIONS:
            version, line = export(model, os.path.join(workdir, precision), precision)
            print(line, file=sys.stderr)
            with open(os.path.join(version, "assets.extra", "albert_tf_export.json")) as f:
                recorded = json.load(f)["precision"]
            if recorded != precision:
                raise RuntimeError(f"{version} records precision {recorded!r}, not {precision!r}.")
            results[precision] = predict(version, texts)

    (labels32, probs32), (labels16, probs16) = results["float32"], results["mixed_bfloat16"]
    accuracy = {p: np.mean([a == b for a, b in zip(results[p][0], gold)]) for p in PRECISIONS}
    same = sum(a == b for a, b in zip(labels32, labels16))
    table = [
        f"{model}: Rotten Tomatoes test split (seed {args.split_seed}), {len(texts)} sentences, through each "
        f"export's serve_text. {cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(cpu_flags()) or 'none'}.",
        "",
        "| export | accuracy | correct |",
        "|---|---:|---:|",
    ] + [f"| {p} | {accuracy[p]:.4f} | {round(accuracy[p] * len(texts))} / {len(texts)} |" for p in PRECISIONS] + [
        "",
        f"Same label from both: {same} / {len(texts)}. Largest |probability difference|: "
        f"{np.abs(probs16 - probs32).max():.4f}.",
    ]
    emit_table("\n".join(table), args.write)


if __name__ == "__main__":
    main()
