"""The strategy.run training loop on one device: accumulation, precision, divergence, configs."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import Trainer, TrainerConfig
from albert_tf.utils.errors import CHECKPOINT, RunStopped
from training_helpers import TINY_MODEL, array_dataset_fn, max_difference, synthetic_examples, tiny_trainer_config, weights_of

EXAMPLES = synthetic_examples()


def train(run_dir, **overrides):
    trainer = Trainer(TINY_MODEL, tiny_trainer_config(**overrides), str(run_dir), array_dataset_fn(EXAMPLES),
                      print_fn=lambda *_: None)
    return trainer, trainer.train()


@pytest.mark.slow
def test_accumulating_micro_batches_equals_one_big_batch(tmp_path):
    # Micro-batches hold different numbers of masked tokens: the MLM loss must
    # still be normalized by the whole batch's count, as one big batch is.
    big, _ = train(tmp_path / "big", global_batch_size=8)
    accumulated, _ = train(tmp_path / "accumulated", global_batch_size=8, accumulation_steps=4)
    assert max_difference(weights_of(big.runner.model), weights_of(accumulated.runner.model)) < 1e-5


def test_accumulated_micro_batches_take_one_big_batchs_step(tmp_path):
    # The same property as above in one step, run eagerly (nothing to trace): a micro-batch
    # normalized by its own mask count moves the weights away from one big batch's step.
    tf.config.run_functions_eagerly(True)
    try:
        big, _ = train(tmp_path / "big", global_batch_size=8, num_steps=1)
        accumulated, _ = train(tmp_path / "accumulated", global_batch_size=8, accumulation_steps=4, num_steps=1)
    finally:
        tf.config.run_functions_eagerly(False)
    assert max_difference(weights_of(big.runner.model), weights_of(accumulated.runner.model)) < 1e-5


@pytest.mark.slow
def test_xla_compiled_steps_match_the_plain_steps(tmp_path):
    plain, plain_record = train(tmp_path / "plain", global_batch_size=8, accumulation_steps=2, compile_step="none")
    compiled, compiled_record = train(tmp_path / "xla", global_batch_size=8, accumulation_steps=2,
                                      compile_step="forward")
    graph = compiled.runner.step_graph(compiled.input_iterator(0)).as_graph_def()
    assert any(f.attr["_XlaMustCompile"].b for f in graph.library.function)  # the forward pass went to XLA
    assert max_difference(weights_of(plain.runner.model), weights_of(compiled.runner.model)) < 1e-5
    assert compiled_record["loss"] == pytest.approx(plain_record["loss"], rel=1e-5)
    # The weights moved: equal weights are not two runs that did nothing.
    assert max_difference(weights_of(plain.runner.model), weights_of(Trainer(
        TINY_MODEL, tiny_trainer_config(), str(tmp_path / "fresh"), array_dataset_fn(EXAMPLES)).runner.model)) > 1e-3


def test_mixed_bfloat16_step_runs_on_cpu_with_finite_loss(tmp_path):
    trainer, record = train(tmp_path, num_steps=1, mixed_precision="mixed_bfloat16")
    assert trainer.runner.model.backbone.dtype_policy.compute_dtype == "bfloat16"
    assert np.isfinite(record["loss"]) and record["loss"] > 0


@pytest.mark.slow
def test_divergence_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    train(tmp_path, num_steps=2, checkpoint_every=2)
    with pytest.raises(RunStopped, match=r"^diverged at step \d+") as raised:
        train(tmp_path, num_steps=8, checkpoint_every=2, learning_rate=1e30)
    assert raised.value.saved == CHECKPOINT and raised.value.path.endswith("ckpt-2")
    assert "resumes from that checkpoint" in raised.value.then
    assert tf.train.latest_checkpoint(tmp_path / "checkpoints").endswith("ckpt-2")
    resumed = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=8), str(tmp_path), array_dataset_fn(EXAMPLES),
                      print_fn=lambda *_: None)
    assert resumed.restore() == 2
    assert all(np.isfinite(w).all() for w in weights_of(resumed.runner.model))


@pytest.mark.slow
def test_resuming_a_different_model_is_an_error(tmp_path):
    train(tmp_path, num_steps=1)
    with pytest.raises(ValueError, match="different model"):
        Trainer(TINY_MODEL.replace(hidden_size=32), tiny_trainer_config(), str(tmp_path), array_dataset_fn(EXAMPLES))


def test_trainer_config_round_trips_and_validates(tmp_path):
    config = TrainerConfig(global_batch_size=64, accumulation_steps=4, mixed_precision="mixed_float16")
    config.save(tmp_path / "c.json")
    assert TrainerConfig.load(tmp_path / "c.json") == config
    assert config.micro_batch_size == 16
    with pytest.raises(ValueError, match="accumulation_steps=3, global_batch_size=64"):
        TrainerConfig(global_batch_size=64, accumulation_steps=3)
    with pytest.raises(ValueError, match="mixed_precision='float16'"):
        TrainerConfig(mixed_precision="float16")
    with pytest.raises(ValueError, match="Unknown TrainerConfig keys"):
        TrainerConfig.from_dict({"batch": 1})


def test_evaluate_pretraining_pools_its_sums_over_unequal_batches():
    from input_pipeline import features
    from albert_tf.training import build_pretrainer, evaluate_pretraining

    examples = synthetic_examples(num_examples=24, seed=3)
    model = build_pretrainer(TINY_MODEL)
    inputs, labels = features.split_pretraining_example(examples)
    outputs = {name: value.numpy() for name, value in model(inputs, training=False).items()}
    # Labels the model gets right exactly where `hit` says: the last 4 examples and every third one before.
    hit = (np.arange(24) >= 20) | (np.arange(24) % 3 == 0)
    predicted = outputs["mlm_logits"].argmax(-1)
    examples = {**examples,
                features.MASK_IDS: np.where(hit[:, None], predicted, (predicted + 1) % TINY_MODEL.vocab_size),
                features.SENTENCE_ORDER_LABEL: np.where(hit, 0, 1) ^ outputs["sop_logits"].argmax(-1)}
    _, labels = features.split_pretraining_example(examples)
    # Batches of 10, 10 and 4 examples: the mean of the batches' accuracies (0.4, 0.3, 1.0) is not the pooled one.
    dataset = tf.data.Dataset.from_tensor_slices(examples).batch(10).map(features.split_pretraining_example)
    result = evaluate_pretraining(model, dataset, num_batches=3, baseline_token_id=7)

    weights, ids = labels[features.MASK_WEIGHTS], labels[features.MASK_IDS]
    assert result["sop_accuracy"] == pytest.approx(11 / 24, rel=1e-6)
    assert result["mlm_accuracy"] == pytest.approx((weights * hit[:, None]).sum() / weights.sum(), rel=1e-6)
    log_probs = outputs["mlm_logits"] - np.log(np.exp(outputs["mlm_logits"]).sum(-1, keepdims=True))
    mlm_ce = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    order = labels[features.SENTENCE_ORDER_LABEL]
    sop_log_probs = outputs["sop_logits"] - np.log(np.exp(outputs["sop_logits"]).sum(-1, keepdims=True))
    ones = order.sum()
    expected = {
        "mlm_loss": (weights * mlm_ce).sum() / weights.sum(),
        "sop_loss": -np.mean(sop_log_probs[np.arange(len(order)), order]),
        "sop_majority_accuracy": max(ones, len(order) - ones) / len(order),
        "unigram_mlm_accuracy": (weights * (ids == 7)).sum() / weights.sum(),
    }
    for name, value in expected.items():
        assert result[name] == pytest.approx(value, rel=1e-5), name
    assert result["num_examples"] == 24 and result["num_masked"] == int(weights.sum())


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_word_embedding_lr_scale_reaches_the_word_table_alone(optimizer):
    from albert_tf.training.step_runner import build_pretrainer, trainer_optimizer

    model = build_pretrainer(TINY_MODEL)
    config = TrainerConfig(word_embedding_lr_scale=0.25, optimizer=optimizer, num_steps=10)
    built = trainer_optimizer(config)
    built.build(model.trainable_variables)
    factors = {v.path: factor for v, factor in zip(model.trainable_variables, built._rate_factors)}
    assert [path for path, factor in factors.items() if factor != 1.0] == [model.backbone.word_embeddings.embeddings.path]
    assert factors[model.backbone.word_embeddings.embeddings.path] == 0.25
    with pytest.raises(ValueError, match="word_embedding_lr_scale"):
        TrainerConfig(word_embedding_lr_scale=-1.0)
