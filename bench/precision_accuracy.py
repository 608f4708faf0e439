"""Is mixed_bfloat16 as accurate as float32? The demo's model pretrained and fine-tuned in each.

Pretrains the demo's model (`albert_tf.apps.demo`: its model, data, schedule
and held-out evaluation) twice from the same start on the same batches:

  - float32, XLA on the forward and backward pass (compile_step forward, the
    demo's float32 setting)
  - mixed_bfloat16 without XLA (compile_step none: oneDNN's kernels use a
    CPU's bf16 units, XLA's CPU backend does not)

The second run reuses the first run's tokenizer, so both read the same pieces;
the weights start from the same seed and PPMI-SVD vectors, and the batches
come from the same seeded pipeline. Each pretrained model is then fine-tuned
on Rotten Tomatoes sentences in its own precision (`FinetuneConfig.
mixed_precision`: the backbone is rebuilt under that dtype policy and the
heads follow it; the logits layer stays float32) with the fine-tuning
library's defaults, best epoch kept on dev, and scored on test, beside the
majority-class and TF-IDF + logistic regression baselines of the same split.

The tolerance is stated in `TOLERANCES` before any run: the curves are
compared at every logged step (each point a mean over `log_every` steps),
raw and smoothed (trailing mean of `--smooth` points).

Each run has its own directory under --out; rerunning resumes an
interrupted run and skips a finished one (pretraining or fine-tuning).

    python bench/precision_accuracy.py [--out runs/precision_accuracy] \\
        [--write bench/results/precision_accuracy.md]
    # a smoke run:
    python bench/precision_accuracy.py --steps 20 --documents 300 --vocab-size 1000 --limit 300 --epochs 1 --out /tmp/pa
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from benchlib.baselines import majority, tfidf_logistic_regression
from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table
from benchlib.sentiment_data import DEFAULT_SPLIT_SEED, split_rows, task_rows, write_csv

# (mixed_precision, compile_step); the first is the reference.
PRECISIONS = (("float32", "forward"), ("mixed_bfloat16", "none"))
# Fixed before the runs: bf16 rounds each matmul input to 8 significant bits,
# so single logged points may differ by a few percent; the smoothed curve
# should not on average, and the end points should be as close.
TOLERANCES = {
    "mean relative difference of the smoothed loss": 0.02,
    "relative difference of the final smoothed loss": 0.02,
    "held-out MLM accuracy difference (points)": 1.0,
}
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TEST_FILE = "test.json"


def pretrain(out, precision, compile_step, args, print_fn):
    """Runs (or resumes, or skips when finished) the demo in `precision`; returns its metrics.json dict."""
    from albert_tf.apps.demo import METRICS_FILE, run_demo
    from albert_tf.apps.demo_config import demo_config

    run_dir = os.path.join(out, precision)
    metrics_path = os.path.join(run_dir, METRICS_FILE)
    if os.path.isfile(metrics_path):
        print_fn(f"--- {precision}: finished run in {run_dir}, skipped")
        with open(metrics_path) as f:
            return json.load(f)
    trainer = {"mixed_precision": precision, "compile_step": compile_step}
    if args.steps:
        trainer.update(num_steps=args.steps, checkpoint_every=max(1, args.steps // 2),
                       log_every=max(1, min(25, args.steps // 10)))
    documents = {"documents": args.documents, "tokenizer_documents": args.documents} if args.documents else {}
    model = {"vocab_size": args.vocab_size} if args.vocab_size else None
    config = demo_config(model=model, trainer=trainer, **documents)
    reference = os.path.join(out, PRECISIONS[0][0], "tokenizer")
    if precision != PRECISIONS[0][0] and not os.path.isdir(os.path.join(run_dir, "tokenizer")):
        shutil.copytree(reference, os.path.join(run_dir, "tokenizer"))  # the same pieces in both runs
    print_fn(f"--- {precision}, compile_step {compile_step} -> {run_dir}")
    return run_demo(run_dir, config, print_fn=print_fn)


def finetune_sentiment(out, precision, paths, args, print_fn):
    """Fine-tunes `out/precision/final` in `precision` (skipped when done); returns {dev, test, best_epoch, seconds}."""
    from albert_tf.models import AlbertBackbone
    from albert_tf.recipes import FinetuneConfig, finetune, get_recipe, load_run
    from albert_tf.model_dirs import find_tokenizer

    run_dir = os.path.join(out, precision, "sentiment")
    result_path = os.path.join(run_dir, _TEST_FILE)
    if os.path.isfile(result_path):
        with open(result_path) as f:
            return json.load(f)
    pretrained = os.path.join(out, precision, "final")
    tokenizer = find_tokenizer(pretrained, None)
    # finetune() rebuilds the backbone under the requested policy (heads follow it; logits stay float32).
    config = FinetuneConfig(task="classification", truncate=True, label_names=("negative", "positive"),
                            epochs=args.epochs, seed=args.seed, mixed_precision=precision)
    backbone = AlbertBackbone.from_pretrained(pretrained)
    print_fn(f"--- fine-tuning {pretrained} in {precision} -> {run_dir}")
    start = time.perf_counter()
    run = finetune(config, backbone, tokenizer, paths["train"], paths["dev"], run_dir, log=print_fn)
    seconds = time.perf_counter() - start
    _, model, _, _ = load_run(run_dir)
    recipe = get_recipe("classification")
    test = recipe.encode(paths["test"], tokenizer, config, model.label_names)
    result = {"best_epoch": run["best_epoch"], "dev": run["best"]["accuracy"],
              "test": recipe.evaluate(model, test, config)["accuracy"], "seconds": seconds,
              "policy": precision}
    with open(result_path, "w") as f:
        json.dump(result, f, indent=2)
    return result


def smooth(values, window):
    """Trailing mean over up to `window` points (the first points average what there is)."""
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    index = np.arange(1, len(values) + 1)
    return (cumulative[index] - cumulative[np.maximum(index - window, 0)]) / np.minimum(index, window)


def compare_curves(reference, other, window):
    """{name: value}: relative differences of `other`'s loss to `reference`'s at the steps both logged."""
    steps = sorted(set(reference) & set(other))
    if not steps:
        raise ValueError("The two runs have no logged step in common.")
    a, b = np.array([reference[s] for s in steps]), np.array([other[s] for s in steps])
    sa, sb = smooth(a, window), smooth(b, window)
    raw, smoothed = np.abs(b - a) / a, np.abs(sb - sa) / sa
    return {"steps": len(steps), "first_step": steps[0], "last_step": steps[-1],
            "raw_max": float(raw.max()), "raw_mean": float(raw.mean()),
            "smooth_max": float(smoothed.max()), "smooth_mean": float(smoothed.mean()),
            "final": (float(a[-1]), float(b[-1])), "final_smooth": (float(sa[-1]), float(sb[-1])),
            "mean_signed": float(np.mean((sb - sa) / sa))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/precision_accuracy")
    parser.add_argument("--steps", type=int, help="Pretraining steps (default: the demo's); for smoke runs.")
    parser.add_argument("--documents", type=int, help="Pretraining reviews (default: the demo's); for smoke runs.")
    parser.add_argument("--vocab-size", type=int, help="Tokenizer pieces (default: the demo's); for smoke runs.")
    parser.add_argument("--limit", type=int, help="Rotten Tomatoes sentences used (default: all); for smoke runs.")
    parser.add_argument("--epochs", type=int, default=3, help="Fine-tuning epochs (best on dev kept).")
    parser.add_argument("--seed", type=int, default=0, help="Fine-tuning seed.")
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED)
    parser.add_argument("--smooth", type=int, default=8, help="Logged points in the smoothed loss's trailing mean.")
    parser.add_argument("--write", help="Also write the Markdown table to this file.")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, "log.txt")

    def print_fn(line):
        print(line, flush=True)
        with open(log_path, "a") as f:
            f.write(line + "\n")

    from albert_tf.training import read_log

    metrics = {p: pretrain(args.out, p, c, args, print_fn) for p, c in PRECISIONS}
    split = split_rows(task_rows("rt"), args.split_seed, limit=args.limit)
    paths = {name: write_csv(os.path.join(args.out, f"rt_{name}.csv"), rows) for name, rows in split.items()}
    sentiment = {p: finetune_sentiment(args.out, p, paths, args, print_fn) for p, _ in PRECISIONS}
    baselines = {"majority class": majority(split["train"], split["test"]),
                 "TF-IDF + logistic regression": tfidf_logistic_regression(split["train"], split["test"])}
    curves = {p: {r["step"]: r["loss"] for r in read_log(os.path.join(args.out, p))} for p, _ in PRECISIONS}
    (reference, _), (other, _) = PRECISIONS
    curve = compare_curves(curves[reference], curves[other], args.smooth)
    emit_table(report(args, metrics, sentiment, baselines, curve, split), args.write)


def report(args, metrics, sentiment, baselines, curve, split):
    """The Markdown report: header, tolerance check, curve comparison, held-out and fine-tuned accuracies."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True,
                            text=True).stdout.strip()
    (reference, ref_compile), (other, other_compile) = PRECISIONS
    heldout = {p: metrics[p]["heldout"] for p, _ in PRECISIONS}
    mlm_points = 100 * abs(heldout[other]["mlm_accuracy"] - heldout[reference]["mlm_accuracy"])
    measured = {
        "mean relative difference of the smoothed loss": curve["smooth_mean"],
        "relative difference of the final smoothed loss":
            abs(curve["final_smooth"][1] - curve["final_smooth"][0]) / curve["final_smooth"][0],
        "held-out MLM accuracy difference (points)": mlm_points,
    }
    pct = lambda x: f"{100 * x:.2f}%"  # noqa: E731
    command = "python bench/precision_accuracy.py " + " ".join(sys.argv[1:])
    lines = [
        f"# bf16 against float32: the demo's model pretrained and fine-tuned in each",
        "",
        f"{cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(cpu_flags()) or 'none'}.",
        f"Command: `{command.strip()}`; {datetime.date.today().isoformat()}, commit {commit or 'unknown'}.",
        f"Pretraining: the demo's model, data and schedule ({metrics[reference]['steps']} steps), same tokenizer, "
        f"start and batches; {reference} with compile_step {ref_compile}, {other} with compile_step "
        f"{other_compile}. Fine-tuning: Rotten Tomatoes sentences, seeded split "
        + ", ".join(f"{k} {len(v)}" for k, v in split.items())
        + f", the library's defaults, {args.epochs} epochs, best on dev, each model in its own precision "
        "(FinetuneConfig.mixed_precision: the backbone rebuilt under the policy, which the head's dropout "
        "follows; the logits layer is float32 in both, as the library builds it).",
        "",
        "## Tolerance (stated before the runs)",
        "",
        "| check | tolerance | measured | held |",
        "|---|---:|---:|---|",
    ]
    for name, limit in TOLERANCES.items():
        value = measured[name]
        shown = (f"{limit:.1f}", f"{value:.2f}") if "points" in name else (pct(limit), pct(value))
        lines.append(f"| {name} | {shown[0]} | {shown[1]} | {'yes' if value <= limit else 'NO'} |")
    lines += [
        "",
        f"## Training loss, {other} against {reference}",
        "",
        f"At each of the {curve['steps']} logged steps ({curve['first_step']} to {curve['last_step']}; each point "
        f"the mean of the steps since the previous one); smoothed: trailing mean of {args.smooth} points. "
        f"Relative difference |{other} - {reference}| / {reference}.",
        "",
        "| curve | max relative difference | mean relative difference | final loss float32 | final loss bf16 |",
        "|---|---:|---:|---:|---:|",
        f"| raw | {pct(curve['raw_max'])} | {pct(curve['raw_mean'])} | {curve['final'][0]:.4f} | "
        f"{curve['final'][1]:.4f} |",
        f"| smoothed | {pct(curve['smooth_max'])} | {pct(curve['smooth_mean'])} | {curve['final_smooth'][0]:.4f} | "
        f"{curve['final_smooth'][1]:.4f} |",
        "",
        f"Mean signed difference of the smoothed loss ({other} - {reference}) / {reference}: "
        f"{100 * curve['mean_signed']:+.2f}%.",
        "",
        "## Held-out pretraining accuracy and fine-tuned sentiment accuracy",
        "",
        f"| model | held-out MLM accuracy | held-out SOP accuracy | held-out MLM / SOP loss | pretraining (s) | "
        f"RT dev accuracy (best epoch) | RT test accuracy (n={len(split['test'])}) | fine-tuning (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for precision, compile_step in PRECISIONS:
        h, s = heldout[precision], sentiment[precision]
        lines.append(
            f"| {precision}, compile_step {compile_step} | {h['mlm_accuracy']:.4f} | {h['sop_accuracy']:.4f} | "
            f"{h['mlm_loss']:.3f} / {h['sop_loss']:.3f} | {metrics[precision]['timings']['pretraining_seconds']:.0f} | "
            f"{s['dev']:.4f} ({s['best_epoch']}) | {s['test']:.4f} | {s['seconds']:.0f} |"
        )
    h = heldout[reference]
    lines.append(f"| unigram MLM baseline / SOP majority label | {h['unigram_mlm_accuracy']:.4f} | "
                 f"{h['sop_majority_accuracy']:.4f} | | | | | |")
    for name, accuracy in baselines.items():
        lines.append(f"| {name} (RT baseline) | | | | | | {accuracy:.4f} | |")
    lines += ["", f"Held-out: {h['num_examples']} examples, {h['num_masked']} masked tokens. The wall times are "
              "from a shared machine; bench/pretrain_throughput.py measures speed."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
