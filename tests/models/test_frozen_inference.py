"""FrozenForward: the model's outputs with its weights baked in as constants, for any shapes, in any precision."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port

from albert_tf import AlbertBackbone, AlbertClassifier, AlbertTagger, FrozenForward
from albert_tf import inference, precision
from albert_tf.inference import CompiledPredictions, FrozenPredictions, length_bucket
from albert_tf.recipes.prediction import predict_examples
from helpers import backbone_batch, max_abs_diff, tiny_config

# Measured 5e-7 (float32 reassociation after constant folding).
FLOAT32_ATOL = 1e-5
# bfloat16 keeps 8 significant bits, and the folded graph rounds in its own
# order, so frozen and variable bf16 outputs differ by up to 2% of the largest
# output (8 seeds). What must hold is that the frozen form is as close to
# float32 as the variable form: measured equal over 8 seeds.
BFLOAT16_ERROR_RATIO = 1.25


def variable_reads(function):
    return [op for op in function.graph.get_operations() if op.type in ("ReadVariableOp", "VarHandleOp")]


def optimized_op_counts(function, inputs):
    """{op type: count} of a concrete function's graph as TensorFlow runs it, after grappler and oneDNN's rewrites."""
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(function.graph.as_graph_def(), name="")
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph) as session:
        # The frozen function takes its inputs in sorted-name order.
        feeds = {t.name: inputs[name] for t, name in zip(function.inputs, sorted(inputs))}
        session.run([t.name for t in function.outputs], feeds,
                    options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    return collections.Counter(node.op for graph in metadata.partition_graphs for node in graph.node)


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


def test_mixed_bfloat16_frozen_is_as_close_to_float32_as_its_variable_form():
    keras.utils.set_random_seed(0)
    config = tiny_config()
    float32 = AlbertBackbone(config)
    bfloat16 = AlbertBackbone(config, dtype="mixed_bfloat16")
    bfloat16.set_weights(float32.get_weights())
    inputs = backbone_batch(config)
    reference = float32(inputs, training=False)
    frozen_error = max_abs_diff(FrozenForward(bfloat16)(inputs), reference)
    variables_error = max_abs_diff(bfloat16(inputs, training=False), reference)
    # It does run in bfloat16: far from float32 rounding.
    assert frozen_error > 1e-3
    assert frozen_error <= BFLOAT16_ERROR_RATIO * variables_error


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


@pytest.mark.slow
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


def test_xla_compiles_few_shapes_padded_to_buckets_and_cuts_the_padding_off():
    # Lengths pad to powers of two and 1.5 times them; rows to a power of two.
    assert [length_bucket(n) for n in (1, 8, 9, 12, 13, 17, 25, 33, 100, 129, 300, 512)] == [
        8, 8, 12, 12, 16, 24, 32, 48, 128, 192, 384, 512]
    config = tiny_config()
    model = AlbertClassifier(AlbertBackbone(config), 3)
    compiled = CompiledPredictions(model)
    batch = backbone_batch(config, batch=3, seq=10)
    got = compiled.predict_on_batch(batch)
    assert compiled.shapes == {(4, 12)}
    assert got["logits"].shape == (3, 3)
    np.testing.assert_allclose(got["logits"], model(batch, training=False)["logits"], atol=FLOAT32_ATOL)


@pytest.mark.slow
def test_compiled_predictions_give_the_task_model_outputs_for_every_length():
    config = tiny_config()
    model = AlbertTagger(AlbertBackbone(config), 5)
    rng = np.random.default_rng(0)
    examples = []
    for length in (9, 4, 12, 7, 12, 30):
        examples.append({"token_ids": rng.integers(5, config.vocab_size, length).astype("int32"),
                         "segment_ids": np.zeros(length, "int32"), "padding_mask": np.ones(length, "int32")})
    expected = predict_examples(model, examples, batch_size=2)
    compiled = CompiledPredictions(model)
    for want, got, example in zip(expected, predict_examples(compiled, examples, batch_size=2), examples):
        assert got["logits"].shape == (len(example["token_ids"]), 5)
        np.testing.assert_allclose(got["logits"], want["logits"], atol=FLOAT32_ATOL)
    # Lengths 4 .. 30 in batches of 2 compile three buckets, not one program per length.
    assert {length for _, length in compiled.shapes} <= {8, 12, 32}, compiled.shapes


@pytest.mark.parametrize("dtype", [None, "mixed_bfloat16"])
def test_every_block_matmul_and_layer_norm_runs_fused(dtype):
    # Random weights, as a trained model has: grappler drops an all-zero bias
    # (the initializer's), and then there is no bias to fuse.
    keras.utils.set_random_seed(0)
    config = tiny_config(num_hidden_layers=2)
    backbone = AlbertBackbone(config, dtype=dtype)
    rng = np.random.default_rng(0)
    backbone.set_weights([w + rng.normal(0.0, 0.02, w.shape).astype(w.dtype) for w in backbone.get_weights()])
    inputs = backbone_batch(config, batch=1, seq=8, pad=False)
    forward = FrozenForward(backbone)
    assert max_abs_diff(forward(inputs), backbone(inputs, training=False)) <= (FLOAT32_ATOL if dtype is None else 0.1)
    ops = optimized_op_counts(forward.functions[0], inputs)
    matmuls = {op: n for op, n in ops.items() if op.endswith("MatMul")}
    fused = sum(n for op, n in matmuls.items() if op.endswith("FusedMatMul"))
    # Per layer one (H, 3H) query-key-value matmul in every precision, the
    # output projection and the FFN's two matmuls, plus the pooler's and the
    # embedding projection's.
    layers = config.num_hidden_layers
    assert sum(matmuls.values()) == 4 * layers + 2, ops
    # Attention moves its heads with one transpose for q, k and v, then one for the context.
    transposes = sum(n for op, n in ops.items() if op.endswith("Transpose"))
    assert transposes == 2 * layers, ops
    one_dnn = one_dnn_runs(dtype)
    if dtype is not None and not one_dnn:
        # Without oneDNN the remapper fuses only float32 matmuls on a CPU: bfloat16
        # ones stay MatMul + BiasAdd (and run in Eigen).
        assert fused == 0 and ops["BiasAdd"] == 4 * layers + 2, ops
        return
    # Every block matmul and the pooler's get their bias (and activation) fused;
    # only the embedding projection, once on (batch, seq, E), stays a plain matmul.
    assert fused == 4 * layers + 1, ops
    # oneDNN's fused matmul takes the tanh GELU ("gelu_new") and the pooler's
    # tanh in; Eigen's takes only Relu-like activations, so each stays a Tanh.
    assert ops["Tanh"] == (0 if one_dnn else layers + 1), ops
    if dtype is None:
        # Every float32 LayerNorm (the embeddings', and two per layer) is one
        # oneDNN kernel where TensorFlow runs oneDNN; elsewhere Keras' own
        # form, not a batch norm (FrozenForward picks it by IsMklEnabled()).
        layer_norms = 2 * layers + 1
        if one_dnn:
            assert ops["_MklLayerNorm"] == layer_norms and ops["Rsqrt"] == 0, ops
        else:
            assert ops["Rsqrt"] == layer_norms and ops["FusedBatchNormV3"] == 0, ops


def one_dnn_runs(dtype):
    """Whether TensorFlow runs `dtype`'s (None: float32) matmuls in oneDNN here.

    oneDNN is TensorFlow's default on x86 CPUs with AVX-512 and off on those
    with AVX2 alone (TF_ENABLE_ONEDNN_OPTS turns it either way); where it is on
    it takes bfloat16 only on CPUs with AVX-512 (or AVX-NE-CONVERT, AMX), and
    leaves it to Eigen elsewhere.
    """
    if not _pywrap_util_port.IsMklEnabled():
        return False
    return dtype is None or bool({"avx512f", "avx_ne_convert", "amx_bf16"} & precision.cpu_flags())


def test_layer_norm_as_a_batch_norm_keeps_the_layers_epsilon():
    # TensorFlow's graph optimizer gives the LayerNorm kernels it fuses from
    # other forms an epsilon of 0.001; the batch norm form must keep the layer's.
    layer = keras.layers.LayerNormalization(epsilon=1e-12)
    layer.build((None, 64))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(size=64).astype("float32"), rng.normal(size=64).astype("float32")])
    x = tf.constant(rng.normal(0.0, 0.1, (2, 6, 64)).astype("float32"))
    # Values of variance 0.01: an epsilon of 0.001 moves them by 5%.
    got = tf.function(lambda x: inference.layer_norm_as_fused_batch_norm(layer, x))(x)
    np.testing.assert_allclose(got.numpy(), layer(x).numpy(), atol=1e-5)
