"""Checkpoint conversion: round trips, source variants, bad input, and the CLI."""

import json
import os

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from albert_tf import AlbertBackbone, AlbertConfig, AlbertPretrainer, load_pretrained
from albert_tf.cli import main
from albert_tf.convert import (
    convert_from_hf,
    convert_from_tf1,
    from_hf,
    to_hf,
)
from albert_tf.loading import load_hf
import hf_reference as ref
from cli_helpers import run_cli

PREFIX = "albert.encoder.albert_layer_groups.0.albert_layers.0."


def tiny_config(**overrides):
    return AlbertConfig.from_dict({**ref.TINY, "model_type": "albert", **overrides})


def random_pretrainer(**overrides):
    model = AlbertPretrainer(AlbertBackbone(tiny_config(**overrides)))
    # Zero-initialized at build; random so that the round trip checks it.
    bias = np.random.default_rng(0).normal(size=model.mlm_head.output_bias.shape)
    model.mlm_head.output_bias.assign(bias.astype("float32"))
    return model


def hf_dir(tmp_path, cls=transformers.AlbertForPreTraining, name="hf"):
    model = ref.make_hf_model(cls)
    model.save_pretrained(tmp_path / name)
    return model, tmp_path / name


def assert_weights_equal(a, b):
    assert type(a) is type(b)
    assert a.config == b.config
    wa, wb = a.get_weights(), b.get_weights()
    assert len(wa) == len(wb)
    for x, y in zip(wa, wb):
        assert x.dtype == y.dtype and np.array_equal(x, y)  # bitwise


@pytest.mark.parametrize("with_heads", [True, False])
def test_round_trip_through_hf_is_exact(with_heads, tmp_path):
    model = random_pretrainer(num_hidden_groups=3)
    if not with_heads:
        model = model.backbone
    to_hf(model, tmp_path / "hf")
    with open(tmp_path / "hf" / "config.json") as f:
        hf_config = json.load(f)
    assert hf_config["architectures"] == ["AlbertForPreTraining" if with_heads else "AlbertModel"]
    assert "sharing" not in hf_config
    assert_weights_equal(model, from_hf(tmp_path / "hf"))


def test_masked_lm_source_gets_a_fresh_sop_head(tmp_path, capsys):
    hf_model, src = hf_dir(tmp_path, transformers.AlbertForMaskedLM)
    report = load_hf(src)
    assert isinstance(report.model, AlbertPretrainer)
    assert report.newly_initialized == (
        "pooler/kernel", "pooler/bias", "sop_head/dense/kernel", "sop_head/dense/bias",
    )
    inputs = ref.batch(300)
    with torch.no_grad():
        hf_logits = hf_model(
            input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
            token_type_ids=torch.tensor(inputs["segment_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long),
        ).logits.numpy()
    ours = ref.our_outputs(report.model, inputs)["mlm_logits"]
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(ours[real], hf_logits[real], atol=1e-4)

    assert main(["convert", "--from", "hf", str(src), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "newly initialized" in out and "sop_head/dense/kernel" in out


def test_albert_model_from_pytorch_bin_gives_a_backbone(tmp_path):
    hf_model = ref.make_hf_model(transformers.AlbertModel)
    (tmp_path / "hf").mkdir()
    hf_model.config.save_pretrained(tmp_path / "hf")
    # As older transformers saved it: a pickle, no "albert." prefix, with buffers.
    state = dict(hf_model.state_dict(), **{"embeddings.position_ids": torch.arange(64)[None]})
    torch.save(state, tmp_path / "hf" / "pytorch_model.bin")

    model = from_hf(tmp_path / "hf")

    assert isinstance(model, AlbertBackbone)
    inputs = ref.batch(300)
    diffs = ref.max_differences(ref.our_outputs(model, inputs), ref.hf_outputs(hf_model, inputs),
                                inputs["padding_mask"])
    assert max(diffs.values()) < 1e-4, diffs


def test_explicit_tied_decoder_must_equal_the_embeddings(tmp_path):
    _, src = hf_dir(tmp_path)
    tensors = load_file(src / "model.safetensors")
    tensors["predictions.decoder.weight"] = tensors["albert.embeddings.word_embeddings.weight"]
    tensors["predictions.decoder.bias"] = tensors["predictions.bias"]
    tensors["albert.embeddings.position_ids"] = np.arange(64)[None]
    save_file(tensors, src / "model.safetensors")
    assert isinstance(from_hf(src), AlbertPretrainer)  # tied copies and buffers: accepted

    tensors["predictions.decoder.weight"] = tensors["predictions.decoder.weight"] + 1.0
    save_file(tensors, src / "model.safetensors")
    with pytest.raises(ValueError, match="untied decoder"):
        from_hf(src)


def test_hf_mismatches_are_all_listed_and_nothing_is_written(tmp_path):
    _, src = hf_dir(tmp_path)
    tensors = load_file(src / "model.safetensors")
    del tensors[PREFIX + "attention.query.weight"]
    del tensors["albert.pooler.bias"]
    tensors["albert.encoder.extra.weight"] = np.zeros((2, 2), np.float32)
    tensors[PREFIX + "ffn.weight"] = np.zeros((100, 64), np.float32)
    save_file(tensors, src / "model.safetensors")
    out = tmp_path / "out"

    with pytest.raises(ValueError) as error:
        convert_from_hf(src, out)

    message = str(error.value)
    assert PREFIX + "attention.query.weight" in message and "albert.pooler.bias" in message
    assert "missing 2" in message
    assert "unexpected 1" in message and "albert.encoder.extra.weight" in message
    assert f"{PREFIX}ffn.weight: checkpoint (100, 64), model expects (128, 64)" in message
    assert not out.exists()


def test_tf1_mismatches_are_all_listed_and_nothing_is_written(tmp_path):
    hf_model = ref.make_hf_model()
    variables = ref.tf1_variables(hf_model)
    del variables["bert/pooler/dense/kernel"]
    variables["cls/seq_relationship/output_weights"] = np.zeros((64, 2), np.float32)  # Keras layout
    ref.write_tf1_checkpoint(str(tmp_path / "model.ckpt"), variables)
    out = tmp_path / "out"

    with pytest.raises(ValueError) as error:
        convert_from_tf1(str(tmp_path / "model.ckpt"), tiny_config(), out)

    message = str(error.value)
    assert "missing 1 TF1 tensors: ['bert/pooler/dense/kernel']" in message
    assert (
        "cls/seq_relationship/output_weights: checkpoint (64, 2), model expects (2, 64)"
        in message
    )
    assert not out.exists()


def test_tf1_unexpected_variables_are_listed_and_optimizer_state_is_skipped_with_a_note(tmp_path):
    hf_model = ref.make_hf_model()
    variables = ref.tf1_variables(hf_model)
    slots = {f"{name}/{slot}": np.zeros_like(value) for name, value in variables.items() for slot in ("adam_m", "adam_v")}
    variables.update(slots, global_step=np.array(10, np.int64))
    ref.write_tf1_checkpoint(str(tmp_path / "clean.ckpt"), variables)
    notes = []
    report = convert_from_tf1(str(tmp_path / "clean.ckpt"), tiny_config(), tmp_path / "clean", print_fn=notes.append)
    assert isinstance(report.model, AlbertPretrainer)
    assert len(notes) == 1 and f"Skipped {len(slots) + 1} optimizer-state variables" in notes[0]
    assert "adam_m, adam_v, global_step" in notes[0]

    extras = [f"bert/encoder/extra_{i}/kernel" for i in range(12)]
    variables.update({name: np.zeros((2, 2), np.float32) for name in extras})
    ref.write_tf1_checkpoint(str(tmp_path / "extra.ckpt"), variables)
    out = tmp_path / "out"
    with pytest.raises(ValueError) as error:
        convert_from_tf1(str(tmp_path / "extra.ckpt"), tiny_config(), out, print_fn=notes.append)
    message = str(error.value)
    assert f"unexpected 12 TF1 tensors: {sorted(extras)}" in message  # in full, not "and 7 more"
    assert "adam_m" not in message and "missing" not in message
    assert not out.exists()


def test_unknown_config_key_is_an_error(tmp_path):
    _, src = hf_dir(tmp_path)
    with open(src / "config.json") as f:
        values = json.load(f)
    with open(src / "config.json", "w") as f:
        json.dump(dict(values, bogus_key=1), f)
    with pytest.raises(ValueError, match="bogus_key"):
        convert_from_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_safetensors_is_a_clear_error(damage, tmp_path):
    _, src = hf_dir(tmp_path)
    path = src / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        convert_from_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unreadable_tf1_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a readable TF checkpoint"):
        convert_from_tf1(str(tmp_path / "missing.ckpt"), tiny_config(), tmp_path / "out")


def test_to_hf_refuses_partial_sharing(tmp_path):
    model = AlbertBackbone(tiny_config(sharing="attention"))
    with pytest.raises(ValueError, match="sharing='attention'"):
        to_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()

    model.save_pretrained(tmp_path / "ours")
    argv = ["convert", "--to", "hf", str(tmp_path / "ours"), "--out", str(tmp_path / "hf")]
    assert main(argv) == 2
    assert not (tmp_path / "hf").exists()


def test_output_dir_must_be_new_or_empty(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        to_hf(random_pretrainer(), tmp_path / "out")
    assert os.listdir(tmp_path / "out") == ["keep.txt"]


def count_checks_and_publishes(monkeypatch):
    """{"checks": n, "publishes": n}, counted from now on: the outputs' checks (`check_writable`) and the
    renames that put outputs in place (`move` of a directory, `replace` of a file, or the one rename that
    refuses a target another writer made meanwhile, `_put_in_place_if_new`)."""
    from albert_tf.utils import files

    counts = {"checks": 0, "publishes": 0}

    def counted(key, function):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(files, "check_writable", counted("checks", files.check_writable))
    monkeypatch.setattr(files, "move", counted("publishes", files.move))
    monkeypatch.setattr(files, "replace", counted("publishes", files.replace))
    monkeypatch.setattr(files, "_put_in_place_if_new", counted("publishes", files._put_in_place_if_new))
    return counts


def test_convert_checks_and_publishes_its_output_once(tmp_path, monkeypatch):
    from albert_tf.convert import convert_to_hf

    random_pretrainer().save_pretrained(tmp_path / "ours")
    counts = count_checks_and_publishes(monkeypatch)
    argv = ["convert", "--to", "hf", "--model", str(tmp_path / "ours"), "--out", str(tmp_path / "hf")]
    assert main(argv) == 0
    # The command checks --out before the converter runs, and the converter writes into its staging directory.
    assert counts == {"checks": 1, "publishes": 1}
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["hf", "ours"]

    counts.update(checks=0, publishes=0)
    convert_to_hf(str(tmp_path / "ours"), str(tmp_path / "hf2"))
    assert counts == {"checks": 1, "publishes": 1}
    assert sorted(os.listdir(tmp_path / "hf2")) == ["config.json", "model.safetensors"]


def test_convert_refuses_a_non_empty_out_and_overwrite_replaces_it(tmp_path):
    random_pretrainer().save_pretrained(tmp_path / "ours")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "old.txt").write_text("old")
    argv = ["convert", "--to", "hf", "--model", str(tmp_path / "ours"), "--out", str(tmp_path / "hf")]
    assert main(argv) == 2 and (tmp_path / "hf" / "old.txt").is_file()
    assert main([*argv, "--overwrite"]) == 0
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["hf", "ours"]


@pytest.mark.slow
def test_cli_converts_in_all_three_directions(tmp_path, capsys):
    hf_model, src = hf_dir(tmp_path)
    assert main(["convert", "--from", "hf", str(src), "--out", str(tmp_path / "from_hf")]) == 0

    # An original albert_config.json (no model_type: "gelu" is the tanh form) + TF1 checkpoint.
    with open(tmp_path / "albert_config.json", "w") as f:
        json.dump(dict(ref.TINY, hidden_act="gelu"), f)
    ref.write_tf1_checkpoint(str(tmp_path / "model.ckpt-1"), ref.tf1_variables(hf_model))
    assert main([
        "convert", "--from", "tf1", str(tmp_path / "model.ckpt-1"),
        "--config", str(tmp_path / "albert_config.json"), "--out", str(tmp_path / "from_tf1"),
    ]) == 0

    argv = ["convert", "--to", "hf", str(tmp_path / "from_tf1"), "--out", str(tmp_path / "hf2")]
    assert main(argv) == 0
    assert "Wrote HF AlbertForPreTraining" in capsys.readouterr().out

    from_hf_model = load_pretrained(tmp_path / "from_hf")
    assert_weights_equal(from_hf_model, load_pretrained(tmp_path / "from_tf1"))
    assert_weights_equal(from_hf_model, from_hf(tmp_path / "hf2"))
    tensors = load_file(tmp_path / "hf2" / "model.safetensors")
    original = load_file(src / "model.safetensors")
    assert sorted(tensors) == sorted(original)
    assert all(np.array_equal(tensors[k], original[k]) for k in original)


def test_cli_reports_bad_arguments(tmp_path, capsys):
    assert main(["convert", "--from", "tf1", "x", "--out", str(tmp_path / "o")]) == 2
    assert "--from tf1 needs --config" in capsys.readouterr().err
    assert main(["convert", "--from", "hf", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "config.json is missing" in capsys.readouterr().err


@pytest.mark.parametrize("holds_projection", [True, False])
def test_tf1_with_e_equal_to_h_builds_the_projection_the_checkpoint_holds(holds_projection, tmp_path):
    hf_model = ref.make_hf_model(embedding_size=64)
    variables = ref.tf1_variables(hf_model)
    if not holds_projection:
        for leaf in ("kernel", "bias"):
            del variables[f"bert/encoder/embedding_hidden_mapping_in/{leaf}"]
    ref.write_tf1_checkpoint(str(tmp_path / "model.ckpt"), variables)

    report = convert_from_tf1(str(tmp_path / "model.ckpt"), tiny_config(embedding_size=64), tmp_path / "out")

    assert report.model.config.embedding_projection is holds_projection
    loaded = load_pretrained(tmp_path / "out")
    assert_weights_equal(report.model, loaded)
    projection = loaded.backbone.embedding_projection
    if holds_projection:
        np.testing.assert_array_equal(projection.kernel, variables["bert/encoder/embedding_hidden_mapping_in/kernel"])
    else:
        assert projection is None
        with open(tmp_path / "out" / "config.json") as f:
            assert json.load(f)["embedding_projection"] is False


def test_a_model_without_projection_goes_to_hf_with_an_identity_one(tmp_path):
    model = random_pretrainer(embedding_size=64, embedding_projection=False)
    to_hf(model, tmp_path / "hf")
    with open(tmp_path / "hf" / "config.json") as f:
        hf_config = json.load(f)
    assert "embedding_projection" not in hf_config and "group_formula" not in hf_config
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    np.testing.assert_array_equal(tensors["albert.encoder.embedding_hidden_mapping_in.weight"], np.eye(64))
    np.testing.assert_array_equal(tensors["albert.encoder.embedding_hidden_mapping_in.bias"], np.zeros(64))


@pytest.mark.slow
@pytest.mark.parametrize("layers, groups, formula", [(44, 22, "original"), (18, 14, "exact")])
def test_to_hf_refuses_a_grouping_hf_cannot_express(layers, groups, formula, tmp_path, capsys):
    # HF's int(i / (L / G)) puts layers 30 and 31 of 44 in group 15 (the original: 14 and 15),
    # and layers 8 and 9 of 18 in group 6 (i * G // L: 6 and 7).
    model = AlbertBackbone(tiny_config(num_hidden_layers=layers, num_hidden_groups=groups, group_formula=formula))
    with pytest.raises(ValueError, match=f"group_formula='{formula}'.*HF cannot express this model"):
        to_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()

    model.save_pretrained(tmp_path / "ours")
    argv = ["convert", "--to", "hf", str(tmp_path / "ours"), "--out", str(tmp_path / "hf")]
    assert main(argv) == 2
    assert "HF cannot express this model" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
def test_cli_converts_an_original_e_equal_to_h_checkpoint_with_an_unused_group_both_ways(tmp_path):
    overrides = dict(embedding_size=64, num_hidden_layers=22, num_hidden_groups=22)
    hf_model, variables = ref.original_layout(seed=5, **overrides)
    ref.write_tf1_checkpoint(str(tmp_path / "model.ckpt-3"), variables)
    with open(tmp_path / "albert_config.json", "w") as f:
        json.dump(dict(ref.TINY, **overrides, hidden_act="gelu"), f)

    run_cli("convert", "--from", "tf1", "--model", tmp_path / "model.ckpt-3", "--config",
            tmp_path / "albert_config.json", "--out", tmp_path / "ours")
    run_cli("convert", "--to", "hf", "--model", tmp_path / "ours", "--out", tmp_path / "hf")

    ours = load_pretrained(tmp_path / "ours")
    assert ours.backbone.embedding_projection is None and not ours.backbone.blocks[15]
    assert ours.config.group_formula == "original"
    back = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    inputs = ref.batch(300, seed=5)
    expected = ref.hf_outputs(hf_model, inputs)
    for outputs in (ref.our_outputs(ours, inputs), ref.hf_outputs(back, inputs)):
        diffs = ref.max_differences(outputs, expected, inputs["padding_mask"])
        assert max(diffs.values()) < 1e-4, diffs
