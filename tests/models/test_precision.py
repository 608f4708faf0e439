"""The "auto" precision and compile-step rule (`albert_tf.precision`), branch by branch, with given CPU flags."""

import argparse
import ast

import pytest
from source_scan import ROOT, modules

from albert_tf.cli import build_parser
from albert_tf.precision import (
    BF16_MIN_HIDDEN_SIZE, MIXED_PRECISION_HELP, PRECISIONS, PrecisionChoice, choose_precision, cpu_flags,
    resolve_precision,
)

BF16_CPU = frozenset({"avx512f", "avx512_bf16", "avx512_vnni"})
AMX_CPU = frozenset({"avx512f", "amx_bf16", "amx_tile"})
PLAIN_CPU = frozenset({"avx2", "avx512f", "avx512_vnni"})
WIDE, NARROW = BF16_MIN_HIDDEN_SIZE, BF16_MIN_HIDDEN_SIZE // 2


def choose(precision="auto", compile_step="auto", hidden_size=WIDE, device="cpu", whole_compiles=True,
           flags=BF16_CPU):
    choice = resolve_precision(precision, compile_step, hidden_size, device, whole_compiles, flags)
    return choice.precision, choice.compile_step


def test_cpuinfo_flags_are_read_from_every_processor_line():
    text = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu amx_bf16\n"
    assert cpu_flags(text) == {"fpu", "avx512f", "avx512_bf16", "amx_bf16"}
    assert cpu_flags("processor\t: 0\nmodel name\t: some CPU\n") == frozenset()


def test_auto_is_bfloat16_without_xla_on_a_bf16_cpu_for_a_wide_model():
    assert choose() == ("mixed_bfloat16", "none")
    assert choose(flags=AMX_CPU) == ("mixed_bfloat16", "none")
    assert choose(compile_step="none") == ("mixed_bfloat16", "none")
    # Several replicas change nothing: no XLA either way.
    assert choose(whole_compiles=False) == ("mixed_bfloat16", "none")
    reason = resolve_precision("auto", "auto", 768, "cpu", flags=BF16_CPU).reason
    assert reason == "auto: this CPU has avx512_bf16, H 768 >= 512"


def test_auto_is_float32_with_todays_compile_step_elsewhere():
    # Narrow model, CPU without bf16 units, GPU: float32, and XLA as before.
    for kwargs in ({"hidden_size": NARROW}, {"flags": PLAIN_CPU}, {"device": "gpu"}):
        assert choose(**kwargs) == ("float32", "whole"), kwargs
        assert choose(whole_compiles=False, **kwargs) == ("float32", "forward"), kwargs
    assert "H 256 < 512" in resolve_precision("auto", "auto", NARROW, "cpu", flags=BF16_CPU).reason
    assert "no avx512_bf16 or amx_bf16" in resolve_precision("auto", "auto", WIDE, "cpu", flags=PLAIN_CPU).reason
    assert "not measured on a GPU" in resolve_precision("auto", "auto", WIDE, "gpu", flags=BF16_CPU).reason


def test_auto_is_bfloat16_on_a_tpu_whatever_the_width_and_says_so():
    for hidden_size in (NARROW, WIDE):
        assert choose(hidden_size=hidden_size, device="tpu") == ("mixed_bfloat16", "whole")
    assert choose(compile_step="forward", device="tpu") == ("mixed_bfloat16", "forward")
    assert choose("float32", device="tpu") == ("float32", "whole")
    choice = resolve_precision("auto", "auto", 768, "tpu", flags=PLAIN_CPU)
    assert choice.describe() == "mixed_bfloat16 (auto: TPUs compute in bfloat16); XLA: whole"


def test_auto_with_an_explicit_xla_step_stays_float32():
    # bfloat16 under XLA measured slower than float32 under XLA.
    assert choose(compile_step="forward") == ("float32", "forward")
    assert choose(compile_step="whole") == ("float32", "whole")


def test_explicit_precision_is_kept():
    assert choose("float32") == ("float32", "whole")
    assert choose("float32", whole_compiles=False) == ("float32", "forward")
    assert choose("float32", "none") == ("float32", "none")
    # Explicit bfloat16 on a bf16 CPU: no XLA unless asked for.
    assert choose("mixed_bfloat16", hidden_size=NARROW) == ("mixed_bfloat16", "none")
    assert choose("mixed_bfloat16", "forward") == ("mixed_bfloat16", "forward")
    assert choose("mixed_bfloat16", flags=PLAIN_CPU) == ("mixed_bfloat16", "whole")
    assert choose("mixed_bfloat16", device="tpu") == ("mixed_bfloat16", "whole")
    assert choose("mixed_float16", device="gpu") == ("mixed_float16", "whole")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"precision": "bfloat16"}, "precision='bfloat16'"),
    ({"compile_step": "xla"}, "compile_step='xla'"),
    ({"device": "npu"}, "device='npu'"),
])
def test_bad_arguments_are_named(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        choose(**kwargs)


# ------------------------------------------------- one place resolves it for every command
def test_no_module_resolves_precision_but_albert_tf_precision():
    # A command that calls the rule (or asks for the device) itself picks its own compile step:
    # every job goes through `choose_precision`, which knows each one's.
    own = {}
    for path in modules("albert_tf"):
        if path.name == "precision.py" and path.parent.name == "albert_tf":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else [name]
            for found in set(names) & {"resolve_precision", "device_kind"}:
                own.setdefault(str(path.relative_to(ROOT)), set()).add(found)
    assert own == {}


def test_each_job_runs_under_its_own_compile_step():
    # Predictions and exports run without XLA; only pretraining takes a compile step.
    for job in ("predict", "export"):
        assert choose_precision(job, "auto", WIDE, device="cpu", flags=BF16_CPU) == PrecisionChoice(
            "mixed_bfloat16", "none", "auto: this CPU has avx512_bf16, H 512 >= 512")
        assert choose_precision(job, "float32", WIDE, device="cpu", flags=BF16_CPU, onednn=True).compile_step == "none"
        with pytest.raises(ValueError, match="`compile_step` is pretraining's; .*compile_step='whole'"):
            choose_precision(job, "auto", WIDE, compile_step="whole", device="cpu", flags=BF16_CPU)
    # An export is resolved for this machine's CPU, whatever else it has.
    assert choose_precision("export", "auto", WIDE, flags=PLAIN_CPU).precision == "float32"
    with pytest.raises(ValueError, match="`job` must be one of .*job='serve'"):
        choose_precision("serve", "auto", WIDE)


def test_predict_compiles_its_float32_forward_pass_where_tensorflow_runs_no_onednn():
    # AVX2-only CPUs: TensorFlow leaves oneDNN off, and XLA's forward pass beats the frozen graph in Eigen.
    eigen = choose_precision("predict", "auto", WIDE, device="cpu", flags=PLAIN_CPU, onednn=False)
    assert (eigen.precision, eigen.compile_step) == ("float32", "forward")
    assert eigen.describe().endswith("; TensorFlow runs Eigen's kernels here, where XLA's forward pass measured "
                                     "faster); XLA: forward"), eigen.describe()
    assert choose_precision("predict", "float32", WIDE, device="cpu", flags=BF16_CPU, onednn=False).compile_step == "forward"
    # Where oneDNN runs, the frozen graph; bfloat16 (oneDNN's) and other devices never compile.
    assert choose_precision("predict", "auto", WIDE, device="cpu", flags=PLAIN_CPU, onednn=True).compile_step == "none"
    assert choose_precision("predict", "mixed_bfloat16", WIDE, device="cpu", flags=PLAIN_CPU,
                            onednn=False).compile_step == "none"
    assert choose_precision("predict", "auto", WIDE, device="gpu", onednn=False).compile_step == "none"
    # The export is for a server whose flags are its own: never XLA.
    assert choose_precision("export", "auto", WIDE, device="cpu", flags=PLAIN_CPU, onednn=False).compile_step == "none"


def test_every_command_names_precision_with_one_flag_and_one_vocabulary():
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {name: action for name, parser in subparsers.choices.items() for action in parser._actions
             if "--mixed-precision" in action.option_strings}
    assert set(flags) == {"pretrain", "demo", "finetune", "distill", "predict", "export"}
    # The export's SavedModel has no float16 path: the same names, one fewer, and a help of its own.
    assert {name: action.help for name, action in flags.items() if name != "export"} == dict.fromkeys(
        {"pretrain", "demo", "finetune", "distill", "predict"}, MIXED_PRECISION_HELP)
    assert {name: tuple(action.choices) for name, action in flags.items()} == {
        **dict.fromkeys(("pretrain", "demo", "finetune", "distill", "predict"), PRECISIONS),
        "export": tuple(p for p in PRECISIONS if p != "mixed_float16"),
    }
