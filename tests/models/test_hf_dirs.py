"""HuggingFace `save_pretrained` directories used directly: `load_pretrained`,
`from_pretrained`, `resolve_model_dir` and `find_tokenizer` read them as
`albert-tf convert --from hf` would have converted them."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
import transformers

from albert_tf import AlbertBackbone, AlbertPretrainer, load_pretrained
from albert_tf.convert import convert_from_hf
from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
from input_pipeline import movie_reviews
from input_pipeline.tokenizer import AlbertTokenizer
import hf_reference as ref
from cli_helpers import run_cli


def hf_model_dir(tmp_path, cls, **save_kwargs):
    directory = tmp_path / "hf"
    ref.make_hf_model(cls).save_pretrained(directory, **save_kwargs)
    return directory


def torch_bin_dir(tmp_path, cls):
    """As transformers 4 saved without safetensors: config.json + pytorch_model.bin."""
    directory = tmp_path / "hf"
    model = ref.make_hf_model(cls)
    model.config.save_pretrained(directory)
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    return directory


def assert_identical_models(a, b):
    assert type(a) is type(b)
    assert getattr(a, "backbone", a).config == getattr(b, "backbone", b).config
    weights_a, weights_b = a.get_weights(), b.get_weights()
    assert len(weights_a) == len(weights_b)
    for x, y in zip(weights_a, weights_b):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    inputs = ref.batch(ref.TINY["vocab_size"])
    outputs_a, outputs_b = ref.our_outputs(a, inputs), ref.our_outputs(b, inputs)
    for name in outputs_b:
        assert np.array_equal(outputs_a[name], outputs_b[name]), name


@pytest.mark.parametrize("cls, expected, layout", [
    (transformers.AlbertForPreTraining, AlbertPretrainer, "safetensors"),
    (transformers.AlbertModel, AlbertBackbone, "safetensors"),
    (transformers.AlbertForPreTraining, AlbertPretrainer, "sharded"),
    (transformers.AlbertModel, AlbertBackbone, "pytorch_model.bin"),
])
def test_loading_a_hf_dir_equals_converting_it_first(cls, expected, layout, tmp_path):
    if layout == "pytorch_model.bin":
        directory = torch_bin_dir(tmp_path, cls)
    else:
        directory = hf_model_dir(tmp_path, cls, **({"max_shard_size": "50KB"} if layout == "sharded" else {}))
    if layout == "sharded":
        assert (directory / "model.safetensors.index.json").is_file()

    direct = load_pretrained(directory)
    convert_from_hf(directory, tmp_path / "converted")
    converted = load_pretrained(tmp_path / "converted")

    assert isinstance(direct, expected)
    assert_identical_models(direct, converted)
    assert (resolve_model_dir(str(directory)).path, resolve_model_dir(str(directory)).kind) == (str(directory), "hf")
    # from_pretrained reads it too; a backbone comes out of a pretraining checkpoint.
    assert_identical_models(AlbertBackbone.from_pretrained(directory), converted.backbone
                            if expected is AlbertPretrainer else converted)


@pytest.mark.parametrize("cls, layout", [
    (transformers.AlbertForPreTraining, "safetensors"),
    (transformers.AlbertForPreTraining, "sharded"),
    (transformers.AlbertModel, "pytorch_model.bin"),
])
def test_a_hf_dir_in_a_bucket_loads_as_the_local_one(cls, layout, tmp_path):
    """TensorFlow's in-memory `ram://` file system stands in for gs://."""
    import tensorflow as tf

    if layout == "pytorch_model.bin":
        directory = torch_bin_dir(tmp_path, cls)
    else:
        directory = hf_model_dir(tmp_path, cls, **({"max_shard_size": "50KB"} if layout == "sharded" else {}))
    bucket = f"ram://hf_dirs/{layout}"
    tf.io.gfile.makedirs(bucket)
    for path in directory.iterdir():
        tf.io.gfile.copy(str(path), f"{bucket}/{path.name}", overwrite=True)

    assert resolve_model_dir(bucket).path == bucket
    assert_identical_models(load_pretrained(bucket), load_pretrained(directory))


def test_hf_masked_lm_dir_warns_about_its_fresh_heads(tmp_path):
    directory = hf_model_dir(tmp_path, transformers.AlbertForMaskedLM)
    with pytest.warns(UserWarning, match="newly initialized.*sop_head/dense/kernel"):
        model = load_pretrained(directory)
    assert isinstance(model, AlbertPretrainer)


@pytest.fixture(scope="module")
def spiece_model(tmp_path_factory):
    """A small SentencePiece model trained on real reviews, as a HF directory ships it."""
    sentences = [s for document in movie_reviews.imdb_documents("pretrain", limit=300) for s in document]
    tokenizer = AlbertTokenizer.train(sentences, vocab_size=ref.TINY["vocab_size"])
    return tokenizer.model_proto


def real_sentences():
    sentences = [s for document in movie_reviews.imdb_documents("heldout", limit=10) for s in document]
    # Plus whitespace runs, LaTeX quotes, accents, case and NFKC-folded forms.
    return sentences + ["  Café CRÈME,   naïve ``quoted'' text\tand TABS  ",
                        "Ｆｕｌｌ-width ＡＢＣ and ﬁne ligatures"]


@pytest.mark.parametrize("options", [
    {},  # a hub download with no tokenizer_config.json: transformers' defaults
    {"do_lower_case": True, "keep_accents": False},
    {"do_lower_case": False, "keep_accents": True},
])
def test_hf_dir_tokenizer_encodes_as_transformers_does(options, spiece_model, tmp_path):
    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    (directory / "spiece.model").write_bytes(spiece_model)
    if options:
        (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "AlbertTokenizer", **options}))
        # transformers 5 rewrites tokenizer_config.json (with "remove_space": null)
        # and adds its own tokenizer.json, which is not albert-tf's tokenizer.json.
        transformers.AutoTokenizer.from_pretrained(str(directory)).save_pretrained(str(directory))
        assert (directory / "tokenizer.json").is_file()
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))

    ours = find_tokenizer(str(directory))
    # As --tokenizer DIR too.
    assert find_tokenizer(str(tmp_path), tokenizer_dir=str(directory)).preprocessing == ours.preprocessing

    sentences = real_sentences()
    # transformers maps `` and '' to '"' first and keeps digit-comma pieces whole; the original ALBERT does neither.
    unsplit = AlbertTokenizer(ours.model_proto, dataclasses.replace(ours.preprocessing, split_digit_comma=False))
    for sentence in sentences:
        hf_ids = theirs(sentence, add_special_tokens=False)["input_ids"]
        assert unsplit.encode(sentence.replace("``", '"').replace("''", '"')) == hf_ids, sentence
    # The in-graph tokenizer of exports and tf.data gives the same ids.
    assert ours.tf_encode(sentences).to_list() == [ours.encode(s) for s in sentences]


@pytest.mark.parametrize("damage, what", [
    (lambda values: json.dumps({**values, "model_type": "bert"}).encode(), "describes a 'bert' model, not 'albert'"),
    (lambda values: b'{"model_type": "albert",', "is not valid UTF-8 JSON"),
    (lambda values: b'{"model_type": "alb\xe9rt"}', "is not valid UTF-8 JSON"),
    (lambda values: json.dumps({**values, "hidden_size": 65}).encode(), "hidden_size"),
])
def test_bad_hf_config_is_an_error_naming_config_json(damage, what, tmp_path):
    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    path = directory / "config.json"
    path.write_bytes(damage(json.loads(path.read_text())))
    with pytest.raises(ValueError) as error:
        load_pretrained(directory)
    assert str(path) in str(error.value) and what in str(error.value), error.value


def test_hf_dir_without_weights_says_what_it_expected(tmp_path, spiece_model):
    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    (directory / "model.safetensors").unlink()
    (directory / "spiece.model").write_bytes(spiece_model)
    for load in (load_pretrained, resolve_model_dir):
        with pytest.raises(ValueError) as error:
            load(str(directory))
        message = str(error.value)
        assert str(directory) in message and "model.safetensors" in message and "pytorch_model.bin" in message


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_hf_safetensors_names_the_file(damage, tmp_path):
    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    path = directory / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a safetensors file")
    with pytest.raises(ValueError, match=f"{path} is not a readable safetensors file"):
        load_pretrained(directory)


def test_hf_task_head_is_listed_not_dropped(tmp_path):
    directory = hf_model_dir(tmp_path, transformers.AlbertForSequenceClassification)
    with pytest.raises(ValueError) as error:
        load_pretrained(directory)
    message = str(error.value)
    assert "unexpected 2 HF tensors: ['classifier.bias', 'classifier.weight']" in message, message
    assert "names ['AlbertForSequenceClassification']" in message and "not task heads" in message, message


def test_hf_dir_without_spiece_model_explains_what_to_copy(tmp_path, spiece_model):
    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    (directory / "spiece.model").write_bytes(spiece_model)
    transformers.AutoTokenizer.from_pretrained(str(directory)).save_pretrained(str(tmp_path / "saved"))
    (directory / "spiece.model").unlink()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "saved" / name, directory / name)
    with pytest.raises(ValueError, match="transformers' tokenizer.json only.*copy spiece.model"):
        find_tokenizer(str(directory))
    assert find_tokenizer(str(directory), required=False) is None


def test_a_run_in_a_bucket_is_classified_from_one_listing_per_directory(monkeypatch):
    """A gs:// probe is a round trip: the run and its final/ are listed once each, nothing else is asked."""
    import tensorflow as tf

    from albert_tf.utils import files

    run = "ram://classified/run"
    for name in ("config.json", "albert_tf.json", "model.weights.h5"):
        tf.io.gfile.makedirs(f"{run}/final")
        with tf.io.gfile.GFile(f"{run}/final/{name}", "w") as f:
            f.write("{}")
    asked = []
    for name in ("exists", "isdir", "isfile", "listdir"):
        monkeypatch.setattr(files, name, lambda path, name=name, fn=getattr(files, name): asked.append((name, path)) or fn(path))

    model_dir = resolve_model_dir(run)

    assert (model_dir.path, model_dir.kind) == (f"{run}/final", "albert-tf")
    assert asked == [("listdir", run), ("listdir", f"{run}/final")]
    assert resolve_model_dir(model_dir) is model_dir and asked == [("listdir", run), ("listdir", f"{run}/final")]


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/../../outside.safetensors"])
def test_a_shard_index_naming_a_file_outside_its_directory_is_refused_in_one_line(shard, tmp_path):
    directory = hf_model_dir(tmp_path, transformers.AlbertModel, max_shard_size="50KB")
    index = directory / "model.safetensors.index.json"
    values = json.loads(index.read_text())
    first = sorted(set(values["weight_map"].values()))[0]
    # The shard really is there, so only the guard stands between the index and the file.
    shutil.copy(directory / first, tmp_path / "outside.safetensors")
    values["weight_map"] = {k: shard if v == first else v for k, v in values["weight_map"].items()}
    index.write_text(json.dumps(values))
    done = run_cli("convert", "--from", "hf", "--model", directory, "--out", tmp_path / "out", expect_rc=2)
    assert done.stderr.strip() == (f"albert-tf convert: error: {index}: its weight_map names the shard {shard!r}, "
                                   "outside the index's directory; shards must be files beside it."), done.stderr


def test_a_hf_dir_in_a_bucket_larger_than_its_model_is_refused_unread(tmp_path):
    import tensorflow as tf
    from safetensors.numpy import load_file, save_file

    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    tensors = load_file(str(directory / "model.safetensors"))
    save_file({**tensors, "padding": np.zeros(1 << 20, "float32")}, str(directory / "model.safetensors"))
    bucket = "ram://hf_dirs/oversized"
    tf.io.gfile.makedirs(bucket)
    for path in directory.iterdir():
        tf.io.gfile.copy(str(path), f"{bucket}/{path.name}", overwrite=True)
    with pytest.raises(ValueError, match=rf"^{bucket}/model.safetensors is [\d,]+ bytes, more than the [\d,]+ a "
                                         r"weights file of its config.json's model takes in float32; refused unread"):
        load_pretrained(bucket)


def test_a_weight_of_integers_is_refused_naming_it(tmp_path):
    from safetensors.numpy import load_file, save_file

    directory = hf_model_dir(tmp_path, transformers.AlbertModel)
    tensors = load_file(str(directory / "model.safetensors"))
    name = "pooler.bias" if "pooler.bias" in tensors else "albert.pooler.bias"
    save_file({**tensors, name: tensors[name].astype("int32")}, str(directory / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"model.safetensors: tensor '{name}' holds I32 values; weights are floating"):
        load_pretrained(directory)
