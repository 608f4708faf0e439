import numpy as np
import pytest

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.config import AlbertConfig
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
    return v * e + p * e + c.type_vocab_size * e + 2 * e + e * h + h + h * h + h


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


@pytest.mark.parametrize("dtype", [None, "mixed_bfloat16"])
def test_an_inference_call_fuses_each_shared_attention_kernel_once(dtype):
    """The (H, 3H) query/key/value kernel: once per distinct attention layer in inference, per application in training."""
    import tensorflow as tf

    config = tiny_config(num_hidden_layers=4, num_hidden_groups=2, hidden_dropout=0.0, attention_dropout=0.0)
    backbone = AlbertBackbone(config, dtype=dtype)
    inputs = {k: tf.constant(v) for k, v in backbone_batch(config).items()}

    def concats(training):
        graph = tf.function(lambda x: backbone(x, training=training)).get_concrete_function(inputs).graph
        return sum(op.type == "ConcatV2" for op in graph.get_operations())

    distinct = len(backbone.attention_layers())
    # Kernel and bias: two concats per fusion.
    assert concats(False) == 2 * distinct
    assert concats(True) == 2 * config.num_hidden_layers
    inference, training = (backbone(inputs, training=t)["sequence_output"] for t in (False, True))
    np.testing.assert_array_equal(np.asarray(inference, "float32"), np.asarray(training, "float32"))
