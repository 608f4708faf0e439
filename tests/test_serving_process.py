"""`albert-tf serve` in a fresh process, and the custom ops an export needs a server to have.

In-process tests import tensorflow_text, which registers its ops for every
later load; only a separate process shows whether the server registers them.
"""

import json
import queue
import re
import signal
import subprocess
import threading
import urllib.request

import pytest

from albert_tf.export import custom_ops, export_saved_model
from cli_helpers import albert_tf_command, ctrl_c_reaches_it, user_environment
from export_fixtures import LABELS, config, exported_classifier, tokenizer

DOCS = "docs/deployment.md"


@pytest.mark.slow
def test_serve_starts_in_a_fresh_process_and_answers_text(tmp_path):
    base = exported_classifier()[0]
    stderr = open(tmp_path / "stderr.txt", "w")
    process = subprocess.Popen(
        albert_tf_command() + ["serve", base, "--port", "0"],
        stdout=subprocess.PIPE, stderr=stderr, text=True, env=user_environment(),
        preexec_fn=ctrl_c_reaches_it,
    )
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    try:
        try:
            banner = lines.get(timeout=300)
        except queue.Empty:
            banner = ""
        url = re.search(r"http://\S+", banner)
        assert url, f"no start-up line; exit {process.poll()}; stderr:\n{(tmp_path / 'stderr.txt').read_text()[-3000:]}"
        body = json.dumps({"signature_name": "serve_text", "instances": ["A wonderful, moving film."]}).encode()
        with urllib.request.urlopen(urllib.request.Request(url.group(0) + ":predict", data=body), timeout=60) as answer:
            predictions = json.loads(answer.read())["predictions"]
        assert len(predictions) == 1 and predictions[0]["labels"] in LABELS
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: the server stops cleanly
        assert process.wait(timeout=60) == 0
        stderr.close()


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
