"""TFLite export: builtin ops only, parity with Keras through LiteRT, quantization, tokenizer files."""

import functools
import io
import json
import os
import pathlib
import zipfile

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.export import export_tflite, pack_texts, tflite_metadata
from export_fixtures import (
    LABELS, MAX_LENGTH, MEDIAPIPE_TEXTS, assert_spread, classifier, config, real_texts, run_mediapipe, run_task_library,
    scratch_dir, spread_apart, texts_and_pairs, tokenizer,
)
from helpers import max_abs_diff, pretraining_batch

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"


def _softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _ops(path):
    interpreter = Interpreter(model_path=path)
    return interpreter, {op["op_name"] for op in interpreter._get_ops_details()}


@pytest.mark.slow
def test_float_classifier_matches_keras_with_builtin_ops_only(tmp_path):
    path = export_tflite(classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH)
    interpreter, ops = _ops(path)
    assert not any(op.startswith("Flex") for op in ops) and "FULLY_CONNECTED" in ops
    # With metadata (the default): one output, the inputs in the order ids, mask, segment_ids.
    assert interpreter.get_signature_list() == {"serving_default": {
        "inputs": ["padding_mask", "segment_ids", "token_ids"], "outputs": ["probabilities"],
    }}
    names = [d["name"] for d in interpreter.get_input_details()]
    assert names == [f"serving_default_{n}:0" for n in ("token_ids", "padding_mask", "segment_ids")]
    runner = interpreter.get_signature_runner("serving_default")
    texts, pairs = texts_and_pairs()
    packed = pack_texts(tokenizer(), texts, pairs, MAX_LENGTH, pad_to=MAX_LENGTH)
    expected = _softmax(np.asarray(classifier()(packed)["logits"]))
    for row in range(len(texts)):  # batch 1, fixed length
        out = runner(**{k: v[row : row + 1] for k, v in packed.items()})
        assert max_abs_diff(out["probabilities"], expected[row : row + 1]) <= 1e-5

    assert sorted(os.listdir(tmp_path)) == ["export.json", "model.tflite", "spiece.model", "tokenizer.json"]
    with open(tmp_path / "export.json") as f:
        metadata = json.load(f)
    assert metadata["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert metadata["max_length"] == MAX_LENGTH and metadata["label_names"] == LABELS
    assert metadata["tflite_metadata"] is True
    assert metadata["inputs"] == [
        {"name": name, "dtype": "int32", "shape": [1, MAX_LENGTH], "metadata_name": role}
        for name, role in (("token_ids", "ids"), ("padding_mask", "mask"), ("segment_ids", "segment_ids"))
    ]
    assert metadata["outputs"] == [
        {"name": "probabilities", "dtype": "float32", "shape": [1, 2], "metadata_name": "probability"}
    ]


def test_metadata_reads_back_with_mediapipes_schema(tmp_path):
    """The TFLITE_METADATA flatbuffer, parsed by MediaPipe's generated reader, and the files zipped after it."""
    from mediapipe.tasks.metadata import metadata_schema_py_generated as schema

    path = export_tflite(classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH)
    with open(path, "rb") as f:
        content = f.read()
    raw = tflite_metadata.read_metadata(content)
    assert schema.ModelMetadata.ModelMetadataBufferHasIdentifier(raw, 0)
    metadata = schema.ModelMetadataT.InitFromPackedBuf(raw, 0)
    assert metadata.minParserVersion == b"1.1.0"
    subgraph = metadata.subgraphMetadata[0]
    assert [t.name for t in subgraph.inputTensorMetadata] == [b"ids", b"mask", b"segment_ids"]
    (output,) = subgraph.outputTensorMetadata
    assert output.name == b"probability" and (output.stats.min, output.stats.max) == ([0.0], [1.0])
    (labels,) = output.associatedFiles
    assert (labels.name, labels.type) == (b"labels.txt", schema.AssociatedFileType.TENSOR_AXIS_LABELS)
    (unit,) = subgraph.inputProcessUnits
    assert unit.optionsType == schema.ProcessUnitOptions.SentencePieceTokenizerOptions
    assert [f.name for f in unit.options.sentencePieceModel] == [b"spiece.model"]
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
        assert archive.read("spiece.model") == tokenizer().standalone_model_proto()
        assert archive.read("labels.txt").decode() == "negative\npositive\n"


def test_no_metadata_keeps_every_output(tmp_path):
    path = export_tflite(classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH, metadata=False)
    with open(path, "rb") as f:
        assert tflite_metadata.read_metadata(f.read()) is None
    outputs = Interpreter(model_path=path).get_signature_list()["serving_default"]["outputs"]
    assert outputs == ["logits", "probabilities"]
    with open(tmp_path / "export.json") as f:
        assert [o["name"] for o in json.load(f)["outputs"]] == ["logits", "probabilities"]


@pytest.mark.slow
def test_mediapipe_text_classifier_matches_litert_on_albert_tf_ids(tmp_path):
    """MediaPipe tokenizes raw text with the zipped spiece.model; the same file fed albert-tf's ids agrees."""
    from albert_tf.models import AlbertClassifier, AlbertRegressor

    texts = MEDIAPIPE_TEXTS + [real_texts()[4]]  # and one longer than max_length: cut from the end
    packed = pack_texts(tokenizer(), texts, None, MAX_LENGTH, pad_to=MAX_LENGTH)
    model = spread_apart(AlbertClassifier(AlbertBackbone(config()), num_classes=2, label_names=LABELS), packed)
    path = export_tflite(model, str(tmp_path / "classifier"), tokenizer=tokenizer(), max_length=MAX_LENGTH)
    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    expected = [runner(**{k: v[[row]] for k, v in packed.items()})["probabilities"][0] for row in range(len(texts))]
    assert_spread([p[0] for p in expected], texts)
    for text, result, probabilities in zip(texts, run_mediapipe(path, texts), expected):
        (head,) = result
        assert head["head"] == "probability"
        assert [head["scores"][str(i)][0] for i in range(2)] == LABELS
        assert max(abs(head["scores"][str(i)][1] - probabilities[i]) for i in range(2)) <= 1e-6, text

    regressor = spread_apart(AlbertRegressor(AlbertBackbone(config())), packed)
    path = export_tflite(regressor, str(tmp_path / "regressor"), tokenizer=tokenizer(), max_length=MAX_LENGTH)
    expected = np.asarray(regressor(packed)["predictions"])
    assert_spread(list(expected), texts)
    for row, result in enumerate(run_mediapipe(path, texts)):
        (head,) = result
        assert abs(head["scores"]["0"][1] - expected[row]) <= 1e-5


@pytest.mark.slow
@pytest.mark.timeout(900)  # the first run on a machine installs tflite-support (tests/README.md)
@pytest.mark.parametrize("quantize", ["none", "float16"])
def test_task_library_bert_nl_classifier_matches_litert_on_albert_tf_ids(quantize, tmp_path):
    """The TFLite Task Library reads the inputs by position and the labels from the `probability` output."""
    path = export_tflite(classifier(), str(tmp_path), tokenizer=tokenizer(), max_length=MAX_LENGTH, quantize=quantize)
    texts = MEDIAPIPE_TEXTS + [real_texts()[4]]
    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    packed = pack_texts(tokenizer(), texts, None, MAX_LENGTH, pad_to=MAX_LENGTH)
    for row, scores in enumerate(run_task_library(path, texts)):
        expected = runner(**{k: v[row : row + 1] for k, v in packed.items()})["probabilities"][0]
        assert [scores[str(i)][0] for i in range(2)] == LABELS
        assert max(abs(scores[str(i)][1] - expected[i]) for i in range(2)) <= 1e-6, texts[row]


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
    assert out["probabilities"].shape == (8, 2)
    # Probabilities move at most a quarter as much as the logits' difference does.
    assert max_abs_diff(out["probabilities"], _softmax(expected)) <= tolerance / 2


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
    expected = _softmax(np.asarray(model(packed)["logits"]))
    for row in range(len(texts)):
        out = runner(**{k: v[row : row + 1] for k, v in packed.items()})
        assert max_abs_diff(out["probabilities"], expected[row : row + 1]) <= 1e-5


@pytest.mark.slow
def test_cli_refuses_metadata_for_pairs_and_warns_where_mediapipe_reads_otherwise(tmp_path):
    """A run fine-tuned on pairs needs --no-metadata; a cased tokenizer, windows and start truncation warn."""
    import dataclasses

    from cli_helpers import run_cli
    from input_pipeline import AlbertTokenizer, movie_reviews
    from journey_fixtures import assert_one_line_error

    run = tmp_path / "run"
    classifier().save_pretrained(str(run / "best"))
    # Byte fallback: a preprocessing that cannot be built into spiece.model; and case kept.
    documents = movie_reviews.imdb_documents("pretrain", limit=100)
    plain = AlbertTokenizer.train((s for d in documents for s in d), tokenizer().vocab_size, byte_fallback=True,
                                  character_coverage=0.98, num_threads=1)
    cased = AlbertTokenizer(plain.model_proto, dataclasses.replace(plain.preprocessing, lower_case=False))
    cased.save(str(run / "best" / "tokenizer"))
    (run / "finetune.json").write_text(json.dumps({"config": {"task": "mnli", "max_seq_length": MAX_LENGTH}}))
    refused = run_cli("export", "--model", run, "--format", "tflite", "--out", tmp_path / "out", expect_rc=2)
    assert_one_line_error(refused, "text pairs", "--no-metadata")
    assert not (tmp_path / "out").exists()
    run_cli("export", "--model", run, "--format", "tflite", "--no-metadata", "--out", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "export.json").read_text())["tflite_metadata"] is False

    (run / "finetune.json").write_text(json.dumps({"config": {
        "task": "sst2", "max_seq_length": MAX_LENGTH, "max_windows": 3, "truncate_from": "start",
    }}))
    done = run_cli("export", "--model", run, "--format", "tflite", "--out", tmp_path / "single")
    (warning,) = [line for line in done.stdout.splitlines() if line.startswith("Warning: MediaPipe")]
    assert "keeps case" in warning and "--max-windows 3" in warning and "not its start" in warning
    assert "cannot be built into spiece.model" in warning
    assert json.loads((tmp_path / "single" / "export.json").read_text())["tflite_metadata"] is True


@functools.lru_cache(maxsize=None)
def _converted_tokenizer_export():
    """A classifier exported with the original ALBERT's spiece.model, which carries none of ALBERT's
    preprocessing (lower-casing, accents): the zipped spiece.model must have it compiled in."""
    from albert_tf.models import AlbertClassifier
    from helpers import tiny_config
    from input_pipeline import AlbertTokenizer

    original = AlbertTokenizer((FIXTURES / "original_tokenizer" / "spiece.model").read_bytes())
    assert not original.carries_preprocessing
    model = AlbertClassifier(AlbertBackbone(tiny_config(vocab_size=original.vocab_size, embedding_size=4)),
                             num_classes=2, label_names=LABELS)
    spread_apart(model, pack_texts(original, MEDIAPIPE_TEXTS, None, MAX_LENGTH, pad_to=MAX_LENGTH))
    return original, model, export_tflite(model, scratch_dir() + "/converted", tokenizer=original,
                                          max_length=MAX_LENGTH)


def test_converted_tokenizer_ships_a_spiece_model_that_reads_raw_text_as_albert_tf():
    import sentencepiece as spm

    original, _, path = _converted_tokenizer_export()
    with zipfile.ZipFile(path) as archive:
        shipped = spm.SentencePieceProcessor(model_proto=archive.read("spiece.model"))
    # Upper case, accents, full-width letters and quotes: what the original's own spiece.model reads otherwise.
    raw = spm.SentencePieceProcessor(model_proto=original.model_proto)
    assert any(raw.encode(text) != original.encode(text) for text in MEDIAPIPE_TEXTS)
    for text in MEDIAPIPE_TEXTS:
        assert shipped.encode(text) == original.encode(text), text


@pytest.mark.slow
def test_mediapipe_scores_raw_text_with_a_converted_tokenizer_as_litert_on_albert_tf_ids():
    original, _, path = _converted_tokenizer_export()
    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    packed = pack_texts(original, MEDIAPIPE_TEXTS, None, MAX_LENGTH, pad_to=MAX_LENGTH)
    expected = [runner(**{k: v[[row]] for k, v in packed.items()})["probabilities"][0]
                for row in range(len(MEDIAPIPE_TEXTS))]
    assert_spread([p[0] for p in expected], MEDIAPIPE_TEXTS)
    for row, result in enumerate(run_mediapipe(path, MEDIAPIPE_TEXTS)):
        (head,) = result
        scores = [head["scores"][str(i)][1] for i in range(2)]
        assert max(abs(s - e) for s, e in zip(scores, expected[row])) <= 1e-6, MEDIAPIPE_TEXTS[row]
