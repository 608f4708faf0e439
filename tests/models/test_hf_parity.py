"""Numerical parity with HF transformers' ALBERT (PyTorch), through the converters."""

import keras
import numpy as np
import pytest
import transformers

from albert_tf import AlbertBackbone, AlbertConfig, AlbertPretrainer
from albert_tf.convert import from_hf, from_tf1, to_hf
import hf_reference as ref

TOLERANCE = 1e-4

CASES = {
    "default": {},
    "groups_2_inner_2": dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    # HF's int(i / (L / G)) puts layer 9 in group 6, i * G // L in group 7.
    "groups_14_of_18": dict(num_hidden_layers=18, num_hidden_groups=14),
    # v1 style: exact-erf GELU and dropout 0.1 (inactive at inference).
    "erf_gelu_v1": dict(
        hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1
    ),
}


def assert_close(ours, hf, inputs):
    diffs = ref.max_differences(ours, hf, inputs["padding_mask"])
    assert set(diffs) == {"sequence_output", "pooled_output", "mlm_logits", "sop_logits"}
    assert max(diffs.values()) < TOLERANCE, diffs


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_hf_matches_transformers(case, tmp_path):
    hf_model = ref.make_hf_model(**CASES[case])
    hf_model.save_pretrained(tmp_path / "hf")
    model = from_hf(tmp_path / "hf")

    assert isinstance(model, AlbertPretrainer)
    expected_act = "gelu" if case == "erf_gelu_v1" else "gelu_new"
    assert model.config.hidden_act == expected_act
    inputs = ref.batch(model.config.vocab_size)
    hf_out = ref.hf_outputs(hf_model, inputs)
    assert_close(ref.our_outputs(model, inputs), hf_out, inputs)
    if case == "erf_gelu_v1":
        # The tolerance is tight enough to tell the two GELUs apart.
        tanh_model = AlbertPretrainer(AlbertBackbone(model.config.replace(hidden_act="gelu_new")))
        tanh_model.set_weights(model.get_weights())
        tanh_out = ref.our_outputs(tanh_model, inputs)
        diffs = ref.max_differences(tanh_out, hf_out, inputs["padding_mask"])
        assert max(diffs.values()) > TOLERANCE, diffs


@pytest.mark.parametrize("hub_prefix", ["", "module/"])
def test_from_tf1_matches_transformers(hub_prefix, tmp_path):
    hf_model = ref.make_hf_model(seed=1)
    variables = {hub_prefix + k: v for k, v in ref.tf1_variables(hf_model).items()}
    # Optimizer state a training checkpoint also holds: skipped.
    variables[hub_prefix + "bert/pooler/dense/kernel/adam_m"] = np.zeros((64, 64), np.float32)
    variables[hub_prefix + "cls/predictions/output_bias/lamb_v"] = np.zeros((300,), np.float32)
    variables["global_step"] = np.array(7, np.int64)
    prefix = str(tmp_path / "model.ckpt-7")
    ref.write_tf1_checkpoint(prefix, variables)
    # An original albert_config.json: no model_type, and "gelu" is the tanh form.
    config = AlbertConfig.from_dict(dict(ref.TINY, hidden_act="gelu"))
    assert config.hidden_act == "gelu_new"

    model = from_tf1(prefix, config)

    inputs = ref.batch(model.config.vocab_size, seed=1)
    assert_close(ref.our_outputs(model, inputs), ref.hf_outputs(hf_model, inputs), inputs)


def test_to_hf_loads_in_transformers_and_matches(tmp_path):
    config = AlbertConfig.from_dict({**ref.TINY, "model_type": "albert", "num_hidden_groups": 3})
    model = AlbertPretrainer(AlbertBackbone(config))
    rng = np.random.default_rng(0)
    model.mlm_head.output_bias.assign(rng.normal(size=(config.vocab_size,)).astype("float32"))
    to_hf(model, tmp_path / "hf")

    hf_model, info = transformers.AlbertForPreTraining.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    inputs = ref.batch(config.vocab_size, seed=2)
    assert_close(ref.our_outputs(model, inputs), ref.hf_outputs(hf_model.eval(), inputs), inputs)


# The original's layouts that HF does not have: E == H without the E -> H
# projection, and groups picked by the original's formula (L = G = 22: layer
# 15 in group 14, no group 15; L = G = 23: layer 13 in group 12, no group 13).
ORIGINAL_LAYOUTS = {
    "e_equals_h": dict(embedding_size=64),
    "groups_22_of_22": dict(num_hidden_layers=22, num_hidden_groups=22),
    "e_equals_h_groups_23_of_23_inner_2": dict(embedding_size=64, num_hidden_layers=23, num_hidden_groups=23,
                                               inner_group_num=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ORIGINAL_LAYOUTS))
def test_from_tf1_of_the_originals_layouts_matches_transformers(case, tmp_path):
    overrides = ORIGINAL_LAYOUTS[case]
    hf_model, variables = ref.original_layout(seed=3, **overrides)
    prefix = str(tmp_path / "model.ckpt-1")
    ref.write_tf1_checkpoint(prefix, variables)

    model = from_tf1(prefix, AlbertConfig.from_dict(dict(ref.TINY, **overrides)))

    e_equals_h = "embedding_size" in overrides
    assert model.config.embedding_projection is not e_equals_h
    assert (model.backbone.embedding_projection is None) is e_equals_h
    # "original" where it groups otherwise than "exact" (which the usual shapes keep).
    corner = {22: [15], 23: [13]}.get(model.config.num_hidden_groups)
    assert model.config.group_formula == ("original" if corner else "exact")
    unused = [g for g, group in enumerate(model.backbone.blocks) if not group]
    assert unused == (corner or [])
    inputs = ref.batch(model.config.vocab_size, seed=3)
    assert_close(ref.our_outputs(model, inputs), ref.hf_outputs(hf_model, inputs), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ORIGINAL_LAYOUTS))
def test_to_hf_of_the_originals_layouts_loads_in_transformers_and_matches(case, tmp_path):
    overrides = ORIGINAL_LAYOUTS[case]
    values = {**ref.TINY, "model_type": "albert", **overrides}
    config = AlbertConfig.from_dict(values).replace(
        embedding_projection="embedding_size" not in overrides, group_formula="original"
    )
    # Seeded: the weights decide how far float32 rounding carries through 23 layers. Unseeded,
    # they depended on the tests run before in the process; one draw gave 1.2e-4 on the MLM logits.
    keras.utils.set_random_seed(4)
    model = AlbertPretrainer(AlbertBackbone(config))
    to_hf(model, tmp_path / "hf")

    hf_model, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    inputs = ref.batch(config.vocab_size, seed=4)
    ours = ref.our_outputs(model, inputs)
    assert_close(ours, ref.hf_outputs(hf_model.eval(), inputs), inputs)
    # Back from HF: HF's layout (a projection, HF's grouping), the same function.
    again = from_hf(tmp_path / "hf")
    assert again.config.embedding_projection and again.backbone.embedding_projection is not None
    assert all(again.backbone.blocks)
    assert_close(ref.our_outputs(again, inputs), ours, inputs)
