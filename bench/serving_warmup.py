"""First request after a fresh load, with and without the export's warmup records, against the steady median.

Exports one classifier (`albert-tf export`, which writes
assets.extra/tf_serving_warmup_requests); then, --rounds times and in turns,
a fresh Python process loads it with `albert_tf.export.serving.ServingModel`
(replaying the records, as `albert-tf serve` and TF-Serving do, or not) and
times one `serve_text` request of one Rotten Tomatoes sentence, then
--steps more: the steady median. Reports the first request, the steady
median and their ratio, medians over the rounds, and the load time.

    python bench/serving_warmup.py [--model demo|base|DIR] [--rounds 3] [--steps 20] [--write FILE]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib.load_test import build_model, export, load_test_parser, rotten_tomatoes
from benchlib.machine import cpu_flags, cpu_name

# Runs in the fresh process: argv = version base path, "1"/"0" (warmup), steps, sentences as JSON.
_CHILD = """
import json, statistics, sys, time
t0 = time.perf_counter()
from albert_tf.export.serving import ServingModel
model = ServingModel(sys.argv[1], warmup=sys.argv[2] == "1")
load = time.perf_counter() - t0
sentences = json.loads(sys.argv[4])
times = []
for i in range(int(sys.argv[3]) + 1):
    start = time.perf_counter()
    model.predict({"signature_name": "serve_text", "instances": [sentences[i % len(sentences)]]})
    times.append(time.perf_counter() - start)
print(json.dumps({"load": load, "first": times[0], "steady": statistics.median(times[1:]),
                  "replayed": model.warmup_requests}))
"""


def fresh_load(base, warmup, steps, sentences):
    done = subprocess.run([sys.executable, "-c", _CHILD, base, "1" if warmup else "0", str(steps),
                           json.dumps(sentences)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the fresh process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = load_test_parser(__doc__, model="demo", rounds=3, rounds_help="fresh loads of each kind, in turns",
                              quick_help="toy model, one round, 3 steps")
    parser.add_argument("--steps", type=int, default=20, help="requests after the first (the steady median)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 3

    from benchlib.output import emit_table

    sentences = rotten_tomatoes(50)
    results = {True: [], False: []}
    with tempfile.TemporaryDirectory() as workdir:
        model_dir, described = build_model(args.model, workdir, args.tokenizer, args.quick)
        base = os.path.dirname(export(model_dir, os.path.join(workdir, "saved"), "float32", args.max_length))
        for r in range(args.rounds):
            for warmup in (True, False) if r % 2 == 0 else (False, True):
                result = fresh_load(base, warmup, args.steps, sentences)
                results[warmup].append(result)
                print(f"round {r + 1}/{args.rounds} warmup={warmup}: {json.dumps(result)}", file=sys.stderr, flush=True)

    flags = cpu_flags()
    lines = [
        f"{described}; float32 export (--max-length {args.max_length}); a fresh process loads it, then sends one "
        f"Rotten Tomatoes sentence to serve_text, then {args.steps} more (the steady median); medians of "
        f"{args.rounds} fresh loads each, in turns. {cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(flags) or 'none'}.",
        "",
        "| load | records replayed | load (s) | first request (ms) | steady median (ms) | first / steady [min, max] |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for warmup in (True, False):
        rounds = results[warmup]
        ratios = [r["first"] / r["steady"] for r in rounds]
        lines.append(
            f"| {'with the warmup file' if warmup else 'without (--no-enable-model-warmup)'} | "
            f"{rounds[0]['replayed']} | {statistics.median(r['load'] for r in rounds):.1f} | "
            f"{1000 * statistics.median(r['first'] for r in rounds):.1f} | "
            f"{1000 * statistics.median(r['steady'] for r in rounds):.1f} | "
            f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] |")
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
