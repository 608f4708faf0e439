"""What the benchmark scripts share: timing, the machine's ceilings and CPU flags,
implementations run alternately in their own processes, and Markdown tables."""

import json
import os
import statistics
import subprocess
import sys
import time

# The /proc/cpuinfo flags that decide matmul speed, in the order tables print them.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def timed(fn, warmup, steps):
    """Median wall time of `fn()` over `steps` calls after `warmup` calls, in milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


def emit_table(text, path=None):
    """Prints `text` and, with a `path`, also writes it there (creating the folder)."""
    print(text)
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")


def cpu_flags():
    """The `SPEED_FLAGS` this CPU has (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next(l for l in f if l.startswith("flags"))
    except (OSError, StopIteration):
        return []
    present = set(line.split(":", 1)[1].split())
    return [flag for flag in SPEED_FLAGS if flag in present]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l for l in f if l.startswith("model name")).split(":", 1)[1].strip()
    except (OSError, StopIteration):
        return "unknown CPU"


def measure_ceilings(seconds=0.5):
    """bench/ceilings.py's measurement, run in a fresh process (no thread pool of ours competes)."""
    out = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ceilings.py"),
         "--json", "--seconds", str(seconds)],
        capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine_line(ceilings):
    """One line for a table's header: CPU, flags and the measured ceilings."""
    return (
        f"{cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(ceilings['flags']) or 'none'}; "
        f"measured ceilings (bench/ceilings.py): fp32 {ceilings['fp32']:.0f} GFLOP/s, "
        f"bf16 {ceilings['bf16']:.1f} GFLOP/s, int8 {ceilings['int8']:.1f} GOP/s."
    )


def albert_flops(hidden, layers, intermediate, embedding, vocab, batch, seq, predictions=0, train=False):
    """Matmul FLOPs of one ALBERT forward pass (x3 with `train`: the backward pass is two matmuls per matmul).

    Counts the E -> H projection, per layer the QKV/output projections, the
    attention scores and context, and the FFN; the pooler; and, with
    `predictions`, the MLM head (H -> E transform and the E x V decoder).
    """
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * batch * seq * seq * hidden
    forward = 2 * tokens * embedding * hidden + layers * per_layer + 2 * batch * hidden * hidden
    forward += 2 * batch * predictions * (hidden * embedding + embedding * vocab)
    return forward * (3 if train else 1)


class Worker:
    """One implementation in its own process, measured on request.

    The child runs `script --worker KEY ARGS...`, builds and warms up its model
    once, then answers each line it reads on stdin with one JSON line of
    timings (see `serve`). Keeping every child alive lets `alternate` time
    the implementations in turns, so a change in the machine's load hits
    all of them instead of one.
    """

    def __init__(self, script, key, args=()):
        self.key = key
        self._process = subprocess.Popen(
            [sys.executable, script, "--worker", key, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self._read()  # "ready" once built and warmed up

    def _read(self):
        for line in self._process.stdout:
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise RuntimeError(f"worker {self.key} exited with code {self._process.wait()}")

    def measure(self):
        self._process.stdin.write("run\n")
        self._process.stdin.flush()
        return self._read()

    def close(self):
        self._process.stdin.close()
        self._process.wait()


def serve(measurements):
    """The child side of `Worker`: `measurements` is {name: zero-argument function -> ms}."""
    print("RESULT " + json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        print("RESULT " + json.dumps({name: fn() for name, fn in measurements.items()}), flush=True)


def alternate(script, keys, rounds, args=()):
    """Times `keys` in turns, `rounds` times; returns {key: [one result dict per round]}.

    Each round starts with a different implementation, so none always runs
    right after the same neighbour.
    """
    workers = {key: Worker(script, key, args) for key in keys}
    results = {key: [] for key in keys}
    try:
        for r in range(rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)]
            for key in order:
                results[key].append(workers[key].measure())
                print(f"round {r + 1}/{rounds} {key}: {results[key][-1]}", file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.close()
    return results


def ratio_stats(results, key, peers, measurement):
    """Median over rounds of `key`'s time / the fastest peer's time in that round, and the (min, max).

    The fastest peer is the one with the lowest median over all rounds.
    """
    fastest = min(peers, key=lambda p: statistics.median(r[measurement] for r in results[p]))
    ratios = [a[measurement] / b[measurement] for a, b in zip(results[key], results[fastest])]
    return fastest, statistics.median(ratios), (min(ratios), max(ratios))
