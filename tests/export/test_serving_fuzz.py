"""Malformed requests get 400 (or 404/405) with TF-Serving's {"error": ...} body, never 500: a seeded fuzzer.

The requests go through the server's HTTP handler in-process (no socket: a
stand-in connection holds the raw bytes), so 10,000 of them take seconds;
tests/export/test_serving_process.py sends a short run to a real `serve`.
Python's json module reads NaN and Infinity, which TF-Serving's parser also
accepts (rapidjson's kParseNanAndInfFlag in tensorflow_serving/util/json_tensor.cc).
"""

import io
import json
import random
import types

import pytest

from albert_tf.export.serving import ServingModel
from albert_tf.export.serving.server import _Handler
from export_fixtures import exported_classifier, exported_regressor

CASES = 10_000
SEED = 20261205
OK_STATUSES = {200, 400, 404, 405, 505}  # 505: a request line of HTTP/9.9
APIS = (":predict", ":classify", ":regress", "/versions/1:predict")
OTHER_PATHS = ("/metadata", "", "/versions/7:classify", ":explain", "/versions/x/metadata")
SIGNATURES = ("serving_default", "serve_text", "serve_text_pair", "serve_examples", "nope", "\ud800")


class _Connection:
    """What `socketserver.StreamRequestHandler` needs of a socket: the request's bytes in, the answer's out."""

    def __init__(self, raw):
        self._raw, self.sent = raw, bytearray()

    def makefile(self, mode, buffering=None):
        return io.BytesIO(self._raw)

    def sendall(self, data):
        self.sent += data

    def settimeout(self, timeout):
        pass

    def setsockopt(self, *args):
        pass


def answer(server, raw):
    """(status, decoded body) of the handler's answer to the raw request bytes `raw`."""
    connection = _Connection(raw)
    _Handler(connection, ("127.0.0.1", 0), server)
    head, _, body = bytes(connection.sent).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else None


def http_request(path, body, method="POST", length=None, model="classifier"):
    """Raw HTTP/1.1 request bytes; `length` overrides Content-Length (None: the body's; False: none)."""
    headers = f"{method} /v1/models/{model}{path} HTTP/1.1\r\nHost: x\r\n"
    if length is not False:
        headers += f"Content-Length: {len(body) if length is None else length}\r\n"
    return headers.encode("utf-8", "surrogatepass") + b"\r\n" + body


def _json_value(rng, depth=0):
    """A random JSON value: scalars of every type (huge numbers, surrogates), and lists and objects of them."""
    kind = rng.randrange(10 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False, 0, -1, 2**31, 2**63, 1.5, -0.0, 1e308])
    if kind == 1:
        return int("9" * rng.choice([1, 20, 400, 4000]))
    if kind == 2:
        return rng.choice(["a fine film", "", " ", "\ud800", "ok \udfff", "\U0001F600", "x" * 300, "\x00"])
    if kind == 3:
        return {"b64": rng.choice(["aGk=", "%%", "", 3, None])}
    if kind == 4:
        return float(rng.choice(["1e-300", "3.4e39", "-3.4e39"]))
    if kind == 5:
        return rng.choice(["token_ids", "text", "inputs", "instances"])
    if kind < 8:
        return [_json_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 5]))]
    keys = ["token_ids", "padding_mask", "segment_ids", "text", "text_pair", "\ud800", "b64", "x"]
    return {rng.choice(keys): _json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _request_body(rng, path):
    """A predict, classify or regress body, mostly near-valid and broken in one place."""
    body = {}
    if rng.random() < 0.8:
        body["signature_name"] = rng.choice(SIGNATURES)
    if "classify" in path or "regress" in path or rng.random() < 0.1:
        body["examples"] = rng.choice([
            [{"text": "a fine film"}], [{"text": _json_value(rng)}], [{"f": _json_value(rng)}],
            [_json_value(rng)], _json_value(rng), [{"text": "x"}] * rng.choice([1, 300]),
            [{"\ud800": "a"}], [{"text": ["a", 10**400]}], [{"text": "a", "w": [1.5, 10**400]}],
        ])
        if rng.random() < 0.2:
            body["context"] = _json_value(rng)
    else:
        row = rng.choice([
            "a fine film", {"token_ids": [5, 6], "padding_mask": [1, 1], "segment_ids": [0, 0]},
            {"token_ids": _json_value(rng), "padding_mask": [1], "segment_ids": [0]}, _json_value(rng),
            {"text": "a", "text_pair": _json_value(rng)}, [10**400, 1.5], {"token_ids": "raw text"},
        ])
        rows = rng.choice([1, 2, 300])
        body["instances" if rng.random() < 0.7 else "inputs"] = [row] * rows if rng.random() < 0.9 else row
    if rng.random() < 0.1:
        body[rng.choice(["x", "instances", "examples"])] = _json_value(rng)
    return body


def _encoded(rng, body):
    """The body's bytes: JSON, or JSON broken (truncated, deeply nested, not UTF-8, a 5,000-digit number)."""
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5)
    choice = rng.randrange(12)
    if choice == 0:
        return text[: rng.randrange(len(text) + 1)].encode("utf-8", "surrogatepass")
    if choice == 1:
        depth = rng.choice([33, 1000, 100_000])
        return ("[" * depth + "]" * depth).encode()
    if choice == 2:
        return b"\xff\xfe" + text.encode("utf-8", "surrogatepass")
    if choice == 3:
        return text.replace("[", "[" + "7" * 5000 + ",", 1).encode("utf-8", "surrogatepass")
    if choice == 4:
        return rng.choice([b"", b"null", b"[]", b"NaN", b'{"instances": [NaN, Infinity]}', b"{}", b"{" * 50])
    return text.encode("utf-8", "surrogatepass")


def fuzz_cases(seed, n):
    """`n` raw requests: bodies as `_request_body`, methods, paths, Content-Length headers and request lines."""
    rng = random.Random(seed)
    for _ in range(n):
        path = rng.choice(APIS if rng.random() < 0.85 else OTHER_PATHS)
        raw_body = _encoded(rng, _request_body(rng, path))
        kind = rng.randrange(20)
        if kind == 0:
            yield rng.choice([b"GET /\r\n\r\n", b"\r\n", b"POST\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                              b"GARBAGE " * 100 + b"\r\n\r\n", b"GET /v1/models/classifier HTTP/1.1\r\nBad\r\n\r\n"])
        elif kind == 1:
            length = rng.choice(["\u00b2", "-1", " 12", "1e3", "99999999999", "", "0x10", "\u0663", False])
            yield http_request(path, raw_body, length=length)
        elif kind == 2:
            yield http_request(path, raw_body, method=rng.choice(["GET", "PUT", "DELETE", "HEAD", "OPTIONS"]))
        elif kind == 3:
            yield http_request(path, raw_body, model=rng.choice(["other", "classifier/versions/1", "\ud800", "%00"]))
        else:
            yield http_request(path, raw_body)


@pytest.fixture(scope="module")
def server():
    model = ServingModel(exported_classifier()[0], "classifier", warmup=False)
    yield types.SimpleNamespace(model=model, max_body_bytes=64 * 1024, log_requests=False)
    model.close()


def _check(status, body, raw):
    assert status in OK_STATUSES, f"{status} {body} for {raw[:300]!r}"
    if status != 200 and not raw.startswith(b"HEAD "):  # HEAD's answer has headers only
        assert set(body) == {"error"} and isinstance(body["error"], str), (status, body, raw[:300])


def test_each_reported_malformed_request_is_a_400_with_an_error_body(server):
    text = b'{"signature_name": "serve_text", "instances": ["a fine film"]}'
    for raw, message in [
        (http_request(":predict", text, length="\u00b2"), "Content-Length"),
        (http_request(":classify", b'{"signature_name": "serve_examples", "examples": [{"\\ud800": "a"}]}'), "lone surrogate"),
        (http_request(":classify", b'{"signature_name": "serve_examples", "examples": [{"text": "a", "w": [1.5, 1' + b"0" * 400 + b']}]}'),
         "outside the float range"),
        (http_request(":predict", b'{"instances": [' + b"7" * 5000 + b"]}"), "JSON Parse error"),
        (http_request(":predict", b'{"instances": [{"token_ids": "a fine film", "padding_mask": [1], '
                                  b'"segment_ids": [0]}]}'), '"signature_name": "serve_text"'),
    ]:
        status, body = answer(server, raw)
        assert status == 400 and message in body["error"], (raw, body)
    status, body = answer(server, http_request(":predict", text))
    assert status == 200 and len(body["predictions"]) == 1


@pytest.mark.slow  # about 20 s
def test_ten_thousand_fuzzed_requests_get_no_500_and_the_server_answers_after(server):
    statuses = {}
    for raw in fuzz_cases(SEED, CASES):
        status, body = answer(server, raw)
        _check(status, body, raw)
        statuses[status] = statuses.get(status, 0) + 1
    # The fuzzer reaches the model too, not only the parsers.
    assert statuses.get(200, 0) >= 100 and statuses[400] >= CASES // 2, statuses
    status, body = answer(server, http_request(":predict", b'{"signature_name": "serve_text", "instances": ["a"]}'))
    assert status == 200 and len(body["predictions"]) == 1


@pytest.mark.slow
def test_regress_and_metadata_are_fuzzed_too():
    model = ServingModel(exported_regressor()[0], "classifier", warmup=False)
    server = types.SimpleNamespace(model=model, max_body_bytes=64 * 1024, log_requests=False)
    try:
        for raw in fuzz_cases(SEED + 1, 500):
            _check(*answer(server, raw), raw)
        status, body = answer(server, http_request(":regress", b'{"signature_name": "serve_examples", "examples": [{"text": "a fine film"}]}'))
        assert status == 200 and len(body["results"]) == 1
    finally:
        model.close()
