"""TFRecord files of `tf.train.Example`s, written without TensorFlow.

Data-writer workers write every shard; importing TensorFlow would cost each
of them seconds of start-up and ~800 MB (it loads Keras too). The formats are
small and fixed, so they are encoded here and a test checks the bytes against
TensorFlow's own (`tf.train.Example.SerializeToString(deterministic=True)`
and `tf.io.TFRecordWriter`), and that `tf.data.TFRecordDataset` reads them.

TFRecord framing: uint64 length, uint32 masked CRC-32C of the length, the
data, uint32 masked CRC-32C of the data (all little-endian). The CRC comes
from `google-crc32c` (C): a pure-Python CRC would cost more than TensorFlow.
"""

import struct

import google_crc32c
import numpy as np

from albert_tf.utils import files


def _masked_crc(data):
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def first_damaged_record(path):
    """Where the first damaged record of the TFRecord file `path` starts, or None when every record is whole.

    A record is damaged when its length or its data fails its CRC (bytes
    changed after they were written), or when the file ends inside it. This
    is the check `tf.data.TFRecordDataset` makes as it reads, whose
    `DataLossError` ("corrupted record at N") names no file.

    Returns:
        The record's byte offset in the file, or None.
    """
    offset = 0
    with files.open_file(path, "rb") as f:
        while header := f.read(12):
            length, length_crc = header[:8], header[8:]
            if len(header) < 12 or struct.pack("<I", _masked_crc(length)) != length_crc:
                return offset
            size = struct.unpack("<Q", length)[0]
            record, crc = f.read(size), f.read(4)
            if len(record) < size or struct.pack("<I", _masked_crc(record)) != crc:
                return offset
            offset += 12 + size + 4
    return None


class RecordWriter:
    """Writes TFRecord files, as `tf.io.TFRecordWriter` (no compression).

    Args:
        path: the file to write.
    """

    def __init__(self, path):
        self._file = files.open_file(path, "wb")

    def write(self, record):
        """Appends one record (bytes)."""
        length = struct.pack("<Q", len(record))
        self._file.write(length + struct.pack("<I", _masked_crc(length)))
        self._file.write(record + struct.pack("<I", _masked_crc(record)))

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _varint(value):
    """The protobuf varint of one int64, as bytes (negatives: two's complement, 10 bytes)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Varints of 0 .. 2^14 - 1 (one or two bytes): token ids, positions and labels
# are nearly all below it, and a table lookup per value is several times
# faster than encoding or vectorizing.
_SMALL_VARINTS = [_varint(value) for value in range(1 << 14)]


def _varints(values):
    """Protobuf varints of int64 values, concatenated."""
    table = _SMALL_VARINTS
    return b"".join([table[v] if 0 <= v < 1 << 14 else _varint(v) for v in values.tolist()])


def _field(number, payload):
    """A length-delimited field: key, length, payload."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int64_feature(values):
    values = np.asarray(values, np.int64).reshape(-1)
    packed = _field(1, _varints(values)) if len(values) else b""  # Int64List.value, packed
    return _field(3, packed)  # Feature.int64_list


def _float_feature(values):
    values = np.asarray(values, "<f4").reshape(-1)
    packed = _field(1, values.tobytes()) if len(values) else b""  # FloatList.value, packed
    return _field(2, packed)  # Feature.float_list


def serialize_example(int64_features, float_features):
    """A `tf.train.Example` of int64 and float32 lists, serialized deterministically.

    Args:
        int64_features: dict name -> int sequence.
        float_features: dict name -> float sequence.

    Returns:
        bytes, equal to TensorFlow's `SerializeToString(deterministic=True)`
        (map entries sorted by name).
    """
    features = {name: _int64_feature(v) for name, v in int64_features.items()}
    features.update({name: _float_feature(v) for name, v in float_features.items()})
    entries = b"".join(
        _field(1, _field(1, name.encode("utf-8")) + _field(2, features[name]))  # Features.feature map entry
        for name in sorted(features)
    )
    return _field(1, entries)  # Example.features
