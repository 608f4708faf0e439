"""TF-Serving's REST formats without a socket: body decoding, request checks, output encoding."""

import json

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.export.serving.codec import (
    MAX_JSON_DEPTH, RequestError, clean_tf_error, decode_json, encode_outputs, json_depth, parse_examples,
    parse_predict,
)

IDS = {"token_ids": tf.TensorSpec((None, None), tf.int32), "padding_mask": tf.TensorSpec((None, None), tf.int32)}
SPECS = {"serving_default": IDS, "serve_text": {"text": tf.TensorSpec((None,), tf.string)}}


CLASSIFY = "tensorflow/serving/classify"
METHODS = {"serving_default": "tensorflow/serving/predict", "classify_text": CLASSIFY}


def refused(request, status=400, parse=lambda r: parse_predict(r, SPECS, max_batch_size=4)):
    with pytest.raises(RequestError) as error:
        parse(request)
    assert error.value.status == status
    return error.value.message


def refused_example(request):
    return refused(request, parse=lambda r: parse_examples(r, METHODS, CLASSIFY, max_batch_size=4))


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 500, 100_000])
def test_deep_nesting_is_a_400_not_a_crash(depth):
    body = ("[" * depth + "]" * depth).encode()
    with pytest.raises(RequestError, match="deep") as error:
        decode_json(body)
    assert error.value.status == 400
    assert json_depth(decode_json(b'{"instances": [[1, [2]]]}')) == 4


def test_bad_bytes_and_bad_json_are_400():
    for body, message in [(b"\xff\xfe", "not UTF-8"), (b"{nope", "JSON Parse error")]:
        with pytest.raises(RequestError, match=message):
            decode_json(body)


def test_lone_surrogate_in_text_is_a_400_naming_the_input():
    request = decode_json(b'{"signature_name": "serve_text", "instances": ["ok \\ud800 then"]}')
    message = refused(request)
    assert "`text`" in message and "\\ud800" in message and "surrogate" in message
    # A proper surrogate pair is one character and passes.
    request = decode_json(b'{"signature_name": "serve_text", "instances": ["\\ud83d\\ude00"]}')
    assert parse_predict(request, SPECS)[1]["text"].tolist() == ["\U0001F600".encode()]


def test_wrong_dtype_shape_and_names_are_400():
    assert "must hold integers" in refused({"instances": [{"token_ids": [1.5], "padding_mask": [1]}]})
    assert "must hold integers" in refused({"instances": [{"token_ids": [True], "padding_mask": [1]}]})
    assert "int32 range" in refused({"inputs": {"token_ids": [[2**31]], "padding_mask": [[1]]}})
    assert "must have shape (-1, -1)" in refused({"inputs": {"token_ids": [1, 2], "padding_mask": [1, 1]}})
    assert "ragged" in refused({"inputs": {"token_ids": [[1, 2], [3]], "padding_mask": [[1, 1], [1]]}})
    assert "must hold strings" in refused({"signature_name": "serve_text", "instances": [3]})
    assert "does not have named input(s): ['padding_mask']" in refused({"instances": [{"token_ids": [1]}]})
    assert "not found in signature def" in refused({"signature_name": "nope", "instances": ["a"]})
    assert "invalid base64" in refused({"signature_name": "serve_text", "instances": [{"b64": "%%"}]})


def test_predict_and_classify_requests_are_checked_alike_up_to_their_rows():
    assert refused([1]) == refused_example([1]) == "The request body must be a JSON object. Received: list"
    assert refused({"instances": ["a"], "x": 1}) == (
        "Unknown request keys ['x']; expected 'signature_name' and 'instances' or 'inputs'.")
    assert refused_example({"examples": [{}], "x": 1}) == (
        "Unknown request keys ['x']; expected 'signature_name', 'context' and 'examples'.")
    assert refused({"signature_name": 3, "instances": ["a"]}) == (
        "Serving signature name: 3 not found in signature def. Available: ['serve_text', 'serving_default']")
    assert refused_example({"signature_name": "nope", "examples": [{}]}) == (
        "Serving signature name: \"nope\" not found in signature def. Available: ['classify_text', 'serving_default']")
    # TF-Serving's batch queue's words (tensorflow/core/kernels/batching_util/shared_batch_scheduler.h).
    assert refused({"signature_name": "serve_text", "instances": ["a"] * 5}) == (
        "Task size 5 is larger than maximum input batch size 4")
    assert refused_example({"signature_name": "classify_text", "examples": [{"text": "a"}] * 5}) == (
        "Task size 5 is larger than maximum input batch size 4")
    name, serialized = parse_examples({"signature_name": "classify_text", "examples": [{"text": "a"}] * 4}, METHODS,
                                      CLASSIFY, max_batch_size=4)
    assert name == "classify_text" and len(serialized) == 4
    assert parse_predict({"signature_name": "serve_text", "instances": ["a"] * 4}, SPECS, max_batch_size=4)[1][
        "text"].shape == (4,)


def test_good_requests_convert_and_outputs_encode():
    name, arrays, rows = parse_predict(
        {"instances": [{"token_ids": [5, 6], "padding_mask": [1, 1]}, {"token_ids": [7, 0], "padding_mask": [1, 0]}]},
        SPECS,
    )
    assert (name, rows) == ("serving_default", True)
    assert arrays["token_ids"].dtype == np.int32 and arrays["token_ids"].tolist() == [[5, 6], [7, 0]]
    _, arrays, rows = parse_predict({"signature_name": "serve_text", "inputs": [{"b64": "aGk="}]}, SPECS)
    assert arrays["text"].tolist() == [b"hi"] and not rows

    outputs = {"labels": np.array([b"pos", b"neg"], object), "logits": np.array([[0.5, 1.0], [2.0, 0.0]], np.float32)}
    assert encode_outputs(outputs, True) == {"predictions": [
        {"labels": "pos", "logits": [0.5, 1.0]}, {"labels": "neg", "logits": [2.0, 0.0]}]}
    assert encode_outputs(outputs, False) == {"outputs": {"labels": ["pos", "neg"], "logits": [[0.5, 1.0], [2.0, 0.0]]}}
    assert encode_outputs({"logits": outputs["logits"]}, True) == {"predictions": [[0.5, 1.0], [2.0, 0.0]]}
    json.dumps(encode_outputs(outputs, True))


def test_tensorflow_assertions_become_their_own_message_on_one_line():
    node = "\n\t [[{{node assert_positive/assert_less/Assert/AssertGuard/Assert}}]]"
    empty = ("assertion failed: [`text` must not be empty: every string needs at least one token after whitespace "
             "collapse..  ] [Condition x > 0 did not hold element-wise:] [x (sub:0) = ] [3 0 4]")
    assert clean_tf_error(empty + node) == ("`text` must not be empty: every string needs at least one token "
                                            "after whitespace collapse (row 1 of the request).")
    # Values TF shortened name no row; a message ending in ":" keeps the value after it.
    shortened = empty.replace("[3 0 4]", "[3 0 4...]")
    assert clean_tf_error(shortened + node).endswith("whitespace collapse.")
    rank = "assertion failed: [`text` must have rank 1; received shape:] [2 3]"
    assert clean_tf_error(rank + node) == "`text` must have rank 1; received shape: [2 3]"
    assert clean_tf_error("Something else went wrong" + node) == "Something else went wrong"


def test_huge_numbers_and_surrogate_feature_names_are_400_not_500():
    with pytest.raises(RequestError, match="JSON Parse error: Exceeds the limit") as error:
        decode_json(b'{"instances": [' + b"7" * 5000 + b"]}")
    assert error.value.status == 400
    floats = {"x": tf.TensorSpec((None,), tf.float32)}
    message = refused({"instances": [10**400]}, parse=lambda r: parse_predict(r, {"serving_default": floats}))
    assert message == "Input `x` holds a number outside the float32 range."
    assert refused_example({"signature_name": "classify_text", "examples": [{"text": "a", "f": [1.5, 10**400]}]}) == (
        "Feature \"f\" of element 0 of 'examples' holds a number outside the float range.")
    request = decode_json(b'{"signature_name": "classify_text", "examples": [{"\\ud800x": "a"}]}')
    message = refused_example(request)
    assert "its name holds a lone surrogate (\\ud800)" in message


def test_the_batch_size_is_checked_before_any_input_converts(monkeypatch):
    from albert_tf.export.serving import codec

    monkeypatch.setattr(codec, "to_array", lambda *a: pytest.fail("converted before the batch size was checked"))
    rows = [{"token_ids": [1] * 1000, "padding_mask": [1] * 1000}] * 5
    assert refused({"instances": rows}).startswith("Task size 5 ")
    assert refused({"inputs": {"token_ids": [[1]] * 5, "padding_mask": [[1]] * 5}}).startswith("Task size 5 ")


def test_raw_text_sent_to_the_id_signature_names_serve_text():
    message = refused({"instances": [{"token_ids": "a fine film", "padding_mask": [1]}]})
    assert "must hold integers" in message and '"signature_name": "serve_text"' in message
    message = refused({"instances": [{"token_ids": [1.5], "padding_mask": [1]}]})
    assert "serve_text" not in message
