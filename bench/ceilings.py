"""This machine's matmul ceilings (fp32, bf16, int8) and the CPU flags that decide them.

Each ceiling is the best throughput of a square GEMM over a few sizes, in
GFLOP/s (int8: GOP/s), measured with torch (oneDNN / mkldnn kernels) and, for
fp32 and bf16, with TensorFlow (oneDNN), keeping the faster library: on some
CPUs one library's fp32 GEMM is far slower than the other's (an AMD EPYC with
AVX-512: torch 210 GFLOP/s, TensorFlow about 1.7x that), and a ceiling below
what a model reaches says nothing. bf16 and int8 are measured on every CPU,
and the table says whether the CPU has units for them: without AVX512_BF16 /
AMX-BF16 a bf16 GEMM is emulated and runs slower than fp32, without VNNI /
AMX-INT8 an int8 GEMM gains little. The speed tables divide their figures by
these ceilings.

    python bench/ceilings.py [--write bench/results/ceilings.md] [--json]
"""

import argparse
import json
import os
import time

from benchlib.machine import UNITS, cpu_flags, stand_in
from benchlib.output import emit_table

SIZES = (256, 512, 1024, 2048)


def gemm_rate(dtype, size, seconds=1.0, library="torch"):
    """Operations per second (2 per multiply-add) of a (size x size) @ (size x size) GEMM.

    Args:
        dtype: "fp32", "bf16" or "int8" (torch only).
        library: "torch" or "tensorflow".
    """
    if library == "tensorflow":
        import tensorflow as tf

        tf_dtype = tf.float32 if dtype == "fp32" else tf.bfloat16
        a, b = (tf.cast(tf.random.normal((size, size)), tf_dtype) for _ in range(2))
        gemm = tf.function(tf.linalg.matmul)

        def matmul(a, b):
            gemm(a, b).numpy()  # waits for the result: TensorFlow may run ops asynchronously
    else:
        import torch

        if dtype == "int8":
            a = torch.randint(-128, 127, (size, size), dtype=torch.int8)
            b = torch.randint(-128, 127, (size, size), dtype=torch.int8)
            matmul = torch._int_mm  # int8 x int8 -> int32, the VNNI / AMX path
        else:
            torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
            a, b = torch.randn(size, size, dtype=torch_dtype), torch.randn(size, size, dtype=torch_dtype)
            matmul = torch.mm
    matmul(a, b)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        matmul(a, b)
        calls += 1
    return 2 * size**3 * calls / (time.perf_counter() - start)


def ceiling(precision, seconds, sizes, library="torch"):
    """The best `gemm_rate` over `sizes`, smallest first.

    Stops at the first size where one GEMM takes longer than `seconds`:
    emulated bf16 / int8 run at a few GFLOP/s, and a 2048 GEMM would then
    take a minute per call without changing the answer.
    """
    best = 0.0
    for size in sorted(sizes):
        rate = gemm_rate(precision, size, seconds, library)
        best = max(best, rate)
        if 2 * size**3 / rate > seconds:
            break
    return best


def libraries(precision, environ=os.environ):
    """The libraries whose `precision` GEMM is measured.

    Not TensorFlow's bf16 with oneDNN kept to AVX2 (`ONEDNN_MAX_CPU_ISA`, a
    stand-in for an AVX2 CPU): TensorFlow sends bf16 to oneDNN by the CPU's
    own flags, and oneDNN so kept has no bf16 matmul (the process aborts);
    torch emulates it.
    """
    onednn = stand_in({"ONEDNN_MAX_CPU_ISA": environ.get("ONEDNN_MAX_CPU_ISA", "")})
    if precision == "int8" or (precision == "bf16" and onednn and onednn[0] == "avx2"):
        return ("torch",)
    return ("torch", "tensorflow")


def measure(seconds=1.0, sizes=SIZES):
    """{"fp32": GFLOP/s, "bf16": GFLOP/s, "int8": GOP/s, "library": {precision: faster library}, "flags": [...],
    "threads": n, "onednn": whether TensorFlow runs oneDNN in this environment}."""
    import tensorflow as tf
    import torch
    from tensorflow.python.util import _pywrap_util_port

    threads = os.cpu_count()
    torch.set_num_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    result, library = {}, {}
    for precision in UNITS:
        rates = {name: ceiling(precision, seconds, sizes, name) for name in libraries(precision)}
        library[precision] = max(rates, key=rates.get)
        result[precision] = rates[library[precision]] / 1e9
    return {**result, "library": library, "flags": cpu_flags(), "threads": threads,
            "onednn": _pywrap_util_port.IsMklEnabled()}


def table(ceilings):
    flags = set(ceilings["flags"])
    lines = [
        f"Matmul ceilings on {ceilings['threads']} threads; CPU flags: {' '.join(ceilings['flags']) or 'none'}.",
        "",
        "| precision | ceiling (G(FL)OP/s) | vs fp32 | library | hardware units |",
        "|---|---:|---:|---|---|",
    ]
    for precision, units in UNITS.items():
        present = [u for u in units if u in flags]
        lines.append(
            f"| {precision} | {ceilings[precision]:.1f} | {ceilings[precision] / ceilings['fp32']:.2f}x | "
            f"{ceilings['library'][precision]} | "
            f"{', '.join(present) if present else 'none (emulated)'} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per GEMM size")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    parser.add_argument("--write", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    ceilings = measure(args.seconds, tuple(args.sizes))
    if args.json:
        print(json.dumps(ceilings))
    else:
        emit_table(table(ceilings), args.write)


if __name__ == "__main__":
    main()
