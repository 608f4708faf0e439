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

Every command resolves its precision here, in `choose_precision`, naming
the job it runs (pretraining under its strategy, fine-tuning, predictions,
an export): each job has its own compile step, and the one rule above. The
`--mixed-precision` flag of every command reads `MIXED_PRECISION_HELP`.

This module imports neither TensorFlow nor Keras at load time: commands
print their choice and tests check the rule without them.
"""

import dataclasses
import os

from albert_tf.utils.errors import UserError

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
# What a precision is chosen for: each runs under its own compile step (see `choose_precision`).
JOBS = ("pretrain", "finetune", "predict", "export")
# The help of every command's --mixed-precision flag (the config fields' and predict's).
MIXED_PRECISION_HELP = (
    "float32, mixed_bfloat16 (TPU, CPU) or mixed_float16 (GPU; training scales the loss dynamically); auto: "
    f"mixed_bfloat16 on a TPU, and without XLA on a CPU with bfloat16 units ({', '.join(BF16_CPU_FLAGS)}) for "
    f"H >= {BF16_MIN_HIDDEN_SIZE}, where it measured faster; else float32 (on GPUs nothing was measured). The "
    "weights are kept and saved in float32 either way."
)


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
            replica; see `choose_precision`).
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


def choose_precision(job, precision, hidden_size, *, compile_step="auto", strategy=None, device=None, flags=None,
                     onednn=None):
    """The precision and compile step of `job`, "auto" resolved: what every command runs in and prints.

    Each job has its compile step; the precision rule is `resolve_precision`'s.
      - "pretrain": `compile_step` under `strategy`. XLA compiles
        TPUStrategy's replica step, and that of a single replica, with two
        exceptions where the compiled replica step cannot run:
          - several replicas outside a TPU: XLA runs each replica's program
            on one device, and it cannot reach the variables other devices
            hold ("Trying to access resource ... located in device CPU:1
            from device CPU:0");
          - MirroredStrategy or MultiWorkerMirroredStrategy on a GPU: Keras'
            `optimizer.apply` increments its iteration counter (an
            ONLY_FIRST_REPLICA variable) with a `merge_call`, which
            TensorFlow refuses inside a compiled replica function on GPUs
            ("merge_call called while defining a new graph",
            keras-team/keras#17187). On CPUs TensorFlow keeps merge calls
            outside XLA, and the default strategy makes none.
        Those runs get "forward", which holds no variable write and no all-reduce.
      - "finetune": Keras `fit` runs without XLA ("none"); TPUStrategy
        compiles the whole step ("whole").
      - "predict": forward passes without XLA where TensorFlow runs oneDNN
        (its default on x86 CPUs with AVX-512), whose kernels on frozen
        weights led there; "forward" (XLA, on shape buckets: see
        `albert_tf.inference.CompiledPredictions`) in float32 on CPUs where it
        runs Eigen (AVX2 alone), where XLA's forward pass measured 1.44x
        faster than the frozen graph (bench/results/serving_forms_avx2.md).
      - "export": the serving graph, without XLA, for this machine's CPU,
        which stands for the serving machine's.

    Args:
        job: one of `JOBS`.
        precision: one of `PRECISIONS`.
        hidden_size: the model's H.
        compile_step: pretraining's `TrainerConfig.compile_step`; the other
            jobs have theirs fixed and take "auto" only.
        strategy: the `tf.distribute.Strategy` of a "pretrain" or "finetune"
            job; None uses the current one.
        device: "cpu", "gpu" or "tpu", what runs the model
            (`device_kind(strategy)` when None; an export's is the CPU).
        flags: the CPU's flags (`cpu_flags()` when None).
        onednn: whether TensorFlow runs oneDNN here (`onednn_enabled()` when
            None); read by "predict" only.

    Returns:
        A `PrecisionChoice`.

    Raises:
        UserError: pretraining's compile_step "whole" under a strategy where
            the compiled step cannot run.
    """
    if job not in JOBS:
        raise ValueError(f"`job` must be one of {JOBS}. Received: job={job!r}")
    if job != "pretrain" and compile_step != "auto":
        raise ValueError(f"`compile_step` is pretraining's; {job} has its own. Received: compile_step={compile_step!r}")
    if job == "export":
        return resolve_precision(precision, "none", hidden_size, device or "cpu", flags=flags)
    if job == "predict":
        device = device or device_kind()
        choice = resolve_precision(precision, "none", hidden_size, device, flags=flags)
        if device != "cpu" or choice.precision != "float32" or (onednn_enabled() if onednn is None else onednn):
            return choice
        return dataclasses.replace(choice, compile_step="forward", reason=f"{choice.reason}; TensorFlow runs Eigen's "
                                   "kernels here, where XLA's forward pass measured faster")
    # Imported on use, as in `device_kind`: the rule and the commands' --help need no TensorFlow.
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    device = device or device_kind(strategy)
    if job == "finetune":
        return resolve_precision(precision, "whole" if device == "tpu" else "none", hidden_size, device, flags=flags)
    on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    merge_calls = device == "gpu" and isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    )
    whole_compiles = on_tpu or (strategy.num_replicas_in_sync == 1 and not merge_calls)
    if compile_step == "whole" and not whole_compiles:
        why = ("Keras' optimizer makes a merge call that TensorFlow refuses inside XLA on GPUs under "
               f"{type(strategy).__name__} (run one GPU without --strategy)" if merge_calls else
               "XLA compiles the all-reduce only under TPUStrategy and with one replica")
        raise UserError(
            f"compile_step='whole' cannot run here: {why}. Received: {type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replicas on {device.upper()}; use 'forward'."
        )
    return resolve_precision(precision, compile_step, hidden_size, device, whole_compiles, flags)


def onednn_enabled():
    """Whether TensorFlow runs its oneDNN kernels here: its default on x86 CPUs with AVX-512, off on those
    with AVX2 alone; the environment's TF_ENABLE_ONEDNN_OPTS (read by TensorFlow) turns it either way."""
    # Imported on use, as in `device_kind`. TensorFlow has no public name for it.
    from tensorflow.python.util import _pywrap_util_port

    return _pywrap_util_port.IsMklEnabled()


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
