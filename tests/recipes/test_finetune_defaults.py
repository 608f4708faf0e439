import pytest

from albert_tf import AlbertConfig
from albert_tf.recipes import FinetuneConfig
from albert_tf.recipes.config import default_learning_rate


@pytest.mark.parametrize("hidden_size, expected", [
    (4096, 2e-5), (1024, 2e-5), (768, 2e-5), (512, 4.5e-5), (256, 1.8e-4), (128, 7.2e-4), (64, 2.88e-3),
])
def test_default_learning_rate_follows_the_width_rule(hidden_size, expected):
    assert default_learning_rate(hidden_size) == pytest.approx(expected)


def test_no_learning_rate_resolves_by_model_width_and_an_explicit_one_is_kept():
    small = AlbertConfig(hidden_size=128, num_attention_heads=2, intermediate_size=512)
    config = FinetuneConfig(task="sst2")
    assert config.learning_rate is None
    assert config.resolved(small).learning_rate == pytest.approx(7.2e-4)
    assert config.resolved(AlbertConfig()).learning_rate == pytest.approx(2e-5)
    explicit = FinetuneConfig(task="sst2", learning_rate=3e-5, pooling="cls", fixed_shapes=False)
    assert explicit.resolved(small) == explicit
    # The resolved rate round-trips through the run file.
    assert FinetuneConfig.from_dict(config.resolved(small).to_dict()).learning_rate == pytest.approx(7.2e-4)


def test_auto_pooling_resolves_by_model_width_and_an_explicit_one_is_kept():
    config = FinetuneConfig(task="sst2")
    assert config.pooling == "auto"
    for hidden_size, expected in ((64, "mean"), (128, "mean"), (512, "mean"), (767, "mean"), (768, "cls"),
                                  (4096, "cls")):
        model_config = AlbertConfig(hidden_size=hidden_size, num_attention_heads=1, intermediate_size=4)
        assert config.resolved(model_config).pooling == expected, hidden_size
    narrow = AlbertConfig(hidden_size=128, num_attention_heads=2, intermediate_size=512)
    assert FinetuneConfig(task="sst2", pooling="cls").resolved(narrow).pooling == "cls"
    assert FinetuneConfig(task="sst2", pooling="mean").resolved(AlbertConfig()).pooling == "mean"
    # The run file records what was used, not "auto".
    resolved = config.resolved(narrow)
    assert FinetuneConfig.from_dict(resolved.to_dict()).pooling == "mean"


@pytest.mark.parametrize("bad, message", [
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(learning_rate=-1e-5), "learning_rate"),
    (dict(pooling="max"), "pooling='max'"),
    (dict(truncate_from="left"), "truncate_from='left'"),
    (dict(task="squad", truncate_from="start"), "applies to classification and regression"),
    (dict(max_windows=0), "max_windows=0"),
    (dict(task="tagging", max_windows=2), "applies to classification and regression"),
])
def test_bad_settings_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        FinetuneConfig(**{"task": "sst2", **bad})
    with pytest.raises(ValueError, match="hidden_size"):
        default_learning_rate(0)


def test_a_runs_settings_are_found_beside_its_best_model_and_old_runs_read_as_defaults(tmp_path):
    import json

    from albert_tf.recipes import RunSettings, run_settings

    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    config = FinetuneConfig(task="sst2", truncate=True, truncate_from="middle", max_windows=4, max_seq_length=96)
    (run / "finetune.json").write_text(json.dumps({"config": config.to_dict()}))
    expected = RunSettings(max_seq_length=96, truncate_from="middle", max_windows=4, reads_pairs=False)
    assert run_settings(str(run / "best")) == run_settings(str(run / "best") + "/") == expected
    assert run_settings(str(run)) == RunSettings()  # not a run's best/: no run record to read
    # Text pairs: a pair column, or a GLUE task of two texts.
    for pairs in (config.replace(text_pair_column="b"), FinetuneConfig(task="mrpc")):
        (run / "finetune.json").write_text(json.dumps({"config": pairs.to_dict()}))
        assert run_settings(str(run / "best")).reads_pairs, pairs
    # A run written before the settings existed: no keys, so BERT's rule, and its config still loads.
    old = config.to_dict()
    del old["truncate_from"], old["max_windows"]
    (run / "finetune.json").write_text(json.dumps({"config": old}))
    assert run_settings(str(run / "best")) == RunSettings(max_seq_length=96)
    assert FinetuneConfig.from_dict(old).truncate_from == "end" and FinetuneConfig.from_dict(old).max_windows == 1
