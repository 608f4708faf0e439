"""Pretraining data: masked SOP/NSP examples, their sharded TFRecords, and the tf.data pipelines.

Nothing is imported here: data-writer workers import `tfrecord_shards` and
`examples` without TensorFlow, which `dataset` loads. The package-level
names are in `input_pipeline` (`PretrainingDataConfig`, `make_pretraining_dataset`, ...).
"""
