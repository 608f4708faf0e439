"""Random batches and weights for the speed benches: the shapes matter, not the values."""

import numpy as np


def pretraining_arrays(batch, seq, predictions, vocab, seed=0):
    """One batch of random token ids, two segments, `predictions` masked positions and SOP labels.

    Returns:
        dict of NumPy arrays: token_ids, segment_ids, padding_mask (batch, seq);
        mask_positions, mask_ids, mask_weights (batch, predictions);
        sentence_order_label (batch,).
    """
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(5, vocab, (batch, seq)).astype("int32"),
        "segment_ids": (np.arange(seq) >= seq // 2).astype("int32")[None].repeat(batch, 0),
        "padding_mask": np.ones((batch, seq), "int32"),
        "mask_positions": np.sort(rng.choice(np.arange(1, seq), (batch, predictions)), -1).astype("int32"),
        "mask_ids": rng.integers(5, vocab, (batch, predictions)).astype("int32"),
        "mask_weights": np.ones((batch, predictions), "float32"),
        "sentence_order_label": rng.integers(0, 2, (batch,)).astype("int32"),
    }


def backbone_arrays(batch, seq, vocab=30000, seed=0):
    """Random [CLS] ... [SEP] sequences of `seq` pieces, two segments, no padding: a backbone's inputs.

    Returns:
        dict of int32 NumPy arrays (batch, seq): token_ids, segment_ids, padding_mask.
    """
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, vocab, (batch, seq)).astype("int32")
    token_ids[:, 0], token_ids[:, -1] = 2, 3
    return {
        "token_ids": token_ids,
        "segment_ids": (np.arange(seq) >= seq // 2).astype("int32")[None].repeat(batch, 0),
        "padding_mask": np.ones((batch, seq), "int32"),
    }


def move_off_initial_values(model, seed=0, stddev=0.02):
    """Adds normal noise to every weight of `model`, as training moves them.

    A graph with the weights frozen in drops an all-zero bias (the
    initializer's), and with it the fusion of a matmul with its bias and
    activation: an untrained model would time a graph no trained one runs.
    """
    rng = np.random.default_rng(seed)
    model.set_weights([w + rng.normal(0.0, stddev, w.shape).astype(w.dtype) for w in model.get_weights()])
