"""Random pretraining batches for the speed benches: the shapes matter, not the values."""

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
