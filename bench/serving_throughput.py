"""Serving throughput: `albert-tf serve` on a float32 and a bf16 export of one classifier, several clients.

Builds a sentiment classifier (random weights: speed does not depend on
them) of ALBERT-base's shape (--model base), the demo's (--model demo), or
takes a model directory with its tokenizer; exports it twice with
`albert-tf export --mixed-precision float32` and `--mixed-precision mixed_bfloat16`; starts
`albert-tf serve` on each export (its own process, 127.0.0.1, a free port);
then 1, 4 and 16 concurrent clients each send --requests single Rotten
Tomatoes sentences to `serve_text` over REST, one request after the other.
Beside each server, the same requests go through the export's `serve_text`
loaded in this process with `tf.saved_model.load` (one thread per client),
which is the model's time without HTTP and JSON.

Reports requests/s (all clients together: requests over the wall time of the
whole burst) and the p50 / p99 latency of single requests, the median of
--rounds rounds in turns (each round starts with another export, so a
change in the machine's load hits all of them), with the range of
requests/s over the rounds, and bf16's requests/s against float32's. The
clients run in this process: on a small machine they take CPU from the
server, as real clients on the same host would.

    python bench/serving_throughput.py [--model base|demo|DIR] [--clients 1 4 16] [--requests 40]
        [--rounds 3] [--tokenizer DIR] [--quick]

--quick: a one-layer toy model, 1 and 2 clients, 3 requests, one round: a
smoke test of the whole path, not a measurement.
"""

import argparse
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from albert_tf.precision import BF16_CPU_FLAGS, bf16_units
from benchlib.machine import cpu_flags, cpu_name

PRECISIONS = ("float32", "mixed_bfloat16")
PATHS = {"rest": "albert-tf serve, REST serve_text", "direct": "SavedModel serve_text, in-process"}
LABELS = ("negative", "positive")
WARMUP_REQUESTS = 3
START_TIMEOUT_S = 600
REQUEST_TIMEOUT_S = 120


def albert_tf_command():
    """The `albert-tf` console script beside this Python, else the module."""
    script = os.path.join(os.path.dirname(sys.executable), "albert-tf")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "albert_tf.cli"]


def build_model(model, workdir, tokenizer_dir, quick):
    """A model directory holding a classifier and its tokenizer; returns (path, description)."""
    if model not in ("base", "demo"):
        return model, model
    import keras

    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.apps.demo_config import DEMO_MODEL
    from albert_tf.models import AlbertClassifier
    from input_pipeline import AlbertTokenizer, movie_reviews

    if tokenizer_dir:
        tokenizer = AlbertTokenizer.load(tokenizer_dir)
    else:
        # A tokenizer of real text: serve_text's work depends on its pieces. Its size only changes the
        # embedding table, whose lookup is a small share of the time.
        documents = movie_reviews.imdb_documents("pretrain", limit=300 if quick else 3000)
        tokenizer = AlbertTokenizer.train((s for d in documents for s in d), 300 if quick else 8000, num_threads=1)
    if quick:
        config = AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=32,
                              num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                              max_position_embeddings=128)
    else:
        config = (AlbertConfig.from_preset("base") if model == "base" else DEMO_MODEL).replace(
            vocab_size=tokenizer.vocab_size)
    keras.utils.set_random_seed(0)
    classifier = AlbertClassifier(AlbertBackbone(config), num_classes=2, label_names=list(LABELS))
    path = os.path.join(workdir, "model")
    classifier.save_pretrained(path)
    tokenizer.save(path)
    shape = "a toy" if quick else f"the {model}"
    return path, (f"A classifier of {shape} shape (H {config.hidden_size}, L {config.num_hidden_layers}), random "
                  f"weights, {tokenizer.vocab_size}-piece tokenizer")


def export(model_dir, out, precision, max_length):
    """`albert-tf export --mixed-precision PRECISION`; returns the version directory."""
    done = subprocess.run(
        albert_tf_command() + ["export", "--model", model_dir, "--format", "saved_model", "--out", out,
                               "--mixed-precision", precision, "--max-length", str(max_length)],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"albert-tf export --mixed-precision {precision} failed:\n{done.stdout}\n{done.stderr}")
    print(done.stdout.strip(), file=sys.stderr)
    return os.path.join(out, "1")


class Server:
    """`albert-tf serve BASE --port 0` on 127.0.0.1 in its own process; `url` once it answers."""

    def __init__(self, base):
        self._stderr = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(albert_tf_command() + ["serve", base, "--host", "127.0.0.1", "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self._lines = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(line) for line in self.process.stdout], daemon=True).start()
        self.url = None

    def wait(self):
        """Blocks until the start-up line; returns the predict URL."""
        try:
            banner = self._lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            banner = ""
        found = re.search(r"http://127\.0\.0\.1:\d+/\S+", banner)
        if not found:
            self._stderr.seek(0)
            raise RuntimeError(f"albert-tf serve did not start (exit {self.process.poll()}):\n"
                               f"{self._stderr.read()[-3000:]}")
        self.url = found.group(0) + ":predict"
        return self.url

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        self._stderr.close()


def rest_call(url):
    """A function sending one sentence to `url`'s serve_text; returns its label."""
    def call(sentence):
        body = json.dumps({"signature_name": "serve_text", "instances": [sentence]}).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
            return json.loads(answer.read())["predictions"][0]["labels"]

    return call


def direct_call(version_dir):
    """A function running one sentence through the export's serve_text in this process; returns its label."""
    import tensorflow as tf

    from albert_tf.export import load_saved_model

    signature = load_saved_model(version_dir).signatures["serve_text"]
    return lambda sentence: signature(text=tf.constant([sentence]))["labels"].numpy()[0].decode()


def burst(call, sentences, clients, requests):
    """`clients` threads each sending `requests` sentences one after the other.

    Returns:
        {"rps": requests/s over the burst, "p50", "p99": single-request latency in ms, "labels": [...]}.
    """
    def client(index):
        latencies, labels = [], []
        for i in range(requests):
            sentence = sentences[(index * requests + i) % len(sentences)]
            start = time.perf_counter()
            labels.append(call(sentence))
            latencies.append(time.perf_counter() - start)
        return latencies, labels

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    latencies = sorted(l for r in results for l in r[0])
    return {
        "rps": len(latencies) / wall,
        "p50": 1000 * percentile(latencies, 50),
        "p99": 1000 * percentile(latencies, 99),
        "labels": [label for r in results for label in r[1]],
    }


def percentile(sorted_values, q):
    """The nearest-rank `q`th percentile of an ascending list."""
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base",
                        help="base or demo (that shape, random weights), or a model directory with a tokenizer.")
    parser.add_argument("--tokenizer", help="For base/demo: a tokenizer directory (default: one trained on IMDB).")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16], help="concurrent clients")
    parser.add_argument("--requests", type=int, default=40, help="requests each client sends per burst")
    parser.add_argument("--rounds", type=int, default=3, help="turns over the exports")
    parser.add_argument("--max-length", type=int, default=128, help="the exports' --max-length")
    parser.add_argument("--quick", action="store_true", help="a smoke test: toy model, 1 and 2 clients, 3 requests")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.requests, args.rounds = [1, 2], 3, 1
    if min(args.clients) < 1 or args.requests < 1 or args.rounds < 1:
        parser.error("--clients, --requests and --rounds must be >= 1")

    from benchlib.output import emit_table
    from input_pipeline import movie_reviews

    sentences = [text for text, _ in movie_reviews.rotten_tomatoes_sentences()[:2000]]
    flags = cpu_flags()
    with tempfile.TemporaryDirectory() as workdir:
        model_dir, described = build_model(args.model, workdir, args.tokenizer, args.quick)
        versions = {p: export(model_dir, os.path.join(workdir, f"saved-{p}"), p, args.max_length)
                    for p in PRECISIONS}
        servers = {p: Server(os.path.dirname(versions[p])) for p in PRECISIONS}  # both start at once
        try:
            calls = {("rest", p): rest_call(servers[p].wait()) for p in PRECISIONS}
            calls.update({("direct", p): direct_call(versions[p]) for p in PRECISIONS})
            for call in calls.values():
                for sentence in sentences[:WARMUP_REQUESTS]:
                    call(sentence)
            keys = list(calls)
            results = {(key, c): [] for key in keys for c in args.clients}
            for r in range(args.rounds):
                for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                    for clients in args.clients:
                        result = burst(calls[key], sentences, clients, args.requests)
                        results[key, clients].append(result)
                        print(f"round {r + 1}/{args.rounds} {key[0]} {key[1]} x{clients}: {result['rps']:.2f} req/s, "
                              f"p50 {result['p50']:.1f} ms, p99 {result['p99']:.1f} ms", file=sys.stderr, flush=True)
        finally:
            for server in servers.values():
                server.close()

    units = bf16_units(set(flags))
    lines = [
        f"{described}; single Rotten Tomatoes sentences to serve_text (--max-length {args.max_length}), "
        f"{args.requests} requests per client per burst, median of {args.rounds} round(s) in turns. "
        f"{cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(flags) or 'none'}"
        + ("." if units else f"; no {' or '.join(BF16_CPU_FLAGS)}: bf16 runs emulated here."),
        "",
        "| path | precision | clients | requests/s [min, max] | p50 (ms) | p99 (ms) | bf16 / float32 requests/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for path in PATHS:
        for clients in args.clients:
            for precision in PRECISIONS:
                rounds = results[(path, precision), clients]
                rps = [r["rps"] for r in rounds]
                ratio = ""
                if precision == "mixed_bfloat16":
                    ratios = [b["rps"] / f["rps"] for b, f in zip(rounds, results[(path, "float32"), clients])]
                    ratio = f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"
                lines.append(
                    f"| {PATHS[path]} | {precision} | {clients} | {statistics.median(rps):.2f} "
                    f"[{min(rps):.2f}, {max(rps):.2f}] | {statistics.median(r['p50'] for r in rounds):.1f} | "
                    f"{statistics.median(r['p99'] for r in rounds):.1f} | {ratio} |")
    agree = agreement(results)
    lines += ["", f"bf16 and float32 gave the same label to {agree[0]} of {agree[1]} requests."]
    emit_table("\n".join(lines), args.write)


def agreement(results):
    """(same labels, requests) of bf16 against float32, over requests sent to both in the same order."""
    same = total = 0
    for (key, clients), rounds in results.items():
        if key[1] != "mixed_bfloat16":
            continue
        for bf16, float32 in zip(rounds, results[(key[0], "float32"), clients]):
            same += sum(a == b for a, b in zip(bf16["labels"], float32["labels"]))
            total += len(bf16["labels"])
    return same, total


if __name__ == "__main__":
    main()
