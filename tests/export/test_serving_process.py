"""`albert-tf serve` in a fresh process, and the custom ops an export needs a server to have.

In-process tests import tensorflow_text, which registers its ops for every
later load; only a separate process shows whether the server registers them.
"""

import re

import pytest

from albert_tf.export import custom_ops, export_saved_model
from cli_helpers import serving
from export_fixtures import LABELS, config, exported_classifier, tokenizer

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
