import numpy as np
import pytest

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.config import AlbertConfig
from albert_tf.models.backbone import attention_bias_from_padding_mask
from input_pipeline import features
from helpers import (
    assert_keras_archive_round_trip,
    assert_pretrained_round_trip,
    backbone_batch,
    run_on_jax,
    tiny_config,
)

# ALBERT_FACTS.md: backbone (with pooler) and backbone + MLM + SOP heads.
PRESET_COUNTS = {
    "base": (11_683_584, 11_813_810),
    "large": (17_683_968, 17_847_474),
    "xlarge": (58_724_864, 59_021_490),
    "xxlarge": (222_595_584, 223_158_450),
}


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESET_COUNTS))
def test_preset_parameter_counts_are_exact(preset):
    backbone = AlbertBackbone(AlbertConfig.from_preset(preset))
    assert backbone.count_params() == PRESET_COUNTS[preset][0]
    assert AlbertPretrainer(backbone).count_params() == PRESET_COUNTS[preset][1]


def block_params(c, attention=True, ffn=True):
    h, i = c.hidden_size, c.intermediate_size
    return (4 * h * h + 6 * h if attention else 0) + (2 * h * i + i + 3 * h if ffn else 0)


def outside_blocks(c):
    v, e, h, p = c.vocab_size, c.embedding_size, c.hidden_size, c.max_position_embeddings
    projection = e * h + h if c.embedding_projection else 0
    return v * e + p * e + c.type_vocab_size * e + 2 * e + projection + h * h + h


# The paper's Table 3 (ALBERT-base: H 768, L 12), backbone with pooler:
# (E, sharing, exact count, the paper's cell). The E = 768 rows have no E -> H
# projection, as in the original; the paper rounds loosely (ALBERT_FACTS.md):
# its cells are checked to within 1.1M, the exact counts exactly.
TABLE_3 = [
    (64, "none", 87_648_000, 87e6),
    (64, "all", 9_681_408, 10e6),
    (128, "none", 89_650_176, 89e6),
    (128, "all", 11_683_584, 12e6),
    (256, "none", 93_654_528, 93e6),
    (256, "all", 15_687_936, 16e6),
    (768, "none", 109_081_344, 108e6),
    (768, "all", 31_114_752, 31e6),
]


@pytest.mark.slow
@pytest.mark.parametrize("embedding_size, sharing, exact, paper", TABLE_3)
def test_parameter_counts_match_the_papers_table_3(embedding_size, sharing, exact, paper):
    config = AlbertConfig.from_preset(
        "base", embedding_size=embedding_size, sharing=sharing, embedding_projection=embedding_size != 768
    )
    blocks = config.num_hidden_layers if sharing == "none" else 1
    assert outside_blocks(config) + blocks * block_params(config) == exact
    assert AlbertBackbone(config).count_params() == exact
    assert abs(exact - paper) <= 1.1e6


def test_without_the_projection_the_embeddings_feed_the_first_block(tmp_path):
    config = tiny_config(embedding_size=32, embedding_projection=False, num_hidden_layers=2)
    backbone = AlbertBackbone(config)
    assert backbone.embedding_projection is None
    assert backbone.count_params() == outside_blocks(config) + block_params(config)
    inputs = backbone_batch(config)
    embedded = backbone.embeddings(inputs[features.TOKEN_IDS], inputs[features.SEGMENT_IDS])
    bias = attention_bias_from_padding_mask(inputs[features.PADDING_MASK])
    (block,) = backbone.blocks[0]
    expected = block(block(embedded, bias), bias)
    np.testing.assert_allclose(backbone(inputs)["sequence_output"], expected, atol=1e-5)
    loaded = assert_pretrained_round_trip(backbone, inputs, tmp_path)
    assert loaded.embedding_projection is None


@pytest.mark.slow
def test_a_group_no_layer_uses_is_not_built_and_saves_and_loads(tmp_path):
    # The original's formula: layer 15 of 22 goes to group 14, and no layer uses group 15.
    config = tiny_config(num_hidden_layers=22, num_hidden_groups=22, group_formula="original")
    backbone = AlbertBackbone(config)
    assert [len(group) for group in backbone.blocks] == [1] * 15 + [0] + [1] * 6
    assert backbone.count_params() == outside_blocks(config) + 21 * block_params(config)
    inputs = backbone_batch(config)
    assert_keras_archive_round_trip(backbone, inputs, tmp_path)
    assert_pretrained_round_trip(backbone, inputs, tmp_path)


@pytest.mark.parametrize(
    "sharing, attentions, ffns",
    [("all", 1, 1), ("attention", 1, "L"), ("ffn", "L", 1), ("none", "L", "L")],
)
def test_sharing_modes_count_what_their_structure_implies(sharing, attentions, ffns):
    config = tiny_config(num_hidden_layers=4, sharing=sharing)
    layers = config.num_hidden_layers
    n_att = layers if attentions == "L" else attentions
    n_ffn = layers if ffns == "L" else ffns
    expected = (
        outside_blocks(config)
        + n_att * block_params(config, ffn=False)
        + n_ffn * block_params(config, attention=False)
    )
    assert AlbertBackbone(config).count_params() == expected


def test_full_sharing_count_does_not_depend_on_depth():
    counts = {AlbertBackbone(tiny_config(num_hidden_layers=n)).count_params() for n in (1, 3, 12)}
    assert len(counts) == 1


def test_groups_times_inner_blocks():
    config = tiny_config(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=3)
    backbone = AlbertBackbone(config)
    assert [len(group) for group in backbone.blocks] == [3, 3]
    assert backbone.count_params() == outside_blocks(config) + 6 * block_params(config)


def test_outputs_and_any_sequence_length():
    config = tiny_config()
    backbone = AlbertBackbone(config)
    for seq in (5, 17, config.max_position_embeddings):
        outputs = backbone(backbone_batch(config, batch=2, seq=seq))
        assert tuple(outputs["sequence_output"].shape) == (2, seq, config.hidden_size)
        assert tuple(outputs["pooled_output"].shape) == (2, config.hidden_size)


def test_padding_does_not_change_real_positions():
    config = tiny_config()
    backbone = AlbertBackbone(config)
    short = backbone_batch(config, batch=1, seq=8, pad=False)
    padded = {k: np.pad(v, ((0, 0), (0, 5))) for k, v in short.items()}
    a = backbone(short)["sequence_output"]
    b = backbone(padded)["sequence_output"][:, :8]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_too_long_sequence_is_an_error():
    config = tiny_config()
    backbone = AlbertBackbone(config)
    with pytest.raises(Exception, match="(?i)indices|out of range|invalid"):
        backbone(backbone_batch(config, batch=1, seq=config.max_position_embeddings + 1))


@pytest.mark.slow
def test_save_and_reload(tmp_path):
    config = tiny_config(num_hidden_groups=2, inner_group_num=2)
    backbone = AlbertBackbone(config)
    inputs = backbone_batch(config)
    assert_keras_archive_round_trip(backbone, inputs, tmp_path)
    assert_pretrained_round_trip(backbone, inputs, tmp_path)


def test_bad_config_argument():
    with pytest.raises(ValueError, match="AlbertConfig or a dict. Received: str"):
        AlbertBackbone("base")


JAX_SCRIPT = """
np.savez(sys.argv[3], **{k: np.asarray(v) for k, v in model(inputs).items()})
"""


@pytest.mark.slow
def test_jax_backend_gives_the_same_outputs(tmp_path):
    config = tiny_config(num_hidden_groups=2, inner_group_num=2, hidden_act="gelu")
    backbone = AlbertBackbone(config)
    inputs = backbone_batch(config)
    jax_out = run_on_jax(backbone, inputs, tmp_path, JAX_SCRIPT)
    tf_out = backbone(inputs)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(jax_out[name], tf_out[name], atol=1e-5)
    assert set(jax_out) == {"sequence_output", "pooled_output"}
    assert features.TOKEN_IDS in inputs


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [None, "mixed_bfloat16"])
def test_an_inference_call_fuses_each_shared_attention_kernel_once(dtype):
    """The (H, 3H) query/key/value kernel of a mixed policy: once per distinct attention layer in inference, per
    application in training. float32 applies the three projections apart and concatenates no kernel."""
    import tensorflow as tf

    config = tiny_config(num_hidden_layers=4, num_hidden_groups=2, hidden_dropout=0.0, attention_dropout=0.0)
    backbone = AlbertBackbone(config, dtype=dtype)
    inputs = {k: tf.constant(v) for k, v in backbone_batch(config).items()}

    def concats(training):
        graph = tf.function(lambda x: backbone(x, training=training)).get_concrete_function(inputs).graph
        return sum(op.type == "ConcatV2" for op in graph.get_operations())

    distinct = len(backbone.attention_layers())
    # Kernel and bias: two concats per fusion.
    per_fusion = 0 if dtype is None else 2
    assert concats(False) == per_fusion * distinct
    assert concats(True) == per_fusion * config.num_hidden_layers
    inference, training = (backbone(inputs, training=t)["sequence_output"] for t in (False, True))
    np.testing.assert_array_equal(np.asarray(inference, "float32"), np.asarray(training, "float32"))
