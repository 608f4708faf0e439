"""Batch-1 latency of a fine-tuned classifier's TFLite files: MediaPipe's classify() vs LiteRT.

Exports the classifier twice (float32 and dynamic-range int8, both with the
metadata MediaPipe reads), then times, each in its own fresh process:

    MediaPipe  TextClassifier.classify(text): raw text in, categories out
               (SentencePiece tokenization, packing and post-processing included).
    LiteRT     the `serving_default` signature runner on ids packed beforehand
               (tokenization excluded: albert-tf's Python tokenizer is not what an app runs).

Median milliseconds per call over Rotten Tomatoes sentences (cycled), with the
file sizes and the CPU's flags. Needs `mediapipe` (the test extra installs it).

    python bench/tflite_mediapipe.py --model runs/sentiment [--max-length 128] [--steps 200] [--threads 1]
    python bench/tflite_mediapipe.py --preset base --tokenizer runs/demo/tokenizer --max-length 128

--preset times a two-label classifier of that size with random weights (speed
does not depend on the weights) and the tokenizer given.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table
from benchlib.timing import timed

QUANTIZE = ("none", "dynamic")


def texts(count):
    from input_pipeline import movie_reviews

    return [text for text, _ in movie_reviews.rotten_tomatoes_sentences()[:count]]


def time_mediapipe(path, sentences, warmup, steps, threads):
    from mediapipe.tasks.python import text
    from mediapipe.tasks.python.core import base_options

    del threads  # MediaPipe's TextClassifier has no thread option; it runs XNNPACK's default
    options = text.TextClassifierOptions(base_options=base_options.BaseOptions(model_asset_path=path))
    cycle = itertools.cycle(sentences)
    with text.TextClassifier.create_from_options(options) as classifier:
        return timed(lambda: classifier.classify(next(cycle)), warmup, steps)


def time_litert(path, sentences, warmup, steps, threads):
    from ai_edge_litert.interpreter import Interpreter

    from albert_tf.export import pack_texts
    from albert_tf.model_dirs import find_tokenizer

    tokenizer = find_tokenizer(os.path.dirname(path))
    with open(os.path.join(os.path.dirname(path), "export.json")) as f:
        max_length = json.load(f)["max_length"]
    packed = pack_texts(tokenizer, sentences, None, max_length, pad_to=max_length)
    rows = itertools.cycle([{k: v[i : i + 1] for k, v in packed.items()} for i in range(len(sentences))])
    runner = Interpreter(model_path=path, num_threads=threads).get_signature_runner("serving_default")
    return timed(lambda: runner(**next(rows)), warmup, steps)


RUNTIMES = {"MediaPipe classify()": time_mediapipe, "LiteRT (ids given)": time_litert}


def measure(runtime, path, args):
    """One runtime on one file, in a fresh process (MediaPipe and LiteRT each bring their own TFLite)."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", runtime, path, "--texts", str(args.texts),
               "--warmup", str(args.warmup), "--steps", str(args.steps), "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="A fine-tuned classifier: a `finetune` output directory or its best/.")
    parser.add_argument("--preset", help="Instead of --model: a random-weight classifier of this preset (base, ...).")
    parser.add_argument("--tokenizer", help="With --preset: the tokenizer directory to ship with it.")
    parser.add_argument("--max-length", type=int, help="Default: the fine-tuning run's --max-seq-length.")
    parser.add_argument("--texts", type=int, default=100, help="Rotten Tomatoes sentences, cycled.")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="LiteRT threads.")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    parser.add_argument("--worker", nargs=2, metavar=("RUNTIME", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        runtime, path = args.worker
        print(RUNTIMES[runtime](path, texts(args.texts), args.warmup, args.steps, args.threads))
        return
    if (args.model is None) == (args.preset is None) or (args.preset is None) != (args.tokenizer is None):
        parser.error("give --model, or --preset with --tokenizer and --max-length")

    from albert_tf import AlbertBackbone, AlbertConfig, AlbertTokenizer
    from albert_tf.export import export_tflite
    from albert_tf.export.options import default_max_length
    from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
    from albert_tf.models import AlbertClassifier
    from albert_tf.loading import load_pretrained
    from albert_tf.recipes import run_settings

    if args.preset:
        tokenizer = AlbertTokenizer.load(args.tokenizer)
        config = AlbertConfig.from_preset(args.preset, vocab_size=tokenizer.vocab_size)
        model = AlbertClassifier(AlbertBackbone(config), num_classes=2, label_names=["negative", "positive"])
        max_length = args.max_length or 128
    else:
        model_dir = resolve_model_dir(args.model)
        model, tokenizer = load_pretrained(model_dir), find_tokenizer(model_dir)
        max_length = args.max_length or default_max_length(run_settings(model_dir.path), model)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for quantize in QUANTIZE:
            path = export_tflite(model, os.path.join(workdir, quantize), tokenizer=tokenizer,
                                 max_length=max_length, quantize=quantize)
            size = os.path.getsize(path) / 2**20
            for runtime in RUNTIMES:
                rows.append((quantize, runtime, size, measure(runtime, path, args)))
    lines = [
        f"{args.model or args.preset + ' (random weights)'}: batch 1, max length {max_length}, median of {args.steps} calls over {args.texts} Rotten "
        f"Tomatoes sentences; LiteRT {args.threads} thread(s). {cpu_name()}, {os.cpu_count()} cores; "
        f"flags: {' '.join(cpu_flags()) or 'none'}.",
        "",
        "| file | runtime | file (MiB) | ms / text |",
        "|---|---|---:|---:|",
    ] + [f"| {'float32' if q == 'none' else q} | {runtime} | {size:.2f} | {ms:.2f} |" for q, runtime, size, ms in rows]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
