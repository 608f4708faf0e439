"""ALBERT input pipeline: tokenizer, corpus readers, pretraining data and tf.data.

The public names load on first use (PEP 562), so importing one light module
(`input_pipeline.tokenizer`, `input_pipeline.pretraining.examples`) does not pull
in TensorFlow through `input_pipeline.pretraining.dataset`.
"""

from albert_tf.utils.lazy import lazy_names

# Public name -> module that defines it.
_EXPORTS = {
    "Corpus": "input_pipeline.corpus",
    "split_sentences": "input_pipeline.corpus",
    "make_pretraining_dataset": "input_pipeline.pretraining.dataset",
    "pretraining_dataset_fn": "input_pipeline.pretraining.dataset",
    "PretrainingDataConfig": "input_pipeline.pretraining.examples",
    "TokenizedCorpus": "input_pipeline.pretraining.examples",
    "read_metadata": "input_pipeline.pretraining.tfrecord_shards",
    "write_pretraining_tfrecords": "input_pipeline.pretraining.tfrecord_shards",
    "AlbertTokenizer": "input_pipeline.tokenizer",
    "Preprocessing": "input_pipeline.tokenizer",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
