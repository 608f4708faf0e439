"""Speed and exactness of the in-graph SentencePiece ops on Korean and Japanese text.

For a byte-fallback tokenizer (the ko/ja default) and the same tokenizer
without byte fallback, times on the same texts, in one process:
  - the sentencepiece library (Python, the reference ids),
  - tensorflow-text's FastSentencepieceTokenizer (what exports run; emits
    <unk> where the library emits byte pieces),
  - tensorflow-text's SentencepieceTokenizer (has byte fallback; an older
    SentencePiece that breaks score ties differently),
  - FastSentencepieceTokenizer with albert-tf's in-graph byte spelling
    (`input_pipeline.byte_fallback`), what `AlbertTokenizer.tf_encode` runs,
and counts the texts whose ids differ from the library's, on the timed texts and
on stress texts (the lines, 3,000 random pieces of them, and runs of one
punctuation mark or digit, where segmentations tie). Every op gets the
preprocessed text; the Python row and the tf_encode row include the
preprocessing (NFKC, whitespace).

Texts: every line of the Korean corpus (konlpy) and the 500 Japanese sentences
(hironsancorpus), the test extra's data, 4 times over; tokenizers trained on
every other line, so the rest holds characters they never saw.

    python bench/tokenizer_ops.py [--steps 7] [--output bench/results/tokenizer_ops.md]
"""

import argparse
import datetime
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from benchlib.machine import cpu_flags, cpu_name  # noqa: E402
from benchlib.output import emit_table  # noqa: E402
from benchlib.timing import timed  # noqa: E402
from input_pipeline import AlbertTokenizer  # noqa: E402
from input_pipeline import byte_fallback as byte_fallback_lib  # noqa: E402
from language_corpora import japanese_sentences, korean_lines  # noqa: E402

SIZES = {"ko": 1000, "ja": 1500}  # pieces without the 256 byte pieces; ja's 500 cannot hold its characters
REPEAT = 4


def stress_texts(lines):
    rng = random.Random(0)
    pieces = []
    for _ in range(3000):
        line = rng.choice(lines)
        start = rng.randrange(len(line))
        pieces.append(line[start : start + rng.randrange(1, 40)])
    runs = [c * n for c in "-.=0125~*!?" for n in range(1, 30)]
    return list(lines) + pieces + runs


def rows_for(language, lines, steps):
    import tensorflow as tf
    import tensorflow_text as tf_text

    rows = []
    for fallback in (True, False):
        tokenizer = AlbertTokenizer.train(lines[::2], SIZES[language] + 256 * fallback, language=language,
                                          byte_fallback=fallback, num_threads=2)
        timed_lines = list(lines) * REPEAT
        processed = [tokenizer.preprocessing.apply(t) for t in timed_lines]
        reference = tokenizer.encode_batch(timed_lines)
        texts = tf.constant(processed)
        stress = [tokenizer.preprocessing.apply(t) for t in stress_texts(lines)]
        stress_reference = tokenizer.encode_batch(stress)
        ops = {
            "sentencepiece library (Python)": lambda texts=None: tokenizer.encode_batch(texts or timed_lines),
            "FastSentencepieceTokenizer": tf.function(tf_text.FastSentencepieceTokenizer(tokenizer.model_proto).tokenize),
            "SentencepieceTokenizer": tf.function(tf_text.SentencepieceTokenizer(tokenizer.model_proto).tokenize),
        }
        if fallback:
            fast, known = byte_fallback_lib.fast_op_model(tokenizer.model_proto)
            fast_op = tf_text.FastSentencepieceTokenizer(fast)
            ops["Fast + in-graph byte spelling"] = tf.function(
                lambda t: fast_op.tokenize(byte_fallback_lib.tf_fast_op_input(t, known))
            )
        whole = tf.function(tokenizer.tf_encode)
        raw = tf.constant(timed_lines)
        calls, exactness = {}, {}
        for name, op in ops.items():
            python = name.startswith("sentencepiece")
            run = (lambda t, op=op: op(t)) if python else (lambda t, op=op: op(tf.constant(t)).to_list())
            calls[name] = op if python else (lambda op=op: op(texts))
            exactness[name] = (differing(run(timed_lines if python else processed), reference),
                               differing(run(stress), stress_reference))
        name = "tf_encode (preprocessing + the op above)"
        calls[name] = lambda: whole(raw)
        exactness[name] = (differing(whole(raw).to_list(), reference),
                           differing(whole(tf.constant(stress)).to_list(), stress_reference))
        # The machine is shared: ops take turns, and each gets the median of its rounds' medians.
        rounds = {name: [] for name in calls}
        for _ in range(steps):
            for name, call in calls.items():
                rounds[name].append(cpu_ms(call))
        for name, times in rounds.items():
            ms = statistics.median(times)
            rows.append((language, fallback, name, ms, len(timed_lines) / ms * 1000, *exactness[name], len(stress)))
    return rows


def cpu_ms(fn, steps=3):
    """Median CPU time of `fn()` over `steps` calls after one warm-up call, in milliseconds."""
    return timed(fn, 1, steps, clock=time.process_time)


def differing(ids, reference):
    return sum(a != b for a, b in zip(ids, reference, strict=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=7, help="Rounds (ops take turns; 3 timed calls each).")
    parser.add_argument("--output", help="Also write the table here.")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = rows_for("ko", list(korean_lines()), args.steps) + rows_for("ja", list(japanese_sentences()), args.steps)
    lines = [
        f"`python bench/tokenizer_ops.py --steps {args.steps}` ({datetime.date.today()}, commit {commit}).",
        "",
        f"{cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(cpu_flags()) or 'none'}. One call tokenizes "
        f"every text {REPEAT} times over ({REPEAT * len(korean_lines())} Korean lines, "
        f"{REPEAT * len(japanese_sentences())} Japanese sentences); ops take turns, {args.steps} rounds of 3 calls, "
        "median of the rounds' medians.",
        "",
        "| text | byte fallback | op | CPU ms per call | texts per CPU s | ids differ from the library's: timed texts | "
        "stress texts |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {lang} | {'on' if fb else 'off'} | {name} | {ms:.1f} | {rate:,.0f} | {differ} | {stress} of {n:,} |"
              for lang, fb, name, ms, rate, differ, stress, n in rows]
    emit_table("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
