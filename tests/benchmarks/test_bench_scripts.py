"""The benchmark scripts and their shared library (bench/benchlib/).

Every script builds its command line (`--help`): a renamed config field must not break one unnoticed.
The library's pieces that decide what a table says (which rows, which flags, what a figure counts) get
a check each; the indexes and the cited tables are tests/project/test_bench.py's.
"""

import contextlib
import glob
import importlib
import io
import json
import os
import re
import runpy
import sys

import numpy as np
import pytest

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCH_DIR, "*.py")))


@pytest.fixture
def benchlib(monkeypatch):
    """Imports a module of bench/benchlib/ the way the scripts do (bench/ first on the path)."""
    monkeypatch.syspath_prepend(BENCH_DIR)
    return lambda name: importlib.import_module(f"benchlib.{name}")


def test_the_benchmarks_are_found():
    assert {"transfer.py", "anisotropy.py", "model_speed.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_help_prints_usage(script, monkeypatch):
    monkeypatch.syspath_prepend(BENCH_DIR)
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    printed = io.StringIO()
    with pytest.raises(SystemExit) as exit_info, contextlib.redirect_stdout(printed):
        runpy.run_path(os.path.join(BENCH_DIR, script), run_name="__main__")
    assert exit_info.value.code in (0, None)
    assert printed.getvalue().startswith("usage:")


@pytest.mark.slow
def test_transfer_keys_random_init_by_config_and_tokenizer(monkeypatch):
    """Random init's cached result is found again whichever model lends the config, and only then."""
    from data_fixtures import VOCAB_SIZE, imdb_documents, small_tokenizer
    from helpers import tiny_config

    from input_pipeline import AlbertTokenizer

    monkeypatch.syspath_prepend(BENCH_DIR)
    identity = runpy.run_path(os.path.join(BENCH_DIR, "transfer.py"))["random_init_identity"]
    tokenizer = small_tokenizer()
    config = tiny_config(vocab_size=VOCAB_SIZE)
    same_tokenizer = AlbertTokenizer(tokenizer.model_proto, tokenizer.preprocessing, tokenizer.language)
    assert identity(config, tokenizer) == identity(tiny_config(vocab_size=VOCAB_SIZE), same_tokenizer)
    assert identity(config, tokenizer) != identity(tiny_config(vocab_size=VOCAB_SIZE, hidden_size=48), tokenizer)
    other = AlbertTokenizer.train((s for d in imdb_documents()[:300] for s in d), 200, num_threads=2)
    assert identity(config, tokenizer) != identity(config, other)


def _run_dir(root, name, batch):
    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "training_config.json").write_text(json.dumps({"trainer": {"global_batch_size": batch}}))
    return run


def test_transfer_plots_each_pretraining_run_as_its_own_line(benchlib, tmp_path):
    """Checkpoints of one run share a line, in examples read (steps x batch); another run is another line."""
    pretraining_run = benchlib("pretrained").pretraining_run
    functions = runpy.run_path(os.path.join(BENCH_DIR, "transfer.py"))
    demo, longer = _run_dir(tmp_path, "demo", 16), _run_dir(tmp_path, "long", 32)
    specs = {"demo": f"{demo}/final", "demo@500": f"{demo}/checkpoints/ckpt-500",
             "long@1000": f"{longer}/checkpoints/ckpt-1000", "long": f"{longer}/final/"}
    runs = {name: pretraining_run(spec) for name, spec in specs.items()}
    assert runs["demo@500"] == (os.path.normpath(str(demo)), 16)
    assert runs["long"] == (os.path.normpath(str(longer)), 32)
    steps = {"random init": 0, "demo": 3000, "demo@500": 500, "long@1000": 1000, "long": 6000}
    series, by_examples = functions["step_series"](steps, runs)
    assert by_examples
    assert series == {"demo": [("random init", 0), ("demo@500", 8000), ("demo", 48000)],
                      "long": [("random init", 0), ("long@1000", 32000), ("long", 192000)]}
    # Without its final/, a run's line is named after its last checkpoint.
    del steps["long"]
    assert list(functions["step_series"](steps, runs)[0]) == ["demo", "long@1000"]
    steps["long"] = 6000
    # A run whose batch size is unknown: every line falls back to steps.
    (longer / "training_config.json").unlink()
    runs["long"] = pretraining_run(specs["long"])
    series, by_examples = functions["step_series"](steps, runs)
    assert not by_examples and series["demo"][-1] == ("demo", 3000)


def _summary(split_seeds, results, tasks=("rt",)):
    sizes = {task: {"train": 4, "dev": 2, "test": 2} for task in tasks}
    return {"split_seeds": split_seeds, "sizes": sizes, "results": results}


def test_dev_selected_keeps_each_splits_best_dev_setting(monkeypatch, tmp_path):
    """Per model and split the setting with the higher dev accuracy is kept (a tie: the first listed)."""
    monkeypatch.syspath_prepend(BENCH_DIR)
    short = {"majority label": {"rt": [{"test": 0.5}, {"test": 0.5}]},
             "random init": {"rt": [{"dev": 0.60, "test": 0.61}, {"dev": 0.70, "test": 0.70}]},
             "demo": {"rt": [{"dev": 0.80, "test": 0.81}, {"dev": 0.75, "test": 0.74}]}}
    long = {"random init": {"rt": [{"dev": 0.65, "test": 0.67}, {"dev": 0.70, "test": 0.90}]},
            "demo": {"rt": [{"dev": 0.70, "test": 0.99}, {"dev": 0.78, "test": 0.77}]}}
    paths = {}
    # The first run also measured imdb: only the task both runs have is compared.
    for name, results, tasks in (("short", short, ("rt", "imdb")), ("long", long, ("rt",))):
        if "imdb" in tasks:
            results = {row: dict(by_task, imdb=by_task["rt"]) for row, by_task in results.items()}
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(_summary([7, 8], results, tasks)))
    out = tmp_path / "table.md"
    monkeypatch.setattr(sys, "argv", ["dev_selected.py", "--results", f"3 epochs={paths['short']}",
                                      "--results", f"10 epochs={paths['long']}", "--write", str(out)])
    runpy.run_path(os.path.join(BENCH_DIR, "dev_selected.py"), run_name="__main__")
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in out.read_text().splitlines()
            if line.startswith("| random init") or line.startswith("| demo")}
    # random init: split 1 -> 10 epochs (0.65 > 0.60), split 2 a tie -> 3 epochs: (67 + 70) / 2.
    assert rows["random init"][3:5] == ["68.5", "10 epochs, 3 epochs"]
    # demo: split 1 -> 3 epochs, split 2 -> 10 epochs: (81 + 77) / 2; minus random init: +14 and +7.
    assert rows["demo"][3:5] == ["79.0", "3 epochs, 10 epochs"]
    assert rows["demo"][-1].rstrip(" |") == "+10.5 (3.5)"
    assert "majority label" not in out.read_text() and "**imdb**" not in out.read_text()

    paths["long"].write_text(json.dumps(_summary([7, 9], long)))
    with pytest.raises(ValueError, match="split_seeds"):
        runpy.run_path(os.path.join(BENCH_DIR, "dev_selected.py"), run_name="__main__")


def test_split_rows_limits_the_training_part_or_every_part(benchlib):
    """`train_limit` cuts only train (dev and test stay); `limit` cuts the shuffled rows before the split."""
    split_rows = benchlib("sentiment_data").split_rows
    rows = [(f"text {i}", i % 2) for i in range(100)]
    full, cut = split_rows(rows, 7), split_rows(rows, 7, train_limit=5)
    assert [len(full[k]) for k in ("test", "dev", "train")] == [10, 10, 80]
    assert cut["test"] == full["test"] and cut["dev"] == full["dev"] and cut["train"] == full["train"][:5]
    small = split_rows(rows, 7, limit=50)
    assert [len(small[k]) for k in ("test", "dev", "train")] == [5, 5, 40]
    assert small["test"] == full["test"][:5]


def _script(name, monkeypatch):
    """The globals of bench/`name` as the scripts import (bench/ first on the path), without running main."""
    monkeypatch.syspath_prepend(BENCH_DIR)
    return runpy.run_path(os.path.join(BENCH_DIR, name))


def test_class_weights_split_holds_the_share_of_positives_in_every_part_and_no_row_twice(monkeypatch):
    """Each part has its size and round(size * share) positives; the parts are disjoint and seeded; the
    minority's recall and macro F1 are scored on the positive class and both classes."""
    script = _script("class_weights.py", monkeypatch)
    rows = [(f"text {i}", int(i % 3 == 0)) for i in range(300)]
    sizes = {"train": 100, "dev": 30, "test": 45}
    parts = script["imbalanced_split"](rows, 7, sizes, 0.1)
    assert {name: (len(part), sum(label for _, label in part)) for name, part in parts.items()} == {
        "train": (100, 10), "dev": (30, 3), "test": (45, 4)}
    texts = [text for part in parts.values() for text, _ in part]
    assert len(set(texts)) == len(texts)
    assert parts == script["imbalanced_split"](rows, 7, sizes, 0.1) != script["imbalanced_split"](rows, 8, sizes, 0.1)
    scores = script["scores"]([0, 0, 0, 1, 1], [0, 0, 1, 1, 0])
    assert scores["minority_recall"] == 0.5 and scores["accuracy"] == 0.6
    assert scores["macro_f1"] == pytest.approx((2 * 2 / (2 * 2 + 2) + 2 * 1 / (2 * 1 + 2)) / 2)


def test_precision_accuracy_compares_losses_at_the_steps_both_runs_logged(monkeypatch):
    """Raw and smoothed relative differences are taken at common steps only; the smoothing is a trailing mean."""
    script = _script("precision_accuracy.py", monkeypatch)
    assert script["smooth"](np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist() == [1.0, 2.0, 4.0, 6.0]
    reference = {25: 10.0, 50: 8.0, 75: 6.0}
    other = {25: 11.0, 50: 8.0, 75: 6.0, 100: 1.0}  # step 100 has no float32 point: not compared
    curve = script["compare_curves"](reference, other, 2)
    assert (curve["steps"], curve["first_step"], curve["last_step"]) == (3, 25, 75)
    assert curve["raw_max"] == pytest.approx(0.1) and curve["raw_mean"] == pytest.approx(0.1 / 3)
    # Smoothed: [10, 9, 7] against [11, 9.5, 7].
    assert curve["smooth_max"] == pytest.approx(0.1)
    assert curve["smooth_mean"] == pytest.approx((0.1 + 0.5 / 9) / 3)
    assert curve["final_smooth"] == (7.0, 7.0)
    with pytest.raises(ValueError, match="no logged step in common"):
        script["compare_curves"]({25: 1.0}, {50: 1.0}, 2)


def test_pretrain_throughput_marks_the_default_precision_and_compiler(monkeypatch):
    """bf16 without XLA on CPUs with bf16 units and hidden size >= 512, else float32 whole at 10 steps per loop."""
    script = _script("pretrain_throughput.py", monkeypatch)
    default_row, settings = script["default_row"], script["SETTINGS"]
    bf16_cpu, avx2_cpu = ["avx2", "avx512f", "avx512_bf16"], ["avx2", "fma"]
    assert default_row(settings, 768, bf16_cpu) == ("mixed_bfloat16", "none", 10)
    assert default_row(settings, 768, ["amx_bf16"]) == ("mixed_bfloat16", "none", 10)
    assert default_row(settings, 128, bf16_cpu) == ("float32", "whole", 10)
    assert default_row(settings, 768, avx2_cpu) == ("float32", "whole", 10)
    # Where only one steps-per-loop value is timed, that row is the default's.
    assert default_row(script["LARGE_SETTINGS"], 768, bf16_cpu) == ("mixed_bfloat16", "none", 1)
    assert default_row(script["LARGE_SETTINGS"], 768, avx2_cpu) == ("float32", "whole", 1)
    # Every shape times both precisions, so the float32 and bf16 rows sit side by side.
    for *_, model_settings, _ in script["MODELS"]:
        assert {s[0] for s in model_settings} == {"float32", "mixed_bfloat16"}


def test_export_latency_times_bf16_in_its_own_precision_and_keeps_it_out_of_the_float32_peers(monkeypatch):
    script = _script("export_latency.py", monkeypatch)
    assert script["PRECISION"]["keras-bf16"] == "bf16" and script["PRECISION"]["tflite-dynamic"] == "int8"
    assert "keras-bf16" in script["ROWS"] and "keras-bf16" not in script["FLOAT_PEERS"]
    # The bf16 SavedModel is timed only where the CPU has bf16 units, against the bf16 ceiling.
    assert script["PRECISION"]["saved_model-bf16"] == "bf16" and "saved_model-bf16" in script["BF16_ROWS"]
    assert "saved_model-bf16" not in script["FLOAT_PEERS"]


def test_backbone_arrays_are_cls_sep_sequences_in_two_segments_for_any_batch(benchlib):
    # export_latency's --batch and serving_ops: every row a [CLS] ... [SEP] sequence of the length asked.
    batch = benchlib("synthetic").backbone_arrays(8, 128)
    assert {k: v.shape for k, v in batch.items()} == {k: (8, 128) for k in ("token_ids", "segment_ids", "padding_mask")}
    assert (batch["token_ids"][:, 0] == 2).all() and (batch["token_ids"][:, -1] == 3).all()
    assert (batch["segment_ids"][:, :64] == 0).all() and (batch["segment_ids"][:, 64:] == 1).all()


def test_serving_throughput_counts_every_request_of_every_client_and_compares_labels_in_order(benchlib, monkeypatch):
    script, load_test = _script("serving_throughput.py", monkeypatch), benchlib("load_test")
    assert load_test.percentile(list(range(1, 101)), 50) == 50
    assert load_test.percentile(list(range(1, 101)), 99) == 99
    assert load_test.percentile([7.0], 99) == 7.0
    sent = []
    result = load_test.burst(lambda s: sent.append(s) or s.upper(), ["a", "b", "c"], clients=4, requests=5)
    assert len(sent) == 20 and sorted(sent) == sorted("abcab" "cabca" "bcabc" "abcab")
    assert result["labels"] == ["A", "B", "C", "A", "B"] + ["C", "A", "B", "C", "A"] + ["B", "C", "A", "B", "C"] \
        + ["A", "B", "C", "A", "B"]
    assert result["rps"] > 0 and result["p99"] >= result["p50"] > 0
    float32 = {"labels": ["x", "y", "z"]}
    results = {(("rest", "float32"), 1): [float32], (("rest", "mixed_bfloat16"), 1): [{"labels": ["x", "y", "w"]}]}
    assert script["agreement"](results) == (2, 3)


def test_the_load_tests_share_their_flags_and_quick_shrinks_every_burst(benchlib, capsys):
    # serving_throughput.py and serving_batching.py: the same flags, each with its own defaults.
    load_test = benchlib("load_test")
    parser = load_test.load_test_parser("", model="demo", requests=20, rounds=2, rounds_help="", quick_help="")
    args = load_test.parse_burst_args(parser, [])
    assert (args.model, args.clients, args.requests, args.rounds, args.max_length) == ("demo", [1, 4, 16], 20, 2, 128)
    quick = load_test.parse_burst_args(parser, ["--quick", "--clients", "8", "--requests", "50"])
    assert (quick.clients, quick.requests, quick.rounds) == ([1, 2], 3, 1)
    with pytest.raises(SystemExit):
        load_test.parse_burst_args(parser, ["--clients", "4", "0"])
    assert "--clients, --requests and --rounds must be >= 1" in capsys.readouterr().err
    results = load_test.bursts(str.upper, ["a", "b", "c"], quick, 0, "rest float32")
    assert sorted(results) == [1, 2] and results[2]["labels"] == ["A", "B", "C", "A", "B", "C"]
    printed = capsys.readouterr().err.splitlines()
    # The progress line names the turn, the load and the client count ("round" and a number read as history).
    expected = [f"round {turn}/1 rest float32 x{clients}" for turn, clients in ((1, 1), (1, 2))]
    assert [line.split(":")[0] for line in printed] == expected


@pytest.mark.slow
def test_resume_time_prints_a_row_per_step(monkeypatch, capsys):
    monkeypatch.syspath_prepend(BENCH_DIR)
    monkeypatch.setattr(sys, "argv", ["resume_time.py", "--steps", "0", "5000", "--shards", "2",
                                      "--shard-examples", "20", "--batch-size", "4", "--repeats", "1"])
    runpy.run_path(os.path.join(BENCH_DIR, "resume_time.py"), run_name="__main__")
    table = capsys.readouterr().out
    assert "flags:" in table
    assert re.search(r"^\| 0 \| 0 \| 0 \| [0-9.]+ \|$", table, re.M)
    # 5,000 steps of 4 examples are 500 epochs of the 40 examples.
    assert re.search(r"^\| 5,000 \| 20,000 \| 500 \| [0-9.]+ \|$", table, re.M)


@pytest.mark.parametrize("flags, kind", [
    (["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"], "bf16"),
    (["avx2", "fma", "amx_tile", "amx_bf16"], "bf16"),
    (["avx2", "fma", "avx512f", "avx512_vnni"], "avx512"),
    (["avx2", "fma"], "avx2"),
    ([], "other"),
])
def test_speed_tables_name_the_kind_of_cpu_in_one_word(benchlib, flags, kind):
    machine = benchlib("machine")
    assert machine.cpu_kind(flags) == kind
    ceilings = {"flags": flags, "fp32": 100.0, "bf16": 80.0, "int8": 3.2}
    assert f"CPU kind: {kind};" in machine.machine_line(ceilings)


@pytest.mark.parametrize("on, environ, words", [
    (False, {}, "TensorFlow's oneDNN: off (TensorFlow's default here);"),
    (True, {"TF_ENABLE_ONEDNN_OPTS": "1"}, "TensorFlow's oneDNN: on (TF_ENABLE_ONEDNN_OPTS=1);"),
])
def test_speed_tables_say_whether_tensorflow_ran_onednn(benchlib, on, environ, words):
    # On an AVX2-only CPU TensorFlow leaves oneDNN off, and rows named for oneDNN's kernels ran Eigen's.
    machine = benchlib("machine")
    ceilings = {"flags": ["avx2", "fma"], "fp32": 100.0, "bf16": 80.0, "int8": 3.2, "onednn": on}
    assert words in machine.machine_line(ceilings, environ)


def test_a_precision_without_hardware_units_gets_no_ceiling_share(benchlib):
    # An emulated bf16 or int8 GEMM "ceiling" is no peak: an int8 row read "4914% of the ceiling" on AVX2.
    machine = benchlib("machine")
    avx2 = {"flags": ["avx2", "fma"], "fp32": 100.0, "bf16": 80.0, "int8": 3.2}
    assert machine.ceiling_share(50e9, "fp32", avx2) == "50%"
    assert machine.ceiling_share(157e9, "int8", avx2) == "no such units"
    assert machine.ceiling_share(40e9, "bf16", avx2) == "no such units"
    assert "int8 3.2 GOP/s (emulated)" in machine.machine_line(avx2)
    vnni = {**avx2, "flags": ["avx2", "fma", "avx512f", "avx512_vnni"], "int8": 400.0}
    assert machine.ceiling_share(200e9, "int8", vnni) == "50%"


@pytest.mark.parametrize("environ, kind", [
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "XLA_FLAGS": "--xla_cpu_max_isa=AVX512_VNNI"}, "avx512"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "avx2"),
    ({"XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_cpu_max_isa=AVX2"}, "avx2"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "bf16"),
    ({}, "bf16"),
])
def test_a_stand_in_for_another_kind_of_cpu_is_named_as_such(benchlib, monkeypatch, environ, kind):
    # ISA caps on a CPU with bf16 units stand in for one without: its tables name that kind, and the
    # units above the cap get no ceiling share.
    machine = benchlib("machine")
    own = ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"]
    monkeypatch.setattr(machine.precision, "cpu_flags", lambda: set(own))
    flags = machine.cpu_flags(environ)
    ceilings = {"flags": flags, "fp32": 100.0, "bf16": 80.0, "int8": 300.0}
    line = machine.machine_line(ceilings, environ)
    assert machine.cpu_kind(flags) == kind and f"CPU kind: {kind}" in line, line
    assert ("a stand-in: " in line) == (kind != "bf16"), line
    assert (machine.ceiling_share(40e9, "bf16", ceilings) == "no such units") == (kind != "bf16")


HLO = """HloModule step, entry_computation_layout={(f32[2,3]{1,0})->f32[3,2]{1,0}}

%fused_computation (param_0: f32[2,3]) -> f32[3,2] {
  %param_0 = f32[2,3]{1,0} parameter(0)
  ROOT %transpose.1 = f32[3,2]{0,1} transpose(f32[2,3]{1,0} %param_0), dimensions={1,0}
}

ENTRY %main.9 (Arg_0.1: f32[2,3]) -> f32[3,2] {
  %Arg_0.1 = f32[2,3]{1,0} parameter(0)
  %copy.2 = f32[2,3]{1,0} copy(f32[2,3]{1,0} %Arg_0.1)
  %dot.3 = f32[2,2]{1,0} dot(f32[2,3]{1,0} %copy.2, f32[2,3]{1,0} %Arg_0.1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  %cc = (f32[2,2]{1,0}, u8[0]{0}) custom-call(%dot.3), custom_call_target="__onednn$matmul"
  ROOT %fusion.4 = f32[3,2]{1,0} fusion(f32[2,3]{1,0} %copy.2), kind=kLoop, calls=%fused_computation
}
"""


def test_hlo_counts_tell_ops_inside_fusions_from_ops_outside(monkeypatch):
    monkeypatch.syspath_prepend(BENCH_DIR)
    counts = runpy.run_path(os.path.join(BENCH_DIR, "hlo_compare.py"))["count_hlo"](HLO)
    assert counts["instructions in the entry computation"] == 4
    assert counts["fusions"] == counts["fusions, kLoop"] == 1
    assert counts["transposes inside fusions"] == 1 and counts["transposes inside fusions, M elements written"] == 6e-6
    assert counts["copies outside fusions"] == 1 and "transposes outside fusions" not in counts
    assert counts["dots outside fusions"] == 1
    assert counts["custom calls: __onednn$matmul"] == 1


def test_model_speed_marks_the_rows_the_commands_run_for_training_and_for_inference(monkeypatch):
    # Without bf16 units training compiles its float32 step with XLA and `predict` runs the frozen forward pass
    # without XLA: two rows, each marked for what it stands for; with them one bf16 row stands for both.
    script = _script("model_speed.py", monkeypatch)
    rows, default_rows, marked_name = script["IMPLEMENTATIONS"], script["default_rows"], script["marked_name"]
    avx512 = default_rows(["avx2", "fma", "avx512f", "avx512_vnni"])
    assert avx512 == {"train": "albert-tf-xla", "infer": "albert-tf"}
    assert marked_name(rows["albert-tf-xla"], "albert-tf-xla", avx512).endswith("(**default** for training)")
    assert marked_name(rows["albert-tf"], "albert-tf", avx512).endswith("(**default** for inference)")
    assert "default" not in marked_name(rows["keras-hub-xla"], "keras-hub-xla", avx512)
    bf16 = default_rows(["avx2", "fma", "avx512f", "avx512_bf16"])
    assert marked_name(rows["albert-tf-bf16"], "albert-tf-bf16", bf16).endswith("(**default**)")
    # Where TensorFlow runs Eigen, not oneDNN (AVX2-only CPUs), `predict` compiles with XLA: one row for both.
    avx2 = default_rows(["avx2", "fma"], onednn=False)
    assert avx2 == {"train": "albert-tf-xla", "infer": "albert-tf-xla"}
    assert marked_name(rows["albert-tf-xla"], "albert-tf-xla", avx2).endswith("(**default**)")


def test_serving_ops_sums_the_traced_op_time_of_a_savedmodel_by_op_type(monkeypatch, tmp_path):
    import keras

    from albert_tf import AlbertBackbone
    from albert_tf.export import export_saved_model
    from helpers import tiny_config

    script = _script("serving_ops.py", monkeypatch)
    keras.utils.set_random_seed(0)
    model = AlbertBackbone(tiny_config(vocab_size=300))
    model.set_weights([w + 0.02 for w in model.get_weights()])
    path = export_saved_model(model, str(tmp_path / "albert"), max_length=16)
    times, ops, traced_ms = script["profile"](path, batch=2, steps=2, threads=1, seq=16, vocab=300)
    assert len(times) == 2 and min(times) > 0
    # The graph optimizer's fused matmul (with its bias) is what the session ran, and is counted.
    assert any("MatMul" in op for op in ops) and traced_ms == pytest.approx(sum(ms for ms, _ in ops.values()))
    assert all(count >= 1 for _, count in ops.values())


@pytest.mark.slow
def test_distill_latency_exports_the_layer_norm_form_each_saved_model_row_names(monkeypatch, tmp_path):
    """saved_model traces LayerNorm as the batch norm the graph optimizer fuses (where TensorFlow runs oneDNN);
    saved_model_keras_ln as Keras' own ops; both run at batch 1."""
    import keras
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    from albert_tf import AlbertBackbone
    from albert_tf.models.classifier import AlbertClassifier
    from helpers import tiny_config

    script = _script("distill_latency.py", monkeypatch)
    keras.utils.set_random_seed(0)
    model = AlbertClassifier(AlbertBackbone(tiny_config(vocab_size=300)), num_classes=2)
    model.set_weights([w + 0.02 for w in model.get_weights()])
    forms = ("saved_model", "saved_model_keras_ln")
    calls, precision = script["calls"](model, 16, forms, str(tmp_path), precision="float32")
    assert precision == "float32" and sorted(calls) == sorted(forms)
    for form in forms:
        calls[form]()
        (version,) = [name for name in os.listdir(tmp_path / form) if name.isdigit()]
        graph = tf.saved_model.load(str(tmp_path / form / version)).signatures["serving_default"].graph
        ops = {node.op for function in graph.as_graph_def().library.function for node in function.node_def}
        fused = form == "saved_model" and _pywrap_util_port.IsMklEnabled()
        assert ("FusedBatchNormV3" in ops) == fused and ("Rsqrt" in ops) != fused, (form, sorted(ops))


def test_ceilings_leave_tensorflow_out_of_bf16_only_where_onednn_is_kept_to_avx2(monkeypatch):
    script = _script("ceilings.py", monkeypatch)
    libraries = script["libraries"]
    assert libraries("bf16", {}) == ("torch", "tensorflow") and libraries("fp32", {}) == ("torch", "tensorflow")
    assert libraries("bf16", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}) == ("torch", "tensorflow")
    assert libraries("bf16", {"ONEDNN_MAX_CPU_ISA": "AVX2"}) == ("torch",)
    assert libraries("fp32", {"ONEDNN_MAX_CPU_ISA": "AVX2"}) == ("torch", "tensorflow")
    assert libraries("int8", {}) == ("torch",)


def test_serving_gaps_times_the_models_matmuls_as_constants_and_leaves_out_one_kind_of_op_while_tracing(monkeypatch):
    import albert_tf.inference as inference
    import albert_tf.layers.attention as attention

    script = _script("serving_gaps.py", monkeypatch)
    chain = script["matmul_chain"](1)
    ops = [node.op for node in chain.graph.as_graph_def().node]
    # ALBERT-base's 49 matmuls of one call (the embedding projection, then 4 per layer), their weights constants
    # (captured inputs would not be kept in oneDNN's layout between calls), nothing of attention's rest.
    assert ops.count("MatMul") == 49 and ops.count("Placeholder") == 1, sorted(set(ops))
    assert not {"Softmax", "Transpose", "BatchMatMulV2", "FusedBatchNormV3"} & set(ops)

    saved = attention.ops, inference.layer_norm_as_fused_batch_norm
    with script["left_out"]("layernorm"):
        assert inference.layer_norm_as_fused_batch_norm is not saved[1]
        assert np.allclose(attention.ops.softmax(np.ones((1, 3)) * 2.0), 1 / 3)
    with script["left_out"]("softmax"):
        assert np.allclose(attention.ops.softmax(np.ones((1, 3)) * 2.0), 2.0)
    with script["left_out"]("transpose"):
        assert tuple(attention.ops.transpose(np.zeros((2, 3, 4)), (1, 0, 2)).shape) == (3, 2, 4)
    assert (attention.ops, inference.layer_norm_as_fused_batch_norm) == saved


ROWS_SCRIPT = '''
import sys

sys.path.insert(0, {bench!r})
from benchlib.rows import row_parser, serve_row, time_rows


def runner(key, workdir, threads, batch):
    with open(f"{{workdir}}/{{key}}.started", "w") as f:
        f.write(f"{{threads}} {{batch}}")
    return lambda: None


args = row_parser("rows", ["a", "b"], rounds=2, warmup=1, steps_help="calls").parse_args()
if args.worker:
    serve_row(runner, args)
else:
    print(time_rows(__file__, args.only or ["a", "b"], args, {workdir!r}))
'''


def test_a_rows_script_times_each_row_in_a_worker_of_its_own_with_the_flags_it_was_given(tmp_path):
    # export_latency.py and serving_gaps.py: the parent's flags reach every worker, one process per row.
    import subprocess

    script = tmp_path / "rows.py"
    script.write_text(ROWS_SCRIPT.format(bench=BENCH_DIR, workdir=str(tmp_path)))
    done = subprocess.run([sys.executable, str(script), "--threads", "3", "--batch", "2", "--steps", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = eval(done.stdout.strip().splitlines()[-1])
    assert sorted(results) == ["a", "b"] and all(len(rounds) == 2 for rounds in results.values())
    assert {p.read_text() for p in tmp_path.glob("*.started")} == {"3 2"} and len(list(tmp_path.glob("*.started"))) == 2


def test_test_durations_ranks_tests_and_sums_files_of_two_runs(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(BENCH_DIR)
    durations = importlib.import_module("test_durations")

    def junit(path, times):
        cases = "".join(f'<testcase classname="tests.{m}" name="{n}" time="{t}"/>' for m, n, t in times)
        path.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
        return str(path)

    before = junit(tmp_path / "before.xml", [("commands.test_kill", "test_a[x]", 30), ("commands.test_kill", "test_b", 5),
                                             ("models.test_lora", "test_c", 1)])
    after = junit(tmp_path / "after.xml", [("commands.test_kill", "test_a[x]", 10), ("models.test_lora", "test_c", 2)])
    text = durations.tables(durations.durations(after), durations.durations(before), slowest=1)
    assert "| 1 | `commands/test_kill.py::test_a[x]` | 10.0 | a forked process per kill" in text
    assert "test_c`" not in text  # only the slowest one
    assert "| `commands/test_kill.py` | 35 | 10 |" in text and "| `models/test_lora.py` | 1 | 2 |" in text
    assert "- before: 3 tests, 36 s" in text and "- after: 2 tests, 12 s" in text
