"""Examples per second of the raw-text pretraining input: made locally, or by tf.data service workers.

The input is what `albert-tf pretrain --data TEXT --tokenizer TOK` builds (fresh
SOP pairs and n-gram masks every epoch, TensorFlow ops only), over IMDB reviews.
It is read three ways, each for the same number of batches after a warmup:

    local        the pipeline in the reading process (`pretrain` without --data-service)
    service, N   the same graph sent to a dispatcher and made by N worker processes
                 (`pretrain --data-service grpc://...`), on this machine

On one machine the workers share its cores with the reader, so the service rows
say what the service costs (serialization, gRPC) and whether it keeps up, not
what a pod's many hosts gain. Figures compare only within one run.

    python bench/data_service_throughput.py [--tokenizer runs/demo/tokenizer] [--batches 200]
        [--workers 1 2] [--write bench/results/data_service_throughput.md]

Without --tokenizer it trains a 4,000-piece tokenizer on the reviews first.
"""

import argparse
import os
import socket
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH_DIR))
sys.path.insert(0, BENCH_DIR)

from benchlib.machine import cpu_flags, cpu_name  # noqa: E402
from benchlib.output import emit_table  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_worker(port, dispatcher):
    """`--serve-worker`: one tf.data service worker process, serving until killed."""
    import tensorflow as tf

    service = tf.data.experimental.service
    server = service.WorkerServer(service.WorkerConfig(
        dispatcher_address=dispatcher, worker_address=f"127.0.0.1:{port}", port=port))
    print("ready", flush=True)
    server.join()


def build_input(args):
    """(dataset_fn of the raw-text pretraining input, tokenizer description)."""
    from input_pipeline import AlbertTokenizer, PretrainingDataConfig, TokenizedCorpus, movie_reviews

    documents = movie_reviews.imdb_documents("pretrain", limit=args.documents)
    if args.tokenizer:
        tokenizer, described = AlbertTokenizer.load(args.tokenizer), args.tokenizer
    else:
        tokenizer = AlbertTokenizer.train((s for d in documents for s in d), 4000, num_threads=os.cpu_count())
        described = "4,000 pieces trained on the same reviews"
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    config = PretrainingDataConfig(max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions)
    return corpus, config, described


def examples_per_second(dataset, batch_size, warmup, batches):
    """Reads `warmup` batches untimed, then `batches` timed; examples/s."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", help="a tokenizer directory (default: train one on the reviews)")
    parser.add_argument("--documents", type=int, default=4000, help="IMDB reviews in the corpus")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-predictions", type=int, default=20)
    parser.add_argument("--batches", type=int, default=200, help="timed batches per row")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts for the service rows")
    parser.add_argument("--write", help="also write the table to this Markdown file")
    parser.add_argument("--serve-worker", nargs=2, metavar=("PORT", "DISPATCHER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_worker:
        return serve_worker(int(args.serve_worker[0]), args.serve_worker[1])

    import tensorflow as tf

    from input_pipeline import make_pretraining_dataset
    from input_pipeline.pretraining.dataset import distribute_on_data_service

    corpus, config, described = build_input(args)

    def dataset():
        return make_pretraining_dataset(corpus, args.batch_size, tf.distribute.InputContext(), config=config)

    rows = [("local (in the reading process)", "-", examples_per_second(dataset(), args.batch_size, args.warmup,
                                                                       args.batches))]
    for count in args.workers:
        dispatcher = tf.data.experimental.service.DispatchServer()
        address = dispatcher.target.split("://")[1]
        workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-worker", str(free_port()),
                                     address], stdout=subprocess.PIPE, text=True) for _ in range(count)]
        try:
            for worker in workers:
                if worker.stdout.readline().strip() != "ready":
                    raise RuntimeError("a tf.data service worker did not start")
            served = distribute_on_data_service(dataset(), dispatcher.target)
            rows.append((f"tf.data service, {count} worker process{'es' if count > 1 else ''}", str(count),
                         examples_per_second(served, args.batch_size, args.warmup, args.batches)))
        finally:
            for worker in workers:
                worker.kill()
                worker.wait()
            dispatcher._stop()

    lines = [
        "# Raw-text pretraining input: local against tf.data service",
        "",
        f"`python bench/data_service_throughput.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        "",
        f"CPU: {cpu_name()}, {os.cpu_count()} cores, flags: {' '.join(cpu_flags()) or 'none of note'}. "
        f"TensorFlow {tf.__version__}. Input: {args.documents} IMDB reviews, tokenizer: {described}; "
        f"batch {args.batch_size} x seq {args.max_seq_length}, {args.max_predictions} predictions; "
        f"{args.batches} batches timed after {args.warmup}. Workers run on the same cores as the reader.",
        "",
        "| input | workers | examples/s |",
        "|---|---:|---:|",
        *(f"| {name} | {workers} | {rate:,.0f} |" for name, workers, rate in rows),
    ]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
