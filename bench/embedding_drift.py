"""How far pretraining moved each demo run's word table from its PPMI-SVD start.

For every `--model NAME=RUN_DIR` (an `albert-tf demo` run directory), the
start is recomputed the way the demo made it (the run's tokenizer, its
`--documents` pretraining reviews, its embedding size) and compared with the
table in RUN_DIR/final, over the pieces that occur in the text:

- row cosine: the median cosine between a piece's start vector and its final
  row (the start rescaled to the table's RMS; a rescaling does not change it),
- linear-map R^2: the share of the final table's variance that the best
  linear map of the start explains (1: pretraining only rotated or rescaled
  the start),
- table RMS, and the run's held-out MLM accuracy as its metrics.json has it
  (with the number of held-out examples: runs from before `--eval-examples`
  scored a multiple of their batch size).

    python bench/embedding_drift.py --model demo=runs/demo --model b16=runs/demo_b16 \\
        [--write bench/results/embedding_drift.md]
"""

import argparse
import json
import os

import numpy as np

from benchlib.output import emit_table


def row_cosines(a, b):
    """Cosine between matching rows of `a` and `b` (n, d)."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)


def linear_map_r2(start, table):
    """R^2 of the least-squares linear map (with intercept) from `start` rows to `table` rows."""
    design = np.concatenate([start, np.ones((len(start), 1))], axis=1)
    coef, *_ = np.linalg.lstsq(design, table, rcond=None)
    residual = table - design @ coef
    return 1.0 - float(np.sum(residual**2) / np.sum((table - table.mean(0)) ** 2))


def drift(run_dir, cache):
    """The drift figures of one demo run directory (see the module docstring)."""
    from albert_tf.config import AlbertConfig
    from albert_tf.loading import load_pretrained
    from albert_tf.training.embedding_init import ppmi_svd_vectors
    from input_pipeline import AlbertTokenizer, TokenizedCorpus, movie_reviews

    with open(os.path.join(run_dir, "training_config.json")) as f:
        settings = json.load(f)
    demo = settings.get("demo")
    if demo is None or demo.get("embedding_init") != "ppmi-svd":
        raise SystemExit(f"{run_dir} is not an `albert-tf demo` run with --embedding-init ppmi-svd")
    trainer = settings["trainer"]
    embedding_size = AlbertConfig.load(run_dir).embedding_size
    tokenizer = AlbertTokenizer.load(os.path.join(run_dir, "tokenizer"))
    key = (tokenizer.model_proto, demo["documents"], embedding_size)
    if key not in cache:
        corpus = TokenizedCorpus.from_documents(movie_reviews.imdb_documents("pretrain", limit=demo["documents"]),
                                                tokenizer)
        cache[key] = ppmi_svd_vectors(corpus, embedding_size)
    vectors, counts = cache[key]
    seen = counts > 0
    table = np.asarray(load_pretrained(os.path.join(run_dir, "final")).backbone.word_embeddings.embeddings)[seen]
    start = vectors[seen]
    with open(os.path.join(run_dir, "metrics.json")) as f:
        heldout = json.load(f)["heldout"]
    return {
        "steps": trainer["num_steps"],
        "batch": trainer["global_batch_size"],
        "learning_rate": trainer["learning_rate"],
        "word_lr_scale": trainer.get("word_embedding_lr_scale", 1.0),
        "mlm": heldout["mlm_accuracy"],
        "mlm_examples": heldout["num_examples"],
        "cosine": float(np.median(row_cosines(start, table))),
        "r2": linear_map_r2(start, table),
        "rms": float(np.sqrt(np.mean(table**2))),
        "pieces": int(seen.sum()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, metavar="NAME=RUN_DIR",
                        help="a demo run directory (repeatable)")
    parser.add_argument("--write", metavar="MD", help="also write the table to this file")
    args = parser.parse_args()
    cache = {}
    rows, pieces_per_run = [], []
    for spec in args.model:
        name, _, run_dir = spec.partition("=")
        if not run_dir:
            parser.error(f"--model takes NAME=RUN_DIR. Received: {spec!r}")
        r = drift(run_dir, cache)
        pieces_per_run.append(r["pieces"])
        rows.append(
            f"| {name} | {r['steps']:,} x {r['batch']} | {r['learning_rate']:g} | {r['word_lr_scale']:g} "
            f"| {r['mlm']:.1%} ({r['mlm_examples']}) | {r['cosine']:.3f} | {r['r2']:.3f} | {r['rms']:.4f} |"
        )
        print(rows[-1], flush=True)
    pieces = " / ".join(f"{n:,}" for n in sorted(set(pieces_per_run)))  # one figure unless the runs' texts differ
    text = "\n".join(
        [
            f"Word table of each demo run against its PPMI-SVD start ({pieces} pieces that occur in "
            "the pretraining text). Row cosine: median over pieces; R^2: variance of the final table "
            "explained by the best linear map of the start.",
            "",
            "| run | steps x batch | peak lr | word-table lr factor | held-out MLM (examples) | row cosine to start "
            "| linear-map R^2 | table RMS |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "`python bench/embedding_drift.py " + " ".join(f"--model {m}" for m in args.model) + "`",
        ]
    )
    emit_table(text, args.write)


if __name__ == "__main__":
    main()
