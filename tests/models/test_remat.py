"""`remat=True` recomputes the shared blocks in the backward pass and changes nothing else."""

import keras
import numpy as np
import pytest

from albert_tf import AlbertBackbone, AlbertPretrainer
from helpers import pretraining_batch, tiny_config


def weights_after_steps(remat, steps=3):
    keras.utils.set_random_seed(1)
    config = tiny_config()
    model = AlbertPretrainer(AlbertBackbone(config, remat=remat))
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    x, y = pretraining_batch(config)
    for _ in range(steps):
        model.train_on_batch(x, y)
    return [v.numpy() for v in model.trainable_variables]


@pytest.mark.slow
def test_weights_are_equal_with_and_without_remat_after_optimizer_steps():
    plain, remat = weights_after_steps(False), weights_after_steps(True)
    assert len(plain) == len(remat)
    for a, b in zip(plain, remat):
        # Same math on the same inputs. Under remat the forward pass keeps nothing
        # for the backward pass, so TensorFlow's graph rewrite fuses the FFN's
        # matmul, bias and GELU into one oneDNN op, whose float32 rounding differs
        # from the separate ops': measured 1.0e-6 after three Adam steps at 1e-2
        # (1.3e-7 with the rewrite off).
        np.testing.assert_allclose(a, b, atol=3e-6)
    assert not all(np.array_equal(a, b) for a, b in zip(plain, weights_after_steps(False, steps=2)))


def test_remat_round_trips_through_the_backbone_config():
    backbone = AlbertBackbone(tiny_config(), remat=True)
    assert all(block.remat for group in backbone.blocks for block in group)
    assert AlbertBackbone.from_config(backbone.get_config()).remat


def test_remat_with_dropout_is_an_error():
    with pytest.raises(ValueError, match="remat=True.*hidden_dropout=0.1"):
        AlbertBackbone(tiny_config(hidden_dropout=0.1), remat=True)
