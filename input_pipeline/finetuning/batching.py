"""tf.data pipelines that pad each batch only to its own longest example.

Fine-tuning sentences are short (SST-2 averages ~25 pieces), so padding every
batch to 512 would spend most of the compute on padding. `padded_batch` pads
to the longest example in each batch; `bucket_boundaries` additionally groups
examples of similar length so that the few long ones do not pad the rest.
"""

import numpy as np
import tensorflow as tf

from albert_tf import features


def _signature(value):
    value = np.asarray(value)
    return tf.TensorSpec(shape=(None,) * value.ndim, dtype=tf.as_dtype(value.dtype))


def _nest_signature(value):
    if isinstance(value, dict):
        return {k: _nest_signature(v) for k, v in value.items()}
    return _signature(value)


def _padding_values(value, label_pad):
    if isinstance(value, dict):
        return {k: _padding_values(v, label_pad) for k, v in value.items()}
    return tf.constant(label_pad, dtype=tf.as_dtype(np.asarray(value).dtype))


def make_dataset(inputs, labels=None, batch_size=32, shuffle=False, seed=0, pad_to=None,
                 bucket_boundaries=None, label_pad=0):
    """Batches variable-length examples, padding per batch.

    Args:
        inputs: list of dicts of int32 arrays: (seq,) for sentence tasks,
            (num_choices, seq) for multiple choice.
        labels: list of labels (scalars, (seq,) arrays, or dicts of scalars),
            or None for prediction.
        batch_size: examples per batch; the last batch may be smaller.
        shuffle: reshuffle the examples every epoch (seeded).
        pad_to: pad every batch to this fixed length instead (e.g. 512, to
            compare with fixed-length pipelines).
        bucket_boundaries: optional ascending lengths; examples are batched
            with others of a similar length (training only: it reorders).
        label_pad: padding value for sequence labels (the tagger's IGNORE_LABEL).

    Returns:
        A `tf.data.Dataset` of `inputs` or `(inputs, labels)` batches.
    """
    if not inputs:
        raise ValueError("No examples to batch: the input is empty.")
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels.")
    has_labels = labels is not None

    def generate():
        for i in range(len(inputs)):
            yield (inputs[i], labels[i]) if has_labels else inputs[i]

    first = (inputs[0], labels[0]) if has_labels else inputs[0]
    dataset = tf.data.Dataset.from_generator(generate, output_signature=_nest_signature(first))
    if shuffle:
        dataset = dataset.shuffle(len(inputs), seed=seed, reshuffle_each_iteration=True)

    input_pad = {name: tf.constant(0, tf.int32) for name in inputs[0]}
    padding_values = (input_pad, _padding_values(labels[0], label_pad)) if has_labels else input_pad
    padded_shapes = None
    if pad_to is not None:
        input_shapes = {name: np.asarray(v).shape[:-1] + (pad_to,) for name, v in inputs[0].items()}
        label_shapes = (tf.nest.map_structure(lambda v: np.asarray(v).shape[:-1] + (pad_to,) if np.ndim(v) else (), labels[0])
                        if has_labels else None)
        padded_shapes = (input_shapes, label_shapes) if has_labels else input_shapes

    if bucket_boundaries:
        def length(*element):
            return tf.shape(element[0][features.TOKEN_IDS])[-1]

        dataset = dataset.bucket_by_sequence_length(
            length, list(bucket_boundaries), [batch_size] * (len(bucket_boundaries) + 1),
            padded_shapes=padded_shapes, padding_values=padding_values,
        )
    else:
        dataset = dataset.padded_batch(batch_size, padded_shapes=padded_shapes, padding_values=padding_values)
    return dataset.prefetch(tf.data.AUTOTUNE)
