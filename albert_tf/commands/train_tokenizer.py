"""`albert-tf train-tokenizer`: train a SentencePiece unigram vocabulary with ALBERT's layout.

    albert-tf train-tokenizer --input corpus/ --vocab-size 30000 --out tok/
    albert-tf train-tokenizer --rewrite old_tok/ --out tok/

An English tokenizer's spiece.model carries its preprocessing (lowercasing,
accent stripping), so that any SentencePiece runtime (MediaPipe, the TFLite
Task Library, HF, a bare SentencePieceProcessor) gives albert-tf's ids from
raw text. --rewrite gives a tokenizer trained before that its own.

SIGTERM while the corpus is read stops there and publishes nothing (exit
143); once SentencePiece trains, the run finishes and publishes --out.
"""

import argparse
import dataclasses

from albert_tf.commands.reports import report_corpus_notes
from albert_tf.commands.flags import add_command, add_split_sentences_flag
from albert_tf.commands.outputs import ENTRY_FILES, add_overwrite_flag
from albert_tf.utils import files
from input_pipeline import AlbertTokenizer, Corpus, Preprocessing
from input_pipeline.corpus import FORMATS
from input_pipeline.tokenizer import NoTrainingText
from albert_tf.utils.errors import PREEMPTED, RunStopped, UserError
from input_pipeline.text_normalization import LANGUAGES

# SIGTERM stops the reading of the corpus (`_until_stopped`).
STOPS_ON_SIGTERM = True
# Sentences read between two looks at the stop request.
_STOP_EVERY = 1000


def add_parser(subparsers):
    parser = add_command(subparsers, "train-tokenizer")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", nargs="+", metavar="FILE_OR_DIR", help="Corpus files or directories.")
    source.add_argument(
        "--rewrite", metavar="DIR",
        help="Train nothing: write DIR's tokenizer to --out with its preprocessing built into spiece.model "
        "(English tokenizers without byte fallback; the ids stay the same).",
    )
    parser.add_argument("--format", choices=FORMATS, default="auto", help="Corpus format (auto: csv/jsonl by extension, else sentences: one sentence per line, a blank line "
                        "between documents; lines: one document per line).")
    parser.add_argument("--column", help="CSV column / JSONL field with the text.")
    add_split_sentences_flag(parser)
    parser.add_argument("--vocab-size", type=int, default=30000, help="Pieces, the 5 special ones included.")
    parser.add_argument("--out", required=True, metavar="DIR", help="Writes spiece.model and tokenizer.json here.")
    parser.add_argument(
        "--language", choices=LANGUAGES, default="en",
        help="Preprocessing preset: en = original (NFKD, strip accents, lowercase); ko/ja/zh/multi = "
        "NFKC, marks and case kept, character coverage 0.9995, byte fallback (default: en).",
    )
    add_overwrite_flag(parser)
    parser.add_argument("--cased", action="store_true", help="Keep case and accents (sets both flags below).")
    parser.add_argument("--no-lower-case", action="store_true", help="Do not lowercase.")
    parser.add_argument("--keep-accents", action="store_true", help="Do not strip accents.")
    parser.add_argument("--keep-whitespace", action="store_true", help="Do not collapse whitespace.")
    parser.add_argument("--character-coverage", type=float, default=None, help="Default: 0.99995 for en, 0.9995 otherwise.")
    parser.add_argument(
        "--byte-fallback", action=argparse.BooleanOptionalAction, default=None,
        help="Characters outside the vocabulary become UTF-8 byte pieces (256 more) instead of <unk> "
        "(default: on for ko/ja/zh/multi, off for en).",
    )
    parser.add_argument("--input-sentence-size", type=int, default=10_000_000, help="Sentences sampled for training.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the sentence sampling.")
    return parser


def run(args):
    if args.rewrite is not None:
        return _rewrite(args)
    preset = Preprocessing.for_language(args.language)
    preprocessing = dataclasses.replace(
        preset,
        collapse_whitespace=preset.collapse_whitespace and not args.keep_whitespace,
        strip_accents=preset.strip_accents and not (args.keep_accents or args.cased),
        lower_case=preset.lower_case and not (args.no_lower_case or args.cased),
    )
    with files.publish_output(args.out, args.overwrite, ENTRY_FILES) as staging:
        corpus = Corpus(args.input, format=args.format, column=args.column, split_sentences=args.split_sentences)
        try:
            tokenizer = AlbertTokenizer.train(
                _until_stopped(corpus.sentences(), args.stop_requested),
                args.vocab_size,
                language=args.language,
                preprocessing=preprocessing,
                character_coverage=args.character_coverage,
                byte_fallback=args.byte_fallback,
                input_sentence_size=args.input_sentence_size,
                seed=args.seed,
            )
        except NoTrainingText as e:
            raise UserError(
                f"--input {' '.join(args.input)}: no text to train a tokenizer on "
                f"({corpus.num_empty_skipped} empty documents skipped)."
            ) from e
        tokenizer.write(staging)
    print(
        f"Trained a {tokenizer.vocab_size}-piece {args.language} tokenizer on {corpus.num_documents} documents "
        f"({corpus.num_empty_skipped} empty skipped), byte fallback {'on' if tokenizer.byte_fallback else 'off'}; "
        f"saved to {args.out}"
    )
    report_corpus_notes(corpus, "train-tokenizer")


def _until_stopped(sentences, stop_requested):
    """`sentences`, until `stop_requested()` (asked every `_STOP_EVERY`) raises `RunStopped`."""
    for count, sentence in enumerate(sentences):
        if count % _STOP_EVERY == 0 and stop_requested():
            raise RunStopped(PREEMPTED, f"while reading the corpus, after {count:,} sentences")
        yield sentence


def _rewrite(args):
    try:
        tokenizer = AlbertTokenizer.load(args.rewrite)
    except ValueError as e:
        raise UserError(f"--rewrite {args.rewrite}: {e}") from e
    if not tokenizer.can_embed_preprocessing:
        raise UserError(
            f"--rewrite {args.rewrite}: only English tokenizers without byte fallback can carry their "
            f"preprocessing in spiece.model. Received: language={tokenizer.language!r}, "
            f"byte_fallback={tokenizer.byte_fallback}"
        )
    with files.publish_output(args.out, args.overwrite, ENTRY_FILES) as staging:
        rewritten = tokenizer.with_embedded_preprocessing()
        rewritten.write(staging)
    print(
        f"Wrote {args.rewrite}'s tokenizer to {args.out} with its preprocessing in spiece.model "
        f"({len(tokenizer.model_proto):,} -> {len(rewritten.model_proto):,} bytes); the ids are unchanged"
    )
