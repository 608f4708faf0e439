"""Counts what XLA compiles for albert-tf and for keras-hub: the float32 training step and batch-1 inference.

The programs are the ones bench/model_speed.py times in its "tf.function +
XLA" rows (the same builders, `bench_albert_tf` and `bench_keras_hub`): one
pretraining step (forward, loss, backward, Adam update) at batch 8, seq 128,
and the backbone's forward pass at batch 1, seq 128. Each implementation
runs in its own process with XLA's dump flags added to `XLA_FLAGS` (kept as
given otherwise, so `--xla_cpu_max_isa` and the like still apply), runs one
training step and one inference call, and the optimized HLO of each
(`*after_optimizations.txt`, the largest module each call compiled) is
counted: instructions of the entry computation, fusions by kind, transposes
and copies outside and inside fusions with the elements they write, dots,
custom calls by target, bitcasts, reshapes and collectives. A transpose or
copy outside a fusion is a pass over memory of its own; inside one it may
be free (folded into the fusion's indexing) or not.

    pip install -e .[bench]
    python bench/hlo_compare.py [--config tiny] [--keep /tmp/hlo] [--write bench/results/hlo_compare.md]
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from model_speed import BATCH, PREDICTIONS, SEQ, SIZES, bench_albert_tf, bench_keras_hub

from benchlib.machine import cpu_flags, cpu_kind, cpu_name
from benchlib.output import emit_table
from benchlib.synthetic import pretraining_arrays

BUILDERS = {"albert-tf": bench_albert_tf, "keras-hub": bench_keras_hub}
PHASES = {"train": f"train step b{BATCH} s{SEQ}", "infer": f"inference b1 s{SEQ}"}

# `%name = shape opcode(operands), attributes`: the opcode is the first word directly before a "(".
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s+=\s+(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_ARRAY_SHAPE = re.compile(r"^[a-z0-9]+\[([\d,]*)\]")


def parse_hlo(text):
    """{computation name: [(opcode, shape text, rest of the line)]}, the entry's name, the fused computations."""
    computations, entry, fused, current = {}, None, set(), None
    for line in text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            current = header.group(2)
            computations[current] = []
            if header.group(1):
                entry = current
            continue
        instruction = _INSTRUCTION.match(line) if current else None
        if instruction:
            shape, opcode, rest = instruction.groups()
            computations[current].append((opcode, shape, rest))
            if opcode == "fusion":
                fused.update(re.findall(r"calls=%?([\w.\-]+)", rest))
    return computations, entry, fused


def elements(shape):
    """Elements of an array shape's text (`f32[8,128]{1,0}` -> 1024); 0 for a tuple."""
    match = _ARRAY_SHAPE.match(shape)
    if not match:
        return 0
    count = 1
    for dim in filter(None, match.group(1).split(",")):
        count *= int(dim)
    return count


def count_hlo(text):
    """The table's counts of one optimized HLO module: {row name: value}."""
    computations, entry, fused = parse_hlo(text)
    counts = collections.Counter()
    counts["instructions in the entry computation"] = sum(
        1 for opcode, _, _ in computations[entry] if opcode != "parameter"
    )
    for name, instructions in computations.items():
        where = "inside fusions" if name in fused else "outside fusions"
        for opcode, shape, rest in instructions:
            if opcode == "fusion":
                kind = re.search(r"kind=(\w+)", rest)
                counts["fusions"] += 1
                counts[f"fusions, {kind.group(1) if kind else '?'}"] += 1
            elif opcode in ("transpose", "copy"):
                plural = {"transpose": "transposes", "copy": "copies"}[opcode]
                counts[f"{plural} {where}"] += 1
                counts[f"{plural} {where}, M elements written"] += elements(shape) / 1e6
            elif opcode in ("dot", "convolution"):
                counts[f"{opcode}s {where}"] += 1
            elif opcode == "custom-call":
                target = re.search(r'custom_call_target="([^"]+)"', rest)
                counts[f"custom calls: {target.group(1) if target else '?'}"] += 1
            elif opcode in ("bitcast", "reshape", "concatenate", "slice", "dynamic-slice", "broadcast"):
                counts[f"{opcode}s"] += 1
            elif opcode in ("all-reduce", "while", "call", "conditional"):
                counts[opcode] += 1
    return counts


def run_worker(implementation, config):
    """The child: one training step, then one inference call; prints the HLO file each compiled."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(os.cpu_count())
    dump = os.environ["HLO_COMPARE_DUMP"]
    sizes = SIZES[config]
    arrays = pretraining_arrays(BATCH, SEQ, PREDICTIONS, sizes["vocab_size"])
    steps = BUILDERS[implementation](arrays, 0, (1, 1), True, "float32", sizes=sizes)
    files = {}
    for phase in PHASES:
        before = set(glob.glob(os.path.join(dump, "*after_optimizations.txt")))
        step, _ = steps[phase]
        step()
        new = set(glob.glob(os.path.join(dump, "*after_optimizations.txt"))) - before
        files[phase] = max(new, key=os.path.getsize)
    print("RESULT " + json.dumps(files), flush=True)


def compile_and_count(implementation, config, dump):
    """{phase: counts} of `implementation`'s programs, compiled in a child process that dumps into `dump`."""
    env = dict(os.environ, HLO_COMPARE_DUMP=dump)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text".strip()
    out = subprocess.run(
        [sys.executable, __file__, "--worker", implementation, "--config", config],
        env=env, stdout=subprocess.PIPE, text=True, check=True,
    ).stdout
    files = json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    counts = {}
    for phase, path in files.items():
        with open(path) as f:
            counts[phase] = count_hlo(f.read())
    return counts, files


def format_count(value):
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=list(SIZES), default="base", help="model size (tiny: a quick run)")
    parser.add_argument("--keep", help="keep the HLO dumps under this folder (one subfolder per implementation)")
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    parser.add_argument("--worker", choices=list(BUILDERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(args.worker, args.config)

    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or scratch
        results, files = {}, {}
        for implementation in BUILDERS:
            dump = os.path.join(root, implementation)
            os.makedirs(dump, exist_ok=True)
            results[implementation], files[implementation] = compile_and_count(implementation, args.config, dump)

    import tensorflow as tf

    columns = [(phase, implementation) for phase in PHASES for implementation in BUILDERS]
    names = sorted({name for counts in results.values() for phase in counts.values() for name in phase})
    flags = cpu_flags()
    lines = [
        f"float32 programs XLA compiled, {args.config} config ({', '.join(f'{k} {v}' for k, v in SIZES[args.config].items())}); "
        f"{cpu_name()}, {os.cpu_count()} cores; CPU kind: {cpu_kind(flags)}; flags: {' '.join(flags) or 'none'}; "
        f"XLA_FLAGS: `{os.environ.get('XLA_FLAGS', '') or 'none'}`; TensorFlow {tf.__version__}.",
        "Counted in each program's optimized HLO (`*after_optimizations.txt`); M elements: millions of "
        "elements the ops write.",
        "",
        "| | " + " | ".join(f"{implementation}, {PHASES[phase]}" for phase, implementation in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name in names:
        cells = [format_count(results[implementation][phase].get(name, 0)) for phase, implementation in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if args.keep:
        lines += ["", "Modules: " + "; ".join(
            f"{implementation} {phase} `{os.path.basename(files[implementation][phase])}`"
            for phase, implementation in columns
        ) + "."]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
