"""mixed_bfloat16 pretraining follows the float32 loss curve within a stated tolerance; the backbone casts its
shared weights once per call."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from albert_tf import AlbertBackbone
from albert_tf.training.step_runner import build_pretrainer
from helpers import backbone_batch, pretraining_batch, tiny_config

# bfloat16 keeps 8 significant bits (relative rounding 2^-9 per op); the
# softmax, LayerNorm and losses stay float32, so the loss drifts far less.
# Measured: at most 0.02% over 8 Adam steps of the tiny model; 1% leaves room.
LOSS_RTOL = 0.01


def pretraining_losses(precision, steps=8):
    keras.utils.set_random_seed(1)
    config = tiny_config()
    model = build_pretrainer(config, precision)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    x, y = pretraining_batch(config, batch=4, seq=24)
    return model, np.array([model.train_on_batch(x, y, return_dict=True)["loss"] for _ in range(steps)])


@pytest.mark.slow
def test_mixed_bfloat16_loss_stays_within_tolerance_of_float32():
    _, float32 = pretraining_losses("float32")
    model, bfloat16 = pretraining_losses("mixed_bfloat16")
    assert model.backbone.blocks[0][0].attention.compute_dtype == "bfloat16"
    # The curve must move by more than the tolerance, or matching it proves nothing.
    assert float32[0] - float32[-1] > 10 * LOSS_RTOL * float32[0]
    np.testing.assert_allclose(bfloat16, float32, rtol=LOSS_RTOL)


class PerUseBackbone(AlbertBackbone):
    """The backbone with Keras' own functional call: every read of a weight casts it."""

    def call(self, inputs, training=None, mask=None, **kwargs):
        return super(AlbertBackbone, self).call(inputs, training=training, mask=mask, **kwargs)


def outputs_and_gradients(backbone, weights, inputs, training=None):
    """(sequence_output, {variable path: float32 gradient}, weight casts) of a fixed loss, from `weights`."""
    backbone.set_weights(weights)
    x = {k: tf.constant(v) for k, v in inputs.items()}

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            out = backbone(x, training=training)
            loss = ops.sum(ops.cast(out["sequence_output"], "float32") * 0.1) + ops.sum(
                ops.cast(out["pooled_output"], "float32"))
        return out["sequence_output"], tape.gradient(loss, backbone.trainable_variables)

    sequence, gradients = step(x)
    variable_casts = sum(
        1 for op in step.get_concrete_function(x).graph.get_operations()
        if op.type == "Cast" and op.inputs[0].op.type == "ReadVariableOp"
    )
    paths = [v.path for v in backbone.trainable_variables]
    return (ops.convert_to_numpy(ops.cast(sequence, "float32")),
            {p: ops.convert_to_numpy(tf.convert_to_tensor(g)) for p, g in zip(paths, gradients)}, variable_casts)


GROUPED = dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)


@pytest.mark.slow
@pytest.mark.parametrize("sharing", [dict(num_hidden_layers=4), GROUPED, dict(num_hidden_layers=4, sharing="ffn")])
def test_shared_weights_are_cast_once_per_call_with_the_per_use_results(sharing):
    """mixed_bfloat16: one cast per weight, the same outputs, gradients within bfloat16 rounding."""
    config = tiny_config(**sharing)
    inputs = backbone_batch(config)
    weights = AlbertBackbone(config).get_weights()
    once_out, once_grads, once_casts = outputs_and_gradients(
        AlbertBackbone(config, dtype="mixed_bfloat16"), weights, inputs)
    use_out, use_grads, use_casts = outputs_and_gradients(
        PerUseBackbone(config, dtype="mixed_bfloat16"), weights, inputs)
    model = AlbertBackbone(config, dtype="mixed_bfloat16")
    # Every float variable a bfloat16 layer reads (not LayerNorm's or the embeddings', which stay float32).
    autocast_variables = [v for v in model.weights if not any(
        part in v.path for part in ("layer_norm", "embeddings/"))]
    assert once_casts == len(autocast_variables) < use_casts
    # A cast is deterministic: the forward pass is bit-identical.
    np.testing.assert_array_equal(once_out, use_out)
    for path, gradient in use_grads.items():
        # The L gradients of a shared weight are summed in bfloat16 before the one cast to float32
        # (per use: each cast, then summed in float32). Measured: at most 2 bfloat16 ulps of the
        # largest entry (0.009) on this model; 0.03 fails any real difference.
        np.testing.assert_allclose(once_grads[path], gradient, rtol=0, atol=0.03 * np.abs(gradient).max(),
                                   err_msg=path)


@pytest.mark.slow
def test_training_calls_cast_at_every_use_as_keras_does():
    """In training the L gradients of a shared weight are summed in float32, exactly Keras' own."""
    config = tiny_config(num_hidden_layers=4, hidden_dropout=0.0, attention_dropout=0.0)
    inputs = backbone_batch(config)
    weights = AlbertBackbone(config).get_weights()
    train_out, train_grads, train_casts = outputs_and_gradients(
        AlbertBackbone(config, dtype="mixed_bfloat16"), weights, inputs, training=True)
    use_out, use_grads, use_casts = outputs_and_gradients(
        PerUseBackbone(config, dtype="mixed_bfloat16"), weights, inputs, training=True)
    assert train_casts == use_casts
    np.testing.assert_array_equal(train_out, use_out)
    for path, gradient in use_grads.items():
        np.testing.assert_array_equal(train_grads[path], gradient, err_msg=path)


@pytest.mark.slow
def test_float32_and_remat_read_the_weights_as_keras_does():
    """float32 casts nothing; under remat each application reads (and casts) the weights itself, gradients intact."""
    config = tiny_config(num_hidden_layers=3)
    inputs = backbone_batch(config)
    weights = AlbertBackbone(config).get_weights()
    out, grads, casts = outputs_and_gradients(AlbertBackbone(config), weights, inputs)
    use_out, use_grads, _ = outputs_and_gradients(PerUseBackbone(config), weights, inputs)
    assert casts == 0
    np.testing.assert_array_equal(out, use_out)
    for path in grads:
        # Summation order in the threaded kernels varies from run to run: ~1e-7 relative.
        np.testing.assert_allclose(grads[path], use_grads[path], rtol=1e-5, atol=1e-7, err_msg=path)
    remat_out, remat_grads, _ = outputs_and_gradients(
        AlbertBackbone(config, dtype="mixed_bfloat16", remat=True), weights, inputs)
    use_out, use_grads, _ = outputs_and_gradients(PerUseBackbone(config, dtype="mixed_bfloat16"), weights, inputs)
    # Not bit for bit: under remat the forward pass keeps nothing for the
    # backward pass, so TensorFlow's graph rewrite fuses the FFN's matmul, bias
    # and GELU into one oneDNN op that rounds to bfloat16 once; per use the
    # GELU's input is kept for its gradient and the GELU runs apart, rounding
    # each step. Measured: 0.2% of the largest output (about one bfloat16 ulp).
    np.testing.assert_allclose(remat_out, use_out, rtol=0, atol=0.01 * np.abs(use_out).max())
    for path, gradient in use_grads.items():
        assert np.abs(remat_grads[path]).max() > 0, path
        # The key bias's gradient is zero in exact arithmetic (softmax ignores a
        # constant added to a row of scores): what it holds is rounding noise
        # (measured up to 2.6e-6, seed 0), which the two forward passes'
        # roundings change; hence the floor, far below the 3% of every other weight's.
        np.testing.assert_allclose(remat_grads[path], gradient, rtol=0, atol=0.03 * np.abs(gradient).max() + 1e-5,
                                   err_msg=path)


def trainer_losses(run_dir, precision, steps=8):
    """Losses of `steps` Trainer steps (LAMB, no XLA) of the tiny model, logged every step."""
    from albert_tf.training import Trainer, read_log
    from training_helpers import TINY_MODEL, array_dataset_fn, synthetic_examples, tiny_trainer_config

    config = tiny_trainer_config(num_steps=steps, learning_rate=0.02, log_every=1, steps_per_loop=1,
                                 mixed_precision=precision, compile_step="none")
    # One batch of 8, seen at every step: a curve that falls (random tokens are not learned across batches).
    trainer = Trainer(TINY_MODEL, config, str(run_dir), array_dataset_fn(synthetic_examples(num_examples=8)),
                      print_fn=lambda *_: None)
    trainer.train()
    return trainer, np.array([record["loss"] for record in read_log(str(run_dir))])


@pytest.mark.slow
def test_trainer_in_mixed_bfloat16_stays_within_tolerance_of_float32(tmp_path):
    # The Trainer's own step (global-count losses, clipping, LAMB) without XLA:
    # the path "auto" takes on a CPU with bfloat16 units.
    _, float32 = trainer_losses(tmp_path / "float32", "float32")
    trainer, bfloat16 = trainer_losses(tmp_path / "bfloat16", "mixed_bfloat16")
    assert trainer.runner.model.backbone.dtype_policy.compute_dtype == "bfloat16"
    assert trainer.compile_step == "none"
    assert all(v.dtype == "float32" for v in trainer.runner.model.trainable_variables)
    assert len(float32) == 8 and float32[0] - float32[-1] > 10 * LOSS_RTOL * float32[0]
    np.testing.assert_allclose(bfloat16, float32, rtol=LOSS_RTOL)


def optimizer_state(optimizer):
    """{variable path: value} of an optimizer's own state, the loss-scaled optimizer's inner one included."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return {v.path.split("/", 1)[-1]: v.numpy() for v in inner.variables}


@pytest.mark.slow
def test_a_float32_run_resumes_under_mixed_bfloat16(tmp_path):
    # Older runs saved mixed_precision "float32"; the weights and optimizer
    # slots are float32 under every policy, so the checkpoint restores as is.
    import json

    from albert_tf.training import Trainer
    from training_helpers import TINY_MODEL, array_dataset_fn, synthetic_examples, tiny_trainer_config, weights_of

    examples = synthetic_examples()
    first = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=2, checkpoint_every=2, mixed_precision="float32"),
                    str(tmp_path), array_dataset_fn(examples), print_fn=lambda *_: None)
    first.train()
    lines = []
    resumed = Trainer(TINY_MODEL, tiny_trainer_config(num_steps=3, checkpoint_every=2,
                                                      mixed_precision="mixed_bfloat16"),
                      str(tmp_path), array_dataset_fn(examples), print_fn=lines.append)
    assert resumed.restore() == 2
    assert any("mixed_precision: 'float32' -> 'mixed_bfloat16'" in line for line in lines), lines
    for saved, restored in zip(weights_of(first.runner.model), weights_of(resumed.runner.model)):
        np.testing.assert_array_equal(saved, restored)
    saved, restored = optimizer_state(first.runner.optimizer), optimizer_state(resumed.runner.optimizer)
    assert saved.keys() == restored.keys() and len(saved) > 2
    for path, value in saved.items():
        np.testing.assert_array_equal(restored[path], value, err_msg=path)
    record = resumed.train()
    assert record["step"] == 3 and np.isfinite(record["loss"])
    run = json.loads((tmp_path / "training_config.json").read_text())
    assert run["resolved"]["mixed_precision"] == "mixed_bfloat16"


@pytest.mark.slow
@pytest.mark.parametrize("before, after", [("float32", "mixed_float16"), ("mixed_float16", "mixed_bfloat16")])
def test_a_resume_into_or_out_of_mixed_float16_is_refused_before_anything_changes(tmp_path, before, after):
    # The loss-scaled optimizer checkpoints its slots under other names: the
    # resume would restore the weights and restart LAMB's moments from zero.
    from albert_tf.training import Trainer
    from training_helpers import TINY_MODEL, array_dataset_fn, synthetic_examples, tiny_trainer_config

    examples = synthetic_examples()
    Trainer(TINY_MODEL, tiny_trainer_config(num_steps=2, checkpoint_every=2, mixed_precision=before),
            str(tmp_path), array_dataset_fn(examples), print_fn=lambda *_: None).train()
    saved = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    with pytest.raises(ValueError, match=f"trained in {before} .* resume it in {after}.*--mixed-precision {before}"):
        Trainer(TINY_MODEL, tiny_trainer_config(num_steps=3, checkpoint_every=2, mixed_precision=after),
                str(tmp_path), array_dataset_fn(examples), print_fn=lambda *_: None)
    assert {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == saved


def test_loss_scaling_follows_the_resolved_precision_not_the_config():
    from albert_tf.precision import PrecisionChoice
    from albert_tf.training.step_runner import StepRunner
    from training_helpers import TINY_MODEL, tiny_trainer_config

    strategy = tf.distribute.get_strategy()
    # The config says another precision than the one resolved (valid either way, so that a runner built
    # from the config's builds, and the assertions below tell): the run trains in the resolved one.
    scaled = StepRunner(TINY_MODEL, tiny_trainer_config(mixed_precision="float32"), strategy,
                        PrecisionChoice("mixed_float16", "none", "auto"))
    assert isinstance(scaled.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled.model.backbone.dtype_policy.name == "mixed_float16"
    plain = StepRunner(TINY_MODEL, tiny_trainer_config(mixed_precision="mixed_float16"), strategy,
                       PrecisionChoice("float32", "none", "auto"))
    assert not isinstance(plain.optimizer, keras.optimizers.LossScaleOptimizer)
    # The model too is built in the resolved precision, not the config's.
    assert plain.model.backbone.dtype_policy.name == "float32"
    assert plain.model.backbone.compute_dtype == "float32"


def test_finetuning_compiles_the_whole_step_on_a_tpu_and_nothing_elsewhere():
    from albert_tf.precision import choose_precision

    bf16_cpu = frozenset({"avx512_bf16"})
    assert choose_precision("finetune", "auto", 768, device="tpu", flags=bf16_cpu).compile_step == "whole"
    for device in ("cpu", "gpu"):
        assert choose_precision("finetune", "float32", 768, device=device, flags=bf16_cpu).compile_step == "none"
    assert choose_precision("finetune", "auto", 768, device="cpu", flags=bf16_cpu).precision == "mixed_bfloat16"
