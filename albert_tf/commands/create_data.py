"""`albert-tf create-data`: write sharded pretraining TFRecords (static masking)."""

import time

from input_pipeline import AlbertTokenizer, Corpus, PretrainingDataConfig, write_pretraining_tfrecords
from input_pipeline.corpus import FORMATS
from input_pipeline.pretraining_data import TASKS


def add_parser(subparsers):
    parser = subparsers.add_parser("create-data", help="Write pretraining examples (SOP + n-gram MLM) as TFRecords.")
    parser.add_argument("--input", nargs="+", required=True, metavar="FILE_OR_DIR", help="Corpus files or directories.")
    parser.add_argument("--format", choices=FORMATS, default="auto", help="Corpus format (default: by extension).")
    parser.add_argument("--column", help="CSV column / JSONL field with the text.")
    parser.add_argument("--tokenizer", required=True, metavar="DIR", help="A train-tokenizer output directory.")
    parser.add_argument("--out", required=True, metavar="DIR")
    defaults = PretrainingDataConfig()
    parser.add_argument("--max-seq-length", type=int, default=defaults.max_seq_length)
    parser.add_argument("--max-predictions-per-seq", type=int, default=defaults.max_predictions_per_seq)
    parser.add_argument("--masked-lm-prob", type=float, default=defaults.masked_lm_prob)
    parser.add_argument("--short-seq-prob", type=float, default=defaults.short_seq_prob)
    parser.add_argument("--ngram", type=int, default=defaults.max_ngram, help="Longest masked n-gram, in words.")
    parser.add_argument("--task", choices=TASKS, default=defaults.task)
    parser.add_argument("--dupe-factor", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-workers", type=int, default=None, help="Worker processes (default: all CPUs; 0: none).")
    parser.add_argument("--documents-per-shard", type=int, default=2000, help="Bounds each worker's memory.")
    return parser


def run(args):
    config = PretrainingDataConfig(
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        max_ngram=args.ngram,
        task=args.task,
    )
    corpus = Corpus(args.input, format=args.format, column=args.column)
    start = time.perf_counter()
    stats = write_pretraining_tfrecords(
        corpus,
        AlbertTokenizer.load(args.tokenizer),
        args.out,
        config,
        dupe_factor=args.dupe_factor,
        seed=args.seed,
        num_workers=args.num_workers,
        documents_per_shard=args.documents_per_shard,
    )
    seconds = time.perf_counter() - start
    print(
        f"Wrote {stats['num_examples']} examples in {stats['num_shards']} shards to {args.out} from "
        f"{stats['num_documents']} documents ({corpus.num_empty_skipped} empty skipped) in {seconds:.1f}s "
        f"({stats['num_examples'] / seconds:.0f} examples/s)"
    )
