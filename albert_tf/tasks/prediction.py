"""Running a task model over variable-length examples and undoing the padding."""

import numpy as np

from input_pipeline import features
from input_pipeline.finetuning.batching import batch_order, pad_batch


def predict_examples(model, inputs, batch_size=64):
    """Outputs of `model` for each example, in input order, padding stripped.

    Batches are formed from examples of similar length (sorted within
    chunks), so short examples are not padded to long ones. Keras'
    `predict` cannot be used: it concatenates batches, which fails when
    per-piece outputs (tagging, QA) have a different length in each batch.

    Args:
        model: a task model.
        inputs: list of dicts of int32 arrays, (seq,) or (num_choices, seq).

    Returns:
        list of dicts of NumPy arrays, one per example. Outputs with a piece
        axis are cut back to that example's own length.
    """
    lengths = [np.asarray(x[features.TOKEN_IDS]).shape[-1] for x in inputs]
    # Outputs whose second axis is the (unknown-length) piece axis of 1-D inputs.
    per_piece = set()
    if np.ndim(inputs[0][features.TOKEN_IDS]) == 1:
        per_piece = {k for k, t in model.output.items() if len(t.shape) >= 2 and t.shape[1] is None}
    results = [None] * len(inputs)
    for indices in batch_order(lengths, batch_size, bucket=True):
        batch = pad_batch([inputs[i] for i in indices])
        outputs = {k: np.asarray(v) for k, v in model.predict_on_batch(batch).items()}
        for row, i in enumerate(indices):
            results[i] = {k: v[row, : lengths[i]] if k in per_piece else v[row] for k, v in outputs.items()}
    return results
