"""Shared, built-once fixtures of the export tests: a real-text tokenizer, tiny task models, exports.

Built with `functools.lru_cache`, so the three export test files share them
within one pytest process.
"""

import atexit
import csv
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from helpers import tiny_config
from cli_helpers import run_program
from venv_cache import venv_python

VOCAB_SIZE = 300
MAX_LENGTH = 24
LABELS = ["negative", "positive"]


@functools.lru_cache(maxsize=None)
def tokenizer():
    """A 300-piece tokenizer trained on 300 IMDB reviews (a few seconds)."""
    from input_pipeline import AlbertTokenizer, movie_reviews

    documents = movie_reviews.imdb_documents("pretrain", limit=300)
    return AlbertTokenizer.train((s for d in documents for s in d), VOCAB_SIZE, num_threads=1)


@functools.lru_cache(maxsize=None)
def real_texts(n=40):
    """Held-out IMDB reviews: real text the tokenizer never saw."""
    from input_pipeline import movie_reviews

    return tuple(text for text, _ in movie_reviews.imdb_reviews("heldout")[:n])


def config():
    return tiny_config(vocab_size=VOCAB_SIZE)


@functools.lru_cache(maxsize=None)
def classifier():
    from albert_tf import AlbertBackbone
    from albert_tf.models import AlbertClassifier

    return AlbertClassifier(AlbertBackbone(config()), num_classes=2, label_names=LABELS)


# A random model's outputs hardly move between texts (classifier()'s probabilities spread by 0.02 over
# MEDIAPIPE_TEXTS): a tokenization difference could hide in them. A model that another runtime reads
# raw text with must spread by this much over the test's texts.
SPREAD = 0.1


def assert_spread(outputs, texts):
    """Fails unless `outputs`, one number per text, spread by at least SPREAD."""
    spread = max(outputs) - min(outputs)
    assert spread >= SPREAD, f"outputs spread by {spread:.4f} only, not {SPREAD}: {dict(zip(texts, outputs))}"


def spread_apart(model, packed, std=1.5):
    """Rescales a random model's head, in place, so each output has mean 0 and std `std` over `packed`.

    Its backbone still tells the texts apart; only the head's tiny initial weights squeeze that into
    near-constant outputs, and scaling alone would saturate a softmax on their common offset.

    Args:
        model: an AlbertClassifier or AlbertRegressor (a `head` Dense layer).
        packed: the test's texts, packed (`albert_tf.export.pack_texts`).
    """
    kernel, bias = model.head.get_weights()  # (hidden, units), (units,)
    outputs = model(packed)
    unbiased = np.asarray(outputs.get("logits", outputs.get("predictions"))).reshape(-1, kernel.shape[1]) - bias
    scale = std / unbiased.std(0)  # (units,)
    model.head.set_weights([kernel * scale, -unbiased.mean(0) * scale])
    return model


def write_synthetic_reviews(directory, labels, n=160):
    """train.csv and eval.csv (4:1) in `directory`: short texts whose label a tiny model learns from their
    adjectives in a few epochs (on 64 real sentences its probabilities still spread by less than 0.03)."""
    words = {0: ["dull", "boring", "lifeless", "awful", "tedious", "bland", "stupid", "ugly"],
             1: ["great", "wonderful", "charming", "delightful", "brilliant", "moving", "funny", "beautiful"]}
    nouns = ["film", "movie", "story", "cast", "script", "ending", "plot", "actor"]
    templates = ["a {a} {n}", "the {n} was {a}", "{a} and {b}", "what a {a} {n} !", "such a {a} , {b} {n}"]
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        a, b = rng.choice(words[i % 2], 2, replace=False)
        rows.append((rng.choice(templates).format(a=a, b=b, n=rng.choice(nouns)), labels[i % 2]))
    for name, part in [("train.csv", rows[: n * 4 // 5]), ("eval.csv", rows[n * 4 // 5 :])]:
        with open(os.path.join(directory, name), "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label"), *part])


@functools.lru_cache(maxsize=None)
def exported_classifier():
    """(base_dir, version_dir) of the classifier's SavedModel, with text signatures."""
    from albert_tf.export import export_saved_model

    base = scratch_dir() + "/classifier"
    return base, export_saved_model(classifier(), base, tokenizer=tokenizer(), max_length=MAX_LENGTH)


@functools.lru_cache(maxsize=None)
def exported_regressor():
    """(base_dir, version_dir) of a tiny regressor's SavedModel, with text signatures."""
    from albert_tf import AlbertBackbone
    from albert_tf.export import export_saved_model
    from albert_tf.models import AlbertRegressor

    base = scratch_dir() + "/regressor"
    return base, export_saved_model(AlbertRegressor(AlbertBackbone(config())), base, tokenizer=tokenizer(),
                                    max_length=MAX_LENGTH)


@functools.lru_cache(maxsize=None)
def exported_tagger():
    """(base_dir, version_dir) of a tiny tagger's SavedModel, with text signatures."""
    from albert_tf import AlbertBackbone
    from albert_tf.export import export_saved_model
    from albert_tf.models import AlbertTagger

    base = scratch_dir() + "/tagger"
    return base, export_saved_model(AlbertTagger(AlbertBackbone(config()), 3, label_names=["O", "B", "I"]), base,
                                    tokenizer=tokenizer(), max_length=MAX_LENGTH)


@functools.lru_cache(maxsize=None)
def exported_question_answerer():
    """(base_dir, version_dir) of a tiny question answerer's SavedModel, with text signatures."""
    from albert_tf import AlbertBackbone
    from albert_tf.export import export_saved_model
    from albert_tf.models import AlbertQuestionAnswerer

    base = scratch_dir() + "/question_answerer"
    return base, export_saved_model(AlbertQuestionAnswerer(AlbertBackbone(config())), base, tokenizer=tokenizer(),
                                    max_length=MAX_LENGTH)


def graph_def(path):
    """A SavedModel's GraphDef: its graph and its function library."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto.meta_graphs[0].graph_def


def graph_nodes(path):
    """Every node of a SavedModel's graph and function library."""
    graph = graph_def(path)
    return list(graph.node) + [n for f in graph.library.function for n in f.node_def]


def metadata(path):
    """A SavedModel version's export metadata (assets.extra/albert_tf_export.json)."""
    from albert_tf.utils.layout import EXPORT_METADATA_FILE

    with open(os.path.join(path, EXPORT_METADATA_FILE)) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def scratch_dir():
    path = tempfile.mkdtemp(prefix="albert_tf_export_tests_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def texts_and_pairs():
    """Short, long (truncated), accented and whitespace-heavy texts, and pairs of them."""
    long_text = " ".join(real_texts()[:3])
    texts = ["A great movie!", long_text, "  Café   crème,\tnaïve  ", real_texts()[3]]
    pairs = ["yes", "no", long_text, long_text]
    return texts, pairs


# What MediaPipe's TextClassifier reads exactly as albert-tf does: upper-case ASCII (it lowercases
# that itself), and accents, non-ASCII capitals, full-width letters and quotes, which the zipped
# spiece.model's normalizer handles (AlbertTokenizer.standalone_model_proto).
MEDIAPIPE_TEXTS = [
    "a great movie", "a dull, lifeless and boring film .", "THE BEST FILM OF THE YEAR!",
    "Not Bad At All", "it's the kind of movie you forget before the credits roll", "  spaced   out\ttext  ",
    "Café crème, naïve ÉLAN and a piñata", "ＦＵＬＬ　ｗｉｄｔｈ ＭＯＶＩＥ", "``quoted'' and “curly” ÀÇÕ",
]


def run_mediapipe(model_path, texts):
    """MediaPipe's TextClassifier on `texts`, in its own process (tests/mediapipe_worker.py)."""
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mediapipe_worker.py")
    done = run_program([sys.executable, worker, model_path], input=json.dumps(texts), timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"MediaPipe's TextClassifier failed on {model_path}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def task_library_python():
    """(python, env) of a venv holding the TFLite Task Library."""
    python = venv_python("task-library")
    libusb = subprocess.run([python, "-c", "import libusb_package, os; print(os.path.dirname(libusb_package.__file__))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.exists(os.path.join(libusb, "libusb-1.0.so.0")):  # the soname the Task Library asks for
        os.symlink("libusb-1.0.so", os.path.join(libusb, "libusb-1.0.so.0"))
    return python, {**os.environ, "LD_LIBRARY_PATH": libusb}


def run_task_library(model_path, texts):
    """The TFLite Task Library's BertNLClassifier on `texts` (tests/task_library_worker.py)."""
    python, env = task_library_python()
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "task_library_worker.py")
    done = subprocess.run([python, worker, model_path], input=json.dumps(texts), capture_output=True, text=True,
                          timeout=300, env=env)
    if done.returncode != 0:
        raise AssertionError(f"the Task Library's BertNLClassifier failed on {model_path}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


@functools.lru_cache(maxsize=None)
def tf_serving_python():
    """The python of a venv holding exactly TF_SERVING_REQUIREMENTS (tests/venv_cache.py), no albert-tf."""
    return venv_python("tf-serving")


def run_as_tf_serving(version_dir, requests):
    """Runs `requests` on an export in the TF-Serving venv through the TF1 session loader (tf_serving_worker.py)."""
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_serving_worker.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([tf_serving_python(), worker], input=json.dumps({"path": version_dir, "requests": requests}),
                          capture_output=True, text=True, timeout=600, env=env, cwd=scratch_dir())
    if done.returncode != 0:
        raise AssertionError(f"the TF-Serving venv could not run {version_dir}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
