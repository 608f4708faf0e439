"""The pretraining `tf.data` pipelines: static TFRecords or dynamic re-masking.

`make_pretraining_dataset` is the one entry point. Given a `create-data` output
directory it reads TFRecords; given a `TokenizedCorpus` it draws new sentence
orders and masks every epoch (RoBERTa-style dynamic masking). Both yield the
same example format, batched with fixed shapes (TPU-friendly), sharded per
input pipeline, and deterministic from `seed`.

Both are built from tf.data and TensorFlow ops only (no Python generator or
callback), so a pod slice's hosts and tf.data service workers can run them.

Both read in an order that maps an example's place in the stream to where it
is stored, computed statelessly from (seed, epoch), so resuming at step s
starts reading there instead of reading and dropping what was consumed:

- Static: each epoch permutes the shard files with (seed, epoch) and reads
  them one after another; the stream is cut into windows of
  `shuffle_buffer_size` records, each shuffled with (seed, epoch, window).
  (create-data already shuffled every shard.) Resuming opens the shard that
  holds the window, skips into it (at most one shard's records) and skips
  inside the window; with the records per shard known (metadata.json's
  `shard_examples`, else counted once), no earlier shard is read.
- Dynamic: the corpus is cut once into sentence pairs (`examples.create_instances`,
  seeded by (seed, document)); each epoch permutes them with (seed, epoch),
  and each example draws its sentence order (SOP: the two segments swapped
  with probability 0.5) and its masks (`masking_ops`) from (seed, epoch,
  pair). Resuming slices the epoch's permutation.
"""

import numpy as np
import tensorflow as tf

from input_pipeline import features
from albert_tf.utils.errors import UserError
from input_pipeline.pretraining import masking_ops, tfrecord_shards
from input_pipeline.pretraining.examples import TokenizedCorpus, instances_of_documents

# Domains of the stateless keys drawn from `seed`, so no two draws share one.
_ORDER, _EXAMPLE, _WINDOW = 0, 1, 2
# Epochs counted by `Dataset.range`: more than any run reaches.
_EPOCHS = 2**62


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
            are not read: the pipeline starts where they end, so a resumed
            run sees what an uninterrupted one would have.
        config: `PretrainingDataConfig`; required for a `TokenizedCorpus`, and
            for a directory it must match the one the data was written with.
        flat: if True yield the flat feature dict instead of `(inputs, labels)`.
        shuffle_buffer_size: records per shuffled window (static only; see
            the module docstring).

    Returns:
        tf.data.Dataset of `(inputs, labels)` dicts (see
        `input_pipeline.features.split_pretraining_example`), or of flat dicts, with
        fixed shapes: (batch, max_seq_length), (batch, max_predictions_per_seq), (batch,).
    """
    if global_batch_size < 1:
        raise UserError(f"`global_batch_size` must be positive. Received: global_batch_size={global_batch_size}")
    if start_step < 0:
        raise UserError(f"`start_step` must be >= 0. Received: start_step={start_step}")
    num_pipelines, pipeline_id, batch_size = 1, 0, global_batch_size
    if input_context is not None:
        num_pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    skip_examples = start_step * batch_size
    if isinstance(source, TokenizedCorpus):
        if config is None:
            raise ValueError("`config` (a PretrainingDataConfig) is required with a TokenizedCorpus source.")
        examples = _dynamic_examples(source, config, seed, num_pipelines, pipeline_id, skip_examples)
        batches = examples.batch(batch_size, drop_remainder=True)
    else:
        records, config = _static_records(
            source, config, seed, num_pipelines, pipeline_id, shuffle_buffer_size, skip_examples
        )
        batches = records.batch(batch_size, drop_remainder=True)
        batches = batches.map(lambda s: parse_examples(s, config), num_parallel_calls=tf.data.AUTOTUNE)
    if not flat:
        batches = batches.map(features.split_pretraining_example)
    return batches.prefetch(tf.data.AUTOTUNE)


def pretraining_dataset_fn(source, data_config=None, seed=0, data_service=None):
    """A `dataset_fn` for `albert_tf.training.Trainer` over `make_pretraining_dataset`.

    Args:
        source: a `create-data` directory or a `TokenizedCorpus`.
        data_config: `PretrainingDataConfig` (required for a corpus).
        seed: the data seed.
        data_service: None, or the address of a tf.data service dispatcher
            ("grpc://HOST:PORT"): its workers then make the batches (see
            `distribute_on_data_service`).

    Returns:
        `dataset_fn(global_batch_size, input_context, start_step)`. One input
        pipeline feeds `num_replicas_in_sync / num_input_pipelines` replicas in
        turn, so it has consumed that many of its batches per global batch.
    """

    def dataset_fn(global_batch_size, input_context, start_step):
        replicas_per_pipeline = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        dataset = make_pretraining_dataset(
            source, global_batch_size, input_context, seed=seed,
            start_step=start_step * replicas_per_pipeline, config=data_config,
        )
        return dataset if data_service is None else distribute_on_data_service(dataset, data_service)

    return dataset_fn


def distribute_on_data_service(dataset, address):
    """`dataset` made by the workers of the tf.data service whose dispatcher is at `address`.

    The dataset's graph goes to the dispatcher (so a raw-text corpus travels
    inside it: a graph is at most 2 GB; larger corpora go through create-data).
    Sharding is dynamic: each worker takes the next epoch still unclaimed, so
    no example is made twice and workers can come and go. Batches arrive in
    the order the workers finish them, so a run through the service is not
    bit-for-bit reproducible, and a resumed one starts at its position's
    epoch and offset but then interleaves as the workers go.
    """
    if not isinstance(address, str) or not address.startswith("grpc://"):
        raise UserError(f"`data_service` must be a dispatcher address grpc://HOST:PORT. Received: {address!r}")
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC, service=address,
    ))


def _key(seed, domain, *data):
    """A stateless seed (int64 [2]) of `seed`, a domain and any number of int tensors."""
    key = tf.constant([seed, domain], tf.int64)
    for value in data:
        key = tf.random.experimental.stateless_fold_in(key, tf.cast(value, tf.int64))
    return key


def _permutation(size, key):
    """A random permutation of range(size), int32, from a stateless key."""
    return tf.argsort(tf.random.stateless_uniform([size], key), stable=True)


def _static_records(data_dir, config, seed, num_pipelines, pipeline_id, window, skip):
    """Serialized records of this pipeline's share, endless, from example `skip` of the share on.

    Returns:
        (dataset of tf.string scalars, the data's `PretrainingDataConfig`).
    """
    if window < 1:
        raise UserError(f"`shuffle_buffer_size` must be positive. Received: shuffle_buffer_size={window}")
    metadata = tfrecord_shards.read_metadata(data_dir)
    if config is not None and config != metadata["config"]:
        raise UserError(f"`config` {config} does not match the data in {data_dir!r}: {metadata['config']}")
    paths = tfrecord_shards.shard_paths(data_dir)
    counts = metadata.get("shard_examples") or _count_records(paths)
    # Split by file when there are enough files, else every num_pipelines-th record.
    stride, phase = num_pipelines, pipeline_id
    if len(paths) >= num_pipelines:
        paths, counts = paths[pipeline_id::num_pipelines], counts[pipeline_id::num_pipelines]
        stride, phase = 1, 0
    total = sum(counts)
    per_epoch = (total - phase + stride - 1) // stride  # records of the epoch this pipeline takes
    if per_epoch < 1:
        raise UserError(f"{data_dir!r} has {total} examples, fewer than the {num_pipelines} input pipelines.")
    first_epoch, offset = divmod(skip, per_epoch)
    # Where this pipeline starts in an epoch's stream of every record of `paths`.
    first_position, phase = tf.constant(offset * stride + phase, tf.int64), tf.constant(phase, tf.int64)
    paths, counts = tf.constant(paths), tf.constant(counts, tf.int64)

    def epoch_records(epoch):
        # This pipeline's first record of the epoch, and the window that holds it.
        start = tf.where(tf.equal(epoch, first_epoch), first_position, phase)
        window_start = start // window * window
        order = _permutation(tf.size(paths), _key(seed, _ORDER, epoch))
        epoch_paths, epoch_counts = tf.gather(paths, order), tf.gather(counts, order)
        ends = tf.cumsum(epoch_counts)
        first_file = tf.searchsorted(ends, window_start[None], side="right")[0]
        records = tf.data.TFRecordDataset(epoch_paths[first_file:]).skip(
            window_start - (ends[first_file] - epoch_counts[first_file])
        )

        def shuffle_window(index, batch):
            key = _key(seed, _WINDOW, epoch, window_start // window + index)
            return tf.gather(batch, _permutation(tf.size(batch), key))

        windows = records.batch(window).enumerate().map(shuffle_window)
        return windows.unbatch().skip(start - window_start).shard(stride, 0)

    records = tf.data.Dataset.range(first_epoch, _EPOCHS).flat_map(epoch_records)
    return records, metadata["config"]


def _count_records(paths):
    """Records in each TFRecord file (for data written before metadata.json listed them)."""
    return [int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1)) for path in paths]


def sentence_pairs(corpus, config, seed):
    """The pairs the dynamic pipeline draws from, cut once from `corpus`.

    Each document is cut as `examples.create_instances` cuts it (seeded by
    (seed, document)). A SOP pair of two segments of one document is kept in
    document order and marked swappable: each epoch draws its order afresh
    (label 1 when swapped, probability 0.5). Other pairs (NSP, a one-sentence
    chunk's random-document B, single segments) keep the cut's label.

    Returns:
        dict of NumPy arrays, one entry per pair: first_start, first_end,
        second_start, second_end (int64 token offsets), swappable (bool),
        label (int32).
    """
    instances = instances_of_documents(corpus, range(corpus.num_documents), config, (seed,))
    if not instances:
        raise UserError("The corpus makes no pretraining examples.")
    a_start, a_end, b_start, b_end, label, _ = (np.asarray(column) for column in zip(*instances))
    document_starts = corpus.sentence_splits[corpus.document_splits]
    same_document = np.searchsorted(document_starts, a_start, "right") == np.searchsorted(
        document_starts, b_start, "right"
    )
    swappable = (config.task == "sop") & (b_end > b_start) & same_document
    b_first = swappable & (b_start < a_start)
    return {
        "first_start": np.where(b_first, b_start, a_start).astype(np.int64),
        "first_end": np.where(b_first, b_end, a_end).astype(np.int64),
        "second_start": np.where(b_first, a_start, b_start).astype(np.int64),
        "second_end": np.where(b_first, a_end, b_end).astype(np.int64),
        "swappable": swappable,
        "label": label.astype(np.int32),
    }


def _dynamic_examples(corpus, config, seed, num_pipelines, pipeline_id, skip):
    """Unbatched flat examples, drawn afresh every epoch from `corpus`, from example `skip` of this pipeline on."""
    pairs = sentence_pairs(corpus, config, seed)
    num_pairs = len(pairs["label"])
    per_epoch = num_pairs // num_pipelines  # the same for every pipeline: the last few pairs wait an epoch
    if per_epoch < 1:
        raise UserError(f"The corpus makes {num_pairs} pretraining examples, fewer than the {num_pipelines} "
                         "input pipelines.")
    first_epoch, offset = divmod(skip, per_epoch)
    pairs = {name: tf.constant(values) for name, values in pairs.items()}
    token_ids = tf.constant(np.asarray(corpus.token_ids, np.int32))
    word_starts = tf.constant(np.asarray(corpus.word_starts, bool))

    def epoch_pairs(epoch):
        order = _permutation(num_pairs, _key(seed, _ORDER, epoch))[pipeline_id::num_pipelines][:per_epoch]
        start = tf.where(tf.equal(epoch, first_epoch), offset, 0)
        return tf.data.Dataset.from_tensor_slices(order[start:]).map(lambda pair: (epoch, pair))

    def example(epoch, pair):
        return make_example(token_ids, word_starts, {k: v[pair] for k, v in pairs.items()},
                            _key(seed, _EXAMPLE, epoch, pair), config, corpus.vocab_size)

    return (
        tf.data.Dataset.range(first_epoch, _EPOCHS)
        .flat_map(epoch_pairs)
        .map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    )


def make_example(token_ids, word_starts, pair, key, config, vocab_size):
    """One padded example of a `sentence_pairs` pair, by TensorFlow ops (see `examples.make_example`).

    Args:
        token_ids: int32 [num_tokens]; word_starts: bool [vocab_size] (the corpus).
        pair: dict of scalars, one row of `sentence_pairs`.
        key: int64 [2], the stateless seed of the sentence order and the masks.

    Returns:
        Flat feature dict: token_ids, segment_ids, padding_mask int32
        [max_seq_length]; mask_positions, mask_ids int32
        [max_predictions_per_seq]; mask_weights float32
        [max_predictions_per_seq]; sentence_order_label int32 scalar.
    """
    order_key, mask_key = tf.unstack(tf.random.experimental.stateless_split(key, 2))
    swap = pair["swappable"] & (tf.random.stateless_uniform([], order_key) < 0.5)
    a_start = tf.where(swap, pair["second_start"], pair["first_start"])
    a_end = tf.where(swap, pair["second_end"], pair["first_end"])
    b_start = tf.where(swap, pair["first_start"], pair["second_start"])
    b_end = tf.where(swap, pair["first_end"], pair["second_end"])
    label = tf.where(pair["swappable"], tf.cast(swap, tf.int32), pair["label"])
    tokens, is_word_start, len_a = masking_ops.lay_out(token_ids, word_starts, a_start, a_end, b_start, b_end)
    masked = masking_ops.mask_tokens(
        tokens, is_word_start, mask_key, max_predictions=config.max_predictions_per_seq,
        masked_lm_prob=config.masked_lm_prob, max_ngram=config.max_ngram, vocab_size=vocab_size,
    )
    seq, preds = config.max_seq_length, config.max_predictions_per_seq
    length, num_masked = tf.size(tokens), tf.size(masked["positions"])
    position = tf.range(seq)
    has_b = b_end > b_start
    return {
        features.TOKEN_IDS: tf.ensure_shape(tf.pad(masked["token_ids"], [[0, seq - length]]), [seq]),
        # 0 through the first [SEP], then 1 (when there is a B).
        features.SEGMENT_IDS: tf.cast(has_b & (position >= len_a + 2) & (position < length), tf.int32),
        features.PADDING_MASK: tf.cast(position < length, tf.int32),
        features.MASK_POSITIONS: tf.ensure_shape(tf.pad(masked["positions"], [[0, preds - num_masked]]), [preds]),
        features.MASK_IDS: tf.ensure_shape(tf.pad(masked["labels"], [[0, preds - num_masked]]), [preds]),
        features.MASK_WEIGHTS: tf.cast(tf.range(preds) < num_masked, tf.float32),
        features.SENTENCE_ORDER_LABEL: tf.ensure_shape(label, []),
    }


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
