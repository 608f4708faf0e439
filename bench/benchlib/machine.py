"""The machine a benchmark ran on: CPU name, the flags that decide matmul speed, measured ceilings."""

import json
import os
import re
import subprocess
import sys

from albert_tf import precision

# The /proc/cpuinfo flags that decide matmul speed, in the order tables print them.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
# The ISA flags that run each precision's matmuls in hardware, as /proc/cpuinfo spells them. Without
# them a bf16 GEMM is emulated (slower than fp32) and an int8 GEMM gains little: a "ceiling" measured
# there is no hardware's peak, and a share of it means nothing.
UNITS = {
    "fp32": ("avx2", "fma", "avx512f"),
    "bf16": ("avx512_bf16", "amx_bf16"),
    "int8": ("avx512_vnni", "avx_vnni", "amx_int8"),
}

CEILINGS_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ceilings.py")


# The flags above each ISA cap (`stand_in`): the units a CPU of that kind lacks.
_ABOVE_CAP = {
    "avx512": ("avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"),
    "avx2": ("avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"),
}


def cpu_flags(environ=os.environ):
    """The `SPEED_FLAGS` the benchmark's matmuls may use: this CPU's (Linux /proc/cpuinfo; empty
    elsewhere), less those above the ISA cap that stands in for another kind of CPU (`stand_in`)."""
    present = precision.cpu_flags()
    kind = stand_in(environ)[0] if stand_in(environ) else None
    return [flag for flag in SPEED_FLAGS if flag in present and flag not in _ABOVE_CAP.get(kind, ())]


def stand_in(environ=os.environ):
    """(kind, settings) where oneDNN's and XLA's ISA caps make this CPU stand in for one without
    some units (`ONEDNN_MAX_CPU_ISA`, `--xla_cpu_max_isa` in `XLA_FLAGS`), else None.

    The kind is the lower of the two caps ("avx512" or "avx2"); a cap at or above bf16 stands in
    for nothing. `settings` is how the caps were set, as a table's header prints them.
    """
    caps = []
    if environ.get("ONEDNN_MAX_CPU_ISA"):
        caps.append(("ONEDNN_MAX_CPU_ISA=" + environ["ONEDNN_MAX_CPU_ISA"], environ["ONEDNN_MAX_CPU_ISA"]))
    xla = re.search(r"--xla_cpu_max_isa=(\S+)", environ.get("XLA_FLAGS", ""))
    if xla:
        caps.append(("XLA_FLAGS=--xla_cpu_max_isa=" + xla.group(1), xla.group(1)))
    kinds = [_cap_kind(isa) for _, isa in caps]
    for kind in ("avx2", "avx512"):
        if kind in kinds:
            return kind, " ".join(setting for setting, _ in caps)
    return None


def _cap_kind(isa):
    """The kind of CPU an ISA cap stands in for ("avx2", "avx512"), or None (bf16 units or above)."""
    isa = isa.upper()
    if "BF16" in isa or "AMX" in isa:
        return None
    if isa.startswith("AVX512"):
        return "avx512"
    if isa.startswith("AVX2") or isa.startswith("AVX") or isa.startswith("SSE"):
        return "avx2"
    return None


def cpu_kind(flags):
    """One word for the kind of CPU, as results are kept apart by it: "bf16" (bfloat16 units),
    "avx512" (AVX-512 without them), "avx2", or "other"."""
    flags = set(flags)
    if flags & set(UNITS["bf16"]):
        return "bf16"
    for kind in ("avx512f", "avx2"):
        if kind in flags:
            return kind.removesuffix("f")
    return "other"


def has_units(precision, flags):
    """Whether the CPU with `flags` runs `precision` ("fp32", "bf16", "int8") matmuls in hardware."""
    return bool(set(flags) & set(UNITS[precision]))


def ceiling_share(rate, precision, ceilings):
    """`rate` (FLOP/s, or OP/s for int8) as a share of the measured ceiling of `precision`, or
    "no such units" where the CPU has none for it (an emulated ceiling is no peak to compare with)."""
    if not has_units(precision, ceilings["flags"]):
        return "no such units"
    return f"{rate / (ceilings[precision] * 1e9):.0%}"


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


def machine_line(ceilings, environ=os.environ):
    """One line for a table's header: CPU, flags, whether TensorFlow ran oneDNN and the measured
    ceilings; under a stand-in (`stand_in`), the kind it stands in for and how, beside the CPU's own
    flags. TensorFlow leaves oneDNN off on CPUs with AVX2 alone (TF_ENABLE_ONEDNN_OPTS=1 turns it on),
    so a kernel named oneDNN's in a row's label ran Eigen's where the line says off."""
    standing = stand_in(environ)
    own = precision.cpu_flags()
    kind = cpu_kind(ceilings["flags"])
    if standing:
        kind += (f" (a stand-in: {standing[1]} on a CPU whose own flags are "
                 f"{' '.join(f for f in SPEED_FLAGS if f in own) or 'none'})")
    return (
        f"{cpu_name()}, {os.cpu_count()} cores; CPU kind: {kind}; "
        f"flags: {' '.join(ceilings['flags']) or 'none'}; "
        + one_dnn_words(ceilings.get("onednn"), environ)
        + f"measured ceilings (bench/ceilings.py): fp32 {ceilings['fp32']:.0f} GFLOP/s, "
        + ", ".join(f"{name} {ceilings[name]:.1f} {unit}" + ("" if has_units(name, ceilings["flags"]) else " (emulated)")
                    for name, unit in (("bf16", "GFLOP/s"), ("int8", "GOP/s"))) + "."
    )


def one_dnn_words(on, environ=os.environ):
    """"TensorFlow's oneDNN: on; " (or off, and how the environment set it), "" where not measured."""
    if on is None:
        return ""
    setting = environ.get("TF_ENABLE_ONEDNN_OPTS")
    how = f" (TF_ENABLE_ONEDNN_OPTS={setting})" if setting is not None else " (TensorFlow's default here)"
    return f"TensorFlow's oneDNN: {'on' if on else 'off'}{how}; "
