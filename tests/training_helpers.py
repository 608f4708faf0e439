"""Tiny models and fixed synthetic batches for the training-loop tests.

The batches do not depend on the number of input pipelines (each pipeline
takes its rows of every global batch), so runs under different strategies see
the same global batches and must end with the same weights.
"""

import signal
import time

import numpy as np
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.training import TrainerConfig
from input_pipeline import features

SEQ, PREDICTIONS, VOCAB = 32, 5, 64
TINY_MODEL = AlbertConfig(
    vocab_size=VOCAB, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=32, max_position_embeddings=SEQ,
)


def tiny_trainer_config(**overrides):
    """A `TrainerConfig` of a few steps of batch 8, the plain (uncompiled) step unless `compile_step` says.

    XLA compiles a tiny step in seconds, several times as long as the steps
    take: only the tests about XLA (its equivalence, placement and the "auto"
    choice) ask for it.
    """
    values = dict(global_batch_size=8, num_steps=3, learning_rate=0.01, warmup_steps=0,
                  checkpoint_every=100, log_every=100, compile_step="none")
    values.update(overrides)
    return TrainerConfig(**values)


def synthetic_examples(num_examples=64, seed=0):
    """Flat pretraining examples with varying lengths and mask counts."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(SEQ // 2, SEQ + 1, num_examples)
    positions = np.arange(SEQ)
    padding = (positions[None] < lengths[:, None]).astype("int32")
    num_masks = rng.integers(1, PREDICTIONS + 1, num_examples)
    mask_weights = (np.arange(PREDICTIONS)[None] < num_masks[:, None]).astype("float32")
    return {
        features.TOKEN_IDS: (rng.integers(5, VOCAB, (num_examples, SEQ)) * padding).astype("int32"),
        features.SEGMENT_IDS: ((positions[None] >= lengths[:, None] // 2) * padding).astype("int32"),
        features.PADDING_MASK: padding,
        features.MASK_POSITIONS: (rng.integers(1, SEQ // 2, (num_examples, PREDICTIONS)) * mask_weights).astype("int32"),
        features.MASK_IDS: (rng.integers(5, VOCAB, (num_examples, PREDICTIONS)) * mask_weights).astype("int32"),
        features.MASK_WEIGHTS: mask_weights,
        features.SENTENCE_ORDER_LABEL: rng.integers(0, 2, num_examples).astype("int32"),
    }


def array_dataset_fn(examples):
    """A Trainer dataset_fn: global batch j is rows [j*G, (j+1)*G) of `examples`, repeated.

    Input pipeline p takes the contiguous rows of its replicas, in replica order.
    """

    def dataset_fn(global_batch_size, input_context, start_step):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        rows = per_replica * input_context.num_replicas_in_sync // input_context.num_input_pipelines
        first = input_context.input_pipeline_id * rows
        batches = (
            tf.data.Dataset.from_tensor_slices(examples).repeat().batch(global_batch_size).skip(start_step)
            .map(lambda batch: {k: v[first : first + rows] for k, v in batch.items()})
            .unbatch().batch(per_replica)
        )
        return batches.map(features.split_pretraining_example)

    return dataset_fn


def fit_weights(strategy, steps):
    """Weights after `steps` batches of 8 of `model.fit` under `strategy`.

    Every example has all its mask slots real, so each replica's MLM mean
    (Keras averages per-replica losses) equals the global one, and clipping
    is off (Keras clips per replica); then any strategy must give the
    weights of one device.
    """
    import keras

    from albert_tf.training import build_pretrainer, trainer_optimizer

    examples = synthetic_examples()
    examples[features.MASK_WEIGHTS] = np.ones_like(examples[features.MASK_WEIGHTS])
    dataset = (tf.data.Dataset.from_tensor_slices(examples).batch(8).take(steps)
               .map(features.split_pretraining_example))
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = build_pretrainer(TINY_MODEL)
        if not steps:
            return weights_of(model)
        model.compile(optimizer=trainer_optimizer(tiny_trainer_config(num_steps=steps, clip_norm=0.0)))
    history = model.fit(dataset, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    return weights_of(model)


def weights_of(model):
    return [v.numpy() for v in model.trainable_variables]


def max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def kill_once_written(process, path, timeout):
    """SIGKILLs the running `process` as soon as `path` exists (a checkpoint's .index); fails if it never does."""
    deadline = time.time() + timeout
    while not path.exists():
        assert process.poll() is None and time.time() < deadline, "no checkpoint before the run ended"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
