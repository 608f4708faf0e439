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
from albert_tf.utils.errors import UserError

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


def _stack_ragged(values):
    """One tensor of every example's value: dense (num_examples,) for scalars, else ragged on every axis.

    Gathering rows of it and calling `to_tensor` pads every axis to the
    batch's longest, as `_pad` does, inside the tf.data graph.
    """
    arrays = [np.asarray(v) for v in values]
    if not arrays[0].ndim:
        return tf.constant(np.stack(arrays))
    flat = np.concatenate([a.ravel() for a in arrays])
    # Row lengths of each ragged axis, outermost first: axis k of an example
    # repeats its length once per row of the axes before it.
    nested = [
        np.concatenate([np.full(int(np.prod(a.shape[:axis])), a.shape[axis], np.int64) for a in arrays])
        for axis in range(arrays[0].ndim)
    ]
    return tf.RaggedTensor.from_nested_row_lengths(flat, nested, validate=False)


def _stacked(values):
    """`_stack_ragged` of each field: a list of dicts gives a dict of tensors (nested as the dicts are)."""
    if isinstance(values[0], dict):
        return {k: _stacked([v[k] for v in values]) for k in values[0]}
    return _stack_ragged(values)


def _check_fits(values, pad_to):
    """Refuses any array whose last axis is longer than `pad_to` (padding would have to cut it)."""
    if isinstance(values[0], dict):
        for k in values[0]:
            _check_fits([v[k] for v in values], pad_to)
        return
    longest = max((np.shape(v)[-1] for v in values if np.ndim(v)), default=0)
    if longest > pad_to:
        raise ValueError(f"An example has {longest} positions, more than pad_to={pad_to}.")


def _padded_rows(stacked, indices, value, shape):
    """Rows `indices` of a `_stack_ragged` tensor, padded with `value` (to the known sizes of `shape`)."""
    rows = tf.gather(stacked, indices)
    if isinstance(rows, tf.RaggedTensor):
        return rows.to_tensor(default_value=tf.cast(value, rows.dtype), shape=shape)
    if shape.rank is not None:  # the "pad" remainder: fill rows up to the batch size
        rows = tf.pad(rows, [[0, shape[0] - tf.shape(rows)[0]]], constant_values=tf.cast(value, rows.dtype))
        rows = tf.ensure_shape(rows, shape)
    return rows


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
        raise UserError("No examples to batch: the input is empty.")
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels.")
    if remainder not in REMAINDERS:
        raise ValueError(f"`remainder` must be one of {REMAINDERS}. Received: remainder={remainder!r}")
    if remainder != "keep" and pad_to is None:
        raise ValueError(f"remainder={remainder!r} makes fixed-shape batches and needs `pad_to`. Received: "
                         "pad_to=None")
    if remainder == "drop" and len(inputs) < batch_size:
        raise UserError(f"{len(inputs)} examples make no full batch of batch_size={batch_size}, and "
                         "remainder='drop' drops the partial one: lower the batch size.")
    labels = None if labels is None else [
        np.asarray(y, "int32") if isinstance(y, (int, np.integer)) else
        np.asarray(y, "float32") if isinstance(y, float) else y for y in labels
    ]
    lengths = [np.asarray(x[features.TOKEN_IDS]).shape[-1] for x in inputs]

    def order(shuffled, order_seed):
        batches = batch_order(lengths, batch_size, shuffled, bucket, order_seed)
        return [b for b in batches if len(b) == batch_size] if remainder == "drop" else batches

    # Every example sits in the graph as tensors, and each batch is its row
    # indices gathered and padded by TensorFlow ops: no Python runs while the
    # dataset is read, so any tf.data host or service worker can run it.
    batches = order(shuffle, seed)
    first = inputs[0] if labels is None else (inputs[0], labels[0])
    if remainder == "keep":
        # Scalars stack; arrays pad every axis to the batch's longest (the last to `pad_to`, if given).
        shapes = tf.nest.map_structure(
            lambda v: tf.TensorShape([None] * np.ndim(v) + [pad_to] if np.ndim(v) else None), first)
    else:
        specs = _static_spec(inputs, pad_to) if labels is None else (
            _static_spec(inputs, pad_to), _static_spec(labels, pad_to))
        shapes = tf.nest.map_structure(lambda s: tf.TensorShape([batch_size, *s.shape]), specs)
    if pad_to is not None:
        for values in (inputs, labels or [0]):
            _check_fits(values, pad_to)
    stacked = _stacked(inputs) if labels is None else (_stacked(inputs), _stacked(labels))
    pad_values = tf.nest.map_structure(lambda _: 0, stacked) if labels is None else (
        tf.nest.map_structure(lambda _: 0, stacked[0]), tf.nest.map_structure(lambda _: label_pad, stacked[1]))

    def gather(indices):
        return tf.nest.map_structure(lambda t, v, s: _padded_rows(t, indices, v, s), stacked, pad_values, shapes)

    flat_order = np.concatenate(batches).astype(np.int64)
    index_batches = tf.RaggedTensor.from_row_lengths(flat_order, [len(b) for b in batches], validate=False)
    dataset = tf.data.Dataset.from_tensor_slices(index_batches).map(gather)
    # A known length gives Keras progress bars and clean epoch ends.
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)
