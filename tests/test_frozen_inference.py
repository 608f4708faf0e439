"""FrozenForward: the model's outputs with its weights baked in as constants, for any shapes, in any precision."""

import numpy as np
import pytest

from albert_tf import AlbertBackbone, AlbertTagger, FrozenForward
from albert_tf import inference
from albert_tf.inference import FrozenPredictions
from albert_tf.tasks.prediction import predict_examples
from helpers import backbone_batch, max_abs_diff, tiny_config

# Measured 5e-7 (float32 reassociation after constant folding).
FLOAT32_ATOL = 1e-5
# bfloat16 keeps 8 significant bits; the folded graph may round in another
# order. Measured: 2 units in the last place of the largest output (2^-7 of it).
BFLOAT16_RTOL = 2**-6


def variable_reads(function):
    return [op for op in function.graph.get_operations() if op.type in ("ReadVariableOp", "VarHandleOp")]


def test_first_shape_is_traced_exactly_then_one_function_serves_every_other_shape():
    backbone = AlbertBackbone(tiny_config())
    forward = FrozenForward(backbone)
    for batch, seq in ((3, 12), (3, 12), (2, 7), (5, 16), (3, 12)):
        inputs = backbone_batch(backbone.config, batch, seq)
        assert max_abs_diff(forward(inputs), backbone(inputs, training=False)) <= FLOAT32_ATOL
    assert len(forward.functions) == 2
    static, dynamic = (f.graph.inputs[0].shape.as_list() for f in forward.functions)
    assert static == [3, 12] and dynamic == [None, None]
    assert forward.frozen and not any(variable_reads(f) for f in forward.functions)


def test_mixed_bfloat16_frozen_equals_its_variable_form():
    config = tiny_config()
    float32 = AlbertBackbone(config)
    bfloat16 = AlbertBackbone(config, dtype="mixed_bfloat16")
    bfloat16.set_weights(float32.get_weights())
    inputs = backbone_batch(config)
    frozen = FrozenForward(bfloat16)(inputs)
    variables = bfloat16(inputs, training=False)
    scale = float(np.max(np.abs(np.asarray(variables["sequence_output"], "float32"))))
    assert max_abs_diff(frozen, variables) <= BFLOAT16_RTOL * scale
    # It does run in bfloat16: the fp32 model differs by more than rounding of float32.
    assert max_abs_diff(frozen, float32(inputs, training=False)) > 1e-4


def test_weights_are_read_once_and_a_change_needs_a_new_forward():
    backbone = AlbertBackbone(tiny_config())
    inputs = backbone_batch(backbone.config)
    forward = FrozenForward(backbone)
    before = forward(inputs)
    backbone.set_weights([w * 0.5 for w in backbone.get_weights()])
    assert max_abs_diff(forward(inputs), before) == 0.0
    assert max_abs_diff(FrozenForward(backbone)(inputs), backbone(inputs, training=False)) <= FLOAT32_ATOL


def test_a_model_too_large_to_freeze_runs_on_its_variables(monkeypatch):
    monkeypatch.setattr(inference, "MAX_FROZEN_BYTES", 1000)
    backbone = AlbertBackbone(tiny_config())
    forward = FrozenForward(backbone)
    inputs = backbone_batch(backbone.config)
    assert max_abs_diff(forward(inputs), backbone(inputs, training=False)) <= FLOAT32_ATOL
    assert not forward.frozen and variable_reads(forward.functions[0])


def test_missing_input_is_named():
    forward = FrozenForward(AlbertBackbone(tiny_config()))
    inputs = backbone_batch(tiny_config())
    del inputs["segment_ids"]
    with pytest.raises(ValueError, match=r"lacks \['segment_ids'\]"):
        forward(inputs)


@pytest.mark.parametrize("pad_to", [None, 16])
def test_predict_examples_gives_the_task_model_outputs(pad_to):
    config = tiny_config()
    model = AlbertTagger(AlbertBackbone(config), 5)
    rng = np.random.default_rng(0)
    examples = []
    for length in (9, 4, 12, 7, 12):
        examples.append({"token_ids": rng.integers(5, config.vocab_size, length).astype("int32"),
                         "segment_ids": np.zeros(length, "int32"), "padding_mask": np.ones(length, "int32")})
    expected = predict_examples(model, examples, batch_size=2, pad_to=pad_to)
    frozen = predict_examples(FrozenPredictions(model), examples, batch_size=2, pad_to=pad_to)
    for want, got, example in zip(expected, frozen, examples):
        assert got["logits"].shape == (len(example["token_ids"]), 5)
        np.testing.assert_allclose(got["logits"], want["logits"], atol=FLOAT32_ATOL)
