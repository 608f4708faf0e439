"""Server-side batching: `albert-tf serve` with and without `--enable-batching`, 1, 4 and 16 clients.

Builds a sentiment classifier (random weights: speed does not depend on
them) of the demo's shape (--model demo, the default), ALBERT-base's
(--model base), or takes a model directory with its tokenizer; exports it
(float32); starts `albert-tf serve` on it without batching, and with
`--enable-batching --batching-parameters-file F` for each parameter set of
--configs (TF-Serving's text format; the default: the file `export` writes
beside the versions, and variants of its max_batch_size and timeout), each
in its own process. Then 1, 4 and 16 concurrent clients each send
--requests single Rotten Tomatoes sentences to `serve_text` over REST, one
after the other. Reports requests/s (all clients together) and the p50 /
p99 latency of single requests, medians of --rounds rounds in turns. The
clients run in this process, taking CPU from the server as clients on the
same host would.

    python bench/serving_batching.py [--model demo|base|DIR] [--clients 1 4 16] [--requests 20]
        [--rounds 2] [--write FILE]
"""

import os
import statistics
import tempfile

from benchlib.load_test import (Server, build_model, bursts, export, load_test_parser, parse_burst_args, rest_call,
                                rotten_tomatoes, warm_up)
from benchlib.machine import cpu_flags, cpu_name

# name -> batching parameters text (None: no batching). "suggested": what `export` writes.
CONFIGS = {
    "none": None,
    "suggested": "suggested",
    "max 4, 1 ms": "max_batch_size { value: 4 }\nbatch_timeout_micros { value: 1000 }\nnum_batch_threads { value: 2 }\n"
                   "max_enqueued_batches { value: 64 }\nallowed_batch_sizes: 1\nallowed_batch_sizes: 2\n"
                   "allowed_batch_sizes: 4\n",
    "max 16, 2 ms": "max_batch_size { value: 16 }\nbatch_timeout_micros { value: 2000 }\nnum_batch_threads { value: 2 }\n"
                    "max_enqueued_batches { value: 64 }\n"
                    + "".join(f"allowed_batch_sizes: {b}\n" for b in (1, 2, 4, 8, 16)),
}


def main():
    parser = load_test_parser(__doc__, model="demo", requests=20, rounds=2, rounds_help="turns over the servers",
                              quick_help="toy model, 1 and 2 clients, 3 requests")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS),
                        help="batching parameter sets to measure ('none': no batching)")
    args = parse_burst_args(parser)

    from benchlib.output import emit_table

    sentences = rotten_tomatoes(2000)
    results = {(c, n): [] for c in args.configs for n in args.clients}
    texts = {}
    with tempfile.TemporaryDirectory() as workdir:
        model_dir, described = build_model(args.model, workdir, args.tokenizer, args.quick)
        base = os.path.dirname(export(model_dir, os.path.join(workdir, "saved"), "float32", args.max_length))
        for config in args.configs:
            if CONFIGS[config] is None:
                continue
            path = os.path.join(base, "batching_parameters.txt") if CONFIGS[config] == "suggested" else \
                os.path.join(workdir, f"batching-{len(texts)}.txt")
            if CONFIGS[config] != "suggested":
                with open(path, "w") as f:
                    f.write(CONFIGS[config])
            texts[config] = path
        for r in range(args.rounds):
            order = args.configs[r % len(args.configs):] + args.configs[:r % len(args.configs)]
            for config in order:  # one server at a time: they would share the CPU
                batching = ["--enable-batching", "--batching-parameters-file", texts[config]] if config in texts else []
                server = Server(base, batching)
                try:
                    call = rest_call(server.wait())
                    warm_up(call, sentences)
                    for clients, result in bursts(call, sentences, args, r, config).items():
                        results[config, clients].append(result)
                finally:
                    server.close()
        suggested = open(os.path.join(base, "batching_parameters.txt")).read()

    flags = cpu_flags()
    lines = [
        f"{described}; float32 export (--max-length {args.max_length}); single Rotten Tomatoes sentences to "
        f"serve_text over REST, {args.requests} requests per client per burst, median of {args.rounds} round(s) "
        f"in turns. {cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(flags) or 'none'}.",
        "",
        "| batching | clients | requests/s [min, max] | p50 (ms) | p99 (ms) | requests/s vs none |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for config in args.configs:
        for clients in args.clients:
            rounds = results[config, clients]
            rps = [r["rps"] for r in rounds]
            ratio = ""
            if "none" in args.configs and config != "none":
                ratio = f"{statistics.median(rps) / statistics.median(r['rps'] for r in results['none', clients]):.2f}"
            lines.append(f"| {config} | {clients} | {statistics.median(rps):.2f} [{min(rps):.2f}, {max(rps):.2f}] | "
                         f"{statistics.median(r['p50'] for r in rounds):.1f} | "
                         f"{statistics.median(r['p99'] for r in rounds):.1f} | {ratio} |")
    lines += ["", "The suggested file (`export` writes it as BASE/batching_parameters.txt):", "", "```", suggested.strip(),
              "```"]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
