"""Where pretraining pays off: test accuracy against the number of labelled training examples.

For each training-set size, `bench/transfer.py` fine-tunes random init and
every `--model` with the CLI defaults on the same seeded splits (the first N
training examples of each split; dev and test unchanged), caching each run
in OUT_n{N}/ (a rerun reuses it). This script gathers those results into one
table per task, with the majority label, TF-IDF + logistic regression on
whole texts and on the models' input window, and the paired difference of
every model from random init (mean over the splits, its standard error),
and draws accuracy against N.

    python bench/label_budget.py --model demo=runs/demo/final --model long=runs/demo_long_svd/final \\
        --sizes 250 500 1000 2000 --split-seed 20200209 1 2 --out runs/transfer \\
        --write bench/results/label_budget.md --plot docs/images/label_budget.png

Other flags (e.g. `--epochs 10`) pass through to bench/transfer.py; they
are part of its cache key, so give them a different `--out`.
"""

import argparse
import json
import os
import subprocess
import sys

from benchlib.output import emit_table, pyplot, save_figure
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED
from benchlib.transfer_results import mean_over_splits, paired_differences

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINES = ("majority label", "TF-IDF + logistic regression",
             "TF-IDF + logistic regression, the models' input window")
SHORT = {BASELINES[0]: "majority", BASELINES[1]: "TF-IDF + LR", BASELINES[2]: "TF-IDF + LR, window"}


def run_size(args, size, passthrough):
    """bench/transfer.py at one training-set size; returns its --json output."""
    out = f"{args.out}_n{size}"
    os.makedirs(out, exist_ok=True)
    summary = os.path.join(out, "summary.json")
    command = [sys.executable, os.path.join(HERE, "transfer.py"), "--train-limit", str(size), "--out", out,
               "--json", summary, "--tasks", *args.tasks, "--split-seed", *map(str, args.split_seed)]
    for spec in args.model:
        command += ["--model", spec]
    print(f"== {size} training examples: " + " ".join(command[1:]), flush=True)
    subprocess.run(command + passthrough, check=True)
    with open(summary) as f:
        return json.load(f)


def mean(results, row, task):
    return 100 * mean_over_splits(results, row, task)


def table(summaries, task, models):
    rows = list(BASELINES) + ["random init"] + models
    lines = [
        f"**{task}** (test {next(iter(summaries.values()))['sizes'][task]['test']} examples per split; "
        "accuracy %, mean over the splits; model - random init: points, mean (SE over the splits))",
        "",
        "| training examples | " + " | ".join(SHORT.get(r, r) for r in rows) + " | "
        + " | ".join(f"{m} - random init" for m in models) + " |",
        "|---:|" + "---:|" * (len(rows) + len(models)),
    ]
    for size, summary in summaries.items():
        results = summary["results"]
        cells = [f"{mean(results, r, task):.1f}" for r in rows]
        for m in models:
            diffs, se_mean = paired_differences(results, m, task)
            cells.append(f"{diffs.mean():+.1f} ({se_mean:.1f})")
        lines.append(f"| {size:,} | " + " | ".join(cells) + " |")
    return lines


def plot(summaries, tasks, models, path):
    plt = pyplot()
    sizes = list(summaries)
    figure, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for axis, task in zip(axes[0], tasks):
        for row, style in [("random init", "-")] + [(m, "-") for m in models] + [(BASELINES[1], "--"),
                                                                                  (BASELINES[2], ":")]:
            axis.plot(sizes, [mean(s["results"], row, task) for s in summaries.values()], marker="o",
                      linestyle=style, label=SHORT.get(row, row))
        axis.set_xscale("log")
        axis.set_xticks(sizes, [f"{s:,}" for s in sizes])
        axis.minorticks_off()
        axis.set_xlabel("labelled training examples")
        axis.set_ylabel("test accuracy (%)")
        axis.set_title(task)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    save_figure(figure, path)
    print(f"Wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--tasks", nargs="+", choices=("rt", "imdb"), default=["rt", "imdb"])
    parser.add_argument("--split-seed", type=int, nargs="+", default=[DEFAULT_SPLIT_SEED, 1, 2])
    parser.add_argument("--out", default="runs/transfer", help="Runs go to OUT_n{N}/.")
    parser.add_argument("--write", help="Also write the tables to this Markdown file.")
    parser.add_argument("--plot", help="Also draw accuracy against training examples into this PNG.")
    args, passthrough = parser.parse_known_args()
    if len(args.split_seed) < 2:
        parser.error("--split-seed needs at least 2 splits (the differences' standard error).")
    summaries = {size: run_size(args, size, passthrough) for size in sorted(args.sizes)}
    models = [spec.split("=", 1)[0] for spec in args.model]
    lines = [
        "Test accuracy against the number of labelled training examples (the first N of each seeded split's "
        "training part; dev and test fixed), fine-tuning with the CLI defaults"
        + (f" and {' '.join(passthrough)}" if passthrough else "") + f"; splits {', '.join(map(str, args.split_seed))}.",
    ]
    for task in args.tasks:
        lines += [""] + table(summaries, task, models)
    lines += ["", "`python bench/label_budget.py " + " ".join(sys.argv[1:]) + "`"]
    emit_table("\n".join(lines), args.write)
    if args.plot:
        plot(summaries, args.tasks, models, args.plot)


if __name__ == "__main__":
    main()
