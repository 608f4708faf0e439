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
and counts the texts whose ids differ from the library's. Every op gets the
preprocessed text; the last row adds the in-graph preprocessing (NFKC,
whitespace) to show the whole `tf_encode`.

Texts: every line of the Korean corpus (konlpy) and the 500 Japanese sentences
(hironsancorpus), the test extra's data; tokenizers trained on every other
line, so the rest holds characters they never saw.

    python bench/tokenizer_ops.py [--steps 5] [--output bench/results/tokenizer_ops.md]
"""

import argparse
import datetime
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from bench_utils import cpu_flags, cpu_name, emit_table, timed  # noqa: E402
from input_pipeline import AlbertTokenizer  # noqa: E402
from input_pipeline import byte_fallback as byte_fallback_lib  # noqa: E402
from language_corpora import japanese_sentences, korean_lines  # noqa: E402

SIZES = {"ko": 1000, "ja": 1500}  # pieces without the 256 byte pieces; ja's 500 cannot hold its characters


def rows_for(language, lines, steps):
    import tensorflow as tf
    import tensorflow_text as tf_text

    rows = []
    for fallback in (True, False):
        tokenizer = AlbertTokenizer.train(lines[::2], SIZES[language] + 256 * fallback, language=language,
                                          byte_fallback=fallback, num_threads=2)
        processed = [tokenizer.preprocessing.apply(t) for t in lines]
        reference = tokenizer.encode_batch(lines)
        texts = tf.constant(processed)
        ops = {
            "sentencepiece library (Python)": lambda: tokenizer.encode_batch(lines),
            "FastSentencepieceTokenizer": tf.function(tf_text.FastSentencepieceTokenizer(tokenizer.model_proto).tokenize),
            "SentencepieceTokenizer": tf.function(tf_text.SentencepieceTokenizer(tokenizer.model_proto).tokenize),
        }
        if fallback:
            fast, known = byte_fallback_lib.fast_op_model(tokenizer.model_proto)
            fast_op = tf_text.FastSentencepieceTokenizer(fast)
            ops["Fast + in-graph byte spelling"] = tf.function(
                lambda t: fast_op.tokenize(byte_fallback_lib.tf_spell_unknown_as_bytes(t, known))
            )
        else:
            ops["Fast (tf_encode: no spelling needed)"] = ops["FastSentencepieceTokenizer"]
        whole = tf.function(tokenizer.tf_encode)
        raw = tf.constant(list(lines))
        for name, op in ops.items():
            python = name.startswith("sentencepiece")
            ids = op() if python else op(texts).to_list()
            ms = timed(op if python else (lambda op=op: op(texts)), warmup=1, steps=steps)
            differ = sum(a != b for a, b in zip(ids, reference))
            rows.append((language, fallback, name, ms, len(lines) / ms * 1000, differ))
        ms = timed(lambda: whole(raw), warmup=1, steps=steps)
        differ = sum(a != b for a, b in zip(whole(raw).to_list(), reference))
        rows.append((language, fallback, "tf_encode (preprocessing + the op above)", ms, len(lines) / ms * 1000, differ))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="Timed calls per op (median).")
    parser.add_argument("--output", help="Also write the table here.")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = rows_for("ko", list(korean_lines()), args.steps) + rows_for("ja", list(japanese_sentences()), args.steps)
    lines = [
        f"`python bench/tokenizer_ops.py --steps {args.steps}` ({datetime.date.today()}, commit {commit}).",
        "",
        f"{cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(cpu_flags()) or 'none'}. One call tokenizes "
        f"every text ({len(korean_lines())} Korean lines, {len(japanese_sentences())} Japanese sentences); "
        f"median of {args.steps} calls.",
        "",
        "| text | byte fallback | op | ms per call | texts/s | texts whose ids differ from the library's |",
        "|---|---|---|---:|---:|---:|",
    ]
    lines += [f"| {lang} | {'on' if fb else 'off'} | {name} | {ms:.1f} | {rate:,.0f} | {differ} |"
              for lang, fb, name, ms, rate, differ in rows]
    emit_table("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
