"""Every dataset that `pretrain` and `finetune` hand to a strategy is made of TensorFlow ops only.

A Python generator or callback (`Dataset.from_generator`, `tf.py_function`,
`tf.numpy_function`) runs only in the client process: a pod slice's other
hosts and tf.data service workers cannot run it. These tests walk each
dataset's serialized graph, function library included.
"""

import numpy as np
import pytest
import tensorflow as tf

from data_fixtures import imdb_documents, small_tokenizer
from input_pipeline import PretrainingDataConfig, TokenizedCorpus, write_pretraining_tfrecords
from input_pipeline.finetuning import make_dataset
from input_pipeline.pretraining.dataset import pretraining_dataset_fn

CONFIG = PretrainingDataConfig(max_seq_length=32, max_predictions_per_seq=5)
# The ops Python callbacks and generators become in a tf.data graph.
PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"}
# Source datasets: one must be in every walk, or the walk saw nothing.
SOURCE_OPS = {"TensorSliceDataset", "TensorDataset", "TFRecordDataset", "RangeDataset"}


def graph_ops(dataset):
    """Every op type in the dataset's serialized graph and its function library."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def assert_tensorflow_only(dataset):
    ops = graph_ops(dataset)
    assert ops & SOURCE_OPS, sorted(ops)
    assert not ops & PYTHON_OPS, sorted(ops & PYTHON_OPS)


def strategy_input(dataset_fn):
    """The first pipeline's dataset, as `Trainer.input_iterator` builds it (one replica)."""
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
    return dataset_fn(4, context, 3)


def test_pretraining_records_and_raw_text_are_tensorflow_only(tmp_path):
    tokenizer, documents = small_tokenizer(), imdb_documents()[:30]
    write_pretraining_tfrecords(documents, tokenizer, str(tmp_path), CONFIG, dupe_factor=1, num_workers=0,
                                documents_per_shard=10)
    assert_tensorflow_only(strategy_input(pretraining_dataset_fn(str(tmp_path))))
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    assert_tensorflow_only(strategy_input(pretraining_dataset_fn(corpus, CONFIG)))


def sentence_inputs(lengths):
    return [{"token_ids": np.arange(1, n + 1, dtype=np.int32), "segment_ids": np.zeros(n, np.int32),
             "padding_mask": np.ones(n, np.int32)} for n in lengths]


LENGTHS = [5, 9, 3, 7, 8, 2, 6]
FINETUNE_KINDS = {
    "classification": (sentence_inputs(LENGTHS), [i % 2 for i in range(7)]),
    "regression": (sentence_inputs(LENGTHS), [float(i) for i in range(7)]),
    "tagging": (sentence_inputs(LENGTHS), [np.full(n, 1, np.int32) for n in LENGTHS]),
    "squad": (sentence_inputs(LENGTHS), [{"start_positions": 1, "end_positions": 2} for _ in LENGTHS]),
    "multiple_choice": (
        [{k: np.stack([v, v, v, v]) for k, v in x.items()} for x in sentence_inputs(LENGTHS)], [1] * 7),
}


@pytest.mark.parametrize("kind", sorted(FINETUNE_KINDS))
@pytest.mark.parametrize("options", [dict(bucket=True), dict(pad_to=16, remainder="drop")])
def test_finetuning_datasets_are_tensorflow_only(kind, options):
    inputs, labels = FINETUNE_KINDS[kind]
    dataset = make_dataset(inputs, labels, batch_size=2, shuffle=True, seed=3, label_pad=-100, **options)
    assert_tensorflow_only(dataset)
    # Predictions: inputs only, the remainder padded.
    assert_tensorflow_only(make_dataset(inputs, batch_size=2, pad_to=16, remainder="pad"))


def test_the_walk_finds_python_callbacks():
    generated = tf.data.Dataset.from_generator(lambda: iter([1, 2]), output_signature=tf.TensorSpec([], tf.int32))
    mapped = tf.data.Dataset.range(3).map(lambda x: tf.py_function(lambda y: y, [x], tf.int64))
    for dataset in (generated, mapped):
        assert graph_ops(dataset) & PYTHON_OPS
