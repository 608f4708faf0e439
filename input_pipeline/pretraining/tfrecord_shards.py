"""Static pretraining data: sharded TFRecords written by parallel worker processes.

The main process streams documents and groups them into blocks of
`documents_per_shard`; each block goes to a worker that tokenizes it, cuts
`dupe_factor` differently seeded passes of instances, shuffles them, masks and
writes one shard. A worker holds one block at a time and at most
2 x num_workers blocks are in flight, so memory is bounded by the block size,
not the corpus size. Random-document segments (one-sentence chunks, NSP) are
drawn from the same block; the original drew them from the whole corpus,
which is what forced it to hold the whole corpus in memory.

Shard k is seeded from (seed, k) alone, so the output does not depend on the
number of workers. Workers write without TensorFlow (`input_pipeline.tfrecord_files`),
so they start in well under a second; `input_pipeline.pretraining.dataset` reads the shards.
"""

import collections
import concurrent.futures
import json
import multiprocessing
import os

import numpy as np

from albert_tf.utils import files
from input_pipeline import features, tfrecord_files
from input_pipeline.pretraining.examples import (
    PairStats,
    PretrainingDataConfig,
    TokenizedCorpus,
    instances_of_documents,
    make_example,
)
from albert_tf.utils.errors import PREEMPTED, RunStopped, UserError
from albert_tf.utils.layout import DATA_METADATA_FILE, is_create_data_dir
from input_pipeline.tokenizer import AlbertTokenizer

SHARD_PATTERN = "pretraining-{:05d}.tfrecord"
# Stored as int64 lists of max_seq_length / max_predictions_per_seq values.
INT_FEATURES = (
    features.TOKEN_IDS,
    features.SEGMENT_IDS,
    features.PADDING_MASK,
    features.MASK_POSITIONS,
    features.MASK_IDS,
)


def write_pretraining_tfrecords(
    documents,
    tokenizer,
    output_dir,
    config,
    *,
    dupe_factor=10,
    seed=0,
    num_workers=None,
    documents_per_shard=2000,
    stop_requested=None,
):
    """Writes sharded TFRecords of pretraining examples.

    Args:
        documents: iterable of documents (lists of raw sentences), e.g. a `Corpus`.
        tokenizer: an `AlbertTokenizer`.
        output_dir: directory for the shards and `metadata.json`.
        config: a `PretrainingDataConfig`.
        dupe_factor: passes over each block with different seeds (different
            pairs and masks of the same text).
        seed: the one seed every random choice derives from.
        num_workers: worker processes; 0 writes in this process; None uses
            every CPU.
        documents_per_shard: documents per block (and per output shard); this
            bounds each worker's memory.
        stop_requested: optional `fn() -> bool` (a preemption's SIGTERM),
            asked as each shard is handed out: True stops the writing there
            (the shards being written finish first) with a `RunStopped`; the
            caller publishes nothing, so what `output_dir` holds then is not data.

    Returns:
        dict with num_examples, num_shards, num_documents and pair_stats (a
        `PairStats`; metadata.json keeps its counts).
    """
    if dupe_factor < 1:
        raise UserError(f"`dupe_factor` must be at least 1. Received: dupe_factor={dupe_factor}")
    if documents_per_shard < 2:
        raise UserError(f"`documents_per_shard` must be at least 2. Received: documents_per_shard={documents_per_shard}")
    num_workers = os.cpu_count() if num_workers is None else num_workers
    files.makedirs(output_dir)
    job = dict(
        model_proto=tokenizer.model_proto,
        preprocessing=tokenizer.preprocessing,
        output_dir=output_dir,
        config=config,
        dupe_factor=dupe_factor,
        seed=seed,
    )
    blocks = _blocks(documents, documents_per_shard, stop_requested or (lambda: False))
    if num_workers == 0:
        _init_worker(job)
        results = [_write_shard(index, block) for index, block in enumerate(blocks)]
    else:
        results = _map_bounded(blocks, num_workers, job)
    if not results:
        raise UserError("The corpus has no non-empty documents.")
    num_examples = sum(count for count, _ in results)
    pair_stats = sum((stats for _, stats in results[1:]), results[0][1])
    metadata = {
        "num_examples": num_examples,
        "num_shards": len(results),
        "num_documents": pair_stats.num_documents,
        "num_single_sentence_documents": pair_stats.num_single_sentence_documents,
        "sentence_order_label_counts": list(pair_stats.label_counts),
        # Lets a resumed reader find its place without reading the shards before it.
        "shard_examples": [count for count, _ in results],
        # Lets a reader tell a truncated shard at once, instead of mid-training.
        "shard_bytes": [files.size(os.path.join(output_dir, SHARD_PATTERN.format(i))) for i in range(len(results))],
        "vocab_size": tokenizer.vocab_size,
        "dupe_factor": dupe_factor,
        "seed": seed,
        "config": json.loads(config.to_json()),
    }
    files.write_text(os.path.join(output_dir, DATA_METADATA_FILE), json.dumps(metadata, indent=2))
    return {**{k: metadata[k] for k in ("num_examples", "num_shards", "num_documents")}, "pair_stats": pair_stats}


def _blocks(documents, size, stop_requested):
    """Blocks of `size` documents; raises `RunStopped` before the next block once `stop_requested()`."""
    block, index = [], 0
    for document in documents:
        block.append(document)
        if len(block) == size:
            if stop_requested():
                raise RunStopped(PREEMPTED, f"after {index} shards were handed out")
            yield block
            block, index = [], index + 1
    if block:
        yield block


def _map_bounded(blocks, num_workers, job):
    """Runs `_write_shard` over blocks with at most 2 x num_workers blocks in flight."""
    # Spawned, not forked: forking a process that has TensorFlow loaded is unsafe.
    context = multiprocessing.get_context("spawn")
    results, pending = [], collections.deque()
    with concurrent.futures.ProcessPoolExecutor(
        num_workers, mp_context=context, initializer=_init_worker, initargs=(job,)
    ) as pool:
        try:
            for index, block in enumerate(blocks):
                pending.append(pool.submit(_write_shard, index, block))
                if len(pending) >= 2 * num_workers:
                    results.append(pending.popleft().result())
        except RunStopped:
            for future in pending:  # the running ones finish; the queued ones never start
                future.cancel()
            raise
        results.extend(future.result() for future in pending)
    return results


_WORKER_JOB = {}


def _init_worker(job):
    _WORKER_JOB.clear()
    _WORKER_JOB.update(job)
    _WORKER_JOB["tokenizer"] = AlbertTokenizer(job["model_proto"], job["preprocessing"])


def _write_shard(index, block):
    """Tokenizes, cuts, shuffles, masks and writes one block. Returns (examples, `PairStats`)."""
    job = _WORKER_JOB
    config, seed = job["config"], job["seed"]
    corpus = TokenizedCorpus.from_documents(block, job["tokenizer"])
    documents = range(corpus.num_documents)
    instances = []
    for dupe in range(job["dupe_factor"]):
        instances.extend(instances_of_documents(corpus, documents, config, (seed, index, dupe)))
    order = np.random.default_rng((seed, index)).permutation(len(instances))
    path = os.path.join(job["output_dir"], SHARD_PATTERN.format(index))
    with tfrecord_files.RecordWriter(path) as writer:
        for i in order:
            writer.write(serialize_example(make_example(corpus, instances[i], config)))
    return len(instances), PairStats.of(corpus, instances)


def serialize_example(example):
    """Serializes one feature dict (see `make_example`) as a `tf.train.Example`.

    Deterministic (features in name order), so the same seed gives the same bytes.
    """
    return tfrecord_files.serialize_example(
        {name: example[name] for name in INT_FEATURES + (features.SENTENCE_ORDER_LABEL,)},
        {features.MASK_WEIGHTS: example[features.MASK_WEIGHTS]},
    )


def read_metadata(data_dir):
    """Reads `metadata.json` of a `write_pretraining_tfrecords` output directory, and checks its shards.

    Every shard must be there with the size written (directories written
    before sizes were recorded have none to check), so that a truncated or
    missing shard is refused before training rather than met in the middle.

    Raises:
        UserError: one line naming the unreadable metadata.json, or the
            missing or truncated shard.
    """
    path = os.path.join(data_dir, DATA_METADATA_FILE)
    if not is_create_data_dir(data_dir):
        raise UserError(f"{data_dir!r} has no {DATA_METADATA_FILE}; is it a create-data output directory?")
    try:
        metadata = json.loads(files.read_text(path))
        metadata["config"] = PretrainingDataConfig(**metadata["config"])
        shard_paths = [os.path.join(data_dir, SHARD_PATTERN.format(i)) for i in range(metadata["num_shards"])]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path} is not a readable {DATA_METADATA_FILE} ({type(e).__name__}: {e}); "
                        "rerun create-data.") from None
    for shard, expected in zip(shard_paths, metadata.get("shard_bytes", [None] * len(shard_paths))):
        if not files.isfile(shard):
            raise UserError(f"{shard} is missing: {data_dir} is incomplete; rerun create-data.")
        if expected is not None and files.size(shard) != expected:
            raise UserError(f"{shard} has {files.size(shard)} bytes where {DATA_METADATA_FILE} says {expected} "
                            "(truncated or replaced); rerun create-data.")
    return metadata


def check_records(data_dir):
    """Reads every record of a create-data directory's shards and checks it against its CRC.

    `read_metadata` tells a truncated shard by its size; a shard whose bytes
    changed in place keeps its size, and is found here, by reading it all
    (what training does when tf.data meets a damaged record).

    Raises:
        UserError: one line naming the first damaged shard and where in it.
    """
    for shard in shard_paths(data_dir):
        offset = tfrecord_files.first_damaged_record(shard)
        if offset is not None:
            raise UserError(f"{shard} has a damaged record at byte {offset} (its checksum does not match: the file "
                            "changed after create-data wrote it); rerun create-data.")


def shard_paths(data_dir):
    metadata = read_metadata(data_dir)
    return [os.path.join(data_dir, SHARD_PATTERN.format(i)) for i in range(metadata["num_shards"])]
