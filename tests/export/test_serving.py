"""The local TF-Serving REST server: responses match direct calls; bad requests get 400 and it keeps serving."""

import json
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.export.serving import ModelServer, RequestError, ServingModel
from albert_tf.export.signatures import CLASSIFY_METHOD, EXAMPLES_SIGNATURE, PREDICT_METHOD, REGRESS_METHOD
from export_fixtures import MAX_LENGTH, config, exported_classifier, exported_regressor, texts_and_pairs
from helpers import backbone_batch, max_abs_diff

MAX_BODY_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def server():
    model = ServingModel(exported_classifier()[0], max_batch_size=16)
    server = ModelServer(model, "127.0.0.1", 0, max_body_bytes=MAX_BODY_BYTES)  # port 0: a free one
    thread = server.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _request(url, body=None, method=None):
    """(status, decoded JSON) of one request; bounded by a timeout."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _direct(signature, **arrays):
    loaded = tf.saved_model.load(exported_classifier()[1])
    return {k: v.numpy() for k, v in loaded.signatures[signature](**{k: tf.constant(v) for k, v in arrays.items()}).items()}


@pytest.mark.slow
def test_status_and_metadata(server):
    assert _request(server.url) == (200, {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]})
    status, metadata = _request(server.url + "/metadata")
    defs = metadata["metadata"]["signature_def"]["signature_def"]
    assert status == 200 and defs["serve_text"]["inputs"]["text"]["dtype"] == "DT_STRING"
    # TF-Serving's DataType names, not numpy's.
    assert defs["serving_default"]["inputs"]["token_ids"]["dtype"] == "DT_INT32"
    assert defs["serving_default"]["outputs"]["logits"]["dtype"] == "DT_FLOAT"
    assert defs["serve_text"]["outputs"]["labels"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}]


@pytest.mark.slow
def test_predict_rows_and_columns_match_direct_calls(server):
    batch = backbone_batch(config())
    expected = _direct("serving_default", **batch)
    instances = [{k: v[i].tolist() for k, v in batch.items()} for i in range(3)]
    status, rows = _request(server.url + ":predict", {"instances": instances})
    assert status == 200, rows
    assert max_abs_diff(np.array([r["logits"] for r in rows["predictions"]]), expected["logits"]) <= 1e-6
    status, columns = _request(server.url + "/versions/1:predict", {"inputs": {k: v.tolist() for k, v in batch.items()}})
    assert status == 200 and max_abs_diff(np.array(columns["outputs"]["probabilities"]), expected["probabilities"]) <= 1e-6

    texts, pairs = texts_and_pairs()
    expected = _direct("serve_text_pair", text=np.array(texts, object), text_pair=np.array(pairs, object))
    status, rows = _request(server.url + ":predict", {
        "signature_name": "serve_text_pair", "instances": [{"text": a, "text_pair": b} for a, b in zip(texts, pairs)]})
    assert status == 200
    assert [r["labels"] for r in rows["predictions"]] == [l.decode() for l in expected["labels"]]
    status, single = _request(server.url + ":predict", {"signature_name": "serve_text", "instances": texts})
    assert status == 200 and len(single["predictions"]) == len(texts)


def test_bad_requests_get_400_and_the_server_keeps_serving(server):
    good_ids = backbone_batch(config(), batch=1, seq=4)
    good = {"instances": [{k: v[0].tolist() for k, v in good_ids.items()}]}
    row = good["instances"][0]
    too_long = backbone_batch(config(), batch=1, seq=MAX_LENGTH + 1)
    bad_requests = [
        b"{not json",
        b"[1, 2]",
        {"instances": [{**row, "tokens": row["token_ids"]}]},  # unknown input name
        {"instances": [{k: v for k, v in row.items() if k != "padding_mask"}]},  # missing input
        {"instances": [{**row, "token_ids": [float(t) + 0.5 for t in row["token_ids"]]}]},  # dtype
        {"instances": [{**row, "token_ids": ["a"] * 4}]},  # dtype
        {"inputs": {**{k: v.tolist() for k, v in good_ids.items()}, "token_ids": [[1, 2], [3]]}},  # ragged
        {"inputs": {**{k: v.tolist() for k, v in good_ids.items()}, "token_ids": [[[1, 2, 3, 4]]]}},  # rank
        {"inputs": {k: v.tolist() for k, v in too_long.items()}},  # longer than max_length
        {"signature_name": "nope", **good},
        {"signature_name": "serve_text", "instances": [""]},  # empty text
        {"signature_name": "serve_text", "instances": ["ok"] * 17},  # over max_batch_size
        {"instances": good["instances"], "inputs": {}},
        # JSON values of the wrong kind inside id arrays, and bodies of the wrong kind.
        {"instances": [{**row, "token_ids": [None] + row["token_ids"][1:]}]},
        {"instances": [{**row, "token_ids": [True] + row["token_ids"][1:]}]},
        {"instances": [{**row, "token_ids": [[t] for t in row["token_ids"]]}]},  # nested lists
        {"instances": [{**row, "token_ids": [row["token_ids"][0], [1, 2]] + row["token_ids"][2:]}]},
        {"instances": [{**row, "token_ids": None}]},
        {"instances": [{**row, "token_ids": 3}]},  # a scalar, not a row
        {"instances": [{**row, "padding_mask": ["1"] * 4}]},
        {"instances": [{**row, "token_ids": {"b64": "AAAA"}}]},
        {"inputs": {**{k: v.tolist() for k, v in good_ids.items()}, "segment_ids": [[None] * 4]}},
        {"instances": None},
        {"instances": [None]},
        {"instances": "token_ids"},
        {"inputs": None},
        {"signature_name": None, **good},
        {"signature_name": "serve_text", "instances": [None]},
        {"signature_name": "serve_text", "instances": [1.5]},
        {"signature_name": "serve_text", "instances": [["nested"]]},
        {"signature_name": "serve_text", "inputs": {"text": [True]}},
        b"null", b'"text"', b"1.5", b"true", b"",
        b'{"signature_name": "serve_text", "instances": ["' + b"x" * MAX_BODY_BYTES + b'"]}',  # oversized
    ]
    for body in bad_requests:
        status, answer = _request(server.url + ":predict", body)
        assert status == 400 and isinstance(answer.get("error"), str), (body[:80], status, answer)
        # The server is still there and answers a good request right after.
        assert _request(server.url + ":predict", good)[0] == 200
    assert _request(server.url.replace("/classifier", "/other") + ":predict", good)[0] == 404
    assert _request(server.url + "/versions/7:predict", good)[0] == 404


def test_every_error_is_json_with_the_right_status(server):
    deep = b'{"signature_name": "serve_text", "instances": ' + b"[" * 500 + b"]" * 500 + b"}"
    surrogate = b'{"signature_name": "serve_text", "instances": ["caf\\udce9"]}'
    root = server.url.split("/v1/")[0]
    cases = [
        (server.url + ":predict", deep, "POST", 400),
        (server.url + ":predict", surrogate, "POST", 400),
        (server.url + ":predict", None, "PUT", 405),
        (server.url, None, "DELETE", 405),
        (server.url + ":predict", None, "GET", 405),
        (server.url + "/metadata", b"{}", "POST", 405),
        (server.url + ":explain", b"{}", "POST", 404),
        (server.url + ":classify", None, "GET", 405),
        (root + "/v2/nothing", None, "GET", 404),
        (root + "/", b"{}", "POST", 404),
    ]
    for url, body, method, expected in cases:
        status, answer = _request(url, body, method)
        assert status == expected and isinstance(answer.get("error"), str), (url, method, status, answer)
    assert "surrogate" in _request(server.url + ":predict", surrogate)[1]["error"]


def test_an_empty_text_gets_one_line_naming_the_input_and_row(server):
    for request, expected in [
        ({"signature_name": "serve_text", "instances": ["a fine film", "  "]},
         "`text` must not be empty: every string needs at least one token after whitespace collapse "
         "(row 1 of the request)."),
        ({"signature_name": "serve_text_pair", "instances": [{"text": "a", "text_pair": ""}]},
         "`text_pair` must not be empty: every string needs at least one token after whitespace collapse "
         "(row 0 of the request)."),
    ]:
        assert _request(server.url + ":predict", request) == (400, {"error": expected})


def test_every_answer_ends_with_a_newline(server):
    good = {"signature_name": "serve_text", "instances": ["a fine film"]}
    for request in (urllib.request.Request(server.url),
                    urllib.request.Request(server.url + ":predict", json.dumps(good).encode())):
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.read().endswith(b"}\n")
    bad = urllib.request.Request(server.url + ":predict", b"{not json")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(bad, timeout=60)
    body = error.value.read()
    assert body.endswith(b"}\n") and body.count(b"\n") == 1
    head, _, body = _raw(server, b"garbage\r\n\r\n").partition(b"\r\n\r\n")
    assert body.endswith(b"}\n") and body.count(b"\n") == 1


def _raw(server, request_bytes):
    """The raw answer of the server to `request_bytes` sent on a fresh connection (until it closes)."""
    import socket

    with socket.create_connection(server.server_address[:2], timeout=30) as connection:
        connection.sendall(request_bytes)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("line", [b"GET /", b"GET /v1/models/classifier", b"garbage", b"\x00\xff nonsense here too",
                                  b"GET / HTTP/x", b"GET " + b"a" * 70000 + b" HTTP/1.1"])
def test_request_lines_it_cannot_parse_get_a_400_status_line_and_json(server, line):
    answer = _raw(server, line + b"\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0]
    assert status.startswith(b"HTTP/1.") and status.split()[1] in (b"400", b"414"), answer[:200]
    assert isinstance(json.loads(body)["error"], str)
    assert _request(server.url)[0] == 200


@pytest.mark.slow
def test_eight_concurrent_clients_see_no_stalls(server):
    """p99 within 3x of p50 when 8 clients connect at once, 15 rounds.

    With socketserver's listen backlog of 5, some of each burst's SYNs were
    dropped and those clients waited ~1 s for the retry (p99 ~50x p50, in
    every attempt). Up to 3 attempts: on a shared machine another process can
    delay a few requests by tens of ms, but not every attempt.
    """
    body = {"instances": [{k: v[0].tolist() for k, v in backbone_batch(config(), batch=1, seq=8).items()}]}
    clients, rounds = 8, 15
    assert _request(server.url + ":predict", body)[0] == 200  # warm-up, not timed

    def attempt():
        barrier = threading.Barrier(clients)
        latencies, failures = [], []

        def client():
            for _ in range(rounds):
                barrier.wait(timeout=60)
                start = time.perf_counter()
                status, _ = _request(server.url + ":predict", body)
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    failures.append(status)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not failures and len(latencies) == clients * rounds
        return np.percentile(latencies, [50, 99])

    measured = []
    for _ in range(3):
        p50, p99 = attempt()
        measured.append(f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
        if p99 <= 3 * p50:
            return
    pytest.fail("p99 over 3x p50 in every attempt: " + "; ".join(measured))


def test_classify_answers_as_serve_text_does_in_tf_servings_json(server):
    texts, pairs = texts_and_pairs()
    for examples, signature, arrays in [
        ([{"text": t} for t in texts], "serve_text", {"text": np.array(texts, object)}),
        ([{"text": t, "text_pair": p} for t, p in zip(texts, pairs)], "serve_text_pair",
         {"text": np.array(texts, object), "text_pair": np.array(pairs, object)}),
    ]:
        expected = _direct(signature, **arrays)["probabilities"]
        status, answer = _request(server.url + ":classify", {"signature_name": EXAMPLES_SIGNATURE, "examples": examples})
        assert status == 200, answer
        assert [[label for label, _ in row] for row in answer["results"]] == [["negative", "positive"]] * len(texts)
        assert max_abs_diff(np.array([[score for _, score in row] for row in answer["results"]]), expected) <= 1e-5
    # `context` holds features every example shares; b64 strings are bytes features.
    status, answer = _request(server.url + "/versions/1:classify", {
        "signature_name": EXAMPLES_SIGNATURE, "context": {"text_pair": "yes"},
        "examples": [{"text": {"b64": "QSBncmVhdCBtb3ZpZSE="}}]})  # "A great movie!"
    expected = _direct("serve_text_pair", text=np.array(["A great movie!"], object), text_pair=np.array(["yes"], object))
    assert status == 200 and max_abs_diff(np.array([[s for _, s in answer["results"][0]]]),
                                          expected["probabilities"]) <= 1e-5


def test_bad_examples_get_400_and_the_server_keeps_serving(server):
    good = {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": "a fine film"}]}
    bad_requests = [
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"txt": "a fine film"}]},  # missing feature
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": 3}]},  # int64, not bytes
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": 1.5}]},  # float, not bytes
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": ["two", "texts"]}]},
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": "a", "text_pair": "b"}, {"text": "c"}]},
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": "  "}]},  # empty after whitespace
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": None}]},
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": ["a", 1]}]},
        {"signature_name": EXAMPLES_SIGNATURE, "examples": ["a fine film"]},
        {"signature_name": EXAMPLES_SIGNATURE, "examples": []},
        {"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": "a"}] * 17},  # over max_batch_size
        {"signature_name": EXAMPLES_SIGNATURE, "instances": ["a fine film"]},
        {"signature_name": EXAMPLES_SIGNATURE, "context": [], "examples": [{"text": "a"}]},
        {"examples": [{"text": "a fine film"}]},  # serving_default is a predict signature
        {"signature_name": "serve_text", "examples": [{"text": "a fine film"}]},
        {"signature_name": "nope", "examples": [{"text": "a fine film"}]},
    ]
    for body in bad_requests:
        status, answer = _request(server.url + ":classify", body)
        assert status == 400 and isinstance(answer.get("error"), str), (body, status, answer)
        assert "\n" not in answer["error"], answer
        assert _request(server.url + ":classify", good)[0] == 200
    # A classifier has no regress signature.
    status, answer = _request(server.url + ":regress", good)
    assert status == 400 and "method_name to be tensorflow/serving/regress" in answer["error"]
    assert "Feature: text (data type: string) is required" in _request(server.url + ":classify", bad_requests[0])[1]["error"]


def test_regress_answers_as_serve_text_does():
    model = ServingModel(exported_regressor()[0])
    texts, pairs = texts_and_pairs()
    expected = model.run("serve_text_pair", {"text": np.array(texts, object), "text_pair": np.array(pairs, object)})
    answer = model.regress({"signature_name": EXAMPLES_SIGNATURE,
                            "examples": [{"text": t, "text_pair": p} for t, p in zip(texts, pairs)]})
    assert set(answer) == {"results"} and len(answer["results"]) == len(texts)
    assert max_abs_diff(np.array(answer["results"]), expected["predictions"]) <= 1e-5
    with pytest.raises(RequestError, match="required but could not be found"):
        model.regress({"signature_name": EXAMPLES_SIGNATURE, "examples": [{"sentence": "a"}]})
    with pytest.raises(RequestError, match="method_name to be tensorflow/serving/classify"):
        model.classify({"signature_name": EXAMPLES_SIGNATURE, "examples": [{"text": "a"}]})


def test_examples_signatures_carry_tf_servings_method_names():
    classifier, regressor = ServingModel(exported_classifier()[0]), ServingModel(exported_regressor()[0])
    assert classifier.method_names == {"serving_default": PREDICT_METHOD, "serve_text": PREDICT_METHOD,
                                       "serve_text_pair": PREDICT_METHOD, EXAMPLES_SIGNATURE: CLASSIFY_METHOD}
    assert regressor.method_names[EXAMPLES_SIGNATURE] == REGRESS_METHOD
    classify = classifier.metadata()["metadata"]["signature_def"]["signature_def"][EXAMPLES_SIGNATURE]
    # What TF-Serving's Classify API reads: a string `inputs`, string `classes`, float `scores`.
    assert classify["inputs"]["inputs"]["dtype"] == "DT_STRING"
    assert {k: v["dtype"] for k, v in classify["outputs"].items()} == {"classes": "DT_STRING", "scores": "DT_FLOAT"}
    regress = regressor.metadata()["metadata"]["signature_def"]["signature_def"][EXAMPLES_SIGNATURE]
    assert {k: v["dtype"] for k, v in regress["outputs"].items()} == {"outputs": "DT_FLOAT"}
