"""Which precision and XLA setting a run uses when it leaves them to "auto".

Precision and XLA are chosen together. TensorFlow's XLA CPU backend does not
use a CPU's bfloat16 units, its oneDNN kernels (no XLA) do: on such a CPU
bfloat16 pays only without XLA, and only for models wide enough that the
matmuls dominate the step. So on a CPU with bfloat16 units "auto" picks
mixed_bfloat16 without XLA from `BF16_MIN_HIDDEN_SIZE` up, and float32 (with
XLA) below it; `resolve_precision` has the whole rule. The measurements behind
it: bench/results/pretrain_widths.md, pretrain_throughput.md (training) and
model_speed.md (inference).

On TPUs "auto" is mixed_bfloat16: their matrix units take bfloat16 inputs
(float32 matmuls run as several bfloat16 passes), activations take half the
memory, and tensorflow/models pretrains BERT/ALBERT on TPUs in bfloat16 by
default. Not measured here (no TPU). Nothing was measured on GPUs: "auto"
stays float32 there, and mixed_bfloat16 / mixed_float16 are one flag away.

This module imports neither TensorFlow nor Keras at load time: commands
print their choice and tests check the rule without them.
"""

import dataclasses
import os

PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
# What XLA compiles of a training step (see `TrainerConfig.compile_step`).
COMPILE_STEPS = ("auto", "whole", "forward", "none")
DEVICE_KINDS = ("cpu", "gpu", "tpu")
# /proc/cpuinfo flags of the x86 bfloat16 units oneDNN uses (AVX512-BF16 dot
# products, AMX tiles).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# Narrowest hidden size where "auto" picks bfloat16 on such a CPU: the narrowest
# width whose pretraining step ran faster in bfloat16 (bench/results/pretrain_widths.md).
BF16_MIN_HIDDEN_SIZE = 512
CPUINFO = "/proc/cpuinfo"


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """A resolved precision and compile step, and why.

    Attributes:
        precision: "float32", "mixed_bfloat16" or "mixed_float16".
        compile_step: "whole", "forward" or "none".
        reason: a short human reason, e.g. "auto: this CPU has avx512_bf16, H 768 >= 512".
    """

    precision: str
    compile_step: str
    reason: str

    def describe(self):
        """"mixed_bfloat16 (auto: ...); XLA: none", the line every command prints."""
        return f"{self.precision} ({self.reason}); XLA: {self.compile_step}"


def cpu_flags(cpuinfo=None):
    """The CPU feature flags of this machine (Linux /proc/cpuinfo), or of the text `cpuinfo`.

    Args:
        cpuinfo: /proc/cpuinfo's text; None reads the file. Elsewhere
            (no such file) the flags are empty.

    Returns:
        frozenset of flag names, e.g. {"avx512_bf16", "avx512f", ...}.
    """
    if cpuinfo is None:
        # A local system file, never a user path: plain `open`, not tf.io.gfile.
        if not os.path.isfile(CPUINFO):
            return frozenset()
        with open(CPUINFO, encoding="utf-8", errors="replace") as f:
            cpuinfo = f.read()
    flags = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


def bf16_units(flags):
    """The `BF16_CPU_FLAGS` among `flags` (empty: the CPU has no bfloat16 units)."""
    return tuple(flag for flag in BF16_CPU_FLAGS if flag in flags)


def resolve_precision(precision, compile_step, hidden_size, device="cpu", whole_compiles=True, flags=None):
    """The precision and compile step a run uses, "auto" resolved, with the reason.

    "auto" precision is mixed_bfloat16 on a TPU, and where the device is a CPU with
    bfloat16 units (`BF16_CPU_FLAGS`), the model has hidden_size >=
    `BF16_MIN_HIDDEN_SIZE` and the compile step is "auto" or "none" (the
    step then runs without XLA); float32 otherwise. "auto" compile step is
    "none" for mixed_bfloat16 on such a CPU; otherwise "whole" where
    `whole_compiles`, else "forward". Explicit values are kept.

    Args:
        precision: one of `PRECISIONS`.
        compile_step: one of `COMPILE_STEPS`; "none" for runs without XLA.
        hidden_size: the model's H.
        device: what runs the model, one of `DEVICE_KINDS`.
        whole_compiles: whether XLA can compile the whole step (a TPU, or one
            replica; see `albert_tf.training.trainer.resolve_run_precision`).
        flags: the CPU's flags (`cpu_flags()` when None).

    Returns:
        A `PrecisionChoice`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}. Received: precision={precision!r}")
    if compile_step not in COMPILE_STEPS:
        raise ValueError(f"`compile_step` must be one of {COMPILE_STEPS}. Received: compile_step={compile_step!r}")
    if device not in DEVICE_KINDS:
        raise ValueError(f"`device` must be one of {DEVICE_KINDS}. Received: device={device!r}")
    units = bf16_units(cpu_flags() if flags is None else flags) if device == "cpu" else ()
    default_compile = "whole" if whole_compiles else "forward"
    if precision != "auto":
        if compile_step == "auto" and precision == "mixed_bfloat16" and units:
            return PrecisionChoice(precision, "none", f"requested; no XLA: its CPU backend does not use {units[0]}")
        return PrecisionChoice(precision, default_compile if compile_step == "auto" else compile_step, "requested")
    compile_float32 = default_compile if compile_step == "auto" else compile_step
    if device == "tpu":
        return PrecisionChoice("mixed_bfloat16", compile_float32, "auto: TPUs compute in bfloat16")
    if device != "cpu":
        return PrecisionChoice("float32", compile_float32, f"auto: bfloat16 is not measured on a {device.upper()} "
                               "here; pass mixed_bfloat16 or mixed_float16")
    if not units:
        return PrecisionChoice("float32", compile_float32, f"auto: this CPU has no {' or '.join(BF16_CPU_FLAGS)}")
    if hidden_size < BF16_MIN_HIDDEN_SIZE:
        return PrecisionChoice("float32", compile_float32, f"auto: H {hidden_size} < {BF16_MIN_HIDDEN_SIZE}, where "
                               f"bfloat16 measured no faster on this CPU's {units[0]}")
    if compile_step in ("whole", "forward"):
        return PrecisionChoice("float32", compile_step, f"auto: compile step {compile_step} uses XLA, whose CPU "
                               f"backend does not use {units[0]}")
    return PrecisionChoice("mixed_bfloat16", "none",
                           f"auto: this CPU has {units[0]}, H {hidden_size} >= {BF16_MIN_HIDDEN_SIZE}")


def device_kind(strategy=None):
    """"tpu" under a TPUStrategy, "gpu" where TensorFlow sees a GPU, else "cpu".

    Args:
        strategy: a `tf.distribute.Strategy`; None uses the current one.
    """
    # Imported on use: the rule above and the commands' --help need no TensorFlow.
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
