"""Intrinsic evaluation of a pretrainer: held-out MLM and sentence-order accuracy."""

import numpy as np
import tensorflow as tf

from albert_tf.models.pretrainer import metrics_from_sums, pretraining_sums
from input_pipeline import features


def evaluate_pretraining(model, dataset, num_batches, baseline_token_id=None):
    """MLM and sentence-order accuracy and loss over `num_batches` batches.

    Args:
        model: an `AlbertPretrainer`.
        dataset: `(inputs, labels)` batches, e.g. from `make_pretraining_dataset`.
        num_batches: how many batches to read.
        baseline_token_id: optional int; also report the MLM accuracy of
            always predicting this id (see `most_frequent_masked_id`).

    Returns:
        dict: mlm_accuracy, mlm_loss, sop_accuracy, sop_loss,
        sop_majority_accuracy, num_masked, num_examples (and
        unigram_mlm_accuracy with a baseline id).
    """

    @tf.function
    def batch_sums(inputs, labels):
        sums = pretraining_sums(labels, model(inputs, training=False))
        weights = tf.cast(labels[features.MASK_WEIGHTS], tf.float32)
        order = labels[features.SENTENCE_ORDER_LABEL]
        sums["label_ones"] = tf.reduce_sum(tf.cast(order, tf.float32))
        baseline = -1 if baseline_token_id is None else baseline_token_id
        hit = tf.cast(tf.equal(labels[features.MASK_IDS], baseline), tf.float32)
        sums["baseline_correct"] = tf.reduce_sum(weights * hit)
        return sums

    totals = {}
    for inputs, labels in dataset.take(num_batches):
        for name, value in batch_sums(inputs, labels).items():
            totals[name] = totals.get(name, 0.0) + float(value)
    if not totals:
        raise ValueError("The evaluation dataset is empty.")
    result = {
        **metrics_from_sums(totals),
        # Always predicting the more frequent label: SOP's real chance level
        # (one-sentence chunks take a random-document B, so label 1 > 50%).
        "sop_majority_accuracy": max(totals["label_ones"], totals["sop_examples"] - totals["label_ones"])
        / totals["sop_examples"],
        "num_masked": int(totals["mlm_weight"]),
        "num_examples": int(totals["sop_examples"]),
    }
    if baseline_token_id is not None:
        result["unigram_mlm_accuracy"] = totals["baseline_correct"] / totals["mlm_weight"]
    return result


def most_frequent_masked_id(dataset, num_batches):
    """The token id most often masked in `num_batches` batches (the unigram MLM baseline).

    Args:
        dataset: `(inputs, labels)` batches of training data.
        num_batches: how many batches to count.

    Returns:
        int: the most frequent id among real (weight > 0) masked positions.
    """
    counts = np.zeros(0, np.int64)
    for _, labels in dataset.take(num_batches):
        ids = labels[features.MASK_IDS].numpy().ravel()
        weights = labels[features.MASK_WEIGHTS].numpy().ravel()
        batch_counts = np.bincount(ids[weights > 0], minlength=len(counts))
        counts = np.pad(counts, (0, len(batch_counts) - len(counts))) + batch_counts
    if counts.sum() == 0:
        raise ValueError("No masked tokens in the dataset.")
    return int(np.argmax(counts))
