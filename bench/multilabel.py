"""Multi-label tagging of Debian packages: albert-tf (pretrained, random init) against TF-IDF, tuned thresholds
against 0.5.

The data is built from Debian's package index as `apt-get update` fetches it: `apt-cache dumpavail` gives
each package's one-line Description and its debtags (Tag). The labels are FACETS, a dozen frequent debtags
of several kinds (role, language, interface, use); a package holding none of them is left out, the
Description is the text (the package name is not: "python3-" would give its language away), and packages
with the same Description are kept once. A fixed seed splits the packages into train / dev / test. Each
model picks its best epoch on dev by micro F1 and tunes each label's threshold on dev (`albert-tf
finetune`'s own tuning; the same function for TF-IDF), and is scored on test with those thresholds and
with 0.5 for every label. The TF-IDF baseline is one-vs-rest L2 logistic regression (benchlib.baselines);
it is deterministic, so its seeds agree.

    apt-get update
    python bench/multilabel.py --pretrained runs/demo/final --seeds 0 1 2 --epochs 8 --write bench/results/multilabel.md

Accuracy figures are valid on a busy machine; the wall times it prints are not timings.
"""

import argparse
import collections
import datetime
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

from benchlib.baselines import fit_logistic_regression, tfidf_features
from benchlib.machine import machine_line, measure_ceilings
from benchlib.output import emit_table

FACETS = (
    "role::program", "role::shared-lib", "role::devel-lib", "role::documentation", "role::plugin",
    "implemented-in::c", "implemented-in::perl", "implemented-in::python", "interface::commandline",
    "interface::graphical", "use::gameplaying", "works-with::text", "network::server",
)


def read_packages():
    """[(description, facets)] of every package in apt's index holding one of FACETS, sorted by package name."""
    index = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    packages = {}
    for stanza in index.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*(?:\n .*)*)", stanza, re.M))
        if "Package" not in fields or "Tag" not in fields or "Description" not in fields:
            continue
        tags = {t.strip() for t in fields["Tag"].replace("\n", " ").split(",")}
        facets = sorted(tags & set(FACETS))
        if facets:
            packages.setdefault(fields["Package"], (fields["Description"].split("\n")[0].strip(), facets))
    seen, rows = set(), []
    for name in sorted(packages):
        description, facets = packages[name]
        if description not in seen:
            seen.add(description)
            rows.append((description, facets))
    return rows


def split(rows, seed, sizes):
    """{"train", "dev", "test"} rows: a seeded permutation cut into `sizes`."""
    order = np.random.default_rng(seed).permutation(len(rows))
    parts, start = {}, 0
    for name, size in zip(("train", "dev", "test"), sizes):
        parts[name] = [rows[i] for i in order[start:start + size]]
        start += size
    return parts


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for text, labels in rows:
            f.write(json.dumps({"text": text, "labels": labels}) + "\n")
    return path


def targets(rows):
    return np.array([[facet in labels for facet in FACETS] for _, labels in rows], np.float64)


def tfidf_scores(parts, c=10.0):
    """One-vs-rest TF-IDF logistic regression: {"tuned": scores, "0.5": scores} on test."""
    from albert_tf.recipes import multilabel_metrics

    train_x, dev_x, test_x = tfidf_features(*[[text for text, _ in parts[n]] for n in ("train", "dev", "test")])
    train_y = targets(parts["train"])
    dev_p, test_p = [], []
    for label in range(len(FACETS)):
        w, b = fit_logistic_regression(train_x, train_y[:, label], c)
        dev_p.append(1 / (1 + np.exp(-(dev_x @ w + b))))
        test_p.append(1 / (1 + np.exp(-(test_x @ w + b))))
    dev_p, test_p = np.stack(dev_p, 1), np.stack(test_p, 1)
    tuned = multilabel_metrics.tune_thresholds(targets(parts["dev"]), dev_p)
    return {name: multilabel_metrics.scores(targets(parts["test"]), test_p, thresholds, FACETS)
            for name, thresholds in (("tuned", tuned), ("0.5", [0.5] * len(FACETS)))}


def albert_scores(backbone, tokenizer, paths, out, args, seed):
    """Fine-tunes `backbone` (finetune --task multilabel); {"tuned": scores, "0.5": scores} on test."""
    from albert_tf.recipes import FinetuneConfig, finetune, get_recipe, load_run, multilabel_metrics

    config = FinetuneConfig(task="multilabel", max_seq_length=args.max_seq_length, batch_size=args.batch_size,
                            epochs=args.epochs, learning_rate=args.learning_rate, seed=seed, truncate=True,
                            label_column="labels", label_names=FACETS)
    finetune(config, backbone, tokenizer, paths["train"], paths["dev"], out, log=lambda line: None)
    _, model, _, _ = load_run(out)
    recipe = get_recipe("multilabel")
    test = recipe.encode(paths["test"], tokenizer, config, model.label_names)
    rows = recipe.predictions(model, test, config)
    probabilities = np.array([[row["probabilities"][facet] for facet in FACETS] for row in rows])
    y = np.stack([e.label for e in test.examples])
    return {name: multilabel_metrics.scores(y, probabilities, thresholds, FACETS)
            for name, thresholds in (("tuned", model.thresholds), ("0.5", [0.5] * len(FACETS)))}


def spread(values):
    """'median (min-max)' of `values`."""
    return f"{np.median(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="Pretrained model directory (runs/demo/final), or "
                        "RUN/checkpoints/ckpt-STEP.")
    parser.add_argument("--out", default="runs/multilabel")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--sizes", type=int, nargs=3, default=[2000, 500, 1000], metavar=("TRAIN", "DEV", "TEST"))
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=None, help="Default: finetune's, by model width.")
    parser.add_argument("--max-seq-length", type=int, default=32)
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    import keras

    from albert_tf.models import AlbertBackbone
    from benchlib.pretrained import load_model

    rows = read_packages()
    parts = split(rows, args.split_seed, args.sizes)
    os.makedirs(args.out, exist_ok=True)
    paths = {name: write_jsonl(os.path.join(args.out, f"{name}.jsonl"), part) for name, part in parts.items()}
    counts = collections.Counter(f for _, labels in parts["train"] for f in labels)
    print(f"{len(rows)} packages; " + ", ".join(f"{k} {len(v)}" for k, v in parts.items()))
    results = collections.defaultdict(list)  # (method, thresholds) -> [scores]
    baseline = tfidf_scores(parts)
    for name, scores in baseline.items():
        results[("TF-IDF + logistic regression (one-vs-rest)", name)].append(scores)
    start = time.perf_counter()
    for seed in args.seeds:
        for init in ("pretrained", "random init"):
            backbone, tokenizer, step = load_model(args.pretrained)
            if init == "random init":
                keras.utils.set_random_seed(seed)
                backbone = AlbertBackbone(backbone.config)
            out = os.path.join(args.out, f"{init.replace(' ', '_')}_seed{seed}")
            scores = albert_scores(backbone, tokenizer, paths, out, args, seed)
            for name, s in scores.items():
                results[(f"albert-tf multilabel, {init}", name)].append(s)
            print(f"seed {seed}, {init}: test micro F1 {scores['tuned']['micro_f1']:.4f}, macro F1 "
                  f"{scores['tuned']['macro_f1']:.4f} (tuned thresholds)", flush=True)
    lines = [
        f"Command: `python bench/multilabel.py {' '.join(sys.argv[1:])}`, {datetime.date.today().isoformat()}.",
        "",
        f"Debian packages' one-line descriptions tagged with {len(FACETS)} debtags ({', '.join(FACETS)}), from "
        f"`apt-cache dumpavail`: {len(rows)} packages hold one of them; split seed {args.split_seed}: "
        + ", ".join(f"{k} {len(v)}" for k, v in parts.items()) + ". Training positives per label: "
        + ", ".join(f"{f} {counts[f]}" for f in FACETS) + ".",
        "",
        f"albert-tf: `finetune --task multilabel` from {args.pretrained}"
        + (f" (pretraining step {step})" if step else "") + f" and from random init of its config; {args.epochs} "
        f"epochs, batch {args.batch_size}, max_seq_length {args.max_seq_length}, learning rate "
        f"{args.learning_rate or 'by width'}; best epoch by dev micro F1; seeds {args.seeds}. Thresholds: "
        "\"tuned\" each label's tuned on dev for F1 (kept with the model, what predict applies), \"0.5\" every label "
        "at 0.5. Scores on test: median (min-max) over the seeds; n runs.",
        f"Machine: {machine_line(measure_ceilings())} (a busy shared machine: the scores hold, no time does; "
        f"{time.perf_counter() - start:.0f} s for the albert-tf runs).",
        "",
        "| model | thresholds | micro F1 | macro F1 | exact match | n |",
        "|---|---|---|---|---|---|",
    ]
    for (method, name), runs in results.items():
        lines.append(f"| {method} | {name} | {spread([r['micro_f1'] for r in runs])} | "
                     f"{spread([r['macro_f1'] for r in runs])} | {spread([r['exact_match'] for r in runs])} | "
                     f"{len(runs)} |")
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
