import dataclasses
import json

import pytest

from albert_tf.config import PRESETS, AlbertConfig
from albert_tf.recipes.config import FinetuneConfig
from albert_tf.training.config import TrainerConfig
from input_pipeline import PretrainingDataConfig


def test_presets_match_the_papers_shapes():
    shapes = {name: (c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                     c.intermediate_size) for name, c in PRESETS.items()}
    assert shapes["base"] == (768, 12, 12, 3072)
    assert shapes["large"] == (1024, 24, 16, 4096)
    assert shapes["xlarge"] == (2048, 24, 16, 8192)
    assert shapes["xxlarge"] == (4096, 12, 64, 16384)
    assert PRESETS["base"].hidden_dropout == 0.0 and PRESETS["base-v1"].hidden_dropout == 0.1
    assert PRESETS["xxlarge-v1"].hidden_dropout == 0.0
    assert PRESETS["base-v2"] is PRESETS["base"]


def test_json_round_trip(tmp_path):
    config = AlbertConfig.from_preset("large", num_hidden_groups=2, hidden_act="gelu")
    config.save(str(tmp_path / "config.json"))
    assert AlbertConfig.load(str(tmp_path)) == config


def test_reads_original_albert_config_json(tmp_path):
    # The file google-research/albert ships with albert_base v2.
    original = {
        "attention_probs_dropout_prob": 0, "hidden_act": "gelu", "hidden_dropout_prob": 0,
        "embedding_size": 128, "hidden_size": 768, "initializer_range": 0.02,
        "intermediate_size": 3072, "max_position_embeddings": 512, "num_attention_heads": 12,
        "num_hidden_layers": 12, "num_hidden_groups": 1, "net_structure_type": 0,
        "gap_size": 0, "num_memory_blocks": 0, "inner_group_num": 1,
        "down_scale_factor": 1, "type_vocab_size": 2, "vocab_size": 30000,
    }
    (tmp_path / "albert_config.json").write_text(json.dumps(original))
    config = AlbertConfig.load(str(tmp_path / "albert_config.json"))
    # The original's "gelu" is the tanh approximation.
    assert config.hidden_act == "gelu_new"
    assert config == AlbertConfig.from_preset("base")


def test_hf_gelu_is_exact_erf():
    config = AlbertConfig.from_dict({"model_type": "albert", "hidden_act": "gelu"})
    assert config.hidden_act == "gelu"
    assert AlbertConfig.from_dict({"hidden_act": "gelu"}, gelu_is_tanh=False).hidden_act == "gelu"


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError, match=r"Unknown config keys \['hiden_size'\].*hidden_size"):
        AlbertConfig.from_dict({"hiden_size": 768})


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(num_attention_heads=5), "num_attention_heads.*must divide.*num_attention_heads=5, hidden_size=768"),
        (dict(num_hidden_groups=13), "num_hidden_groups.*num_hidden_groups=13, num_hidden_layers=12"),
        (dict(hidden_size=0), "hidden_size=0"),
        (dict(vocab_size=3.5), "vocab_size=3.5"),
        (dict(hidden_dropout=1.5), "hidden_dropout=1.5"),
        (dict(hidden_act="gelu2"), "hidden_act='gelu2'"),
        (dict(sharing="heads"), "sharing='heads'"),
        (dict(sharing="ffn", num_hidden_groups=2), "sharing='ffn', num_hidden_groups=2"),
        (dict(embedding_projection=False), "embedding_projection=False.*embedding_size=128, hidden_size=768"),
        (dict(embedding_projection=0), "embedding_projection.*True or False. Received: embedding_projection=0"),
        (dict(group_formula="float"), "group_formula='float'"),
    ],
)
def test_impossible_configs_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        AlbertConfig(**changes)


def test_unknown_preset():
    with pytest.raises(ValueError, match="Unknown preset 'huge'.*base"):
        AlbertConfig.from_preset("huge")


def test_group_index_is_exact_integer_math():
    config = AlbertConfig(num_hidden_layers=12, num_hidden_groups=5)
    assert [config.group_index(i) for i in range(12)] == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4]


# (L, G): the layers where the formulas disagree, as (layer, exact, original, hf).
# The original's `int(i / L * G)` and HF's `int(i / (L / G))`, in floating point.
GROUPING_CORNERS = {
    (22, 22): [(15, 15, 14, 15)],
    (44, 22): [(30, 15, 14, 15)],
    (23, 23): [(13, 13, 12, 13)],
    (18, 14): [(9, 7, 7, 6)],
}


@pytest.mark.parametrize("layers, groups", sorted(GROUPING_CORNERS))
def test_group_formulas_differ_only_in_corner_cases(layers, groups):
    by_formula = {
        formula: AlbertConfig(num_hidden_layers=layers, num_hidden_groups=groups, group_formula=formula).group_indices()
        for formula in ("exact", "original", "hf")
    }
    assert by_formula["exact"] == tuple(i * groups // layers for i in range(layers))
    differing = [
        (i, by_formula["exact"][i], by_formula["original"][i], by_formula["hf"][i])
        for i in range(layers) if len({by_formula[f][i] for f in by_formula}) > 1
    ]
    assert differing == GROUPING_CORNERS[layers, groups]


def test_group_formulas_agree_on_usual_shapes():
    for layers in range(1, 49):
        for groups in range(1, min(layers, 13) + 1):
            mappings = {AlbertConfig(num_hidden_layers=layers, num_hidden_groups=groups,
                                     group_formula=formula).group_indices() for formula in ("exact", "original", "hf")}
            assert len(mappings) == 1, (layers, groups)


def test_only_the_original_formula_leaves_a_group_unused():
    config = AlbertConfig(num_hidden_layers=22, num_hidden_groups=22)
    assert config.used_groups == tuple(range(22))
    assert config.replace(group_formula="hf").used_groups == tuple(range(22))
    assert config.replace(group_formula="original").used_groups == tuple(g for g in range(22) if g != 15)


def test_grouped_by_a_formula_changes_the_config_only_where_the_grouping_changes():
    usual = AlbertConfig(num_hidden_groups=3)
    assert usual.grouped_by("original") is usual and usual.grouped_by("hf") is usual
    corner = AlbertConfig(num_hidden_layers=22, num_hidden_groups=22)
    assert corner.grouped_by("original").group_formula == "original"
    assert corner.grouped_by("hf") is corner  # HF's formula groups L = G = 22 exactly


def test_new_fields_are_written_only_when_set(tmp_path):
    assert "embedding_projection" not in AlbertConfig().to_dict()
    assert "group_formula" not in AlbertConfig().to_dict()
    config = AlbertConfig(embedding_size=768, embedding_projection=False, num_hidden_layers=22,
                          num_hidden_groups=22, group_formula="original")
    values = config.to_dict()
    assert values["embedding_projection"] is False and values["group_formula"] == "original"
    config.save(str(tmp_path / "config.json"))
    assert AlbertConfig.load(str(tmp_path / "config.json")) == config


@pytest.mark.parametrize("config", [
    AlbertConfig(hidden_size=64, num_attention_heads=4),
    TrainerConfig(num_steps=40, warmup_steps=None),
    FinetuneConfig(task="sst2", label_names=("neg", "pos")),
    PretrainingDataConfig(max_seq_length=64, task="nsp"),
], ids=lambda c: type(c).__name__)
def test_every_config_shares_the_json_round_trip_and_key_check(config, tmp_path):
    config.save(str(tmp_path / "c.json"))
    assert type(config).load(str(tmp_path / "c.json")) == config
    with pytest.raises(ValueError, match=r"Unknown .*\['not_a_field'\]\. Valid keys: \[.*'"):
        type(config).from_dict({**config.to_dict(), "not_a_field": 1})
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        type(config).load(str(tmp_path / "bad.json"))


@pytest.mark.parametrize("cls, name", [(AlbertConfig, "hidden_size"), (TrainerConfig, "num_steps"),
                                       (FinetuneConfig, "batch_size"), (PretrainingDataConfig, "max_ngram")])
def test_field_checks_say_the_same_thing_everywhere(cls, name):
    values = {"task": "sst2"} if cls is FinetuneConfig else {}
    with pytest.raises(ValueError, match=f"`{name}` must be a positive integer. Received: {name}=0"):
        cls(**values, **{name: 0})


def test_warmup_is_a_share_of_the_steps_unless_given():
    assert TrainerConfig().num_warmup_steps == 3125
    assert TrainerConfig(num_steps=30).num_warmup_steps == 1
    assert TrainerConfig(num_steps=30, warmup_steps=0).num_warmup_steps == 0
    with pytest.raises(ValueError, match="warmup_steps=31, num_steps=30"):
        TrainerConfig(num_steps=30, warmup_steps=31)


def test_command_line_flags_come_from_the_field_help():
    import argparse

    from albert_tf.commands.flags import add_config_flags, config_kwargs

    parser = argparse.ArgumentParser()
    add_config_flags(parser, FinetuneConfig, exclude=("task",))
    args = parser.parse_args(["--labels", "neg", "pos", "--no-bucket", "--epochs", "2"])
    config = FinetuneConfig(task="sst2", **config_kwargs(FinetuneConfig, args, exclude=("task",)))
    assert config.label_names == ("neg", "pos") and config.bucket is False and config.epochs == 2
    epochs = next(a for a in parser._actions if a.dest == "epochs")
    assert epochs.help == dataclasses.fields(FinetuneConfig)[4].metadata["help"]


def test_every_command_line_flag_says_what_it_does():
    import argparse

    from albert_tf import cli

    subparsers = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    silent = [(command, action.option_strings[0])
              for command, parser in subparsers.choices.items()
              for action in parser._actions if action.option_strings and not (action.help or "").strip()]
    assert silent == []


def test_sizes_beyond_any_albert_are_refused_and_every_preset_fits():
    from albert_tf.config import PRESETS, SIZE_BOUNDS

    for name, bound in SIZE_BOUNDS.items():
        assert all(getattr(config, name) <= bound for config in PRESETS.values())
        with pytest.raises(ValueError, match=rf"`{name}` must be an integer in \[1, {bound}\]\. Received: "
                                             rf"{name}={bound + 1}"):
            AlbertConfig(**{name: bound + 1})
