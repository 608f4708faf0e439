"""LoRA vs full fine-tuning: Rotten Tomatoes sentiment from the same pretrained model.

The split, data files and baselines are bench/transfer.py's (8,530 sentences,
seeded 80/10/10 train / dev / test; majority label; TF-IDF + logistic
regression). Each configuration runs `albert_tf.recipes.finetune` in its own
process (so its peak RSS is its own) from the same pretrained directory with
the CLI's defaults (3 epochs, batch 32, pooling "cls" unless --pooling, the default learning
rate of each mode unless --lora-learning-rate is given); the best epoch on
dev is scored on test. With several `--split-seed`s every figure is the
mean over the splits and "vs full" the mean paired difference (LoRA minus
full fine-tuning on the same split) with its standard error. Each run's
result is kept beside it (transfer_result.json, as bench/transfer.py does) and reused by a rerun with the
same settings.

    albert-tf demo --out runs/demo
    python bench/lora.py --pretrained runs/demo/final --ranks 8 [--split-seed 20200209 1 2] \
        [--write bench/results/lora.md]

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

from benchlib.baselines import majority, tfidf_logistic_regression
from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, split_rows, task_rows, write_csv
from benchlib.transfer_results import RESULT_FILE, reused


def run_one(args):
    """One fine-tuning run in this process; prints its result as one JSON line."""
    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.models import AlbertBackbone
    from albert_tf.recipes import FinetuneConfig, finetune, get_recipe, load_run

    config = FinetuneConfig(
        task="classification", truncate=True, label_names=("negative", "positive"), lora_rank=args.one_rank,
        lora_embedding_rank=args.one_embedding_rank,
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
    recipe = get_recipe("classification")
    test = recipe.encode(paths["test"], tokenizer, resolved, model.label_names)
    with open(paths["train"], encoding="utf-8") as f:
        steps = math.ceil((sum(1 for _ in f) - 1) / config.batch_size)
    epoch_seconds = [h["train_seconds"] for h in run["history"]]
    print(json.dumps({
        "test": recipe.evaluate(model, test, resolved)["accuracy"], "dev": run["best"]["accuracy"],
        "epoch": run["best_epoch"], "learning_rate": resolved.learning_rate,
        "trainable": sum(math.prod(v.shape) for v in model.trainable_weights), "total": model.count_params(),
        "step_ms": statistics.median(epoch_seconds[1:] or epoch_seconds) / steps * 1000, "seconds": seconds,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="Pretrained directory; its tokenizer is used.")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8], help="LoRA ranks to run.")
    parser.add_argument("--embedding-ranks", type=int, nargs="+", default=[0, 2],
                        help="Word-embedding LoRA ranks to run with each rank (0: the table frozen; 2: the CLI's "
                             "default).")
    parser.add_argument("--lora-learning-rate", type=float, nargs="+", default=[None],
                        help="LoRA peak rates to run (default: the CLI's LoRA default).")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pooling", choices=("cls", "mean"), default="cls")
    parser.add_argument("--out", default="runs/lora")
    parser.add_argument("--split-seed", type=int, nargs="+", default=[DEFAULT_SPLIT_SEED],
                        help="One or more splits; with several, every figure is the mean over them and "
                             "\"vs full\" the mean paired difference with its standard error.")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    # Internal: one configuration, in a child process.
    parser.add_argument("--one-rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-learning-rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--one-embedding-rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--one-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_out:
        return run_one(args)

    configurations = [("full fine-tuning", 0, None, 0)] + [
        (f"LoRA rank {rank}" + (f" + word embeddings rank {e}" if e else "") + (f", lr {lr:g}" if lr else ""),
         rank, lr, e)
        for rank in args.ranks for e in args.embedding_ranks for lr in args.lora_learning_rate
    ]
    # results[name]: one result per split, in --split-seed order.
    results = {name: [] for name, _, _, _ in configurations}
    baselines = {"majority label": [], "TF-IDF + logistic regression": []}
    for split_seed in args.split_seed:
        split = split_rows(task_rows("rt"), split_seed)
        sizes = {k: len(v) for k, v in split.items()}
        # The first default split keeps its old place.
        out = args.out if split_seed == DEFAULT_SPLIT_SEED else os.path.join(args.out, f"split{split_seed}")
        os.makedirs(out, exist_ok=True)
        for name, rows in split.items():
            write_csv(os.path.join(out, f"{name}.csv"), rows)
        print(f"rt (split seed {split_seed}): " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
        baselines["majority label"].append(majority(split["train"], split["test"]))
        baselines["TF-IDF + logistic regression"].append(tfidf_logistic_regression(split["train"], split["test"]))
        for name, rank, lr, embedding_rank in configurations:
            one_out = os.path.join(
                out, f"{args.pooling}_rank{rank}_lr{lr}" + (f"_emb{embedding_rank}" if embedding_rank else ""))
            key = {"pretrained": args.pretrained, "epochs": args.epochs, "pooling": args.pooling, "rank": rank,
                   "learning_rate": lr, "split_seed": split_seed}
            if embedding_rank:  # results kept before this option had none
                key["embedding_rank"] = embedding_rank
            r = reused(one_out, key)
            if r is None:
                command = [sys.executable, os.path.abspath(__file__), "--pretrained", args.pretrained, "--out", out,
                           "--epochs", str(args.epochs), "--pooling", args.pooling, "--one-rank", str(rank),
                           "--one-out", one_out]
                if lr:
                    command += ["--one-learning-rate", str(lr)]
                command += ["--one-embedding-rank", str(embedding_rank)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"{name} failed:\n{done.stderr[-4000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                with open(os.path.join(one_out, RESULT_FILE), "w") as f:
                    json.dump({"settings": key, "result": r}, f, indent=1)
            results[name].append(r)
            print(f"  {name}: test {r['test']:.4f}, dev {r['dev']:.4f}, {r['trainable']:,} trainable, "
                  f"{r['step_ms']:.0f} ms/step, {r['peak_gib']:.2f} GiB, {r['seconds']:.0f}s", flush=True)

    def mean(name, field):
        return statistics.mean(r[field] for r in results[name])

    full = [r["test"] for r in results["full fine-tuning"]]
    several = len(args.split_seed) > 1
    lines = [
        "Rotten Tomatoes sentences, seeded split" + (f"s ({len(args.split_seed)}; every figure is the mean over "
                                                     "them)" if several else "") + ": "
        + ", ".join(f"{k} {v}" for k, v in sizes.items())
        + f" (one standard error at 50%, one split: {math.sqrt(0.25 / sizes['test']) * 100:.1f} points). "
        f"From `{args.pretrained}`; {args.epochs} epochs, batch 32, pooling {args.pooling}, best epoch on dev. "
        f"CPU: {cpu_name()} ({os.cpu_count()} cores; {' '.join(cpu_flags())}).",
        "",
        "| model | test accuracy | vs full" + (" (SE)" if several else "") + " | trainable parameters | % of total "
        "| lr | step (ms) | peak RSS (GiB) | wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, accuracies in baselines.items():
        lines.append(f"| {name} | {statistics.mean(accuracies):.4f} | | | | | | | |")
    notes = []
    for name in results:
        first = results[name][0]
        delta = ""
        if name != "full fine-tuning":
            diffs = [100 * (r["test"] - f) for r, f in zip(results[name], full)]
            delta = f"{statistics.mean(diffs):+.1f}"
            if several:
                delta += f" ({statistics.stdev(diffs) / math.sqrt(len(diffs)):.1f})"
                notes.append(f"- {name} minus full fine-tuning, per split (seeds "
                             f"{', '.join(map(str, args.split_seed))}): " + ", ".join(f"{d:+.1f}" for d in diffs))
        lines.append(
            f"| {name} | {mean(name, 'test'):.4f} | {delta} | {first['trainable']:,} | "
            f"{100 * first['trainable'] / first['total']:.2f}% | {first['learning_rate']:.3g} | "
            f"{mean(name, 'step_ms'):.0f} | {max(r['peak_gib'] for r in results[name]):.2f} | "
            f"{mean(name, 'seconds'):.0f} |"
        )
    if notes:
        lines += [""] + notes
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
