"""Time to the first batch when the pretraining input resumes at a late step.

Writes synthetic create-data output (random examples in TFRecord shards, with
its metadata.json) to a temporary directory, then times building
`make_pretraining_dataset(..., start_step=s)` and reading its first batch,
for each s. The input finds its place from (seed, epoch) and the shards'
example counts, so the time should not grow with s; reading and dropping
s x batch records would.

    python bench/resume_time.py [--steps 0 10000 100000] [--output table.md]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH_DIR))
sys.path.insert(0, BENCH_DIR)

from benchlib import machine, synthetic  # noqa: E402
from albert_tf.utils import files  # noqa: E402
from albert_tf.utils.layout import DATA_METADATA_FILE  # noqa: E402
from input_pipeline import PretrainingDataConfig, make_pretraining_dataset, tfrecord_files  # noqa: E402
from input_pipeline.pretraining import tfrecord_shards  # noqa: E402


def write_synthetic_records(out_dir, config, num_shards, shard_examples, vocab_size=30000):
    """create-data's layout (shards and metadata.json) with random examples."""
    for shard in range(num_shards):
        arrays = synthetic.pretraining_arrays(
            shard_examples, config.max_seq_length, config.max_predictions_per_seq, vocab_size, seed=shard
        )
        path = os.path.join(out_dir, tfrecord_shards.SHARD_PATTERN.format(shard))
        with tfrecord_files.RecordWriter(path) as writer:
            for i in range(shard_examples):
                writer.write(tfrecord_shards.serialize_example({name: a[i] for name, a in arrays.items()}))
    metadata = {
        "num_examples": num_shards * shard_examples,
        "num_shards": num_shards,
        "num_documents": num_shards,
        "shard_examples": [shard_examples] * num_shards,
        "vocab_size": vocab_size,
        "dupe_factor": 1,
        "seed": 0,
        "config": json.loads(config.to_json()),
    }
    files.write_text(os.path.join(out_dir, DATA_METADATA_FILE), json.dumps(metadata, indent=2))


def first_batch_seconds(data_dir, batch_size, step):
    start = time.perf_counter()
    next(iter(make_pretraining_dataset(data_dir, batch_size, seed=0, start_step=step)))
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 10_000, 100_000], help="Resume steps to time.")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--shard-examples", type=int, default=2000, help="Examples per shard.")
    parser.add_argument("--repeats", type=int, default=3, help="Timings per step; the table shows their median.")
    parser.add_argument("--output", help="Also write the markdown table to this file.")
    args = parser.parse_args()

    config = PretrainingDataConfig(max_seq_length=args.max_seq_length, max_predictions_per_seq=20)
    with tempfile.TemporaryDirectory() as data_dir:
        write_synthetic_records(data_dir, config, args.shards, args.shard_examples)
        first_batch_seconds(data_dir, args.batch_size, 0)  # Warm-up: TensorFlow's first dataset and tracing.
        rows = []
        for step in args.steps:
            seconds = [first_batch_seconds(data_dir, args.batch_size, step) for _ in range(args.repeats)]
            consumed = step * args.batch_size
            rows.append(f"| {step:,} | {consumed:,} | {consumed // (args.shards * args.shard_examples):,} | "
                        f"{statistics.median(seconds):.3f} |")
            print(rows[-1], file=sys.stderr)
    table = "\n".join([
        f"Resume time of the TFRecord input: {machine.cpu_name()}, {os.cpu_count()} cores; "
        f"flags: {' '.join(machine.cpu_flags()) or 'none'}.",
        f"{args.shards} shards x {args.shard_examples:,} synthetic examples, max_seq_length {args.max_seq_length}, "
        f"batch {args.batch_size}; median of {args.repeats} runs, after a warm-up.",
        "",
        "| resume step | examples consumed | epochs consumed | seconds to the first batch |",
        "|---|---|---|---|",
        *rows,
    ])
    print(table)
    if args.output:
        files.write_text(args.output, table + "\n")


if __name__ == "__main__":
    main()
