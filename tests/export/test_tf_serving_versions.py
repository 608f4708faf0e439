"""An export from the default install, run as TF-Serving's newest build runs it: TensorFlow 2.20 and TensorFlow
Text 2.20's ops, no albert-tf, the TF1 session loader. Its signatures answer as `predict` does."""

import base64

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.export.signatures import CLASSIFY_METHOD, EXAMPLES_SIGNATURE, PREDICT_METHOD
from albert_tf.inference import FrozenPredictions
from export_fixtures import MAX_LENGTH, classifier, exported_classifier, run_as_tf_serving, texts_and_pairs, tokenizer
from helpers import max_abs_diff
from input_pipeline.finetuning.text_inputs import pack_texts


def _strings(values):
    return [base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode() for v in values]


def _example(text, pair=None):
    feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))}
    if pair is not None:
        feature["text_pair"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[pair.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first run on a machine downloads and installs TensorFlow 2.20 (tests/README.md)
def test_tf_serving_2_20_loads_the_export_and_its_signatures_answer_as_predict_does():
    texts, pairs = texts_and_pairs()
    # What `predict` runs: the task model's forward pass, frozen, on the Python tokenizer's ids.
    predictions = FrozenPredictions(classifier())
    single = pack_texts(tokenizer(), texts, max_length=MAX_LENGTH)
    paired = pack_texts(tokenizer(), texts, pairs, max_length=MAX_LENGTH)
    expected_single = tf.nn.softmax(predictions.predict_on_batch(single)["logits"]).numpy()
    expected_pair = tf.nn.softmax(predictions.predict_on_batch(paired)["logits"]).numpy()

    answer = run_as_tf_serving(exported_classifier()[1], [
        {"signature": "serve_text", "inputs": {"text": _strings(texts)}},
        {"signature": "serving_default", "inputs": {k: v.tolist() for k, v in single.items()}},
        {"signature": EXAMPLES_SIGNATURE, "inputs": {"inputs": _strings([_example(t) for t in texts])}},
        {"signature": EXAMPLES_SIGNATURE, "inputs": {"inputs": _strings([_example(t, p) for t, p in zip(texts, pairs)])}},
    ])
    assert answer["versions"]["tensorflow"].startswith("2.20.") and answer["versions"]["tensorflow_text"].startswith("2.20.")
    assert answer["methods"][EXAMPLES_SIGNATURE] == CLASSIFY_METHOD and answer["methods"]["serve_text"] == PREDICT_METHOD
    text, ids, classify, classify_pairs = answer["outputs"]
    assert max_abs_diff(np.array(text["probabilities"]), expected_single) <= 1e-5
    assert max_abs_diff(np.array(ids["probabilities"]), expected_single) <= 1e-5
    assert max_abs_diff(np.array(classify["scores"]), expected_single) <= 1e-5
    assert max_abs_diff(np.array(classify_pairs["scores"]), expected_pair) <= 1e-5
    assert classify["classes"] == [["negative", "positive"]] * len(texts)
    assert text["labels"] == [["negative", "positive"][i] for i in expected_single.argmax(-1)]
