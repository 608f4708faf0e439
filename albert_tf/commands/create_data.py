"""`albert-tf create-data`: write sharded pretraining TFRecords (static masking).

The data directory keeps a copy of its tokenizer (OUT/tokenizer), so
`pretrain --data OUT` needs no --tokenizer.

It reports how many documents have one sentence and the balance of
sentence_order_label, and warns when the examples are mostly label 1: a
corpus of one text per line wants --format lines --split-sentences.
"""

import os
import time

from albert_tf.commands.flags import add_command, add_config_flags, add_split_sentences_flag, config_kwargs
from albert_tf.commands.outputs import ENTRY_FILES, add_overwrite_flag
from albert_tf.commands.reports import report_corpus_notes, report_pairs
from albert_tf.model_dirs import TOKENIZER_DIR, load_tokenizer
from albert_tf.utils import files
from albert_tf.utils.layout import DATA_METADATA_FILE
from input_pipeline import Corpus, PretrainingDataConfig, write_pretraining_tfrecords
from input_pipeline.corpus import FORMATS

# SIGTERM stops the writing at the next shard and publishes nothing (`write_pretraining_tfrecords`).
STOPS_ON_SIGTERM = True


def add_parser(subparsers):
    parser = add_command(subparsers, "create-data", description=__doc__)
    parser.add_argument("--input", nargs="+", required=True, metavar="FILE_OR_DIR", help="Corpus files or directories.")
    parser.add_argument("--format", choices=FORMATS, default="auto", help="Corpus format (auto: csv/jsonl by extension, else sentences: one sentence per line, a blank line "
                        "between documents; lines: one document per line).")
    parser.add_argument("--column", help="CSV column / JSONL field with the text.")
    add_split_sentences_flag(parser)
    parser.add_argument("--tokenizer", required=True, metavar="DIR", help="A train-tokenizer output directory.")
    parser.add_argument("--out", required=True, metavar="DIR", help="Output directory (TFRecord shards, "
                        f"{DATA_METADATA_FILE}, {TOKENIZER_DIR}/).")
    add_overwrite_flag(parser)
    add_config_flags(parser, PretrainingDataConfig)
    parser.add_argument("--dupe-factor", type=int, default=10, help="Passes over the corpus, each masked anew.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of every random choice.")
    parser.add_argument("--num-workers", type=int, default=None, help="Worker processes (default: all CPUs; 0: none).")
    parser.add_argument("--documents-per-shard", type=int, default=2000, help="Bounds each worker's memory.")
    return parser


def run(args):
    config = PretrainingDataConfig(**config_kwargs(PretrainingDataConfig, args))
    tokenizer = load_tokenizer(args.tokenizer)
    corpus = Corpus(args.input, format=args.format, column=args.column, split_sentences=args.split_sentences)
    start = time.perf_counter()
    with files.publish_output(args.out, args.overwrite, ENTRY_FILES) as staging:
        stats = write_pretraining_tfrecords(
            corpus, tokenizer, staging, config, dupe_factor=args.dupe_factor, seed=args.seed,
            num_workers=args.num_workers, documents_per_shard=args.documents_per_shard,
            stop_requested=args.stop_requested,
        )
        tokenizer.save(os.path.join(staging, TOKENIZER_DIR))
    seconds = time.perf_counter() - start
    print(
        f"Wrote {stats['num_examples']} examples in {stats['num_shards']} shards to {args.out} from "
        f"{stats['num_documents']} documents ({corpus.num_empty_skipped} empty skipped) in {seconds:.1f}s "
        f"({stats['num_examples'] / seconds:.0f} examples/s)"
    )
    report_corpus_notes(corpus, "create-data")
    report_pairs(stats["pair_stats"], config.task, "create-data")
