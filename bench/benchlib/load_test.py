"""What the serving benchmarks share: their flags, a model to serve, its export, `albert-tf serve`, and clients.

A load test builds a classifier (random weights: speed does not depend on
them) or takes a model directory (`build_model`), exports it with
`albert-tf export` (`export`), starts `albert-tf serve` on it in its own
process (`Server`), and sends single Rotten Tomatoes sentences to its
`serve_text` over REST from concurrent clients in this process (`rest_call`,
`bursts`).
"""

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

LABELS = ("negative", "positive")
WARMUP_REQUESTS = 3
START_TIMEOUT_S = 600
REQUEST_TIMEOUT_S = 120


def load_test_parser(description, *, model, rounds, rounds_help, quick_help, requests=None,
                     max_length_help="the export's --max-length"):
    """The flags every load test takes; with a default of `requests`, also --clients and --requests.

    --model, --tokenizer, [--clients, --requests,] --rounds, --max-length, --quick, --write.
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    other = "demo" if model == "base" else "base"
    parser.add_argument("--model", default=model,
                        help=f"{model} or {other} (that shape, random weights), or a model directory with a tokenizer.")
    parser.add_argument("--tokenizer", help="For base/demo: a tokenizer directory (default: one trained on IMDB).")
    if requests is not None:
        parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16], help="concurrent clients")
        parser.add_argument("--requests", type=int, default=requests, help="requests each client sends per burst")
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--max-length", type=int, default=128, help=max_length_help)
    parser.add_argument("--quick", action="store_true", help=f"a smoke test: {quick_help}")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    return parser


def parse_burst_args(parser, argv=None):
    """The arguments of a parser with --clients and --requests; --quick: 1 and 2 clients, 3 requests, 1 round."""
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.requests, args.rounds = [1, 2], 3, 1
    if min(args.clients) < 1 or args.requests < 1 or args.rounds < 1:
        parser.error("--clients, --requests and --rounds must be >= 1")
    return args


def rotten_tomatoes(limit):
    """The first `limit` Rotten Tomatoes sentences, what the clients send."""
    from input_pipeline import movie_reviews

    return [text for text, _ in movie_reviews.rotten_tomatoes_sentences()[:limit]]


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
    """`albert-tf serve BASE --port 0 [FLAGS]` on 127.0.0.1 in its own process; `url` once it answers."""

    def __init__(self, base, flags=()):
        self._stderr = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            albert_tf_command() + ["serve", base, "--host", "127.0.0.1", "--port", "0", *flags],
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


def warm_up(call, texts):
    """The first `WARMUP_REQUESTS` of `texts` through `call`, untimed: the first calls trace and allocate."""
    for text in texts[:WARMUP_REQUESTS]:
        call(text)


def bursts(call, texts, args, round_index, name):
    """One `burst` through `call` per --clients count, each printed (to stderr) as it ends.

    Returns:
        {clients: the burst's result}.
    """
    results = {}
    for clients in args.clients:
        result = results[clients] = burst(call, texts, clients, args.requests)
        print(f"round {round_index + 1}/{args.rounds} {name} x{clients}: {result['rps']:.2f} req/s, "
              f"p50 {result['p50']:.1f} ms, p99 {result['p99']:.1f} ms", file=sys.stderr, flush=True)
    return results


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
