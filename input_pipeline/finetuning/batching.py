"""Batches padded only to their own longest example.

Fine-tuning sentences are short (Rotten Tomatoes sentences average ~30
pieces), so padding every batch to 512 would spend most of the compute on
padding. Each batch here is padded to its longest example; `bucket=True`
also batches examples of similar length together (sorting within large
shuffled chunks), so the few long ones do not pad the rest.
"""

import numpy as np
import tensorflow as tf

from input_pipeline import features

# Examples per sorted chunk, in batches: large enough to find similar
# lengths, small enough that batch order stays well mixed.
BUCKET_CHUNK_BATCHES = 50


def _pad(arrays, value, length=None):
    """Stacks arrays of equal rank, padding every axis to its max (the last to `length`)."""
    arrays = [np.asarray(a) for a in arrays]
    shape = [len(arrays)] + list(np.max([a.shape for a in arrays], axis=0)) if arrays[0].ndim else [len(arrays)]
    if length is not None and arrays[0].ndim:
        if shape[-1] > length:
            raise ValueError(f"An example has {shape[-1]} positions, more than pad_to={length}.")
        shape[-1] = length
    out = np.full(shape, value, dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[(i,) + tuple(slice(0, n) for n in a.shape)] = a
    return out


def pad_batch(items, pad_value=0, pad_to=None):
    """Stacks a list of arrays, or of dicts of arrays, padding each to the batch's longest."""
    if isinstance(items[0], dict):
        return {k: pad_batch([item[k] for item in items], pad_value, pad_to) for k in items[0]}
    return _pad(items, pad_value, pad_to)


def batch_order(lengths, batch_size, shuffle=False, bucket=False, seed=0):
    """Lists of example indices, one per batch.

    Args:
        lengths: sequence length of each example.
        shuffle: random order (from `seed`).
        bucket: sort by length within chunks of `BUCKET_CHUNK_BATCHES` batches,
            then (when shuffling) shuffle the batches.
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    if not bucket:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    chunk = batch_size * BUCKET_CHUNK_BATCHES
    batches = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[np.argsort([lengths[i] for i in part], kind="stable")]
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _spec(value):
    if isinstance(value, dict):
        return {k: _spec(v) for k, v in value.items()}
    value = np.asarray(value)
    return tf.TensorSpec((None,) * value.ndim, tf.as_dtype(value.dtype))


def make_dataset(inputs, labels=None, batch_size=32, shuffle=False, seed=0, bucket=False,
                 pad_to=None, label_pad=0):
    """A tf.data pipeline of padded batches for `fit`, `evaluate` or `predict`.

    Args:
        inputs: list of dicts of int32 arrays: (seq,) for sentence tasks,
            (num_choices, seq) for multiple choice.
        labels: list of labels (scalars, (seq,) arrays, or dicts of scalars),
            or None for prediction.
        batch_size: examples per batch; the last batch may be smaller.
        shuffle: a new order every epoch (seeded by `seed` and the epoch).
        bucket: batch examples of similar length together (see module doc).
        pad_to: pad every batch to this fixed length instead (e.g. 512, to
            compare with fixed-length pipelines).
        label_pad: padding value of sequence labels (the tagger's IGNORE_LABEL).

    Returns:
        A `tf.data.Dataset` of `inputs` or `(inputs, labels)` batches, each
        padded to its own longest example (or to `pad_to`).
    """
    if not inputs:
        raise ValueError("No examples to batch: the input is empty.")
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels.")
    labels = None if labels is None else [
        np.asarray(y, "int32") if isinstance(y, (int, np.integer)) else
        np.asarray(y, "float32") if isinstance(y, float) else y for y in labels
    ]
    lengths = [np.asarray(x[features.TOKEN_IDS]).shape[-1] for x in inputs]
    epoch = [0]

    def generate():
        batches = batch_order(lengths, batch_size, shuffle, bucket, seed + epoch[0])
        epoch[0] += 1
        for indices in batches:
            x = pad_batch([inputs[i] for i in indices], 0, pad_to)
            if labels is None:
                yield x
            else:
                yield x, pad_batch([labels[i] for i in indices], label_pad, pad_to)

    first = _spec(inputs[0]) if labels is None else (_spec(inputs[0]), _spec(labels[0]))
    signature = tf.nest.map_structure(
        lambda s: tf.TensorSpec((None,) + tuple(s.shape), s.dtype), first
    )
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # A known length gives Keras progress bars and clean epoch ends.
    num_batches = len(batch_order(lengths, batch_size, bucket=bucket))
    return dataset.apply(tf.data.experimental.assert_cardinality(num_batches)).prefetch(2)
