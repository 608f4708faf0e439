"""Each start at its own best fine-tuning setting: chosen per split on dev, compared on test.

`bench/transfer.py` fine-tunes every start at one setting (the CLI's defaults
unless told otherwise). One setting can suit one start more than another:
with few labels 3 epochs leave random init under-trained, while a pretrained
start peaks at epoch 1 or 2. This script reads the `--json` results of
several transfer.py runs on the same splits, each at one setting, keeps for
every model, task and split the setting with the best dev accuracy (a tie
goes to the first one listed), and prints test accuracy at each setting and
at the dev-selected one, with every model's paired difference from random
init (mean over the splits, its standard error).

    python bench/transfer.py --model demo=runs/demo/final --train-limit 500 --split-seed 20200209 1 2 \\
        --out runs/transfer_n500 --json runs/n500_e3.json
    python bench/transfer.py --model demo=runs/demo/final --train-limit 500 --epochs 10 \\
        --split-seed 20200209 1 2 --out runs/transfer_n500_e10 --json runs/n500_e10.json
    python bench/dev_selected.py --results "3 epochs=runs/n500_e3.json" --results "10 epochs=runs/n500_e10.json" \\
        --write bench/results/dev_selected_n500.md
"""

import argparse
import json

from benchlib.output import emit_table
from benchlib.transfer_results import mean_over_splits, paired_differences

RANDOM_INIT = "random init"


def load(specs):
    """{label: transfer.py --json summary}, checked to hold the same splits and sizes."""
    summaries = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise ValueError(f"--results must be LABEL=JSON. Received: {spec!r}")
        with open(path) as f:
            summaries[label] = json.load(f)
    first_label, first = next(iter(summaries.items()))
    for label, summary in summaries.items():
        # Only the tasks both runs measured must agree: one run may have measured fewer.
        differences = [("split_seeds", summary["split_seeds"], first["split_seeds"])] + [
            (f"sizes of {task}", summary["sizes"][task], first["sizes"][task])
            for task in sorted(set(summary["sizes"]) & set(first["sizes"]))]
        for key, theirs, ours in differences:
            if theirs != ours:
                raise ValueError(f"{label!r} and {first_label!r} differ in {key}: "
                                 f"{theirs} vs {ours}; compare runs on the same splits.")
    return summaries


def fine_tuned_rows(summary):
    """The rows a run fine-tuned (they have a dev accuracy), random init first."""
    rows = [row for row, tasks in summary["results"].items()
            if any(r.get("dev") is not None for results in tasks.values() for r in results)]
    if RANDOM_INIT not in rows:
        raise ValueError(f"No {RANDOM_INIT!r} results in a summary; rows: {sorted(summary['results'])}")
    return [RANDOM_INIT] + [row for row in rows if row != RANDOM_INIT]


def select(summaries, row, task):
    """Per split: (label of the setting with the best dev accuracy, its result)."""
    per_setting = [(label, s["results"][row][task]) for label, s in summaries.items()]
    chosen = []
    for split in range(len(per_setting[0][1])):
        # max() keeps the first of equal keys: a tie goes to the setting listed first.
        label, results = max(per_setting, key=lambda item: item[1][split]["dev"])
        chosen.append((label, results[split]))
    return chosen


def task_table(summaries, task, rows):
    labels = list(summaries)
    sizes = next(iter(summaries.values()))["sizes"][task]
    selected = {row: select(summaries, row, task) for row in rows}
    as_results = {row: {task: [r for _, r in chosen]} for row, chosen in selected.items()}
    lines = [
        f"**{task}** (train {sizes['train']}, dev {sizes['dev']}, test {sizes['test']} examples per split; "
        "test accuracy %, mean over the splits; vs random init: points, mean (SE over the splits))",
        "",
        "| model | " + " | ".join(labels) + " | dev-selected | settings chosen, per split | "
        + " | ".join(f"vs random init, {label}" for label in labels) + " | vs random init, dev-selected |",
        "|---|" + "---:|" * (len(labels) + 1) + "---|" + "---:|" * (len(labels) + 1),
    ]
    for row in rows:
        cells = [f"{100 * mean_over_splits(s['results'], row, task):.1f}" for s in summaries.values()]
        cells.append(f"{100 * mean_over_splits(as_results, row, task):.1f}")
        cells.append(", ".join(label for label, _ in selected[row]))
        for results in [s["results"] for s in summaries.values()] + [as_results]:
            if row == RANDOM_INIT:
                cells.append("")
                continue
            diffs, se_mean = paired_differences(results, row, task)
            cells.append(f"{diffs.mean():+.1f} ({se_mean:.1f})")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", action="append", required=True, metavar="LABEL=JSON",
                        help="A bench/transfer.py --json file and a name for its setting (repeatable, 2 or more).")
    parser.add_argument("--write", help="Also write the tables to this Markdown file.")
    args = parser.parse_args()
    if len(args.results) < 2:
        parser.error("give at least two --results to choose between")
    summaries = load(args.results)
    first = next(iter(summaries.values()))
    rows = [row for row in fine_tuned_rows(first) if all(row in s["results"] for s in summaries.values())]
    # The tasks every run has (one run may have measured fewer).
    tasks = [task for task in first["sizes"]
             if all(task in s["results"][row] for s in summaries.values() for row in rows)]
    lines = []
    for task in tasks:
        lines += task_table(summaries, task, rows) + [""]
    emit_table("\n".join(lines).rstrip(), args.write)


if __name__ == "__main__":
    main()
