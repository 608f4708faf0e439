"""LoRA vs full fine-tuning: Rotten Tomatoes sentiment from the same pretrained model.

The split, data files and baselines are bench/transfer.py's (8,530 sentences,
seeded 80/10/10 train / dev / test; majority label; TF-IDF + logistic
regression). Each configuration runs `albert_tf.tasks.finetune` in its own
process (so its peak RSS is its own) from the same pretrained directory with
the CLI's defaults (3 epochs, batch 32, pooling "cls" unless --pooling, the default learning
rate of each mode unless --lora-learning-rate is given); the best epoch on
dev is scored on test.

    albert-tf demo --out runs/demo
    python bench/lora.py --pretrained runs/demo/final --ranks 8 [--write bench/results/lora.md]

Columns: trainable parameters (and their share of the task model's), median
training step time (epoch wall time / steps, epochs 2 on, so the first
epoch's graph tracing is left out), process peak RSS.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

from bench_utils import cpu_flags, cpu_name, emit_table
from finetune_sentiment import write_csv
from transfer import majority, split_rows, task_rows, tfidf_logistic_regression


def run_one(args):
    """One fine-tuning run in this process; prints its result as one JSON line."""
    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.models import AlbertBackbone
    from albert_tf.tasks import FinetuneConfig, finetune, get_task, load_run

    config = FinetuneConfig(
        task="classification", truncate=True, label_names=("negative", "positive"), lora_rank=args.one_rank,
        learning_rate=args.one_learning_rate, epochs=args.epochs, pooling=args.pooling,
    )
    tokenizer = find_tokenizer(args.pretrained)
    paths = {name: os.path.join(args.out, f"{name}.csv") for name in ("train", "dev", "test")}
    start = time.perf_counter()
    run = finetune(config, AlbertBackbone.from_pretrained(args.pretrained), tokenizer, paths["train"], paths["dev"],
                   args.one_out, log=lambda line: None)
    seconds = time.perf_counter() - start
    # The reloaded best model has the run's LoRA state, so its trainable set is the run's.
    resolved, model, _, _ = load_run(args.one_out)
    task = get_task("classification")
    test = task.encode(paths["test"], tokenizer, resolved, model.label_names)
    with open(paths["train"], encoding="utf-8") as f:
        steps = math.ceil((sum(1 for _ in f) - 1) / config.batch_size)
    epoch_seconds = [h["train_seconds"] for h in run["history"]]
    print(json.dumps({
        "test": task.evaluate(model, test, resolved)["accuracy"], "dev": run["best"]["accuracy"],
        "epoch": run["best_epoch"], "learning_rate": resolved.learning_rate,
        "trainable": sum(math.prod(v.shape) for v in model.trainable_weights), "total": model.count_params(),
        "step_ms": statistics.median(epoch_seconds[1:] or epoch_seconds) / steps * 1000, "seconds": seconds,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="Pretrained directory; its tokenizer is used.")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8], help="LoRA ranks to run.")
    parser.add_argument("--lora-learning-rate", type=float, nargs="+", default=[None],
                        help="LoRA peak rates to run (default: the CLI's LoRA default).")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pooling", choices=("cls", "mean"), default="cls")
    parser.add_argument("--out", default="runs/lora")
    parser.add_argument("--split-seed", type=int, default=20200209)
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    # Internal: one configuration, in a child process.
    parser.add_argument("--one-rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-learning-rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--one-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_out:
        return run_one(args)

    split = split_rows(task_rows("rt"), args.split_seed)
    sizes = {k: len(v) for k, v in split.items()}
    os.makedirs(args.out, exist_ok=True)
    for name, rows in split.items():
        write_csv(os.path.join(args.out, f"{name}.csv"), rows)
    print("rt: " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    baselines = {"majority label": majority(split["train"], split["test"]),
                 "TF-IDF + logistic regression": tfidf_logistic_regression(split["train"], split["test"])}

    configurations = [("full fine-tuning", 0, None)] + [
        (f"LoRA rank {rank}" + (f", lr {lr:g}" if lr else ""), rank, lr)
        for rank in args.ranks for lr in args.lora_learning_rate
    ]
    results = {}
    for name, rank, lr in configurations:
        command = [sys.executable, os.path.abspath(__file__), "--pretrained", args.pretrained, "--out", args.out,
                   "--epochs", str(args.epochs), "--pooling", args.pooling, "--one-rank", str(rank),
                   "--one-out", os.path.join(args.out, f"{args.pooling}_rank{rank}_lr{lr}")]
        if lr:
            command += ["--one-learning-rate", str(lr)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{name} failed:\n{done.stderr[-4000:]}")
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        r = results[name]
        print(f"  {name}: test {r['test']:.4f}, dev {r['dev']:.4f}, {r['trainable']:,} trainable, "
              f"{r['step_ms']:.0f} ms/step, {r['peak_gib']:.2f} GiB, {r['seconds']:.0f}s", flush=True)

    full = results["full fine-tuning"]
    lines = [
        f"Rotten Tomatoes sentences, seeded split: " + ", ".join(f"{k} {v}" for k, v in sizes.items())
        + f" (one standard error at 50%: {math.sqrt(0.25 / sizes['test']) * 100:.1f} points). "
        f"From `{args.pretrained}`; {args.epochs} epochs, batch 32, pooling {args.pooling}, best epoch on dev. "
        f"CPU: {cpu_name()} ({os.cpu_count()} cores; {' '.join(cpu_flags())}).",
        "",
        "| model | test accuracy | vs full | trainable parameters | % of total | lr | step (ms) | peak RSS (GiB) "
        "| wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, accuracy in baselines.items():
        lines.append(f"| {name} | {accuracy:.4f} | | | | | | | |")
    for name, r in results.items():
        delta = "" if r is full else f"{(r['test'] - full['test']) * 100:+.1f}"
        lines.append(
            f"| {name} | {r['test']:.4f} | {delta} | {r['trainable']:,} | {100 * r['trainable'] / r['total']:.2f}% "
            f"| {r['learning_rate']:.3g} | {r['step_ms']:.0f} | {r['peak_gib']:.2f} | {r['seconds']:.0f} |"
        )
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
