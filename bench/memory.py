"""Peak memory and step time of a pretraining step with and without `--remat`.

Each (preset, remat, batch) runs in its own process, so each peak is that
configuration's alone: the process's peak resident set size (ru_maxrss),
model, Adam state, activations and framework included. With `--budget-gib`
the script also finds, for each preset and remat setting, the largest
power-of-two batch whose peak stays within the budget, one step per
candidate (a run that passes the budget is stopped there, and one that the
kernel kills for memory counts as not fitting).

    python bench/memory.py [--presets large xlarge] [--seq 512] [--batch 8] [--steps 3]
                           [--budget-gib 16] [--write bench/results/memory.md]
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchlib.machine import machine_line, measure_ceilings
from benchlib.output import emit_table

PREDICTIONS = 20


def arrays(batch, seq, vocab, seed=0):
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(5, vocab, (batch, seq)).astype("int32"),
        "segment_ids": (np.arange(seq) >= seq // 2).astype("int32")[None].repeat(batch, 0),
        "padding_mask": np.ones((batch, seq), "int32"),
        "mask_positions": np.sort(rng.choice(np.arange(1, seq), (batch, PREDICTIONS)), -1).astype("int32"),
    }
    y = {
        "mask_ids": rng.integers(5, vocab, (batch, PREDICTIONS)).astype("int32"),
        "mask_weights": np.ones((batch, PREDICTIONS), "float32"),
        "sentence_order_label": rng.integers(0, 2, (batch,)).astype("int32"),
    }
    return x, y


def run_one(preset, num_layers, seq, batch, remat, steps, jit):
    """Trains `steps` steps in this process; returns peak RSS (GiB) and the median step (ms)."""
    import keras

    from albert_tf import AlbertConfig
    from albert_tf.training.step_runner import build_pretrainer

    overrides = {"num_hidden_layers": num_layers} if num_layers else {}
    config = AlbertConfig.from_preset(preset, max_position_embeddings=max(512, seq), **overrides)
    model = build_pretrainer(config, remat=remat)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit)
    x, y = arrays(batch, seq, config.vocab_size)
    times = []
    for _ in range(steps + 1):  # the first step traces and compiles
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    # Linux reports ru_maxrss in KiB.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    # With no timed steps (a batch search), the first step's time, tracing included.
    return {"peak_gib": peak, "step_ms": statistics.median(times[1:] or times) * 1000}


def peak_rss_gib(pid):
    """A live process's peak resident set size so far (Linux VmHWM), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def measure(args, preset, batch, remat, steps=None, stop_above_gib=None):
    """`run_one` in a fresh process; None when the process dies (e.g. killed for memory).

    With `stop_above_gib` the process is stopped as soon as its peak RSS passes
    that much (the result then has that peak and no step time): a batch search
    need not wait minutes for a step whose memory already rules it out.
    """
    steps = args.steps if steps is None else steps
    command = [sys.executable, __file__, "--worker", "--presets", preset, "--seq", str(args.seq),
               "--batch", str(batch), "--steps", str(steps)]
    command += ["--remat"] if remat else []
    command += ["--jit"] if args.jit else []
    command += ["--num-layers", str(args.num_layers)] if args.num_layers else []
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        while process.poll() is None:
            peak = peak_rss_gib(process.pid)
            if stop_above_gib is not None and peak is not None and peak > stop_above_gib:
                process.kill()
                process.wait()
                print(f"{preset} batch {batch} remat={remat}: stopped at {peak:.2f} GiB peak RSS",
                      file=sys.stderr, flush=True)
                return {"peak_gib": peak, "step_ms": None}
            time.sleep(0.2)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        print(f"{preset} batch {batch} remat={remat} failed (exit {process.returncode}): {stderr[-500:]}",
              file=sys.stderr)
        return None
    result = json.loads(stdout.strip().splitlines()[-1])
    print(f"{preset} batch {batch} remat={remat}: {result}", file=sys.stderr, flush=True)
    return result


def largest_batch(args, preset, remat):
    """The largest power-of-two batch whose peak RSS is within `args.budget_gib` (0 if none), with its result.

    Each candidate trains one step (the first, where Adam's slots are made):
    the peak is what matters here, not the step time.
    """
    batch, best, best_result = 1, 0, None
    while batch <= args.max_batch:
        result = measure(args, preset, batch, remat, steps=0, stop_above_gib=args.budget_gib)
        if result is None or result["peak_gib"] > args.budget_gib:
            break
        best, best_result, batch = batch, result, batch * 2
    return best, best_result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["large", "xlarge"])
    parser.add_argument("--num-layers", type=int, help="override the presets' layer count (quick checks)")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    parser.add_argument("--jit", action="store_true", help="compile the step with XLA")
    parser.add_argument("--budget-gib", type=float, help="also find the largest batch within this peak RSS")
    parser.add_argument("--max-batch", type=int, default=256, help="stop the batch search here")
    parser.add_argument("--remat", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_one(args.presets[0], args.num_layers, args.seq, args.batch, args.remat,
                                 args.steps, args.jit)))
        return

    ceilings = measure_ceilings()
    layers = f", {args.num_layers} layers" if args.num_layers else ""
    lines = [
        f"Pretraining step (Adam), seq {args.seq}, batch {args.batch}{layers}, "
        f"{'XLA' if args.jit else 'no XLA'}, median of {args.steps} steps; peak = process peak RSS.",
        machine_line(ceilings),
    ]
    if args.budget_gib:
        lines.append(f"Batch search: powers of two up to {args.max_batch}, one step each (the first: Adam's slots "
                     f"made, tracing included), a run stopped as soon as its peak passes {args.budget_gib:g} GiB.")
    lines += [
        "",
        "| preset | remat | peak RSS (GiB) | step (ms) | step vs no remat |"
        + (f" largest batch within {args.budget_gib:g} GiB | its peak (GiB) | its first step (ms) |"
           if args.budget_gib else ""),
        "|---|---|---:|---:|---:|" + ("---:|---:|---:|" if args.budget_gib else ""),
    ]
    for preset in args.presets:
        plain = None
        for remat in (False, True):
            result = measure(args, preset, args.batch, remat)
            plain = result if not remat else plain
            cells = [preset, "on" if remat else "off"]
            if result is None:
                cells += ["did not run", "", ""]
            else:
                ratio = f"{result['step_ms'] / plain['step_ms']:.2f}x" if remat and plain else ""
                cells += [f"{result['peak_gib']:.2f}", f"{result['step_ms']:.0f}", ratio]
            if args.budget_gib:
                best, found = largest_batch(args, preset, remat)
                cells += [str(best), f"{found['peak_gib']:.2f}" if found else "",
                          f"{found['step_ms']:.0f}" if found else ""]
            lines.append("| " + " | ".join(cells) + " |")
    print()
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
