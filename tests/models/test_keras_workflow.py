"""The Keras workflow on raw text: `AlbertPreprocessor`, `fit`/`predict` on strings, `from_pretrained`."""

import json
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import (
    AlbertBackbone, AlbertClassifier, AlbertMultipleChoice, AlbertPreprocessor, AlbertPretrainer,
    AlbertQuestionAnswerer, AlbertRegressor, AlbertTagger, load_pretrained,
)
from albert_tf.export import export_saved_model, export_tflite, load_saved_model, pack_texts
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.utils.layout import FINAL_DIR
from export_fixtures import VOCAB_SIZE, texts_and_pairs, tokenizer
from helpers import max_abs_diff, tiny_config
from input_pipeline import movie_reviews
from input_pipeline.tokenizer import AlbertTokenizer

LENGTH = 24


def preprocessor(**kwargs):
    return AlbertPreprocessor(tokenizer(), **{"sequence_length": LENGTH, **kwargs})


def backbone(**overrides):
    return AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE, classifier_dropout=0.0, **overrides))


def assert_same_ids(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)


def sentiment(n):
    """`n` real IMDB reviews with their labels (balanced)."""
    reviews = movie_reviews.imdb_reviews("heldout")
    by_label = [[t for t, l in reviews if l == label][: n // 2] for label in (0, 1)]
    texts = [t for pair in zip(*by_label) for t in pair]
    return texts, np.array([0, 1] * (n // 2), "int32")


# ---- the layer --------------------------------------------------------------------


@pytest.mark.slow
def test_preprocessor_matches_the_python_packer_eagerly_in_tf_data_and_in_a_model():
    texts, pairs = texts_and_pairs()
    layer = preprocessor()
    for text_pairs in (None, pairs):
        expected = pack_texts(tokenizer(), texts, text_pairs, LENGTH)
        x = texts if text_pairs is None else (texts, text_pairs)
        assert_same_ids(layer(x), expected)
        slices = tf.data.Dataset.from_tensor_slices(texts if text_pairs is None else (texts, text_pairs))
        mapped = slices.batch(len(texts)).map(lambda *x: layer(x[0] if len(x) == 1 else x))
        assert_same_ids(next(iter(mapped)), expected)
    assert pack_texts(tokenizer(), texts, None, LENGTH)["padding_mask"].sum(-1).max() == LENGTH  # truncated

    inputs = keras.Input(shape=(), dtype="string")
    model = keras.Model(inputs, layer(inputs))
    assert_same_ids(model(tf.constant(texts)), pack_texts(tokenizer(), texts, None, LENGTH))


def test_fixed_length_padding_and_multiple_choice():
    texts, pairs = texts_and_pairs()
    fixed = preprocessor(sequence_length=32, pad_to_sequence_length=True)
    short = ["a film", "a long film about nothing"]
    assert_same_ids(fixed(short), pack_texts(tokenizer(), short, None, 32, pad_to=32))
    mapped = tf.data.Dataset.from_tensor_slices(short).batch(2).map(fixed)
    assert mapped.element_spec["token_ids"].shape.as_list() == [None, 32]  # static for TPU / TFLite

    choices = np.array([pairs[:3], pairs[1:]], dtype=object)  # (2, 3)
    packed = preprocessor()((texts[:2], choices))
    assert packed["token_ids"].shape[:2] == (2, 3)
    for i in range(2):
        expected = pack_texts(tokenizer(), [texts[i]] * 3, list(choices[i]), LENGTH)
        width = expected["token_ids"].shape[1]
        for name in expected:
            row = np.asarray(packed[name])[i]
            np.testing.assert_array_equal(row[:, :width], expected[name])
            assert not row[:, width:].any()  # padding of the batch's longer rows


def test_config_round_trip_is_exact_and_json():
    layer = preprocessor(max_first_length=5)
    config = json.loads(json.dumps(layer.get_config()))
    rebuilt = AlbertPreprocessor.from_config(config)
    assert rebuilt.get_config() == layer.get_config()
    assert rebuilt.tokenizer.model_proto == tokenizer().model_proto
    assert rebuilt.tokenizer.preprocessing == tokenizer().preprocessing
    texts, pairs = texts_and_pairs()
    assert_same_ids(rebuilt((texts, pairs)), layer((texts, pairs)))
    mixed = AlbertPreprocessor(tokenizer(), sequence_length=LENGTH, dtype="mixed_bfloat16")
    assert_same_ids(mixed(texts), layer(texts))  # ids stay int32 under any dtype policy
    assert not layer.weights


def test_truncate_from_reaches_the_packing_and_the_config():
    texts = [" ".join(sentiment(4)[0])]  # far longer than LENGTH
    layer = preprocessor(truncate_from="middle")
    assert_same_ids(layer(texts), pack_texts(tokenizer(), texts, max_length=LENGTH, truncate_from="middle"))
    assert (np.asarray(layer(texts)["token_ids"]) != pack_texts(tokenizer(), texts, max_length=LENGTH)["token_ids"]).any()
    assert AlbertPreprocessor.from_config(layer.get_config()).truncate_from == "middle"
    with pytest.raises(ValueError, match="truncate_from='left'"):
        preprocessor(truncate_from="left")


@pytest.mark.parametrize("x, message", [
    ([1, 2], "must be strings"),
    ([["a", "b"]], "must have rank 1"),
    (["a film", "  \t "], "must not be empty"),
    ([], "empty"),
    ((["a"], ["b", "c"]), "same number of rows"),
])
def test_bad_text_is_a_value_error(x, message):
    with pytest.raises(ValueError, match=message):
        preprocessor()(x)


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="AlbertTokenizer"):
        AlbertPreprocessor("spiece.model")
    with pytest.raises(ValueError, match="sequence_length"):
        AlbertPreprocessor(tokenizer(), sequence_length=2)
    with pytest.raises(ValueError, match="pad_to_sequence_length"):
        AlbertPreprocessor(tokenizer(), pad_to_sequence_length=True)
    with pytest.raises(ValueError, match="vocab_size=120"):
        AlbertClassifier(AlbertBackbone(tiny_config()), 2, preprocessor=preprocessor())
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        AlbertClassifier(backbone(), 2, preprocessor=AlbertPreprocessor(tokenizer()))  # 512 by default
    with pytest.raises(ValueError, match="AlbertPreprocessor"):
        AlbertClassifier(backbone(), 2, preprocessor=tokenizer())


# ---- task models on raw text -------------------------------------------------------


@pytest.mark.slow
def test_fit_on_raw_strings_lowers_the_loss_and_datasets_work():
    keras.utils.set_random_seed(0)
    texts, labels = sentiment(16)
    # Mean pooling: the pooler of a random tiny backbone gives [CLS] nearly the same
    # vector for every text, and the loss starts to fall only after many epochs.
    model = AlbertClassifier(backbone(), 2, pooling="mean", preprocessor=preprocessor())
    model.compile(optimizer=keras.optimizers.Adam(2e-3))
    before = model.evaluate(texts, labels, batch_size=8, verbose=0, return_dict=True)["loss"]
    # Each trace of the train step calls it once: the optimizer is made before, not inside, the first trace.
    traces, train_step = [], model.train_step
    model.train_step = lambda data: traces.append(data) or train_step(data)
    model.fit(texts, labels, batch_size=8, epochs=10, verbose=0, validation_data=(texts[:4], labels[:4]))
    assert len(traces) == 1, traces
    after = model.evaluate(texts, labels, batch_size=8, verbose=0, return_dict=True)["loss"]
    assert after < 0.7 * before, (before, after)

    dataset = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(8)
    history = model.fit(dataset, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][0])
    assert model.evaluate(dataset, verbose=0, return_dict=True)["loss"] == pytest.approx(
        model.evaluate(texts, labels, batch_size=8, verbose=0, return_dict=True)["loss"], rel=1e-5
    )


@pytest.mark.slow
def test_fit_does_not_warn_about_the_pooler_that_mean_pooling_leaves_untrained():
    texts, labels = sentiment(8)
    model = AlbertClassifier(backbone(), 2, pooling="mean", preprocessor=preprocessor())
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    pooler_before = [np.array(v) for v in model.backbone.pooler.weights]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(texts, labels, batch_size=4, epochs=1, verbose=0)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "Gradients do not exist" in m], messages
    # The pooler is indeed left as it was: nothing real was hidden.
    for before, after in zip(pooler_before, model.backbone.pooler.weights):
        np.testing.assert_array_equal(before, np.array(after))


@pytest.mark.parametrize("kind", ["classifier", "regressor_pairs", "multiple_choice", "tagger", "qa"])
def test_predict_on_strings_equals_predict_on_python_ids(kind):
    texts, pairs = texts_and_pairs()
    if kind == "classifier":
        model, x, ids = AlbertClassifier(backbone(), 3), texts, pack_texts(tokenizer(), texts, None, LENGTH)
    elif kind == "regressor_pairs":
        model, x, ids = AlbertRegressor(backbone()), (texts, pairs), pack_texts(tokenizer(), texts, pairs, LENGTH)
    elif kind == "tagger":
        model, x, ids = AlbertTagger(backbone(), 4), texts, pack_texts(tokenizer(), texts, None, LENGTH)
    elif kind == "qa":
        model, x = AlbertQuestionAnswerer(backbone()), (texts, pairs)
        ids = pack_texts(tokenizer(), texts, pairs, LENGTH)
    else:
        model, x = AlbertMultipleChoice(backbone()), (texts[:2], np.array([pairs[:2], pairs[2:]], object))
        ids = {k: np.asarray(v) for k, v in preprocessor()(x).items()}
        flat = pack_texts(tokenizer(), [texts[0], texts[0], texts[1], texts[1]], pairs, LENGTH)
        width = flat["token_ids"].shape[1]
        np.testing.assert_array_equal(ids["token_ids"].reshape(4, -1)[:, :width], flat["token_ids"])
    model.preprocessor = preprocessor()
    from_text = model.predict(x, verbose=0)
    from_ids = model.predict(ids, verbose=0)
    assert max_abs_diff(from_text, from_ids) == 0.0


def test_raw_text_errors():
    texts, _ = texts_and_pairs()
    labels = np.zeros(len(texts), "int32")
    with pytest.raises(ValueError, match="no preprocessor"):
        AlbertClassifier(backbone(), 2).predict(texts, verbose=0)
    model = AlbertClassifier(backbone(), 2, preprocessor=preprocessor())
    model.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="does not preprocess"):
        model(tf.constant(texts))
    with pytest.raises(ValueError, match="must not be empty"):
        model.predict(["a film", " "], verbose=0)
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(texts, labels, validation_split=0.5, verbose=0)
    tagger = AlbertTagger(backbone(), 3, preprocessor=preprocessor())
    tagger.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="one tag per word piece"):
        tagger.fit(texts, np.zeros((len(texts), LENGTH), "int32"), verbose=0)
    assert model.predict(pack_texts(tokenizer(), texts, None, LENGTH), verbose=0)["logits"].shape == (4, 2)


# ---- saving and loading -------------------------------------------------------------


@pytest.mark.slow
def test_keras_archive_and_save_pretrained_keep_the_preprocessor(tmp_path):
    texts, pairs = texts_and_pairs()
    model = AlbertClassifier(backbone(), 2, label_names=["neg", "pos"], preprocessor=preprocessor())
    expected = model.predict((texts, pairs), verbose=0)["logits"]

    model.save(str(tmp_path / "model.keras"))
    archived = keras.saving.load_model(str(tmp_path / "model.keras"))
    model.save_pretrained(str(tmp_path / "pretrained"))
    assert AlbertTokenizer.load(str(tmp_path / "pretrained" / TOKENIZER_DIR)).model_proto == tokenizer().model_proto
    for loaded in (archived, load_pretrained(str(tmp_path / "pretrained")),
                   AlbertClassifier.from_pretrained(str(tmp_path / "pretrained"))):
        assert type(loaded) is AlbertClassifier
        assert loaded.preprocessor.get_config() == model.preprocessor.get_config()
        assert_same_ids(loaded.preprocessor((texts, pairs)), model.preprocessor((texts, pairs)))
        assert max_abs_diff(loaded.predict((texts, pairs), verbose=0)["logits"], expected) == 0.0


def _pretrain_run(run_dir, **overrides):
    """A run directory laid out as `albert-tf pretrain` leaves it: final/ and tokenizer/."""
    pretrainer = AlbertPretrainer(backbone(**overrides))
    pretrainer.save_pretrained(str(run_dir / FINAL_DIR))
    tokenizer().save(str(run_dir / TOKENIZER_DIR))
    return pretrainer


def test_from_pretrained_builds_the_task_on_a_pretrain_run_with_its_tokenizer(tmp_path):
    pretrainer = _pretrain_run(tmp_path / "run")
    for directory in (tmp_path / "run", tmp_path / "run" / FINAL_DIR):
        model = AlbertClassifier.from_pretrained(str(directory), num_classes=3, label_names=["a", "b", "c"])
        assert model.num_classes == 3 and model.label_names == ["a", "b", "c"]
        assert model.preprocessor.tokenizer.model_proto == tokenizer().model_proto
        assert model.preprocessor.sequence_length == 64  # min(512, max_position_embeddings)
        for mine, theirs in zip(model.backbone.weights, pretrainer.backbone.weights):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    qa = AlbertQuestionAnswerer.from_pretrained(str(tmp_path / "run"))
    assert qa.preprocessor.max_first_length == 64  # as the serve_text signature

    bare = AlbertClassifier(backbone(), 2)  # as `albert-tf finetune` leaves best/: tokenizer beside it
    bare.save_pretrained(str(tmp_path / "best"))
    tokenizer().save(str(tmp_path / "best" / TOKENIZER_DIR))
    assert AlbertClassifier.from_pretrained(str(tmp_path / "best")).preprocessor.tokenizer.vocab_size == VOCAB_SIZE

    model.save_pretrained(str(tmp_path / "clf"))
    assert AlbertClassifier.from_pretrained(str(tmp_path / "clf"), num_classes=3).num_classes == 3
    with pytest.raises(ValueError, match="num_classes"):
        AlbertClassifier.from_pretrained(str(tmp_path / "clf"), num_classes=2)


@pytest.mark.slow
def test_export_defaults_to_the_preprocessors_tokenizer(tmp_path):
    texts, _ = texts_and_pairs()
    model = AlbertClassifier(backbone(), 2, preprocessor=preprocessor())
    version = export_saved_model(model, str(tmp_path / "export"), max_length=LENGTH)
    served = load_saved_model(version).signatures["serve_text"](text=tf.constant(texts))
    assert max_abs_diff(served["logits"].numpy(), model.predict(texts, verbose=0)["logits"]) <= 1e-5
    export_tflite(model, str(tmp_path / "tflite"), max_length=LENGTH)
    assert AlbertTokenizer.load(str(tmp_path / "tflite")).model_proto == tokenizer().model_proto
