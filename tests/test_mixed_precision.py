"""mixed_bfloat16 pretraining follows the float32 loss curve within a stated tolerance."""

import keras
import numpy as np
import pytest

from albert_tf.training.trainer import build_pretrainer
from helpers import pretraining_batch, tiny_config

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
    assert trainer.model.backbone.dtype_policy.compute_dtype == "bfloat16"
    assert trainer.compile_step == "none"
    assert all(v.dtype == "float32" for v in trainer.model.trainable_variables)
    assert len(float32) == 8 and float32[0] - float32[-1] > 10 * LOSS_RTOL * float32[0]
    np.testing.assert_allclose(bfloat16, float32, rtol=LOSS_RTOL)


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
    for saved, restored in zip(weights_of(first.model), weights_of(resumed.model)):
        np.testing.assert_array_equal(saved, restored)
    record = resumed.train()
    assert record["step"] == 3 and np.isfinite(record["loss"])
    run = json.loads((tmp_path / "training_config.json").read_text())
    assert run["resolved"]["mixed_precision"] == "mixed_bfloat16"
