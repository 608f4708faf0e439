"""This machine's matmul ceilings (fp32, bf16, int8) and the CPU flags that decide them.

Each ceiling is the best throughput of a square GEMM over a few sizes, in
GFLOP/s (int8: GOP/s), measured with torch (oneDNN / mkldnn kernels, the same
libraries TensorFlow and LiteRT use on x86). bf16 and int8 are measured on
every CPU, and the table says whether the CPU has units for them: without
AVX512_BF16 / AMX-BF16 a bf16 GEMM is emulated and runs slower than fp32,
without VNNI / AMX-INT8 an int8 GEMM gains little. The speed tables divide
their figures by these ceilings.

    python bench/ceilings.py [--write bench/results/ceilings.md] [--json]
"""

import argparse
import json
import os
import time

from benchlib.machine import cpu_flags
from benchlib.output import emit_table

SIZES = (256, 512, 1024, 2048)
# The ISA flags that decide each precision's ceiling, as /proc/cpuinfo spells them.
UNITS = {
    "fp32": ("avx2", "fma", "avx512f"),
    "bf16": ("avx512_bf16", "amx_bf16"),
    "int8": ("avx512_vnni", "avx_vnni", "amx_int8"),
}


def gemm_rate(dtype, size, seconds=1.0):
    """Operations per second (2 per multiply-add) of a (size x size) @ (size x size) GEMM."""
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


def ceiling(precision, seconds, sizes):
    """The best `gemm_rate` over `sizes`, smallest first.

    Stops at the first size where one GEMM takes longer than `seconds`:
    emulated bf16 / int8 run at a few GFLOP/s, and a 2048 GEMM would then
    take a minute per call without changing the answer.
    """
    best = 0.0
    for size in sorted(sizes):
        rate = gemm_rate(precision, size, seconds)
        best = max(best, rate)
        if 2 * size**3 / rate > seconds:
            break
    return best


def measure(seconds=1.0, sizes=SIZES):
    """{"fp32": GFLOP/s, "bf16": GFLOP/s, "int8": GOP/s, "flags": [...], "threads": n}."""
    import torch

    torch.set_num_threads(os.cpu_count())
    result = {p: ceiling(p, seconds, sizes) / 1e9 for p in UNITS}
    return {**result, "flags": cpu_flags(), "threads": torch.get_num_threads()}


def table(ceilings):
    flags = set(ceilings["flags"])
    lines = [
        f"Matmul ceilings on {ceilings['threads']} threads; CPU flags: {' '.join(ceilings['flags']) or 'none'}.",
        "",
        "| precision | ceiling (G(FL)OP/s) | vs fp32 | hardware units |",
        "|---|---:|---:|---|",
    ]
    for precision, units in UNITS.items():
        present = [u for u in units if u in flags]
        lines.append(
            f"| {precision} | {ceilings[precision]:.1f} | {ceilings[precision] / ceilings['fp32']:.2f}x | "
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
