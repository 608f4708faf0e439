"""TF-Serving's warmup records: what `export` writes parses as tensorflow-serving-api's PredictionLog, and
`serve` replays it at load."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from albert_tf.export.serving import ServingModel
from albert_tf.export.signatures import EXAMPLES_SIGNATURE
from albert_tf.export.batching_parameters import (SUGGESTED, WARMUP_BATCH_SIZES, BatchingParameters,
                                                  parse_batching_parameters)
from albert_tf.export.serving import RequestError
from albert_tf.export.warmup import CLASSIFY, PREDICT, REGRESS, parse_prediction_log, prediction_log, warmup_lengths
from albert_tf.utils.layout import BATCHING_PARAMETERS_FILE, WARMUP_FILE
from albert_tf.utils.errors import UserError
from export_fixtures import (MAX_LENGTH, exported_classifier, exported_question_answerer, exported_regressor,
                             exported_tagger)


def _records(version_dir):
    logs = []
    for record in tf.data.TFRecordDataset(os.path.join(version_dir, WARMUP_FILE)):
        log = prediction_log_pb2.PredictionLog()
        log.ParseFromString(record.numpy())
        logs.append(log)
    return logs


def test_the_export_holds_a_request_per_signature_batch_size_and_length_tf_serving_reads():
    logs = _records(exported_classifier()[1])
    seen = set()
    for log in logs:
        if log.WhichOneof("log_type") == "classify_log":
            request = log.classify_log.request
            examples = request.input.example_list.examples
            text = examples[0].features.feature["text"].bytes_list.value[0].decode()
            pair = "text_pair" in examples[0].features.feature
            seen.add((request.model_spec.signature_name, len(examples), len(text.split()), pair))
            continue
        assert log.WhichOneof("log_type") == "predict_log"
        request = log.predict_log.request
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        if request.model_spec.signature_name == "serving_default":
            assert sorted(inputs) == ["padding_mask", "segment_ids", "token_ids"]
            batch, length = inputs["token_ids"].shape
            assert inputs["token_ids"].dtype == np.int32 and inputs["token_ids"].min() >= 5
        else:
            batch, = inputs["text"].shape
            length = len(inputs["text"][0].split())
            assert sorted(inputs) == (["text", "text_pair"] if "pair" in request.model_spec.signature_name
                                      else ["text"])
        seen.add((request.model_spec.signature_name, batch, length, None))
    sizes = [(b, n) for b in WARMUP_BATCH_SIZES for n in warmup_lengths(MAX_LENGTH)]
    expected = {(name, b, n, None) for name in ("serving_default", "serve_text", "serve_text_pair") for b, n in sizes}
    expected |= {(EXAMPLES_SIGNATURE, b, n, pair) for b, n in sizes for pair in (False, True)}
    assert seen == expected and len(logs) == len(expected)
    assert warmup_lengths(MAX_LENGTH) == (16, MAX_LENGTH) and WARMUP_BATCH_SIZES == (1, SUGGESTED.max_batch_size)
    assert warmup_lengths(128) == (16, 32, 64, 128) and warmup_lengths(100) == (16, 32, 64, 100)
    assert warmup_lengths(8) == (8,)


def test_hand_written_protos_equal_tensorflow_serving_apis_own():
    ids = {"token_ids": np.array([[2, 7, 3]], np.int32), "text": np.array([b"a", "\u00e9".encode()], object)}
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a fine film"]))})).SerializeToString()]
    for kind, inputs in [(PREDICT, ids), (CLASSIFY, examples), (REGRESS, examples)]:
        expected = prediction_log_pb2.PredictionLog()
        request = getattr(expected, f"{kind}_log").request
        request.model_spec.name, request.model_spec.signature_name = "m", "sig"
        if kind == PREDICT:
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        else:
            for example in inputs:
                request.input.example_list.examples.add().ParseFromString(example)
        written = prediction_log(kind, "sig", inputs, model_name="m")
        parsed = prediction_log_pb2.PredictionLog()
        parsed.ParseFromString(written)
        assert parsed == expected, kind
        # And read back from the package's own bytes.
        got_kind, signature, got = parse_prediction_log(expected.SerializeToString())
        assert (got_kind, signature) == (kind, "sig")
        if kind == PREDICT:
            assert {n: v.tolist() for n, v in got.items()} == {n: v.tolist() for n, v in inputs.items()}
        else:
            assert got == inputs


def test_serve_replays_every_record_at_load_and_a_broken_file_fails_the_load(tmp_path):
    for base, version in (exported_classifier(), exported_regressor()):
        assert ServingModel(base).warmup_requests == len(_records(version)) > 0
    assert any(log.WhichOneof("log_type") == "regress_log" for log in _records(exported_regressor()[1]))
    assert ServingModel(exported_classifier()[0], warmup=False).warmup_requests == 0

    base = tmp_path / "model"
    shutil.copytree(exported_classifier()[0], base)
    warmup = base / "1" / WARMUP_FILE
    with tf.io.TFRecordWriter(str(warmup)) as writer:
        writer.write(prediction_log(PREDICT, "serve_nothing", {"text": np.array([b"a"], object)}))
    with pytest.raises(UserError, match="record 0 names the signature 'serve_nothing'"):
        ServingModel(str(base))
    with tf.io.TFRecordWriter(str(warmup)) as writer:
        writer.write(prediction_log(PREDICT, "serve_text", {"text": np.array([b"   "], object)}))
    with pytest.raises(UserError, match=r"record 0 \(serve_text\) failed: `text` must not be empty"):
        ServingModel(str(base))
    warmup.write_bytes(b"not a TFRecord file")
    with pytest.raises(UserError, match="not a TFRecord file of TF-Serving PredictionLogs"):
        ServingModel(str(base))
    os.remove(warmup)
    assert ServingModel(str(base)).warmup_requests == 0


def _batch_size(log):
    kind = log.WhichOneof("log_type")
    if kind != "predict_log":
        return len(getattr(log, kind).request.input.example_list.examples)
    return max(tf.make_ndarray(p).shape[0] for p in log.predict_log.request.inputs.values())


@pytest.mark.parametrize("export", [
    exported_classifier,
    pytest.param(exported_regressor, marks=pytest.mark.slow),
    pytest.param(exported_tagger, marks=pytest.mark.slow),
    pytest.param(exported_question_answerer, marks=pytest.mark.slow),
])
def test_every_warmup_record_passes_the_batcher_the_suggested_file_configures(export):
    # TF-Serving replays the records through its batching session (saved_model_bundle_factory.cc), whose queue
    # refuses a task larger than max_batch_size: one failed record fails the load.
    base, version = export()
    with open(os.path.join(base, BATCHING_PARAMETERS_FILE)) as f:
        params = parse_batching_parameters(f.read())
    logs = _records(version)
    assert max(_batch_size(log) for log in logs) == params.max_batch_size
    model = ServingModel(base, batching=params)
    try:
        assert model.warmup_requests == len(logs) > 0
        # And a request larger than the queue takes gets TF-Serving's answer.
        with pytest.raises(RequestError) as error:
            model.predict({"instances": [{n: [1] for n in model.input_specs["serving_default"]}]
                           * (params.max_batch_size + 1)})
        assert (error.value.status, error.value.message) == (
            400, f"Task size {params.max_batch_size + 1} is larger than maximum input batch size {params.max_batch_size}")
    finally:
        model.close()


def test_warmup_runs_through_the_batcher_so_a_smaller_queue_fails_the_load():
    with pytest.raises(UserError, match=r"record \d+ \(\w+\) failed: Task size \d+ is larger than maximum input "
                                        r"batch size 1"):
        ServingModel(exported_classifier()[0], batching=BatchingParameters(max_batch_size=1, num_batch_threads=1))


def test_more_warmup_records_than_tf_serving_reads_fail_the_load(tmp_path):
    base = tmp_path / "model"
    shutil.copytree(exported_classifier()[0], base)
    record = prediction_log(PREDICT, "serve_text", {"text": np.array([b"a fine film"], object)})
    with tf.io.TFRecordWriter(str(base / "1" / WARMUP_FILE)) as writer:
        for _ in range(1001):
            writer.write(record)
    with pytest.raises(UserError, match=r"Number of warmup records exceeds the maximum \(1000\)"):
        ServingModel(str(base))
