"""`albert-tf serve` in a fresh process, and the custom ops an export needs a server to have.

In-process tests import tensorflow_text, which registers its ops for every
later load; only a separate process shows whether the server registers them.
"""

import os
import re
import signal
import socket
import urllib.parse

import pytest

from albert_tf.export import custom_ops, export_saved_model
from albert_tf.export.batching_parameters import SUGGESTED
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.utils.layout import BATCHING_PARAMETERS_FILE
from cli_helpers import serving
from export_fixtures import LABELS, classifier, config, exported_classifier, tokenizer
from test_serving_fuzz import SEED, fuzz_cases, http_request
from test_serving_warmup import _records

DOCS = "docs/deployment.md"


@pytest.mark.slow
def test_serve_starts_in_a_fresh_process_and_answers_text(tmp_path):
    base = exported_classifier()[0]
    with serving(base, tmp_path / "stderr.txt") as predict:
        predictions = predict({"signature_name": "serve_text", "instances": ["A wonderful, moving film."]})
    assert len(predictions) == 1 and predictions[0]["labels"] in LABELS


@pytest.mark.slow
def test_docs_name_every_tf_text_op_the_text_signatures_use(tmp_path):
    from albert_tf import AlbertBackbone
    from albert_tf.models import AlbertQuestionAnswerer

    qa = export_saved_model(AlbertQuestionAnswerer(AlbertBackbone(config())), str(tmp_path / "qa"),
                            tokenizer=tokenizer(), max_length=24)
    ids_only = export_saved_model(AlbertBackbone(config()), str(tmp_path / "ids"), max_length=24)
    needed = set(custom_ops(exported_classifier()[1])) | set(custom_ops(qa))
    assert {"NormalizeUTF8", "TFText>FastSentencepieceTokenize"} <= needed
    assert custom_ops(ids_only) == []
    with open(DOCS) as f:
        table = f.read().split("| op type (as in the graph) |")[1].split("\n\n")[0]
    assert set(re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE)) == needed


def _send(url, raw):
    """(status, body bytes) of a raw request to the server of `url`, the connection's write side then shut.

    The server may answer and close before it reads a body it refuses (a reset for the rest): the answer
    received counts; (None, b"") when there was none.
    """
    address = urllib.parse.urlsplit(url)
    answer = b""
    with socket.create_connection((address.hostname, address.port), timeout=60) as connection:
        try:
            connection.sendall(raw)
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    return (int(head.split(b" ", 2)[1]) if head else None), body


@pytest.mark.slow
def test_serve_with_the_suggested_batching_warms_up_through_it_and_refuses_a_larger_request(tmp_path):
    base, version = exported_classifier()
    flags = ["--enable-batching", "--batching-parameters-file", os.path.join(base, BATCHING_PARAMETERS_FILE)]
    with serving(base, tmp_path / "stderr.txt", *flags) as predict:
        assert f"{len(_records(version))} warmup requests replayed, through the batcher" in predict.banner
        rows = ["A wonderful, moving film."] * SUGGESTED.max_batch_size
        assert len(predict({"signature_name": "serve_text", "instances": rows})) == len(rows)
        too_many = http_request(":predict", b'{"signature_name": "serve_text", "instances": ["a"%s]}'
                                % (b', "a"' * SUGGESTED.max_batch_size), model="classifier")
        status, body = _send(predict.url, too_many)
        assert (status, body) == (400, b'{"error": "Task size %d is larger than maximum input batch size %d"}\n'
                                  % (SUGGESTED.max_batch_size + 1, SUGGESTED.max_batch_size))
        # A short fuzz run against the real process: no 500, and it answers a normal request after.
        for raw in fuzz_cases(SEED, 200):
            status, body = _send(predict.url, raw)
            assert status is None or status < 500 or status == 505, (status, body, raw[:300])
        assert len(predict({"signature_name": "serve_text", "instances": rows[:1]})) == 1


@pytest.mark.slow
def test_sigterm_stops_serve_cleanly_and_removes_its_temporary_export(tmp_path):
    model_dir, temp = tmp_path / "model", tmp_path / "temp"
    classifier().save_pretrained(str(model_dir))
    tokenizer().save(str(model_dir / TOKENIZER_DIR))
    temp.mkdir()
    with serving(model_dir, tmp_path / "stderr.txt", stop=signal.SIGTERM, env={"TMPDIR": str(temp)}) as predict:
        assert os.listdir(temp), "serve --model exports to a temporary directory"
        assert len(predict({"signature_name": "serve_text", "instances": ["A fine film."]})) == 1
    # `serving` saw exit 0 after SIGTERM, as after Ctrl-C.
    assert os.listdir(temp) == []
