"""Our TFRecord framing against TensorFlow's own writer and reader, in both directions."""

from __future__ import annotations

import gzip
import random
import zlib

import pytest

tf = pytest.importorskip("tensorflow")

from recordbeam.tfrecord.framing import (  # noqa: E402
    Compression,
    RecordError,
    RecordWriter,
    open_records,
    read_records,
    shard_suffix,
)

pytestmark = pytest.mark.interop

RECORDS = [b"", b"foo", bytes(range(256)) * 3, random.Random(11).randbytes(200_000), b"end"]
ALL = list(Compression)


def write_ours(path, c: Compression, records=RECORDS) -> None:
    with open(path, "wb") as f, RecordWriter(f, c) as w:
        for r in records:
            w.write(r)


def write_tf(path, c: Compression, records=RECORDS) -> None:
    options = tf.io.TFRecordOptions(compression_type=c.value)
    with tf.io.TFRecordWriter(str(path), options) as w:
        for r in records:
            w.write(r)


def read_tf(path, c: Compression) -> list[bytes]:
    ds = tf.data.TFRecordDataset([str(path)], compression_type=c.value)
    return [t.numpy() for t in ds]


@pytest.mark.parametrize("c", ALL)
def test_tf_reads_our_files(tmp_path, c):
    path = tmp_path / f"ours{shard_suffix(c)}"
    write_ours(path, c)
    assert read_tf(path, c) == RECORDS


@pytest.mark.parametrize("c", ALL)
def test_we_read_tf_files(tmp_path, c):
    path = tmp_path / f"theirs{shard_suffix(c)}"
    write_tf(path, c)
    with open(path, "rb") as f:
        assert list(read_records(f, compression=c)) == RECORDS
    assert list(open_records(str(path))) == RECORDS  # compression from the suffix


def test_uncompressed_output_is_byte_identical(tmp_path):
    ours, theirs = tmp_path / "ours.tfrecord", tmp_path / "theirs.tfrecord"
    write_ours(ours, Compression.NONE)
    write_tf(theirs, Compression.NONE)
    assert ours.read_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("c", [Compression.GZIP, Compression.ZLIB])
def test_compressed_outputs_decompress_to_same_stream(tmp_path, c):
    # Compressed bytes may differ (gzip headers, flush points); the record streams must not.
    ours, theirs = tmp_path / "ours.bin", tmp_path / "theirs.bin"
    write_ours(ours, c)
    write_tf(theirs, c)
    unpack = gzip.decompress if c is Compression.GZIP else zlib.decompress
    assert unpack(ours.read_bytes()) == unpack(theirs.read_bytes())


def test_tf_agrees_a_damaged_record_is_corrupt(tmp_path):
    path = tmp_path / "damaged.tfrecord"
    write_ours(path, Compression.NONE, [b"a" * 10, b"b" * 20, b"c" * 30])
    blob = bytearray(path.read_bytes())
    blob[26 + 12 + 3] ^= 0x01  # inside the middle record's data
    path.write_bytes(bytes(blob))
    with pytest.raises(tf.errors.DataLossError):
        read_tf(path, Compression.NONE)
    with pytest.raises(RecordError) as info:
        list(open_records(str(path)))
    assert (info.value.check, info.value.record) == ("data_crc", 1)


@pytest.mark.parametrize("c", ALL)
def test_tf_reads_our_empty_files(tmp_path, c):
    # The sink writes an empty shard for a split with no examples; TF must accept it.
    path = tmp_path / f"empty{shard_suffix(c)}"
    write_ours(path, c, records=[])
    assert read_tf(path, c) == []
    write_tf(path, c, records=[])
    assert list(open_records(str(path))) == []
