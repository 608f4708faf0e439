"""Test accuracy and file size of a fine-tuned classifier: Keras vs its TFLite exports.

Exports the classifier to TFLite float32, float16, dynamic-range int8, full
int8 and 16x8 (int8 weights, int16 activations; the last two calibrated on IMDB
reviews of the pretraining split, disjoint from the test set), runs each on the
test set through LiteRT with the same Python tokenization
(`albert_tf.export.pack_texts`, fixed length), and prints a table with the
majority-class baseline.

    python bench/tflite_accuracy.py --model runs/sentiment/model [--tokenizer DIR] \\
        [--dataset imdb|rotten_tomatoes|FILE.csv] [--limit 1000] [--max-length 128]

FILE.csv: columns `text` and `label`; labels are class ids or the model's
`label_names` (e.g. the `test.csv` that bench/finetune_sentiment.py writes).
"""

import argparse
import csv
import os
import tempfile
import time

import numpy as np

from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table

from albert_tf.export import QUANTIZE_MODES, export_tflite, pack_texts
from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
from albert_tf.loading import load_pretrained


def test_set(dataset, limit, label_names):
    from input_pipeline import movie_reviews

    if dataset == "imdb":
        rows = movie_reviews.imdb_reviews("heldout")
    elif dataset == "rotten_tomatoes":
        rows = movie_reviews.rotten_tomatoes_sentences()
    else:
        ids = {name: i for i, name in enumerate(label_names or [])}
        with open(dataset, encoding="utf-8", newline="") as f:
            rows = [(r["text"], ids[r["label"]] if r["label"] in ids else int(r["label"])) for r in csv.DictReader(f)]
    # A seeded sample keeps both classes when the source is sorted by label.
    order = np.random.default_rng(0).permutation(len(rows))[:limit]
    return [rows[i][0] for i in order], np.array([rows[i][1] for i in order])


def keras_predictions(model, packed, batch_size=32):
    out = []
    for start in range(0, len(packed["token_ids"]), batch_size):
        batch = {k: v[start : start + batch_size] for k, v in packed.items()}
        out.append(np.asarray(model(batch, training=False)["logits"]).argmax(-1))
    return np.concatenate(out)


def tflite_predictions(path, packed, threads):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path, num_threads=threads).get_signature_runner("serving_default")
    return np.array([
        runner(**{k: v[i : i + 1] for k, v in packed.items()})["probabilities"].argmax(-1)[0]
        for i in range(len(packed["token_ids"]))
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="A fine-tuned AlbertClassifier directory.")
    parser.add_argument("--tokenizer", help="Tokenizer dir (default: the model dir's, see input_pipeline.finetuning.text_inputs).")
    parser.add_argument("--dataset", default="imdb", help="imdb (held-out reviews), rotten_tomatoes, or a CSV file.")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--calibration-examples", type=int, default=200)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    from input_pipeline import movie_reviews

    model_dir = resolve_model_dir(args.model)
    model = load_pretrained(model_dir)
    tokenizer = find_tokenizer(model_dir, args.tokenizer)
    texts, labels = test_set(args.dataset, args.limit, getattr(model, "label_names", None))
    packed = pack_texts(tokenizer, texts, None, args.max_length, pad_to=args.max_length)
    calibration = [t for t, _ in movie_reviews.imdb_reviews("pretrain")[: args.calibration_examples]]

    keras_accuracy = float((keras_predictions(model, packed) == labels).mean())
    majority = float(max((labels == c).mean() for c in np.unique(labels)))
    rows = [("majority class", majority, None, None), ("Keras (float32)", keras_accuracy, None, None)]
    with tempfile.TemporaryDirectory() as workdir:
        for mode in QUANTIZE_MODES:
            path = export_tflite(
                model, os.path.join(workdir, mode), tokenizer=tokenizer, max_length=args.max_length,
                quantize=mode, representative_texts=calibration,
            )
            start = time.perf_counter()
            accuracy = float((tflite_predictions(path, packed, args.threads) == labels).mean())
            per_example = (time.perf_counter() - start) / len(texts) * 1000
            rows.append((f"TFLite {mode}", accuracy, os.path.getsize(path) / 2**20, per_example))

    lines = [
        f"{args.dataset}: {len(texts)} examples, max length {args.max_length}, model {args.model}, "
        f"{args.threads} threads. {cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(cpu_flags()) or 'none'}.",
        "",
        "| model | accuracy | vs Keras (points) | file (MiB) | ms / example (batch 1) |",
        "|---|---:|---:|---:|---:|",
    ] + [
        f"| {name} | {accuracy * 100:.2f} | {(accuracy - keras_accuracy) * 100:+.2f} | "
        f"{'' if size is None else f'{size:.1f}'} | {'' if ms is None else f'{ms:.1f}'} |"
        for name, accuracy, size, ms in rows
    ]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
