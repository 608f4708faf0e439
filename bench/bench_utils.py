"""What the benchmark scripts share: timing a callable and emitting a Markdown table."""

import os
import statistics
import time


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
