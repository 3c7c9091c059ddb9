"""Unit tests for recordbeam.tfrecord.index: DALI-style index files for TFRecord shards."""

from __future__ import annotations

import gzip
import io
import random
import struct

import pytest

from recordbeam.tfrecord.framing import (
    Compression,
    RecordError,
    RecordWriter,
    frame_record,
    read_records,
)
from recordbeam.tfrecord.index import index_path_for, read_index, write_index

RECORDS = [b"", b"one", random.Random(0).randbytes(5000), b"last" * 10]


def write_shard(c: Compression) -> tuple[bytes, str]:
    data, idx = io.BytesIO(), io.StringIO()
    with RecordWriter(data, c, index=idx) as w:
        for r in RECORDS:
            w.write(r)
    return data.getvalue(), idx.getvalue()


@pytest.mark.parametrize("c", list(Compression))
def test_writer_index_equals_index_built_from_file(c):
    shard, from_writer = write_shard(c)
    out = io.StringIO()
    assert write_index(io.BytesIO(shard), out, compression=c) == len(RECORDS)
    assert out.getvalue() == from_writer
    assert len(from_writer.splitlines()) == len(RECORDS)


def test_index_lines_are_offset_and_framed_length():
    _, text = write_shard(Compression.NONE)
    expected, pos = [], 0
    for r in RECORDS:
        expected.append((pos, 8 + 4 + len(r) + 4))
        pos += 8 + 4 + len(r) + 4
    assert read_index(io.StringIO(text)) == expected


def test_offsets_let_you_seek_to_each_record(tmp_path):
    shard, text = write_shard(Compression.NONE)
    path = tmp_path / "s.tfrecord"
    path.write_bytes(shard)
    entries = read_index(io.StringIO(text))
    with open(path, "rb") as f:
        for (offset, framed_length), expected in reversed(list(zip(entries, RECORDS, strict=True))):
            f.seek(offset)
            framed = f.read(framed_length)
            assert framed == frame_record(expected)
            (length,) = struct.unpack_from("<Q", framed)
            assert length == framed_length - 16
            assert list(read_records(io.BytesIO(framed))) == [expected]


def test_compressed_offsets_refer_to_decompressed_stream():
    gz, text = write_shard(Compression.GZIP)
    plain, plain_text = write_shard(Compression.NONE)
    assert text == plain_text
    raw = gzip.decompress(gz)
    for offset, framed_length in read_index(io.StringIO(text)):
        assert raw[offset : offset + framed_length] == plain[offset : offset + framed_length]


def test_write_index_infers_compression_from_path():
    shard, text = write_shard(Compression.ZLIB)
    out = io.StringIO()
    write_index(io.BytesIO(shard), out, path="x.tfrecord.zz")
    assert out.getvalue() == text


def test_write_index_refuses_corrupt_shard():
    shard, _ = write_shard(Compression.NONE)
    damaged = bytearray(shard)
    damaged[-1] ^= 0x10
    with pytest.raises(RecordError) as info:
        write_index(io.BytesIO(bytes(damaged)), io.StringIO(), path="bad.tfrecord")
    assert (info.value.check, info.value.record) == ("data_crc", len(RECORDS) - 1)


def test_read_index_skips_blank_lines_and_reads_file(tmp_path):
    p = tmp_path / "s.tfrecord.idx"
    p.write_text("0 19\n\n19 30\n")
    with open(p) as f:
        assert read_index(f) == [(0, 19), (19, 30)]


@pytest.mark.parametrize(
    "text,bad_line",
    [
        ("0 16\n16 x\n", 2),
        ("0 16 7\n", 1),
        ("0 16\n16 20\n-3 20\n", 3),
        ("0\n", 1),
        ("0 15\n", 1),
    ],
)
def test_malformed_line_is_named(tmp_path, text, bad_line):
    p = tmp_path / "broken.idx"
    p.write_text(text)
    with open(p) as f, pytest.raises(ValueError) as info:
        read_index(f)
    msg = str(info.value)
    assert str(p) in msg
    assert f"line {bad_line}:" in msg
    assert "write_index" in msg


def test_read_index_uses_given_name():
    with pytest.raises(ValueError, match=r"^mine\.idx: line 1:"):
        read_index(io.StringIO("garbage\n"), path="mine.idx")


def test_index_path_for():
    assert index_path_for("gs://b/train-00001-of-00010.tfrecord") == (
        "gs://b/train-00001-of-00010.tfrecord.idx"
    )
