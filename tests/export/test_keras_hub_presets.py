"""keras-hub presets both ways, against real keras-hub: outputs, token ids, and what cannot cross."""

import csv
import functools
import io
import json
import os
import re
import shutil

import h5py
import keras_hub  # in the test extra: a missing keras-hub fails these tests, it does not skip them
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from albert_tf import AlbertBackbone, load_pretrained
from albert_tf.cli import main
from albert_tf.convert import save_keras_hub_preset
from albert_tf.model_dirs import find_tokenizer
from albert_tf.models import AlbertClassifier, AlbertPretrainer
from albert_tf.utils.errors import UserError
from cli_helpers import run_cli
from export_fixtures import tokenizer as english_tokenizer
from helpers import backbone_batch, tiny_config
from input_pipeline import AlbertTokenizer, Preprocessing, movie_reviews

VOCAB_SIZE = 300
# Capitals, accents, runs of whitespace, punctuation and numbers: where preprocessing matters.
TEXTS = [
    "The Movie was GREAT!",
    "Café   naïve Résumé, ÉLAN and Ångström.",
    "  tabs\tand\nnewlines  ",
    "It cost $1,000,000 in 1999, said O'Brien.",
    "ＦＵＬＬ width ｔｅｘｔ and ﬁ ligatures",
]


def randomized(model, seed=0):
    """`model` with every weight random (LayerNorms and biases too), so each mapping shows in the outputs."""
    rng = np.random.default_rng(seed)
    model.set_weights([(0.3 * rng.normal(size=w.shape)).astype("float32") for w in model.get_weights()])
    return model


def assert_same_outputs(ours, theirs, config):
    """Backbone outputs within 1e-5 at the real positions (padding positions are anyone's)."""
    inputs = backbone_batch(config)
    a, b = ours(inputs), theirs(inputs)
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(np.asarray(a["sequence_output"])[real], np.asarray(b["sequence_output"])[real],
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(a["pooled_output"]), np.asarray(b["pooled_output"]), atol=1e-5)


def assert_same_ids(ours, theirs):
    for text in TEXTS:
        assert ours.encode(text) == np.asarray(theirs(text)).tolist(), text


@functools.lru_cache(maxsize=None)
def plain_proto():
    """A SentencePiece model trained as keras-hub's docs train one: plain `nmt_nfkc`, no albert-tf
    preprocessing built in (albert-tf's own English tokenizers carry theirs)."""
    sentences = [s for d in movie_reviews.imdb_documents("pretrain", limit=200) for s in d]
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=proto, vocab_size=VOCAB_SIZE, minloglevel=2,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>", unk_piece="<unk>", bos_piece="[CLS]",
        eos_piece="[SEP]", user_defined_symbols="[MASK]", num_threads=1,
    )
    return proto.getvalue()


@pytest.mark.parametrize("shape", [
    dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    # E == H without the E -> H layer: keras-hub gets an identity projection.
    dict(embedding_size=32, embedding_projection=False),
    # Nothing shared: keras-hub gets L groups of one block.
    dict(sharing="none"),
])
def test_albert_tf_to_keras_hub_gives_the_same_outputs_and_ids(shape, tmp_path):
    config = tiny_config(vocab_size=VOCAB_SIZE, **shape)
    ours = randomized(AlbertBackbone(config))
    # Its preprocessing lives only in tokenizer.json: the writer must build it into vocabulary.spm.
    tokenizer = AlbertTokenizer(plain_proto(), Preprocessing())
    assert not tokenizer.carries_preprocessing and tokenizer.can_embed_preprocessing
    save_keras_hub_preset(ours, tokenizer, str(tmp_path / "preset"))

    assert_same_outputs(ours, keras_hub.models.AlbertBackbone.from_preset(str(tmp_path / "preset")), config)
    assert_same_ids(tokenizer, keras_hub.models.AlbertTokenizer.from_preset(str(tmp_path / "preset")))
    # And back: albert-tf reads what it wrote, with the ids it had.
    assert_same_outputs(ours, load_pretrained(str(tmp_path / "preset")), config)
    back = find_tokenizer(str(tmp_path / "preset"))
    assert [back.encode(t) for t in TEXTS] == [tokenizer.encode(t) for t in TEXTS]


def test_a_preset_in_a_bucket_reads_back(tmp_path):
    config = tiny_config(vocab_size=VOCAB_SIZE)
    ours = randomized(AlbertBackbone(config))
    save_keras_hub_preset(ours, english_tokenizer(), "ram://keras_hub/preset")
    assert_same_outputs(ours, load_pretrained("ram://keras_hub/preset"), config)


@pytest.fixture(scope="module")
def keras_hub_preset(tmp_path_factory):
    """(directory, keras-hub backbone, keras-hub tokenizer): a preset keras-hub wrote, tiny, random.

    Its tokenizer is `plain_proto()`, as keras-hub users train one.
    """
    backbone = randomized(keras_hub.models.AlbertBackbone(
        vocabulary_size=VOCAB_SIZE, num_layers=4, num_heads=4, embedding_dim=16, hidden_dim=32,
        intermediate_dim=64, num_groups=2, num_inner_repetitions=2, max_sequence_length=64,
    ))
    tokenizer = keras_hub.models.AlbertTokenizer(proto=plain_proto())
    directory = str(tmp_path_factory.mktemp("keras_hub") / "preset")
    backbone.save_to_preset(directory)
    tokenizer.save_to_preset(directory)
    return directory, backbone, tokenizer


def test_keras_hub_preset_loads_wherever_a_model_directory_does(keras_hub_preset):
    directory, theirs, their_tokenizer = keras_hub_preset
    config = load_pretrained(directory).config
    assert (config.num_hidden_groups, config.inner_group_num, config.num_hidden_layers) == (2, 2, 4)
    assert_same_outputs(load_pretrained(directory), theirs, config)
    assert_same_outputs(AlbertBackbone.from_pretrained(directory), theirs, config)
    classifier = AlbertClassifier.from_pretrained(directory, num_classes=2)
    assert_same_outputs(classifier.backbone, theirs, config)
    # keras-hub gives SentencePiece the raw text: capitals and accents reach it as they are.
    assert_same_ids(classifier.preprocessor.tokenizer, their_tokenizer)
    assert_same_ids(find_tokenizer(directory), their_tokenizer)


def test_a_weights_file_without_layer_names_reads_the_same(keras_hub_preset, tmp_path):
    # Keras before 3.9 (the Kaggle presets') stored no layer names: the groups' class names say which.
    directory, theirs, _ = keras_hub_preset
    shutil.copytree(directory, tmp_path / "preset")
    with h5py.File(tmp_path / "preset" / "model.weights.h5", "r+") as f:
        groups = []
        f.visititems(lambda name, item: groups.append(item))  # (a callback that returns a value stops the visit)
        for group in groups:
            group.attrs.pop("name", None)
        assert not [name for name in f["layers"] if "name" in f["layers"][name]["vars"].attrs]
    model = load_pretrained(str(tmp_path / "preset"))
    assert_same_outputs(model, theirs, model.config)


@pytest.mark.slow
def test_finetune_from_a_keras_hub_preset(keras_hub_preset, tmp_path):
    directory, _, their_tokenizer = keras_hub_preset
    everything = movie_reviews.rotten_tomatoes_sentences()
    sentences = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:24]]
    for name, rows in (("train.csv", sentences[:16]), ("eval.csv", sentences[16:])):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label")] + [(t, "pos" if y else "neg") for t, y in rows])
    assert main(["finetune", "--task", "classification", "--model", directory, "--train", str(tmp_path / "train.csv"),
                 "--eval", str(tmp_path / "eval.csv"), "--out", str(tmp_path / "run"), "--max-seq-length", "64",
                 "--batch-size", "8", "--epochs", "1", "--truncate"]) == 0
    # The run keeps the preset's tokenizer, with keras-hub's ids.
    assert_same_ids(find_tokenizer(str(tmp_path / "run")), their_tokenizer)


def save(model, tmp_path, tokenizer=None):
    model.save_pretrained(str(tmp_path / "model"))
    if tokenizer is not None:
        tokenizer.save(str(tmp_path / "model" / "tokenizer"))
    return str(tmp_path / "model")


@pytest.mark.parametrize("overrides, message", [
    (dict(sharing="attention"), "sharing='attention'"),
    (dict(sharing="ffn"), "sharing='ffn'"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    (dict(layer_norm_eps=1e-6), "layer_norm_eps=1e-06"),
    (dict(hidden_dropout=0.1, attention_dropout=0.0), "one dropout"),
    (dict(num_hidden_layers=3, num_hidden_groups=2), "divide the layers evenly"),
])
def test_what_keras_hub_cannot_express_is_refused_in_one_line(overrides, message, tmp_path, capsys):
    model = save(AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE, **overrides)), tmp_path)
    assert main(["convert", "--to", "keras-hub", "--model", model, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "keras-hub's AlbertBackbone cannot express" in err and message in err, err
    assert len(err.splitlines()) == 1, err
    assert not os.path.exists(tmp_path / "out")


def test_a_task_head_is_refused_and_pretraining_heads_are_left_out(tmp_path, capsys):
    backbone = randomized(AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)))
    model = save(AlbertClassifier(backbone, num_classes=2), tmp_path / "task")
    assert main(["convert", "--to", "keras-hub", "--model", model, "--out", str(tmp_path / "out")]) == 2
    assert "no place for its task head" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")

    model = save(AlbertPretrainer(backbone), tmp_path / "pretrainer", english_tokenizer())
    assert main(["convert", "--to", "keras-hub", "--model", model, "--out", str(tmp_path / "out")]) == 0
    assert "MLM and SOP heads are left out" in capsys.readouterr().out
    assert_same_outputs(backbone, keras_hub.models.AlbertBackbone.from_preset(str(tmp_path / "out")),
                        backbone.config)


def test_a_tokenizer_keras_hub_cannot_reproduce_is_refused(tmp_path, capsys):
    # The ko preset's NFKC cannot be built into vocabulary.spm, and keras-hub preprocesses nothing.
    korean = AlbertTokenizer(english_tokenizer().model_proto, Preprocessing.for_language("ko"), language="ko")
    model = save(AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)), tmp_path, korean)
    assert main(["convert", "--to", "keras-hub", "--model", model, "--out", str(tmp_path / "out")]) == 2
    assert "cannot travel to keras-hub (language='ko'" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("preprocessing", [Preprocessing(), Preprocessing(lower_case=False)], ids=["uncased", "cased"])
def test_a_tokenizer_s_preprocessing_travels_in_vocabulary_spm(preprocessing, tmp_path):
    # A plain SentencePiece model (a HF directory's, say): the preprocessing must be built into it.
    ours = AlbertTokenizer(plain_proto(), preprocessing)
    save_keras_hub_preset(AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)), ours, str(tmp_path / "preset"))
    assert_same_ids(ours, keras_hub.models.AlbertTokenizer.from_preset(str(tmp_path / "preset")))


def test_presets_albert_tf_does_not_read_are_refused_in_one_line(keras_hub_preset, tmp_path):
    directory, theirs, _ = keras_hub_preset
    task = keras_hub.models.AlbertTextClassifier(theirs, num_classes=2, preprocessor=None)
    task.save_to_preset(str(tmp_path / "task"))
    with pytest.raises(UserError, match=r"task.json holds a 'keras_hub>AlbertTextClassifier'.*not task heads"):
        load_pretrained(str(tmp_path / "task"))

    bert = keras_hub.models.BertBackbone(vocabulary_size=VOCAB_SIZE, num_layers=1, num_heads=2, hidden_dim=8,
                                         intermediate_dim=16, max_sequence_length=16)
    bert.save_to_preset(str(tmp_path / "bert"))
    with pytest.raises(UserError, match=r"describes a 'keras_hub>BertBackbone', not a 'keras_hub>AlbertBackbone'"):
        AlbertBackbone.from_pretrained(str(tmp_path / "bert"))


def test_a_preset_without_a_weight_is_refused_naming_it(keras_hub_preset, tmp_path):
    directory, _, _ = keras_hub_preset
    shutil.copytree(directory, tmp_path / "preset")
    with h5py.File(tmp_path / "preset" / "model.weights.h5", "r+") as f:
        del f["layers/dense_1/vars/1"]  # the pooler's bias
    with pytest.raises(UserError, match=r"missing 1 keras-hub tensors: \['pooled_dense/1'\]"):
        load_pretrained(str(tmp_path / "preset"))
    config = json.loads((tmp_path / "preset" / "config.json").read_text())
    assert config["registered_name"] == "keras_hub>AlbertBackbone"


def _crafted(directory, tmp_path, make):
    """A copy of the preset `directory` whose pooler bias (layers/dense_1/vars/1) `make(f, name)` replaced."""
    shutil.copytree(directory, tmp_path / "preset")
    with h5py.File(tmp_path / "preset" / "model.weights.h5", "r+") as f:
        del f["layers/dense_1/vars/1"]
        make(f, "layers/dense_1/vars/1")
    return tmp_path / "preset"


def _other_file(tmp_path):
    """An HDF5 file outside the preset holding a (32,) float32 dataset "bias"."""
    path = tmp_path / "elsewhere.h5"
    with h5py.File(path, "w") as f:
        f["bias"] = np.ones(32, "float32")
    return str(path)


def _virtual(f, name, tmp_path):
    layout = h5py.VirtualLayout(shape=(32,), dtype="float32")
    layout[:] = h5py.VirtualSource(_other_file(tmp_path), "bias", shape=(32,))
    f.create_virtual_dataset(name, layout)


def _external(f, name, tmp_path):
    (tmp_path / "raw.bin").write_bytes(np.ones(32, "float32").tobytes())
    f.create_dataset(name, shape=(32,), dtype="float32", external=[(str(tmp_path / "raw.bin"), 0, 128)])


CRAFTED = {  # what replaces the pooler's bias -> what the line says
    "soft link": (lambda f, name, tmp: f.__setitem__(name, h5py.SoftLink("/layers/dense_1/vars/0")),
                  r"layers/dense_1/vars/1 is an HDF5 SoftLink"),
    "external link": (lambda f, name, tmp: f.__setitem__(name, h5py.ExternalLink(_other_file(tmp), "/bias")),
                      r"layers/dense_1/vars/1 is an HDF5 ExternalLink"),
    "external dataset": (_external, r"dataset layers/dense_1/vars/1 keeps its data in another file"),
    "virtual dataset": (_virtual, r"dataset layers/dense_1/vars/1 is a virtual dataset"),
    # 8 GiB declared, nothing stored: read, it would be allocated.
    "shape bomb": (lambda f, name, tmp: f.create_dataset(name, shape=(1 << 31,), dtype="float32", chunks=(1 << 20,),
                                                         compression="gzip"),
                   r"dataset layers/dense_1/vars/1 declares 8,589,934,592 bytes but stores 0"),
    "shape": (lambda f, name, tmp: f.create_dataset(name, data=np.ones(33, "float32")),
              r"dataset layers/dense_1/vars/1 has shape \(33,\); its config.json's model needs \(32,\)"),
    # The right shape, 32 MiB strings: 1 GiB declared, under the shape-bomb floor, nothing stored.
    "string dtype": (lambda f, name, tmp: f.create_dataset(name, shape=(32,), dtype="S33554432", chunks=(1,),
                                                           compression="gzip"),
                     r"dataset layers/dense_1/vars/1 holds '\|S33554432' values; weights are floating point"),
    "compound dtype": (lambda f, name, tmp: f.create_dataset(name, shape=(32,), dtype=[("a", "f4"), ("b", "f4")]),
                       r"dataset layers/dense_1/vars/1 holds '\|V8' values"),
    "object dtype": (lambda f, name, tmp: f.create_dataset(name, shape=(32,), dtype=h5py.vlen_dtype("f4")),
                     r"dataset layers/dense_1/vars/1 holds '\|O' values"),
    "hard link loop": (lambda f, name, tmp: f.__setitem__("layers/dense_1/vars/loop", f["layers/dense_1"]),
                       r"layers/dense_1(/vars/loop)? is one of 2 hard links to one HDF5 object"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_weights_file_keras_would_refuse_is_refused_in_one_line(keras_hub_preset, case, tmp_path):
    make, message = CRAFTED[case]
    preset = _crafted(keras_hub_preset[0], tmp_path, lambda f, name: make(f, name, tmp_path))
    done = run_cli("convert", "--to", "hf", "--model", preset, "--out", tmp_path / "out", expect_rc=2)
    assert re.fullmatch(rf"albert-tf convert: error: .*model\.weights\.h5: {message}.*", done.stderr.strip()), \
        done.stderr
    assert not os.path.exists(tmp_path / "out")


def test_weights_that_declare_more_than_their_model_holds_are_refused(keras_hub_preset, tmp_path):
    # float64 everywhere: every shape as the config says, twice the bytes its float32 weights take.
    preset = _crafted(keras_hub_preset[0], tmp_path, lambda f, name: f.create_dataset(name, data=np.ones(32)))
    with h5py.File(preset / "model.weights.h5", "r+") as f:
        datasets = []
        f.visititems(lambda name, item: datasets.append(name) if isinstance(item, h5py.Dataset) else None)
        for name in datasets:
            value = f[name][()]
            del f[name]
            f[name] = value.astype("float64")
    done = run_cli("convert", "--to", "hf", "--model", preset, "--out", tmp_path / "out", expect_rc=2)
    assert re.fullmatch(r"albert-tf convert: error: .*model\.weights\.h5: its weights declare [\d,]+ bytes, "
                        r"more than the [\d,]+ its config.json's model holds in float32; refused unread.*",
                        done.stderr.strip()), done.stderr


def test_a_bfloat16_preset_reads_as_keras_wrote_it(keras_hub_preset, tmp_path):
    directory, theirs, _ = keras_hub_preset
    shutil.copytree(directory, tmp_path / "preset")
    with h5py.File(tmp_path / "preset" / "model.weights.h5", "r+") as f:
        value = f["layers/dense_1/vars/1"][()]
        del f["layers/dense_1/vars/1"]
        bits = (value.astype("float32").view("uint32") >> 16).astype("<u2")  # bfloat16, truncated
        f.create_dataset("layers/dense_1/vars/1", data=bits.view("V2")).attrs["dtype"] = "bfloat16"
    model = load_pretrained(str(tmp_path / "preset"))
    pooler_bias = model.get_layer("pooler").weights[1].numpy()
    np.testing.assert_array_equal(pooler_bias, (bits.astype("uint32") << 16).view("float32"))


def test_a_preset_in_a_bucket_larger_than_its_model_is_refused_unread(keras_hub_preset, tmp_path):
    directory, _, _ = keras_hub_preset
    shutil.copytree(directory, tmp_path / "preset")
    with h5py.File(tmp_path / "preset" / "model.weights.h5", "r+") as f:
        f["padding"] = np.zeros(1 << 20, "float32")  # 4 MiB: more than the tiny model's file can take
    for name in os.listdir(tmp_path / "preset"):
        if os.path.isfile(tmp_path / "preset" / name):
            with tf.io.gfile.GFile(f"ram://oversized/preset/{name}", "wb") as f:
                f.write((tmp_path / "preset" / name).read_bytes())
    for root, _, names in os.walk(tmp_path / "preset" / "assets"):
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), tmp_path / "preset")
            tf.io.gfile.makedirs(os.path.dirname(f"ram://oversized/preset/{relative}"))
            with tf.io.gfile.GFile(f"ram://oversized/preset/{relative}", "wb") as f:
                f.write((tmp_path / "preset" / relative).read_bytes())
    done = run_cli("convert", "--to", "hf", "--model", "ram://oversized/preset", "--out", tmp_path / "out",
                   expect_rc=2)
    assert re.fullmatch(r"albert-tf convert: error: ram://oversized/preset/model\.weights\.h5 is [\d,]+ bytes, "
                        r"more than the [\d,]+ a weights file of its config.json's model takes in float32; "
                        r"refused unread\.", done.stderr.strip()), done.stderr


@pytest.mark.parametrize("field, value", [("vocabulary_size", 10**12), ("hidden_dim", 1 << 20),
                                          ("num_layers", 10**6), ("max_sequence_length", 10**9)])
def test_a_config_larger_than_any_albert_is_refused_in_one_line(keras_hub_preset, field, value, tmp_path):
    shutil.copytree(keras_hub_preset[0], tmp_path / "preset")
    config = json.loads((tmp_path / "preset" / "config.json").read_text())
    config["config"][field] = value
    (tmp_path / "preset" / "config.json").write_text(json.dumps(config))
    done = run_cli("convert", "--to", "hf", "--model", tmp_path / "preset", "--out", tmp_path / "out", expect_rc=2)
    assert re.fullmatch(r"albert-tf convert: error: .*config\.json: `\w+` must be an integer in \[1, \d+\]\. "
                        rf"Received: \w+={value}", done.stderr.strip()), done.stderr
