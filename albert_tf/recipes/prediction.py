"""Running a task model over variable-length examples and undoing the padding."""

import numpy as np

from input_pipeline import features
from input_pipeline.finetuning.batching import batch_order, make_dataset, pad_batch


def predict_examples(model, inputs, batch_size=64, pad_to=None):
    """Outputs of `model` for each example, in input order, padding stripped.

    Without `pad_to`, batches are formed from examples of similar length
    (sorted within chunks), so short examples are not padded to long ones.
    Keras' `predict` cannot be used then: it concatenates batches, which
    fails when per-piece outputs (tagging, QA) have a different length in
    each batch.

    With `pad_to`, every batch has the static shape (batch_size, ..., pad_to)
    that TPUs and XLA need: the last batch is filled with all-padding rows,
    whose outputs are cut off here, so every example is scored exactly once.
    Keras' `predict` then runs them, split across the replicas of the
    model's distribution strategy.

    Args:
        model: a task model.
        inputs: list of dicts of int32 arrays, (seq,) or (num_choices, seq).
        batch_size: examples per batch (the global batch under a strategy).
        pad_to: None, or the fixed length to pad every example to.

    Returns:
        list of dicts of NumPy arrays, one per example. Outputs with a piece
        axis are cut back to that example's own length.
    """
    lengths = [np.asarray(x[features.TOKEN_IDS]).shape[-1] for x in inputs]
    # Outputs whose second axis is the (unknown-length) piece axis of 1-D inputs.
    per_piece = set()
    if np.ndim(inputs[0][features.TOKEN_IDS]) == 1:
        per_piece = {k for k, t in model.output.items() if len(t.shape) >= 2 and t.shape[1] is None}

    def example(outputs, row, i):
        return {k: v[row, : lengths[i]] if k in per_piece else v[row] for k, v in outputs.items()}

    if pad_to is not None:
        dataset = make_dataset(inputs, batch_size=batch_size, pad_to=pad_to, remainder="pad")
        outputs = {k: np.asarray(v) for k, v in model.predict(dataset, verbose=0).items()}
        return [example(outputs, i, i) for i in range(len(inputs))]
    results = [None] * len(inputs)
    for indices in batch_order(lengths, batch_size, bucket=True):
        batch = pad_batch([inputs[i] for i in indices])
        outputs = {k: np.asarray(v) for k, v in model.predict_on_batch(batch).items()}
        for row, i in enumerate(indices):
            results[i] = example(outputs, row, i)
    return results
