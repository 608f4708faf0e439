"""Batching as TF-Serving does it: its batching parameters file, and concurrent requests merged into batches."""

import os
import threading
import time

import numpy as np
import pytest

from albert_tf.export.batching_parameters import SUGGESTED, BatchingParameters, parse_batching_parameters
from albert_tf.export.serving.batching import Batcher
from albert_tf.utils.layout import BATCHING_PARAMETERS_FILE
from albert_tf.export.serving.codec import RequestError
from albert_tf.utils.errors import UserError
from cli_helpers import run_cli

TF_SERVING_EXAMPLE = """
# As in TF-Serving's docs (tensorflow_serving/batching/README.md)
max_batch_size { value: 128 }
batch_timeout_micros { value: 0 }
max_enqueued_batches { value: 1000000 }
num_batch_threads { value: 8 }
allowed_batch_sizes: 32
allowed_batch_sizes: 128
pad_variable_length_inputs: true
"""


def test_tf_servings_text_format_is_read_and_written():
    params = parse_batching_parameters(TF_SERVING_EXAMPLE)
    assert params == BatchingParameters(max_batch_size=128, batch_timeout_micros=0, max_enqueued_batches=1000000,
                                        num_batch_threads=8, allowed_batch_sizes=(32, 128),
                                        pad_variable_length_inputs=True)
    assert parse_batching_parameters(params.to_text()) == params
    assert parse_batching_parameters(SUGGESTED.to_text()) == SUGGESTED
    assert parse_batching_parameters("max_batch_size: { value: 4 }").max_batch_size == 4
    assert parse_batching_parameters("").max_batch_size == 1000  # TF-Serving's defaults


@pytest.mark.parametrize("text, message", [
    ("max_batch_size { value: 8 }\nthread_pool_name: \"x\"", "unknown field 'thread_pool_name'"),
    ("max_batch_size { value: eight }", "max_batch_size needs an integer"),
    ("max_batch_size: 8", "expected '{'"),
    ("max_batch_size { value: 0 }", "max_batch_size must be >= 1"),
    ("max_batch_size { value: 8 }\nallowed_batch_sizes: 4", "end with max_batch_size=8"),
    ("max_batch_size { value: 8 }\nallowed_batch_sizes: 4\nallowed_batch_sizes: 2\nallowed_batch_sizes: 8",
     "must increase"),
    ("pad_variable_length_inputs: yes", "true or false"),
    ("max_batch_size { value: 8 ", "found 'the end of the file'"),
    ("max_batch_size { value: 8 } %", "cannot read"),
])
def test_a_bad_file_is_one_line_naming_it(text, message):
    with pytest.raises(UserError, match=message) as error:
        parse_batching_parameters(text, "F.txt")
    assert str(error.value).startswith("F.txt: ") and "\n" not in str(error.value)


class _Recorder:
    """A signature call recording its batch sizes; doubles its input; refuses negative values."""

    def __init__(self, delay=0.05):
        self.batches, self.delay = [], delay

    def __call__(self, name, arrays):
        x = arrays["x"]
        self.batches.append(x.shape)
        time.sleep(self.delay)
        if (x < 0).any():
            raise RequestError("`x` must be >= 0.")
        return {"y": 2 * x}


def _concurrently(batcher, inputs):
    results = [None] * len(inputs)

    def client(i):
        try:
            results[i] = batcher.run("sig", {"x": inputs[i]})
        except RequestError as e:
            results[i] = e

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_concurrent_requests_run_as_batches_and_each_gets_its_own_rows():
    call = _Recorder()
    batcher = Batcher(call, BatchingParameters(max_batch_size=8, batch_timeout_micros=200_000, num_batch_threads=1,
                                               allowed_batch_sizes=(4, 8)))
    try:
        inputs = [np.full((1, 3), i, np.int32) for i in range(6)]
        results = _concurrently(batcher, inputs)
        for i, result in enumerate(results):
            np.testing.assert_array_equal(result["y"], 2 * inputs[i])
        # Six single rows within the timeout: one batch, padded to the allowed size 8.
        assert call.batches == [(8, 3)]
        # One bad request fails alone; the others batched with it are answered.
        call.batches.clear()
        results = _concurrently(batcher, [np.ones((1, 3), np.int32), -np.ones((1, 3), np.int32),
                                          np.ones((2, 3), np.int32)])
        assert isinstance(results[1], RequestError) and results[1].status == 400
        np.testing.assert_array_equal(results[2]["y"], 2 * np.ones((2, 3)))
        assert call.batches[0] == (4, 3) and len(call.batches) == 4
        with pytest.raises(RequestError, match="larger than maximum input batch size 8"):
            batcher.run("sig", {"x": np.ones((9, 3), np.int32)})
    finally:
        batcher.close()


def test_shapes_batch_together_only_when_padded_and_a_full_queue_is_a_503():
    call = _Recorder()
    params = dict(max_batch_size=4, batch_timeout_micros=200_000, num_batch_threads=1)
    batcher = Batcher(call, BatchingParameters(**params))
    try:
        _concurrently(batcher, [np.ones((1, 3), np.int32), np.ones((1, 5), np.int32)])
        assert sorted(call.batches) == [(1, 3), (1, 5)]
    finally:
        batcher.close()
    call.batches.clear()
    batcher = Batcher(call, BatchingParameters(**params, pad_variable_length_inputs=True))
    try:
        short, long = _concurrently(batcher, [np.ones((1, 3), np.int32), np.ones((1, 5), np.int32)])
        assert call.batches == [(2, 5)]
        np.testing.assert_array_equal(short["y"], [[2, 2, 2, 0, 0]])  # padded with zeros, as the batch ran
    finally:
        batcher.close()
    slow = _Recorder(delay=1.0)
    batcher = Batcher(slow, BatchingParameters(max_batch_size=1, max_enqueued_batches=1, num_batch_threads=1))
    try:
        results = _concurrently(batcher, [np.ones((1, 1), np.int32)] * 4)
        full = [r for r in results if isinstance(r, RequestError)]
        assert full and all(r.status == 503 and "queue" in r.message for r in full)
    finally:
        batcher.close()


def test_serve_flags_name_the_file_or_the_missing_flag(tmp_path):
    bad = tmp_path / "batching.txt"
    bad.write_text("max_batch_size { value: 8 }\nenable_large_batch_splitting: true\n")
    for argv, message in [
        (["--batching-parameters-file", str(bad)], "--batching-parameters-file applies with --enable-batching"),
        (["--enable-batching", "--batching-parameters-file", str(bad)],
         f"--batching-parameters-file {bad}: unknown field 'enable_large_batch_splitting'"),
        (["--enable-batching", "--batching-parameters-file", str(tmp_path / "none.txt")], "no such file"),
    ]:
        err = run_cli("serve", tmp_path, "--port", "0", *argv, expect_rc=2).stderr
        assert message in err and err.strip().count("\n") == 0, err


def test_export_writes_the_suggested_file_beside_the_versions():
    from export_fixtures import exported_classifier

    base, _ = exported_classifier()
    with open(os.path.join(base, BATCHING_PARAMETERS_FILE)) as f:
        assert parse_batching_parameters(f.read()) == SUGGESTED
