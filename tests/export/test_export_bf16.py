"""bf16 SavedModels: bfloat16 compute on frozen weights, as close to float32 as Keras' mixed_bfloat16, and
`export --mixed-precision` (auto: mixed_bfloat16 only on a CPU with bfloat16 units and a wide model)."""

import functools
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from albert_tf import AlbertBackbone, inference, precision
from albert_tf.export import export_saved_model, load_saved_model, pack_texts
from albert_tf.export.saved_model import resolve_export_precision
from albert_tf.models import AlbertClassifier
from albert_tf.models.pretrained import with_dtype_policy
from cli_helpers import run_cli, run_program, serving
from export_fixtures import (
    LABELS, MAX_LENGTH, classifier, exported_classifier, graph_nodes, metadata, real_texts, scratch_dir, tokenizer,
)
from helpers import max_abs_diff
from test_export_saved_model import SAVED_MODEL_CLI_WITH_TF_TEXT

# As tests/models/test_frozen_inference.py: the frozen bfloat16 graph rounds in its own
# order, so what must hold is that it is about as close to float32 as Keras'
# own mixed_bfloat16 model (variables) is.
BFLOAT16_ERROR_RATIO = 1.25
BF16_CPU = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
PLAIN_CPU = "processor\t: 0\nflags\t\t: fpu avx2 avx512f\n"


@functools.lru_cache(maxsize=None)
def exported_bf16_classifier():
    return export_saved_model(classifier(), scratch_dir() + "/classifier-bf16", tokenizer=tokenizer(),
                              max_length=MAX_LENGTH, precision="mixed_bfloat16")


def bfloat16_ops(nodes):
    return {n.op for n in nodes if any(v.type == types_pb2.DT_BFLOAT16 for v in n.attr.values())}


@pytest.mark.slow
def test_bf16_export_runs_bfloat16_matmuls_on_constants_within_bfloat16_error_of_float32():
    path = exported_bf16_classifier()
    nodes = graph_nodes(path)
    assert {"MatMul", "BatchMatMulV2"} <= bfloat16_ops(nodes)
    assert not [n for n in nodes if n.op in ("ReadVariableOp", "VarHandleOp")]
    # Nor are the weights written again as variables beside the constants.
    saved = [name for name, _ in tf.train.list_variables(os.path.join(path, "variables", "variables"))]
    assert saved == ["_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert (metadata(path)["precision"], metadata(path)["weights"]) == ("mixed_bfloat16", "constants")
    assert metadata(exported_classifier()[1])["precision"] == "float32"

    loaded = load_saved_model(path)
    assert sorted(loaded.signatures) == ["serve_examples", "serve_text", "serve_text_pair", "serving_default"]
    texts = list(real_texts()[:8])
    out = {k: v.numpy() for k, v in loaded.signatures["serve_text"](text=tf.constant(texts)).items()}
    packed = pack_texts(tokenizer(), texts, None, MAX_LENGTH)
    reference = np.asarray(classifier()(packed, training=False)["logits"])
    keras_bf16 = np.asarray(with_dtype_policy(classifier(), "mixed_bfloat16")(packed, training=False)["logits"])
    error = max_abs_diff(out["logits"], reference)
    assert 1e-5 < error <= BFLOAT16_ERROR_RATIO * max_abs_diff(keras_bf16, reference)
    ids = loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in packed.items()})
    assert max_abs_diff(ids["logits"].numpy(), out["logits"]) <= 1e-6
    assert set(out["labels"]) <= {label.encode() for label in LABELS}


def test_a_model_too_large_to_freeze_exports_bf16_compute_on_float32_variables(monkeypatch, tmp_path):
    monkeypatch.setattr(inference, "MAX_FROZEN_BYTES", 1000)
    keras.utils.set_random_seed(1)
    model = AlbertClassifier(AlbertBackbone(classifier().backbone.config), num_classes=2)
    path = export_saved_model(model, str(tmp_path / "big"), max_length=MAX_LENGTH, precision="mixed_bfloat16")
    nodes = graph_nodes(path)
    assert "MatMul" in bfloat16_ops(nodes) and any(n.op == "ReadVariableOp" for n in nodes)
    assert metadata(path)["weights"] == "variables"
    packed = pack_texts(tokenizer(), list(real_texts()[:4]), None, MAX_LENGTH)
    out = load_saved_model(path).signatures["serving_default"](**{k: tf.constant(v) for k, v in packed.items()})
    reference = np.asarray(model(packed, training=False)["logits"])
    keras_bf16 = np.asarray(with_dtype_policy(model, "mixed_bfloat16")(packed, training=False)["logits"])
    assert max_abs_diff(out["logits"].numpy(), reference) <= BFLOAT16_ERROR_RATIO * max_abs_diff(keras_bf16, reference)


def test_auto_is_bf16_only_on_a_cpu_with_bfloat16_units_and_a_wide_model():
    bf16_cpu, plain_cpu = precision.cpu_flags(BF16_CPU), precision.cpu_flags(PLAIN_CPU)
    assert resolve_export_precision("auto", 768, flags=bf16_cpu) == ("mixed_bfloat16", "auto: this CPU has "
                                                                             "avx512_bf16, H 768 >= 512")
    chosen, reason = resolve_export_precision("auto", 768, flags=plain_cpu)
    assert chosen == "float32" and "no avx512_bf16 or amx_bf16" in reason
    chosen, reason = resolve_export_precision("auto", 128, flags=bf16_cpu)
    assert chosen == "float32" and "H 128 < 512" in reason
    assert resolve_export_precision("mixed_bfloat16", 128, flags=plain_cpu) == ("mixed_bfloat16", "requested")
    for other in ("bf16", "mixed_float16"):
        with pytest.raises(ValueError, match=f"`precision` must be one of .*precision='{other}'"):
            resolve_export_precision(other, 768)
    with pytest.raises(ValueError, match=r"resolve \"auto\""):
        export_saved_model(classifier(), scratch_dir() + "/never", precision="auto")


@pytest.mark.parametrize("cpuinfo, reason", [(PLAIN_CPU, "no avx512_bf16 or amx_bf16"), (BF16_CPU, "H 32 < 512")])
def test_export_auto_says_float32_and_why(cpuinfo, reason, monkeypatch, tmp_path, capsys):
    from albert_tf import cli

    # The CPU's flags come from precision.CPUINFO: a file standing for another CPU.
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    monkeypatch.setattr(precision, "CPUINFO", str(tmp_path / "cpuinfo"))
    model_dir, base = str(tmp_path / "model"), str(tmp_path / "saved")
    AlbertBackbone(classifier().backbone.config).save_pretrained(model_dir)
    assert classifier().backbone.config.hidden_size == 32
    assert cli.main(["export", "--model", model_dir, "--format", "saved_model", "--out", base, "--no-text"]) == 0
    out = capsys.readouterr().out
    assert f"Precision: float32 (auto: this CPU has {reason}" in out or f"Precision: float32 (auto: {reason}" in out
    assert metadata(os.path.join(base, "1"))["precision"] == "float32"


def test_mixed_precision_is_refused_for_tflite_and_the_old_precision_flag_names_its_new_spelling(tmp_path, capsys):
    from albert_tf import cli

    # A real model directory: a missing one is reported first, before the flags are read.
    model_dir = str(tmp_path / "model")
    AlbertBackbone(classifier().backbone.config).save_pretrained(model_dir)
    common = ["export", "--model", model_dir, "--out", str(tmp_path / "t")]
    assert cli.main([*common, "--format", "tflite", "--mixed-precision", "mixed_bfloat16"]) == 2
    assert "--mixed-precision applies to --format saved_model only" in capsys.readouterr().err
    for old, new in (("bf16", "mixed_bfloat16"), ("float32", "float32")):
        assert cli.main([*common, "--format", "saved_model", "--precision", old]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.endswith(f"--precision is now --mixed-precision, as in the other commands: use "
                             f"--mixed-precision {new}.")
    assert not os.path.exists(tmp_path / "t")


@pytest.mark.slow
def test_cli_bf16_export_is_served_by_a_fresh_process(tmp_path):
    model_dir, base = tmp_path / "model", tmp_path / "saved_models" / "sentiment"
    classifier().save_pretrained(str(model_dir))
    tokenizer().save(str(model_dir))
    done = run_cli("export", "--model", model_dir, "--format", "saved_model", "--out", base,
                   "--mixed-precision", "mixed_bfloat16", "--max-length", MAX_LENGTH)
    assert "Precision: mixed_bfloat16 (requested)" in done.stdout and "SavedModel (mixed_bfloat16)" in done.stdout
    assert metadata(str(base / "1"))["weights"] == "constants"

    texts = list(real_texts()[8:12])
    with serving(base, tmp_path / "stderr.txt") as predict:
        predictions = predict({"signature_name": "serve_text", "instances": texts})
    packed = pack_texts(tokenizer(), texts, None, MAX_LENGTH)
    reference = np.asarray(classifier()(packed, training=False)["logits"])
    keras_bf16 = np.asarray(with_dtype_policy(classifier(), "mixed_bfloat16")(packed, training=False)["logits"])
    served = np.array([p["logits"] for p in predictions])
    assert 1e-5 < max_abs_diff(served, reference) <= BFLOAT16_ERROR_RATIO * max_abs_diff(keras_bf16, reference)

    # TF-Serving's loader (a TF1 session restoring `variables/`), as `saved_model_cli run` uses it.
    ran = run_program([*SAVED_MODEL_CLI_WITH_TF_TEXT, "run", "--dir", str(base / "1"),
                       "--tag_set", "serve", "--signature_def", "serve_text", "--input_exprs",
                       "text=['A great movie!', 'Dull.']"], timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "Result for output key labels" in ran.stdout and "probabilities" in ran.stdout
