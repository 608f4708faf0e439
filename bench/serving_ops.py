"""Where the time of a SavedModel's serving_default goes, by op type, as TF-Serving runs it.

Exports ALBERT-base as `export` does (float32 by default; `--mixed-precision
mixed_bfloat16`), loads it the way TF-Serving does (a TF1 session over the
SavedModel, `tf.compat.v1.saved_model.load`), and runs `serving_default` on
batch x seq 128 rows: first untraced, for the latency, then traced
(`RunOptions.FULL_TRACE`), summing each executed op type's time, the fused
kernels the graph optimizer made included (`_MklNativeFusedMatMul`: a matmul
with its bias and GELU). Tracing adds its own cost to every op, so the shares
are of the traced op time; the table says how much that is beside the
untraced latency. Weights random, moved off their initial values (see
bench/export_latency.py: an all-zero bias is folded away with its fusion).

    python bench/serving_ops.py [--batch 1] [--mixed-precision float32] [--steps 20] [--threads N]
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time


from benchlib.machine import machine_line, measure_ceilings
from benchlib.synthetic import backbone_arrays, move_off_initial_values

SEQ = 128


def op_type(node_stats):
    """The op type of a traced node: its timeline label reads "name = Type(inputs)"."""
    label = node_stats.timeline_label
    return label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else node_stats.node_name


def profile(version_dir, batch, steps, threads, seq=SEQ, vocab=30000):
    """(untraced ms per call: list, {op type: (traced ms per call, executions per call)}, traced ms per call)."""
    import tensorflow as tf

    # inter_op 0: TensorFlow's default pool (one thread per core), as TF-Serving's default flags leave it.
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=0)
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        meta = tf.compat.v1.saved_model.load(session, ["serve"], version_dir)
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs[name].name: array for name, array in backbone_arrays(batch, seq, vocab).items()}
        fetch = {name: info.name for name, info in signature.outputs.items()}
        for _ in range(3):
            session.run(fetch, feed)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            session.run(fetch, feed)
            times.append((time.perf_counter() - start) * 1000)
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        micros, counts = collections.Counter(), collections.Counter()
        traced = 3
        for _ in range(traced):
            run_metadata = tf.compat.v1.RunMetadata()
            session.run(fetch, feed, options=options, run_metadata=run_metadata)
            for device in run_metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    kind = op_type(node)
                    micros[kind] += node.op_end_rel_micros - node.op_start_rel_micros
                    counts[kind] += 1
    ops = {op: (us / traced / 1000, counts[op] // traced) for op, us in micros.items()}
    return times, ops, sum(ms for ms, _ in ops.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--mixed-precision", default="float32", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--steps", type=int, default=20, help="untraced calls timed")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--top", type=int, default=14, help="op types listed; the rest are summed")
    args = parser.parse_args()

    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.export import export_saved_model

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    ceilings = measure_ceilings()
    model = AlbertBackbone(AlbertConfig.from_preset("base"))
    move_off_initial_values(model)
    with tempfile.TemporaryDirectory() as workdir:
        path = export_saved_model(model, os.path.join(workdir, "albert"), max_length=SEQ,
                                  precision=args.mixed_precision)
        print(f"Exported ALBERT-base ({args.mixed_precision})", file=sys.stderr)
        times, ops, traced_ms = profile(path, args.batch, args.steps, args.threads)

    print(f"\nALBERT-base SavedModel `serving_default` ({args.mixed_precision}, weights as constants) in a TF1 "
          f"session, batch {args.batch}, seq {SEQ}, {args.threads} threads; untraced: median of {args.steps} "
          f"calls {statistics.median(times):.1f} ms [{min(times):.1f}, {max(times):.1f}]; traced op time "
          f"{traced_ms:.1f} ms per call. {machine_line(ceilings)}\n")
    print("| op type | executions per call | traced ms per call | share of traced op time |")
    print("|---|---:|---:|---:|")
    ranked = sorted(ops.items(), key=lambda item: -item[1][0])
    for op, (ms, count) in ranked[:args.top]:
        print(f"| {op} | {count} | {ms:.2f} | {ms / traced_ms:.1%} |")
    rest = ranked[args.top:]
    if rest:
        ms = sum(m for _, (m, _) in rest)
        print(f"| {len(rest)} other op types | {sum(c for _, (_, c) in rest)} | {ms:.2f} | {ms / traced_ms:.1%} |")


if __name__ == "__main__":
    main()
