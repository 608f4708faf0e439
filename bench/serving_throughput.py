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

import os
import statistics
import tempfile

from albert_tf.precision import BF16_CPU_FLAGS, bf16_units
from benchlib.load_test import (Server, build_model, bursts, export, load_test_parser, parse_burst_args, rest_call,
                                rotten_tomatoes, warm_up)
from benchlib.machine import cpu_flags, cpu_name

PRECISIONS = ("float32", "mixed_bfloat16")
PATHS = {"rest": "albert-tf serve, REST serve_text", "direct": "SavedModel serve_text, in-process"}


def direct_call(version_dir):
    """A function running one sentence through the export's serve_text in this process; returns its label."""
    import tensorflow as tf

    from albert_tf.export import load_saved_model

    signature = load_saved_model(version_dir).signatures["serve_text"]
    return lambda sentence: signature(text=tf.constant([sentence]))["labels"].numpy()[0].decode()


def main():
    parser = load_test_parser(__doc__, model="base", requests=40, rounds=3, rounds_help="turns over the exports",
                              quick_help="toy model, 1 and 2 clients, 3 requests",
                              max_length_help="the exports' --max-length")
    args = parse_burst_args(parser)

    from benchlib.output import emit_table

    sentences = rotten_tomatoes(2000)
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
                warm_up(call, sentences)
            keys = list(calls)
            results = {(key, c): [] for key in keys for c in args.clients}
            for r in range(args.rounds):
                for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                    for clients, result in bursts(calls[key], sentences, args, r, f"{key[0]} {key[1]}").items():
                        results[key, clients].append(result)
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
