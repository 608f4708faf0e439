"""The machine a benchmark ran on: CPU name, the flags that decide matmul speed, measured ceilings."""

import json
import os
import subprocess
import sys

from albert_tf import precision

# The /proc/cpuinfo flags that decide matmul speed, in the order tables print them.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")

CEILINGS_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ceilings.py")


def cpu_flags():
    """The `SPEED_FLAGS` this CPU has (Linux /proc/cpuinfo; empty elsewhere)."""
    present = precision.cpu_flags()
    return [flag for flag in SPEED_FLAGS if flag in present]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l for l in f if l.startswith("model name")).split(":", 1)[1].strip()
    except (OSError, StopIteration):
        return "unknown CPU"


def measure_ceilings(seconds=0.5):
    """bench/ceilings.py's measurement, run in a fresh process (no thread pool of ours competes)."""
    out = subprocess.run(
        [sys.executable, CEILINGS_SCRIPT, "--json", "--seconds", str(seconds)],
        capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine_line(ceilings):
    """One line for a table's header: CPU, flags and the measured ceilings."""
    return (
        f"{cpu_name()}, {os.cpu_count()} cores; flags: {' '.join(ceilings['flags']) or 'none'}; "
        f"measured ceilings (bench/ceilings.py): fp32 {ceilings['fp32']:.0f} GFLOP/s, "
        f"bf16 {ceilings['bf16']:.1f} GFLOP/s, int8 {ceilings['int8']:.1f} GOP/s."
    )
