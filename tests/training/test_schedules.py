import keras
import numpy as np
import pytest

from albert_tf.schedules import WarmupLinearDecay


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.0),  # warmup starts at 0: the first update does nothing
        (1, 0.1),  # 1.0 * 1 / 10
        (9, 0.9),  # last warmup step
        (10, 0.9),  # decay over ALL 100 steps: 1 - 10/100, not 1.0
        (55, 0.45),
        (99, 0.01),
        (100, 0.0),
        (250, 0.0),  # clamped, never negative
    ],
)
def test_matches_original_warmup_and_decay(step, expected):
    schedule = WarmupLinearDecay(1.0, warmup_steps=10, total_steps=100)
    np.testing.assert_allclose(float(schedule(step)), expected, atol=1e-7)


def test_paper_recipe_values():
    # lr 0.00176, 3125 warmup steps, 125k steps (ALBERT paper).
    schedule = WarmupLinearDecay(0.00176, 3125, 125_000)
    np.testing.assert_allclose(
        float(schedule(1000)), 0.00176 * 1000 / 3125, rtol=1e-6
    )
    np.testing.assert_allclose(
        float(schedule(3125)), 0.00176 * (1 - 3125 / 125_000), rtol=1e-6
    )
    np.testing.assert_allclose(
        float(schedule(100_000)), 0.00176 * 25_000 / 125_000, rtol=1e-5
    )


def test_no_warmup_is_pure_decay():
    schedule = WarmupLinearDecay(2.0, warmup_steps=0, total_steps=4)
    values = [float(schedule(step)) for step in range(6)]
    np.testing.assert_allclose(values, [2.0, 1.5, 1.0, 0.5, 0.0, 0.0])


def test_accepts_int64_iteration_variable():
    iterations = keras.Variable(7, dtype="int64", trainable=False)
    schedule = WarmupLinearDecay(1.0, warmup_steps=10, total_steps=100)
    np.testing.assert_allclose(float(schedule(iterations)), 0.7, atol=1e-7)


def test_config_round_trip():
    schedule = WarmupLinearDecay(0.00176, 3125, 125_000)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, WarmupLinearDecay)
    assert restored.get_config() == schedule.get_config()


@pytest.mark.parametrize(
    "args, message",
    [
        ((-1.0, 1, 2), "peak_learning_rate=-1.0"),
        ((1.0, 1, 0), "total_steps=0"),
        ((1.0, 5, 2), "warmup_steps=5"),
        ((1.0, 1.5, 2), "warmup_steps=1.5"),
    ],
)
def test_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        WarmupLinearDecay(*args)
