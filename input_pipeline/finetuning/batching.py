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


REMAINDERS = ("keep", "drop", "pad")


def _spec(value):
    if isinstance(value, dict):
        return {k: _spec(v) for k, v in value.items()}
    value = np.asarray(value)
    return tf.TensorSpec((None,) * value.ndim, tf.as_dtype(value.dtype))


def _static_spec(values, pad_to):
    """The one TensorSpec of every value: its last axis `pad_to`, the others as the values have them."""
    if isinstance(values[0], dict):
        return {k: _static_spec([v[k] for v in values], pad_to) for k in values[0]}
    arrays = [np.asarray(v) for v in values]
    shape = list(arrays[0].shape)
    for axis in range(len(shape) - 1):
        sizes = {a.shape[axis] for a in arrays}
        if len(sizes) > 1:
            raise ValueError(f"Fixed-shape batches need one size on every axis but the last; axis {axis} "
                             f"has sizes {sorted(sizes)}.")
    if shape:
        shape[-1] = pad_to
    return tf.TensorSpec(shape, tf.as_dtype(arrays[0].dtype))


def _fill_rows(batch, batch_size, value):
    """`batch` (a padded array or dict of them) with rows of `value` appended up to `batch_size` rows."""
    if isinstance(batch, dict):
        return {k: _fill_rows(v, batch_size, value) for k, v in batch.items()}
    filler = np.full((batch_size - len(batch),) + batch.shape[1:], value, dtype=batch.dtype)
    return np.concatenate([batch, filler])


def make_dataset(inputs, labels=None, batch_size=32, shuffle=False, seed=0, bucket=False,
                 pad_to=None, label_pad=0, remainder="keep"):
    """A tf.data pipeline of padded batches for `fit`, `evaluate` or `predict`.

    Args:
        inputs: list of dicts of int32 arrays: (seq,) for sentence tasks,
            (num_choices, seq) for multiple choice.
        labels: list of labels (scalars, (seq,) arrays, or dicts of scalars),
            or None for prediction.
        batch_size: examples per batch.
        shuffle: a random order, fixed by `seed`: every pass over the
            dataset gives the same one. For a new order each epoch, make a
            dataset per epoch with its own seed; counting passes would not
            do, as tf.distribute may start an iterator more than once.
        bucket: batch examples of similar length together (see module doc).
        pad_to: pad every batch to this fixed length instead (what TPUs and
            XLA need, or to compare with fixed-length pipelines).
        label_pad: padding value of sequence labels (the tagger's IGNORE_LABEL).
        remainder: the last batch when `len(inputs)` is not a multiple of
            `batch_size`: "keep" it smaller, "drop" it (training), or "pad"
            it with all-padding rows (zero `padding_mask`; labels
            `label_pad`) that come after every real example, for prediction
            to cut off. "drop" and "pad" need `pad_to`, and then every batch
            has the static shape (batch_size, ..., pad_to).

    Returns:
        A `tf.data.Dataset` of `inputs` or `(inputs, labels)` batches, each
        padded to its own longest example (or to `pad_to`).
    """
    if not inputs:
        raise ValueError("No examples to batch: the input is empty.")
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels.")
    if remainder not in REMAINDERS:
        raise ValueError(f"`remainder` must be one of {REMAINDERS}. Received: remainder={remainder!r}")
    if remainder != "keep" and pad_to is None:
        raise ValueError(f"remainder={remainder!r} makes fixed-shape batches and needs `pad_to`. Received: "
                         "pad_to=None")
    if remainder == "drop" and len(inputs) < batch_size:
        raise ValueError(f"{len(inputs)} examples make no full batch of batch_size={batch_size}, and "
                         "remainder='drop' drops the partial one: lower the batch size.")
    labels = None if labels is None else [
        np.asarray(y, "int32") if isinstance(y, (int, np.integer)) else
        np.asarray(y, "float32") if isinstance(y, float) else y for y in labels
    ]
    lengths = [np.asarray(x[features.TOKEN_IDS]).shape[-1] for x in inputs]

    def order(shuffled, order_seed):
        batches = batch_order(lengths, batch_size, shuffled, bucket, order_seed)
        return [b for b in batches if len(b) == batch_size] if remainder == "drop" else batches

    def generate():
        for indices in order(shuffle, seed):
            x = pad_batch([inputs[i] for i in indices], 0, pad_to)
            y = None if labels is None else pad_batch([labels[i] for i in indices], label_pad, pad_to)
            if remainder == "pad" and len(indices) < batch_size:
                x = _fill_rows(x, batch_size, 0)
                y = None if y is None else _fill_rows(y, batch_size, label_pad)
            yield x if y is None else (x, y)

    if remainder == "keep":
        first = _spec(inputs[0]) if labels is None else (_spec(inputs[0]), _spec(labels[0]))
        signature = tf.nest.map_structure(lambda s: tf.TensorSpec((None,) + tuple(s.shape), s.dtype), first)
    else:
        first = _static_spec(inputs, pad_to) if labels is None else (
            _static_spec(inputs, pad_to), _static_spec(labels, pad_to))
        signature = tf.nest.map_structure(lambda s: tf.TensorSpec((batch_size,) + tuple(s.shape), s.dtype), first)
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # A known length gives Keras progress bars and clean epoch ends.
    return dataset.apply(tf.data.experimental.assert_cardinality(len(order(False, seed)))).prefetch(2)
