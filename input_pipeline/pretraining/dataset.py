"""The pretraining `tf.data` pipelines: static TFRecords or dynamic re-masking.

`make_pretraining_dataset` is the one entry point. Given a `create-data` output
directory it reads TFRecords; given a `TokenizedCorpus` it draws new pairs and
masks every epoch (RoBERTa-style dynamic masking). Both yield the same example
format, batched with fixed shapes (TPU-friendly), sharded per input pipeline,
and deterministic from `seed`, with `start_step` batches skipped for resuming.

Dynamic pipeline layout. Every epoch the documents are permuted with (seed,
epoch) and dealt to input pipelines, then to `num_streams` logical streams.
Each stream cuts windows of documents into instances (document d seeded by
(seed, epoch, d)), shuffles each window and masks each instance with its own
seed. Streams run in parallel Python generators and are interleaved round
robin in chunks of `chunk_size` examples, so example j of the pipeline always
comes from the same place whatever the number of threads, and skipping whole
rounds only needs the cheap instance layout, not masking.
"""

import numpy as np
import tensorflow as tf

from input_pipeline import features
from input_pipeline.pretraining import tfrecord_shards
from input_pipeline.pretraining.examples import TokenizedCorpus, instances_of_documents, make_example

_FEATURE_ORDER = (
    features.TOKEN_IDS,
    features.SEGMENT_IDS,
    features.PADDING_MASK,
    features.MASK_POSITIONS,
    features.MASK_IDS,
    features.MASK_WEIGHTS,
    features.SENTENCE_ORDER_LABEL,
)


def make_pretraining_dataset(
    source,
    global_batch_size,
    input_context=None,
    *,
    seed=0,
    start_step=0,
    config=None,
    flat=False,
    shuffle_buffer_size=10_000,
    num_streams=8,
    chunk_size=32,
    window_documents=64,
):
    """Batched pretraining examples for `model.fit` or `distribute_datasets_from_function`.

    Args:
        source: a `create-data` output directory (static TFRecords, repeated
            forever) or a `TokenizedCorpus` (dynamic masking, endless epochs).
        global_batch_size: examples per step across all replicas.
        input_context: a `tf.distribute.InputContext` or None. With one, this
            input pipeline reads its share of the data and returns per-replica
            batches (global_batch_size / num_replicas_in_sync).
        seed: the one seed of every shuffle and draw.
        start_step: number of batches of this pipeline already consumed; they
            are skipped deterministically, so a resumed run sees what an
            uninterrupted one would have.
        config: `PretrainingDataConfig`; required for a `TokenizedCorpus`, and
            for a directory it must match the one the data was written with.
        flat: if True yield the flat feature dict instead of `(inputs, labels)`.
        shuffle_buffer_size: examples in the shuffle buffer (static only).
        num_streams, chunk_size, window_documents: dynamic layout (see module
            docstring); changing them changes the data, not its statistics.

    Returns:
        tf.data.Dataset of `(inputs, labels)` dicts (see
        `input_pipeline.features.split_pretraining_example`), or of flat dicts, with
        fixed shapes: (batch, max_seq_length), (batch, max_predictions_per_seq), (batch,).
    """
    if global_batch_size < 1:
        raise ValueError(f"`global_batch_size` must be positive. Received: global_batch_size={global_batch_size}")
    if start_step < 0:
        raise ValueError(f"`start_step` must be >= 0. Received: start_step={start_step}")
    num_pipelines, pipeline_id, batch_size = 1, 0, global_batch_size
    if input_context is not None:
        num_pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    skip_examples = start_step * batch_size
    if isinstance(source, TokenizedCorpus):
        if config is None:
            raise ValueError("`config` (a PretrainingDataConfig) is required with a TokenizedCorpus source.")
        examples = _dynamic_examples(
            source, config, seed, num_pipelines, pipeline_id, skip_examples, num_streams, chunk_size, window_documents
        )
        batches = examples.batch(batch_size, drop_remainder=True)
    else:
        records, config = _static_records(source, config, seed, num_pipelines, pipeline_id, shuffle_buffer_size)
        # Skip serialized records, before the (costlier) parsing.
        batches = records.skip(skip_examples).batch(batch_size, drop_remainder=True)
        batches = batches.map(lambda s: parse_examples(s, config), num_parallel_calls=tf.data.AUTOTUNE)
    if not flat:
        batches = batches.map(features.split_pretraining_example)
    return batches.prefetch(tf.data.AUTOTUNE)


def pretraining_dataset_fn(source, data_config=None, seed=0):
    """A `dataset_fn` for `albert_tf.training.Trainer` over `make_pretraining_dataset`.

    Args:
        source: a `create-data` directory or a `TokenizedCorpus`.
        data_config: `PretrainingDataConfig` (required for a corpus).
        seed: the data seed.

    Returns:
        `dataset_fn(global_batch_size, input_context, start_step)`. One input
        pipeline feeds `num_replicas_in_sync / num_input_pipelines` replicas in
        turn, so it has consumed that many of its batches per global batch.
    """

    def dataset_fn(global_batch_size, input_context, start_step):
        replicas_per_pipeline = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        return make_pretraining_dataset(
            source, global_batch_size, input_context, seed=seed,
            start_step=start_step * replicas_per_pipeline, config=data_config,
        )

    return dataset_fn


def _static_records(data_dir, config, seed, num_pipelines, pipeline_id, shuffle_buffer_size):
    """Serialized records of this pipeline's share, shuffled, repeated forever."""
    metadata = tfrecord_shards.read_metadata(data_dir)
    if config is not None and config != metadata["config"]:
        raise ValueError(f"`config` {config} does not match the data in {data_dir!r}: {metadata['config']}")
    files = tfrecord_shards.shard_paths(data_dir)
    # Split by file when there are enough files, else by record.
    by_file = len(files) >= num_pipelines
    if by_file:
        files = files[pipeline_id::num_pipelines]
    records = (
        tf.data.Dataset.from_tensor_slices(files)
        .shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(len(files), 8),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    )
    if not by_file:
        records = records.shard(num_pipelines, pipeline_id)
    return records.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True), metadata["config"]


def _dynamic_examples(corpus, config, seed, num_pipelines, pipeline_id, skip, num_streams, chunk_size, window_documents):
    """Unbatched flat examples, drawn afresh every epoch from `corpus`."""
    documents_per_pipeline = corpus.num_documents // num_pipelines
    if documents_per_pipeline < 1:
        raise ValueError(
            f"The corpus has {corpus.num_documents} documents, fewer than the {num_pipelines} input pipelines."
        )
    num_streams = min(num_streams, documents_per_pipeline)
    # Whole rounds (one chunk from every stream) are skipped inside the streams;
    # the remainder, under one round, by tf.data.
    round_size = num_streams * chunk_size
    stream_skip, remainder = (skip // round_size) * chunk_size, skip % round_size

    def generate(stream):
        stream = int(stream)
        chunk = []
        to_skip = stream_skip
        for instances in _stream_windows(
            corpus, config, seed, num_pipelines, pipeline_id, stream, num_streams, window_documents
        ):
            if to_skip >= len(instances):
                to_skip -= len(instances)
                continue
            for instance in instances[to_skip:]:
                chunk.append(make_example(corpus, instance, config))
                if len(chunk) == chunk_size:
                    yield tuple(np.stack([e[name] for e in chunk]) for name in _FEATURE_ORDER)
                    chunk = []
            to_skip = 0

    seq, preds = config.max_seq_length, config.max_predictions_per_seq
    signature = tuple(
        tf.TensorSpec([chunk_size, *shape], dtype)
        for shape, dtype in (
            ([seq], tf.int32),
            ([seq], tf.int32),
            ([seq], tf.int32),
            ([preds], tf.int32),
            ([preds], tf.int32),
            ([preds], tf.float32),
            ([], tf.int32),
        )
    )
    chunks = tf.data.Dataset.range(num_streams).interleave(
        lambda stream: tf.data.Dataset.from_generator(generate, output_signature=signature, args=(stream,)),
        cycle_length=num_streams,
        block_length=1,
        num_parallel_calls=num_streams,
        deterministic=True,
    )
    examples = chunks.map(lambda *tensors: dict(zip(_FEATURE_ORDER, tensors))).unbatch()
    return examples.skip(remainder)


def _stream_windows(corpus, config, seed, num_pipelines, pipeline_id, stream, num_streams, window_documents):
    """Yields the shuffled instances of each window of documents of one stream, epoch after epoch."""
    epoch = 0
    while True:
        order = np.random.default_rng((seed, epoch)).permutation(corpus.num_documents)
        documents = order[pipeline_id::num_pipelines][stream::num_streams]
        for start in range(0, len(documents), window_documents):
            instances = instances_of_documents(
                corpus, documents[start : start + window_documents], config, (seed, epoch)
            )
            window_rng = np.random.default_rng((seed, epoch, pipeline_id, stream, start))
            yield [instances[i] for i in window_rng.permutation(len(instances))]
        epoch += 1


def parse_examples(serialized, config):
    """Parses a batch of serialized examples.

    Args:
        serialized: tf.string (batch,).
        config: the `PretrainingDataConfig` the data was written with.

    Returns:
        Flat feature dict with the dtypes of `input_pipeline.features` and a leading batch axis.
    """
    seq, preds = config.max_seq_length, config.max_predictions_per_seq
    spec = {name: tf.io.FixedLenFeature([seq], tf.int64) for name in tfrecord_shards.INT_FEATURES[:3]}
    spec.update({name: tf.io.FixedLenFeature([preds], tf.int64) for name in tfrecord_shards.INT_FEATURES[3:]})
    spec[features.MASK_WEIGHTS] = tf.io.FixedLenFeature([preds], tf.float32)
    spec[features.SENTENCE_ORDER_LABEL] = tf.io.FixedLenFeature([], tf.int64)
    parsed = tf.io.parse_example(serialized, spec)
    # tf.train.Example only stores int64; the models take int32.
    return {name: t if t.dtype == tf.float32 else tf.cast(t, tf.int32) for name, t in parsed.items()}
