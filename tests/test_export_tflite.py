"""TFLite export: builtin ops only, parity with Keras through LiteRT, quantization, tokenizer files."""

import json
import os

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.export import export_tflite, pack_texts
from export_fixtures import LABELS, MAX_LENGTH, classifier, config, real_texts, texts_and_pairs, tokenizer
from helpers import max_abs_diff, pretraining_batch


def _ops(path):
    interpreter = Interpreter(model_path=path)
    return interpreter, {op["op_name"] for op in interpreter._get_ops_details()}


def test_float_classifier_matches_keras_with_builtin_ops_only(tmp_path):
    path = export_tflite(classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH)
    interpreter, ops = _ops(path)
    assert not any(op.startswith("Flex") for op in ops) and "FULLY_CONNECTED" in ops
    assert interpreter.get_signature_list() == {"serving_default": {
        "inputs": ["padding_mask", "segment_ids", "token_ids"], "outputs": ["logits", "probabilities"],
    }}
    runner = interpreter.get_signature_runner("serving_default")
    texts, pairs = texts_and_pairs()
    packed = pack_texts(tokenizer(), texts, pairs, MAX_LENGTH, pad_to=MAX_LENGTH)
    expected = np.asarray(classifier()(packed)["logits"])
    for row in range(len(texts)):  # batch 1, fixed length
        out = runner(**{k: v[row : row + 1] for k, v in packed.items()})
        assert max_abs_diff(out["logits"], expected[row : row + 1]) <= 1e-4

    assert sorted(os.listdir(tmp_path)) == ["export.json", "model.tflite", "spiece.model", "tokenizer.json"]
    with open(tmp_path / "export.json") as f:
        metadata = json.load(f)
    assert metadata["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert metadata["max_length"] == MAX_LENGTH and metadata["label_names"] == LABELS
    assert metadata["tflite_inputs"]["token_ids"] == [1, MAX_LENGTH]


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["float16", "dynamic", "int8", "int8-mixed", "16x8"])
def test_quantized_classifier_runs_close_to_keras(quantize, tmp_path):
    path = export_tflite(
        classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH, quantize=quantize,
        representative_texts=list(real_texts(40)), batch_size=None,
    )
    interpreter, ops = _ops(path)
    assert not any(op.startswith("Flex") for op in ops)
    texts = list(real_texts(40)[-8:])
    packed = pack_texts(tokenizer(), texts, None, MAX_LENGTH, pad_to=MAX_LENGTH)
    out = interpreter.get_signature_runner("serving_default")(**packed)  # dynamic batch of 8
    expected = np.asarray(classifier()(packed)["logits"])
    tolerance = {"float16": 1e-2, "dynamic": 5e-2, "int8": 0.2, "int8-mixed": 5e-2, "16x8": 1e-2}[quantize]
    assert out["logits"].shape == (8, 2)
    assert max_abs_diff(out["logits"], expected) <= tolerance


@pytest.mark.slow
def test_int8_mixed_keeps_matmuls_int8_and_the_denylisted_ops_float(tmp_path):
    path = export_tflite(
        classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH, quantize="int8-mixed",
        representative_texts=list(real_texts(40)),
    )
    interpreter = Interpreter(model_path=path)
    dtypes = {t["index"]: t["dtype"] for t in interpreter.get_tensor_details()}
    kinds = {}
    for op in interpreter._get_ops_details():
        kinds.setdefault(op["op_name"], set()).update(dtypes[i] for i in op["outputs"])
    assert kinds["FULLY_CONNECTED"] == {np.int8} and np.int8 in kinds["BATCH_MATMUL"]
    for name in ("SOFTMAX", "GELU", "RSQRT", "SQUARED_DIFFERENCE"):
        assert kinds[name] == {np.float32}, (name, kinds[name])


def test_cli_pretrainer_with_tokenizer_subdir_and_dynamic_batch(tmp_path):
    from albert_tf import cli

    pretrainer = AlbertPretrainer(AlbertBackbone(config()))
    model_dir = str(tmp_path / "model")
    pretrainer.save_pretrained(model_dir)
    tokenizer().save(os.path.join(model_dir, "tokenizer"))  # the `tokenizer/` subdirectory convention
    out_dir = str(tmp_path / "tflite")
    assert cli.main(["export", "--model", model_dir, "--format", "tflite", "--out", out_dir,
                     "--max-length", "12", "--dynamic-batch"]) == 0
    assert os.path.isfile(os.path.join(out_dir, "spiece.model"))
    inputs, _ = pretraining_batch(config(), batch=3, seq=12)
    padded = dict(inputs, mask_positions=np.pad(inputs["mask_positions"], ((0, 0), (0, 16))))  # 20 positions
    out = Interpreter(model_path=os.path.join(out_dir, "model.tflite")).get_signature_runner()(**padded)
    expected = pretrainer(padded)
    assert max_abs_diff(out["mlm_logits"], np.asarray(expected["mlm_logits"])) <= 1e-4
    assert max_abs_diff(out["sop_logits"], np.asarray(expected["sop_logits"])) <= 1e-4


def test_byte_fallback_tokenizer_ships_with_an_ids_only_model(tmp_path):
    """The TFLite model takes ids: byte fallback changes the files next to it, not the conversion."""
    from albert_tf.models import AlbertClassifier
    from helpers import tiny_config
    from input_pipeline import AlbertTokenizer
    from language_corpora import korean_lines

    tokenizer = AlbertTokenizer.train(korean_lines()[::2], 1256, language="ko", num_threads=2)
    model = AlbertClassifier(AlbertBackbone(tiny_config(vocab_size=tokenizer.vocab_size)), num_classes=2)
    path = export_tflite(model, str(tmp_path), tokenizer=tokenizer, max_length=MAX_LENGTH)
    interpreter, ops = _ops(path)
    assert not any(op.startswith("Flex") for op in ops)
    with open(tmp_path / "tokenizer.json", encoding="utf-8") as f:
        assert json.load(f)["byte_fallback"] is True
    assert AlbertTokenizer.load(tmp_path).encode("뷁 𠮷") == tokenizer.encode("뷁 𠮷")
    texts = ["뷁 똠방각하 햏", "𠮷野家 😀", korean_lines()[1]]
    packed = pack_texts(tokenizer, texts, None, MAX_LENGTH, pad_to=MAX_LENGTH)
    assert ((packed["token_ids"] >= 5) & (packed["token_ids"] < 261)).any()  # byte pieces
    runner = interpreter.get_signature_runner("serving_default")
    expected = np.asarray(model(packed)["logits"])
    for row in range(len(texts)):
        out = runner(**{k: v[row : row + 1] for k, v in packed.items()})
        assert max_abs_diff(out["logits"], expected[row : row + 1]) <= 1e-4
