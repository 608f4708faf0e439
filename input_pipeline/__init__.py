"""ALBERT input pipeline: tokenizer, corpus readers, pretraining data and tf.data."""

from input_pipeline.corpus import Corpus, split_sentences
from input_pipeline.dataset import make_pretraining_dataset
from input_pipeline.pretraining_data import PretrainingDataConfig, TokenizedCorpus
from input_pipeline.tfrecord import read_metadata, write_pretraining_tfrecords
from input_pipeline.tokenizer import AlbertTokenizer, Preprocessing
