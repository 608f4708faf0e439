"""Timing: median wall time of a call, and implementations timed in turns, each in its own process."""

import json
import statistics
import subprocess
import sys
import time

# What `timed` can measure: wall time, or the CPU time of all the process's threads.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(fn, warmup, steps, clock=time.perf_counter):
    """Median time of `fn()` over `steps` calls after `warmup` calls, in milliseconds.

    `clock` is wall time by default; `time.process_time` gives CPU time (all threads of this
    process), which on a shared machine swings much less with the other processes' load.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times) * 1000.0


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


def serve_calls(run, warmup, steps):
    """The child side of `Worker` for a row that times one call: `warmup` calls of `run`, then for each request
    the median of `steps` calls, as {"ms": ...}."""
    for _ in range(warmup):
        run()
    serve({"ms": lambda: timed(run, 0, steps)})


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
