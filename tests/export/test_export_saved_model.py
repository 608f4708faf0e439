"""SavedModel export: versioned layout, signatures, parity with Keras, in-graph text, bad input."""

import json
import os
import re
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import softmax

from albert_tf import AlbertBackbone, AlbertPretrainer, inference
from albert_tf.export import export_saved_model, load_saved_model, pack_texts, truncated_lengths
from albert_tf.export.options import DEFAULT_MAX_LENGTH, default_max_length
from albert_tf.utils.layout import EXPORT_METADATA_FILE
from albert_tf.models import AlbertClassifier, AlbertQuestionAnswerer
from albert_tf.recipes import RunSettings
from export_fixtures import (
    LABELS, MAX_LENGTH, classifier, config, exported_classifier, graph_def, graph_nodes, metadata, texts_and_pairs,
    tokenizer,
)
from helpers import backbone_batch, max_abs_diff, pretraining_batch, tiny_config
from input_pipeline.packing import truncate_pair
from cli_helpers import run_program


def _call(signature, **arrays):
    return {k: v.numpy() for k, v in signature(**{k: tf.constant(v) for k, v in arrays.items()}).items()}


def test_truncation_closed_form_matches_the_loop():
    for budget in range(2, 12):
        for la in range(0, 14):
            for lb in range(0, 14):
                a, b = truncate_pair(range(la), range(lb), budget)
                assert truncated_lengths(la, lb, budget) == (len(a), len(b)), (la, lb, budget)


def test_the_default_max_length_is_the_runs_else_128_within_the_models_positions():
    # `export` and `serve` of a model directory both take it when no --max-length is given.
    short, long = (AlbertBackbone(tiny_config(max_position_embeddings=n)) for n in (64, 512))
    assert default_max_length(RunSettings(max_seq_length=48), long) == 48
    assert default_max_length(RunSettings(), long) == DEFAULT_MAX_LENGTH == 128
    assert default_max_length(RunSettings(), short) == 64
    assert default_max_length(RunSettings(), AlbertClassifier(short, num_classes=2)) == 64


@pytest.mark.slow
def test_classifier_ids_and_text_signatures_match_keras():
    base, path = exported_classifier()
    assert path == os.path.join(base, "1")
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == ["serve_examples", "serve_text", "serve_text_pair", "serving_default"]
    model = classifier()

    batch = backbone_batch(config())
    out = _call(loaded.signatures["serving_default"], **batch)
    expected = np.asarray(model(batch)["logits"])
    assert max_abs_diff(out["logits"], expected) <= 1e-5
    assert max_abs_diff(out["probabilities"], softmax(expected, -1)) <= 1e-6

    texts, pairs = texts_and_pairs()
    for signature, text_pairs in (("serve_text", None), ("serve_text_pair", pairs)):
        inputs = {"text": np.array(texts, dtype=object)}
        if text_pairs is not None:
            inputs["text_pair"] = np.array(text_pairs, dtype=object)
        out = _call(loaded.signatures[signature], **inputs)
        packed = pack_texts(tokenizer(), texts, text_pairs, MAX_LENGTH)
        assert packed["padding_mask"].sum(-1).max() == MAX_LENGTH  # long texts were truncated
        logits = np.asarray(model(packed)["logits"])
        assert max_abs_diff(out["logits"], logits) <= 1e-5
        assert out["label_ids"].tolist() == logits.argmax(-1).tolist()
        assert [l.decode() for l in out["labels"]] == [LABELS[i] for i in logits.argmax(-1)]

    with open(os.path.join(path, EXPORT_METADATA_FILE)) as f:
        metadata = json.load(f)
    assert metadata["kind"] == "classifier" and metadata["label_names"] == LABELS
    assert metadata["max_length"] == MAX_LENGTH


def test_the_classify_signature_reads_its_texts_with_the_text_signatures_functions():
    # serve_examples calls serve_text's and serve_text_pair's functions: the in-graph packing is traced (and
    # stored) once for each, not again for the examples' two branches.
    library = {f.signature.name: f for f in graph_def(exported_classifier()[1]).library.function}
    reached, called, ahead = set(), set(), [name for name in library if name.startswith("__inference_serve_examples_")]
    while ahead:
        name = ahead.pop()
        reached.add(name)
        for node in library[name].node_def:
            for value in node.attr.values():
                for function in ([value.func] if value.HasField("func") else []) + list(value.list.func):
                    if re.match(r"__inference_serve_text(_pair)?_\d+$", function.name):
                        called.add(function.name.rsplit("_", 1)[0])
                    elif function.name in library and function.name not in reached:
                        ahead.append(function.name)
    assert called == {"__inference_serve_text", "__inference_serve_text_pair"}, called
    ops = {node.op for name in reached for node in library[name].node_def}
    assert not [op for op in ops if "Sentencepiece" in op or "Normalize" in op], ops


def test_float32_export_freezes_the_weights_and_keeps_variables_past_the_limit(monkeypatch, tmp_path):
    keras.utils.set_random_seed(2)
    model = AlbertBackbone(config())
    # Trained-like weights: a frozen graph folds an all-zero bias away.
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.02, w.shape).astype(w.dtype) for w in model.get_weights()])
    batch = backbone_batch(config())
    expected = np.asarray(model(batch, training=False)["pooled_output"])
    frozen = export_saved_model(model, str(tmp_path / "frozen"), max_length=MAX_LENGTH)
    assert not [n for n in graph_nodes(frozen) if n.op in ("ReadVariableOp", "VarHandleOp")]
    assert (metadata(frozen)["precision"], metadata(frozen)["weights"]) == ("float32", "constants")
    monkeypatch.setattr(inference, "MAX_FROZEN_BYTES", 1000)
    large = export_saved_model(model, str(tmp_path / "large"), max_length=MAX_LENGTH)
    assert any(n.op == "ReadVariableOp" for n in graph_nodes(large))
    assert metadata(large)["weights"] == "variables"
    for path in (frozen, large):
        out = _call(load_saved_model(path).signatures["serving_default"], **batch)
        assert max_abs_diff(out["pooled_output"], expected) <= 1e-5, path


def must_compile(path):
    """Whether a SavedModel holds a function XLA must compile (`_XlaMustCompile`), as TF-Serving reads it."""
    return any(f.attr["_XlaMustCompile"].b for f in graph_def(path).library.function)


def test_xla_export_compiles_its_forward_pass_and_names_the_server_flag(tmp_path, capsys, monkeypatch):
    from albert_tf import cli
    from albert_tf.commands import export as export_command

    keras.utils.set_random_seed(3)
    backbone = AlbertBackbone(config())
    model_dir, base = str(tmp_path / "model"), str(tmp_path / "served")
    backbone.save_pretrained(model_dir)
    tokenizer().save(model_dir)
    export = ["export", "--model", model_dir, "--format", "saved_model", "--out", base, "--max-length", "16"]
    assert cli.main(export + ["--xla"]) == 0
    said = capsys.readouterr().out
    assert "SavedModel (float32, XLA)" in said and "tensorflow_model_server --xla_cpu_compilation_enabled=true" in said
    assert "Notice" not in said
    path = os.path.join(base, "1")
    assert must_compile(path)
    assert (metadata(path)["compiler"], metadata(path)["weights"]) == ("xla", "variables")
    loaded = load_saved_model(path)
    batch = backbone_batch(config(), seq=16)
    out = _call(loaded.signatures["serving_default"], **batch)
    assert max_abs_diff(out["pooled_output"], np.asarray(backbone(batch, training=False)["pooled_output"])) <= 1e-5
    text = _call(loaded.signatures["serve_text"], text=np.array(["a fine film"], object))
    packed = pack_texts(tokenizer(), ["a fine film"], None, 16)
    assert max_abs_diff(text["pooled_output"], np.asarray(backbone(packed)["pooled_output"])) <= 1e-5
    # The default answers on a server without XLA: nothing in it must compile. Where TensorFlow runs no oneDNN
    # (AVX2-only CPUs), its line names the server environment and the opt-in that measured faster there.
    monkeypatch.setattr(export_command, "onednn_enabled", lambda: False)
    assert cli.main(export) == 0
    notice = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Notice:")]
    assert len(notice) == 1 and "TF_ENABLE_ONEDNN_OPTS=1" in notice[0] and "--xla" in notice[0], notice
    assert not must_compile(os.path.join(base, "2")) and metadata(os.path.join(base, "2"))["compiler"] == "none"
    # bfloat16 is oneDNN's, and a TFLite file has no XLA: each refused in one line.
    tflite = ["export", "--model", model_dir, "--format", "tflite", "--out", str(tmp_path / "tflite"), "--xla"]
    for argv in (export + ["--xla", "--mixed-precision", "mixed_bfloat16"], tflite):
        assert cli.main(argv) == 2
        assert "--xla" in capsys.readouterr().err


def test_bad_inputs_give_clear_errors():
    loaded = tf.saved_model.load(exported_classifier()[1])
    ids, text = loaded.signatures["serving_default"], loaded.signatures["serve_text"]
    good = backbone_batch(config(), batch=1, seq=MAX_LENGTH)
    too_long = backbone_batch(config(), batch=1, seq=MAX_LENGTH + 1)
    cases = [
        (ids, too_long, "at most max_length=24"),
        (ids, {**good, "token_ids": good["token_ids"] + 1000}, "vocab_size=300"),
        (ids, {**good, "segment_ids": good["segment_ids"][:, :-1]}, "shape of `token_ids`"),
        (ids, {**good, "padding_mask": good["padding_mask"] * 2}, "only 0 and 1"),
        (text, {"text": np.array(["fine", "  \t "], dtype=object)}, "`text` must not be empty"),
    ]
    for signature, inputs, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            _call(signature, **inputs)
    # Wrong dtype or rank is refused by the signature itself.
    refused = (TypeError, ValueError, tf.errors.InvalidArgumentError)
    with pytest.raises(refused, match="int32"):
        _call(ids, **{**good, "token_ids": good["token_ids"].astype("float32")})
    with pytest.raises(refused, match="`token_ids` must have rank 2"):
        _call(ids, **{**good, "token_ids": good["token_ids"][0]})
    with pytest.raises(refused, match="`text` must have rank 1"):
        text(text=tf.constant("not a batch"))
    with pytest.raises(refused, match="`text` must have rank 1"):
        text(text=tf.constant([["a", "b"]]))


@pytest.mark.slow
@pytest.mark.parametrize("truncate_from", ["end", "middle"])
def test_windowed_serve_text_averages_the_windows_as_the_python_reference(tmp_path, truncate_from):
    from albert_tf.export import pack_windows, tf_pack_windows
    from albert_tf.models import AlbertRegressor

    texts, _ = texts_and_pairs()  # short texts (one window) and long ones (several, the longest cut)
    inputs, text_index = pack_windows(tokenizer(), texts, MAX_LENGTH, 3, truncate_from)
    got, got_index = tf_pack_windows(tokenizer(), tf.constant(texts), MAX_LENGTH, 3, truncate_from)
    for name in inputs:
        np.testing.assert_array_equal(got[name].numpy(), inputs[name])
    np.testing.assert_array_equal(got_index.numpy(), text_index)
    counts = np.bincount(text_index)
    assert counts.tolist()[0] == 1 and counts.max() == 3 and inputs["padding_mask"].sum(-1).max() <= MAX_LENGTH

    model = classifier()
    path = export_saved_model(model, str(tmp_path / "c"), tokenizer=tokenizer(), max_length=MAX_LENGTH,
                              truncate_from=truncate_from, max_windows=3)
    loaded = tf.saved_model.load(path)
    out = _call(loaded.signatures["serve_text"], text=np.array(texts, object))
    window_logits = np.asarray(model(inputs)["logits"])
    expected = np.stack([window_logits[text_index == i].mean(0) for i in range(len(texts))])
    assert max_abs_diff(out["logits"], expected) <= 1e-5
    assert max_abs_diff(out["probabilities"], softmax(expected, -1)) <= 1e-6
    assert out["label_ids"].tolist() == expected.argmax(-1).tolist()
    # Not what one window gives: the long texts' other windows count.
    one_window = np.asarray(model(pack_texts(tokenizer(), texts, max_length=MAX_LENGTH,
                                             truncate_from=truncate_from))["logits"])
    assert max_abs_diff(one_window, expected) > 1e-4
    # Pairs keep one window; the id signature is unchanged.
    pairs = _call(loaded.signatures["serve_text_pair"], text=np.array(texts, object), text_pair=np.array(texts, object))
    assert pairs["logits"].shape == (len(texts), 2)
    with open(os.path.join(path, EXPORT_METADATA_FILE)) as f:
        metadata = json.load(f)
    assert metadata["max_windows"] == 3 and "up to 3 near-equal windows" in metadata["long_text"]

    regressor = AlbertRegressor(AlbertBackbone(config()))
    loaded = tf.saved_model.load(export_saved_model(regressor, str(tmp_path / "r"), tokenizer=tokenizer(),
                                                    max_length=MAX_LENGTH, truncate_from=truncate_from,
                                                    max_windows=3))
    out = _call(loaded.signatures["serve_text"], text=np.array(texts, object))
    window_scores = np.asarray(regressor(inputs)["predictions"])
    expected = np.array([window_scores[text_index == i].mean() for i in range(len(texts))])
    assert max_abs_diff(out["predictions"], expected) <= 1e-5
    with pytest.raises(ValueError, match="`max_windows` applies to classifier, multilabel and regressor models"):
        export_saved_model(AlbertBackbone(config()), str(tmp_path / "b"), tokenizer=tokenizer(), max_length=MAX_LENGTH,
                           max_windows=2)


def test_a_model_without_an_export_kind_is_refused(tmp_path):
    backbone = AlbertBackbone(config())

    class Unregistered(AlbertPretrainer):
        export_kind = None  # a new task model that forgot to declare its kind

    with pytest.raises(ValueError, match="Unregistered.export_kind must be one of"):
        export_saved_model(Unregistered(backbone), str(tmp_path))


@pytest.mark.slow
def test_question_answering_text_signature_returns_a_span_in_the_context(tmp_path):
    model = AlbertQuestionAnswerer(AlbertBackbone(config()))
    loaded = tf.saved_model.load(export_saved_model(model, str(tmp_path), tokenizer=tokenizer(), max_length=32))
    assert sorted(loaded.signatures) == ["serve_text", "serving_default"]
    question, context = ["who directed it?"], ["The film was directed by Jane Doe in Paris, long ago."]
    out = _call(loaded.signatures["serve_text"], question=np.array(question, object), context=np.array(context, object))
    packed = pack_texts(tokenizer(), question, context, 32, max_first_length=64)
    expected = model(packed)
    assert max_abs_diff(out["start_logits"], np.asarray(expected["start_logits"])) <= 1e-5
    start, end = int(out["answer_start"][0]), int(out["answer_end"][0])
    assert packed["segment_ids"][0, start] == 1 and start <= end < packed["padding_mask"][0].sum() - 1
    assert out["answer"][0].decode() == tokenizer().decode(packed["token_ids"][0, start : end + 1])


@pytest.mark.slow
def test_cli_backbone_versions_and_pretrainer_without_tokenizer(tmp_path):
    from albert_tf import cli

    backbone = AlbertBackbone(config())
    model_dir, base = str(tmp_path / "model"), str(tmp_path / "saved_models" / "albert")
    backbone.save_pretrained(model_dir)
    tokenizer().save(model_dir)  # the convention: a tokenizer inside the model directory
    export = ["export", "--model", model_dir, "--format", "saved_model", "--out", base, "--max-length", "16"]
    assert cli.main(export) == 0
    assert cli.main(export + ["--no-text"]) == 0
    assert sorted(os.listdir(base)) == ["1", "2", "batching_parameters.txt"]
    assert list(tf.saved_model.load(os.path.join(base, "2")).signatures) == ["serving_default"]
    loaded = tf.saved_model.load(os.path.join(base, "1"))
    assert sorted(loaded.signatures) == ["serve_text", "serve_text_pair", "serving_default"]
    out = _call(loaded.signatures["serve_text"], text=np.array(["a fine film"], object))
    packed = pack_texts(tokenizer(), ["a fine film"], None, 16)
    assert max_abs_diff(out["pooled_output"], np.asarray(backbone(packed)["pooled_output"])) <= 1e-5
    assert out["tokens"][0, 0] == b"[CLS]"

    pretrainer = AlbertPretrainer(AlbertBackbone(config()))
    path = export_saved_model(pretrainer, str(tmp_path / "pretrainer"), max_length=16)
    loaded = tf.saved_model.load(path)
    assert list(loaded.signatures) == ["serving_default"]
    inputs, _ = pretraining_batch(config())
    out = _call(loaded.signatures["serving_default"], **inputs)
    assert max_abs_diff(out, {k: np.asarray(v) for k, v in pretrainer(inputs).items()}) <= 1e-5


# `saved_model_cli` with TF Text's ops registered (forked, as the other worker scripts): `run` imports the
# whole graph, text signatures included (as TF-Serving does). `show` needs no ops.
SAVED_MODEL_CLI_WITH_TF_TEXT = [sys.executable, str(Path(__file__).parents[1] / "saved_model_cli_worker.py")]


@pytest.mark.slow
def test_saved_model_cli_show_and_run():
    path = exported_classifier()[1]
    plain = [os.path.join(os.path.dirname(sys.executable), "saved_model_cli")]

    def cli(command, *args):
        done = run_program(command + list(args), timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    shown = cli(plain, "show", "--dir", path, "--all")
    for expected in ("signature_def['serve_text']", "signature_def['serving_default']", "outputs['probabilities']"):
        assert expected in shown
    ran = cli(SAVED_MODEL_CLI_WITH_TF_TEXT, "run", "--dir", path, "--tag_set", "serve", "--signature_def",
              "serving_default",
              "--input_exprs", "token_ids=[[2, 50, 51, 3]];segment_ids=[[0, 0, 0, 0]];padding_mask=[[1, 1, 1, 1]]")
    assert "probabilities" in ran
    ran = cli(SAVED_MODEL_CLI_WITH_TF_TEXT, "run", "--dir", path, "--tag_set", "serve", "--signature_def", "serve_text",
              "--input_exprs", "text=['A great movie!', 'Dull.']")
    assert "labels" in ran and ("positive" in ran or "negative" in ran)
