"""TFRecords written without TensorFlow: the same bytes as TensorFlow's writer and Example."""

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline.tfrecord_files import RecordWriter, first_damaged_record, serialize_example


def _tf_example(int64_features, float_features):
    feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in int64_features.items()}
    feature.update({k: tf.train.Feature(float_list=tf.train.FloatList(value=v)) for k, v in float_features.items()})
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def test_examples_serialize_to_tensorflows_bytes():
    rng = np.random.default_rng(0)
    for _ in range(300):
        # Values of every varint width, negatives (10-byte varints) and empty lists.
        ints = {
            name: rng.integers(low, rng.choice([2, 200, 40_000, 2**40, 2**62]), rng.integers(0, 40)).tolist()
            for name, low in (("token_ids", 0), ("negative", -5), ("mask_ids", 0), ("label", 0))
        }
        floats = {"mask_weights": rng.normal(size=rng.integers(0, 10)).astype("float32").tolist()}
        assert serialize_example(ints, floats) == _tf_example(ints, floats)


def test_record_files_match_tensorflows_writer_and_read_back(tmp_path):
    records = [serialize_example({"a": [1, 2, 3]}, {"w": [0.5]}), b"", b"x" * 3000]
    with RecordWriter(tmp_path / "ours.tfrecord") as writer:
        for record in records:
            writer.write(record)
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    assert (tmp_path / "ours.tfrecord").read_bytes() == (tmp_path / "tf.tfrecord").read_bytes()
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours.tfrecord"))]
    assert read == records


def test_the_first_damaged_record_is_found_where_tensorflows_reader_fails(tmp_path):
    path = tmp_path / "records.tfrecord"
    with RecordWriter(str(path)) as writer:
        for index in range(5):
            writer.write(b"x" * (10 + index))
    whole = path.read_bytes()
    assert first_damaged_record(str(path)) is None
    starts = [0, 26, 53, 81, 110]  # 12 bytes of header, the data, 4 of CRC
    for where, record in ((starts[2] + 3, 2), (starts[3] + 14, 3), (starts[4] + 8, 4)):  # a length, data, a CRC
        damaged = bytearray(whole)
        damaged[where] ^= 0xFF
        path.write_bytes(bytes(damaged))
        assert first_damaged_record(str(path)) == starts[record]
        with pytest.raises(tf.errors.DataLossError, match="corrupted record"):
            list(tf.data.TFRecordDataset(str(path)))
    path.write_bytes(whole[:-2])  # cut inside the last record
    assert first_damaged_record(str(path)) == starts[4]
