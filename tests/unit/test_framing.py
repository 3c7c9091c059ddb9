"""Unit tests for recordbeam.tfrecord.framing: format, compression, corruption handling, memory bounds."""

from __future__ import annotations

import array
import base64
import gzip
import io
import logging
import pickle
import random
import struct
import tracemalloc
import zlib

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

from recordbeam.tfrecord.framing import (
    Compression,
    CorruptRecord,
    RecordError,
    RecordWriter,
    compression_for_path,
    frame_record,
    masked_crc32c,
    open_records,
    parse_compression,
    read_records,
    read_records_with_offsets,
    shard_suffix,
)

ALL = list(Compression)

# Three records whose middle one starts at byte 26 and spans 26..62:
# length 26..34, length CRC 34..38, data 38..58, data CRC 58..62.
RECORDS = [b"a" * 10, b"b" * 20, b"c" * 30]
MID_OFFSET = 16 + 10
MID_END = MID_OFFSET + 16 + 20
PARTS = {
    "length": (MID_OFFSET, MID_OFFSET + 8),
    "length_crc": (MID_OFFSET + 8, MID_OFFSET + 12),
    "data": (MID_OFFSET + 12, MID_OFFSET + 32),
    "data_crc": (MID_OFFSET + 32, MID_END),
}


def spec_mask(crc: int) -> int:
    """The TFRecord mask written out from the format description, independent of the module."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32


def framed_stream(records: list[bytes]) -> bytes:
    return b"".join(frame_record(r) for r in records)


def compress(raw: bytes, c: Compression) -> bytes:
    """Compress an uncompressed record stream with the standard library, not our writer."""
    if c is Compression.GZIP:
        return gzip.compress(raw)
    if c is Compression.ZLIB:
        return zlib.compress(raw)
    return raw


def write_all(records: list[bytes], c: Compression, **kw) -> bytes:
    buf = io.BytesIO()
    with RecordWriter(buf, c, **kw) as w:
        for r in records:
            w.write(r)
    return buf.getvalue()


def read_all(blob: bytes, c: Compression | str | None = None, **kw) -> list[bytes]:
    return list(read_records(io.BytesIO(blob), compression=c, **kw))


def flip_bit(blob: bytes, pos: int, bit: int = 0) -> bytes:
    b = bytearray(blob)
    b[pos] ^= 1 << bit
    return bytes(b)


# --- format -------------------------------------------------------------------------------------


def test_fixed_vector_foo():
    assert base64.b64encode(frame_record(b"foo")) == b"AwAAAAAAAACwmUkOZm9vYYq+/g=="


def test_masked_crc_matches_spec_formula_on_standard_check_value():
    # 0xE3069283 is the published CRC-32C of b"123456789".
    assert masked_crc32c(b"123456789") == spec_mask(0xE3069283)


def test_frame_layout_fields():
    data = bytes(range(200))
    framed = frame_record(data)
    length, length_crc = struct.unpack_from("<QI", framed)
    assert length == 200
    assert length_crc == spec_mask(crc32c.crc32c(framed[:8]))
    assert framed[12:-4] == data
    assert struct.unpack("<I", framed[-4:])[0] == spec_mask(crc32c.crc32c(data))


def test_writer_output_equals_concatenated_frames():
    records = [b"", b"x", b"hello" * 1000]
    assert write_all(records, Compression.NONE) == framed_stream(records)


@pytest.mark.parametrize("c", [Compression.GZIP, Compression.ZLIB])
def test_compressed_output_is_standard_stream_of_frames(c):
    records = [b"one", b"", b"three" * 500]
    blob = write_all(records, c)
    raw = gzip.decompress(blob) if c is Compression.GZIP else zlib.decompress(blob)
    assert raw == framed_stream(records)
    if c is Compression.GZIP:
        assert blob[:2] == b"\x1f\x8b"
    else:
        assert (blob[0] * 256 + blob[1]) % 31 == 0 and blob[0] & 0x0F == 8


@pytest.mark.parametrize("c", ALL)
def test_round_trip(c):
    records = [b"", b"\x00", bytes(range(256)) * 40, b"tail"]
    assert read_all(write_all(records, c), c) == records


@pytest.mark.parametrize("c", ALL)
def test_reads_stdlib_compressed_streams(c):
    records = [b"p" * 3, b"q" * 70000, b""]
    assert read_all(compress(framed_stream(records), c), c) == records


def test_multi_member_gzip_is_read_in_full():
    first = gzip.compress(framed_stream([b"a", b"b"]))
    second = gzip.compress(framed_stream([b"c"]))
    assert read_all(first + second, Compression.GZIP) == [b"a", b"b", b"c"]
    # gzip allows zero padding between and after members
    assert read_all(first + b"\0" * 5 + second + b"\0\0", "gzip") == [b"a", b"b", b"c"]


@pytest.mark.parametrize("c", ALL)
def test_empty_input_has_no_records(c):
    assert read_all(b"", c) == []
    assert read_all(write_all([], c), c) == []


@settings(max_examples=examples(100), deadline=None)
@given(
    records=st.lists(st.binary(max_size=300), max_size=12),
    c=st.sampled_from(ALL),
)
def test_property_round_trip_with_offsets(records, c):
    index = io.StringIO()
    blob = write_all(records, c, index=index)
    got = list(read_records_with_offsets(io.BytesIO(blob), compression=c))
    assert [d for _, _, d in got] == records
    expected_offsets = []
    pos = 0
    for r in records:
        expected_offsets.append((pos, len(r) + 16))
        pos += len(r) + 16
    assert [(o, n) for o, n, _ in got] == expected_offsets
    assert index.getvalue() == "".join(f"{o} {n}\n" for o, n in expected_offsets)


class TrickleReader(io.RawIOBase):
    """A raw stream that returns at most a few bytes per read, like a slow socket."""

    def __init__(self, data: bytes, step: int = 5):
        self._data = data
        self._pos = 0
        self._step = step

    def readable(self):
        return True

    def read(self, n=-1):
        n = self._step if n < 0 else min(n, self._step)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


@pytest.mark.parametrize("c", ALL)
def test_short_reads_from_raw_streams(c):
    records = [b"abc" * 50, b"", b"z" * 33]
    blob = write_all(records, c)
    assert list(read_records(TrickleReader(blob), compression=c)) == records


def test_verify_false_ignores_data_crc():
    blob = flip_bit(framed_stream(RECORDS), PARTS["data_crc"][0])
    assert read_all(blob, verify=False) == RECORDS
    with pytest.raises(RecordError):
        read_all(blob)


def test_open_records_infers_compression_from_suffix(tmp_path):
    records = [b"r1", b"r2" * 100]
    for c in ALL:
        path = tmp_path / f"shard{shard_suffix(c)}"
        path.write_bytes(write_all(records, c))
        assert list(open_records(str(path))) == records


# --- compression names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,expected",
    [
        (None, Compression.NONE),
        ("", Compression.NONE),
        ("none", Compression.NONE),
        ("NONE", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("GZIP", Compression.GZIP),
        ("zlib", Compression.ZLIB),
        ("ZLIB", Compression.ZLIB),
        (Compression.ZLIB, Compression.ZLIB),
    ],
)
def test_parse_compression(name, expected):
    assert parse_compression(name) is expected


def test_parse_compression_bad_name_lists_choices():
    with pytest.raises(ValueError, match="gzp.*none, gzip, zlib"):
        parse_compression("gzp")
    with pytest.raises(ValueError, match="unknown compression"):
        read_records_with_offsets(io.BytesIO(b""), compression="bzip2")


def test_compression_values_are_tf_option_names():
    assert [c.value for c in Compression] == ["", "GZIP", "ZLIB"]


@pytest.mark.parametrize(
    "path,expected",
    [
        ("a.tfrecord", Compression.NONE),
        ("a.tfrecord.gz", Compression.GZIP),
        ("A.TFRECORD.GZ", Compression.GZIP),
        ("a.tfrecord.zz", Compression.ZLIB),
        ("a.zlib", Compression.ZLIB),
        ("gz/a.tfrecord", Compression.NONE),
    ],
)
def test_compression_for_path(path, expected):
    assert compression_for_path(path) is expected


def test_shard_suffix_round_trips_through_compression_for_path():
    assert [shard_suffix(c) for c in ALL] == [".tfrecord", ".tfrecord.gz", ".tfrecord.zz"]
    for c in ALL:
        assert compression_for_path("x" + shard_suffix(c)) is c


# --- writer behaviour --------------------------------------------------------------------------


def test_writer_counters_and_bytes_like_inputs():
    buf = io.BytesIO()
    w = RecordWriter(buf)
    w.write(bytearray(b"ab"))
    w.write(memoryview(b"cde"))
    assert (w.records_written, w.bytes_written) == (2, 2 + 16 + 3 + 16)
    w.close()
    assert read_all(buf.getvalue()) == [b"ab", b"cde"]
    with pytest.raises(TypeError, match="bytes-like"):
        RecordWriter(io.BytesIO()).write("text")  # type: ignore[arg-type]


def test_writer_close_keeps_or_closes_file_as_asked():
    kept = io.BytesIO()
    with RecordWriter(kept, Compression.GZIP) as w:
        w.write(b"x")
    assert not kept.closed
    assert read_all(kept.getvalue(), "gzip") == [b"x"]
    with pytest.raises(ValueError, match="closed RecordWriter"):
        w.write(b"y")
    w.close()  # second close is harmless

    owned = io.BytesIO()
    RecordWriter(owned, close_fileobj=True).close()
    assert owned.closed


# --- corruption ---------------------------------------------------------------------------------


@pytest.mark.parametrize("c", ALL)
@pytest.mark.parametrize(
    "part,check",
    [
        ("length", "length_crc"),
        ("length_crc", "length_crc"),
        ("data", "data_crc"),
        ("data_crc", "data_crc"),
    ],
)
@pytest.mark.parametrize("where", ["first", "last"])
def test_bit_flip_in_each_part_of_middle_record(c, part, check, where):
    start, end = PARTS[part]
    pos = start if where == "first" else end - 1
    blob = compress(flip_bit(framed_stream(RECORDS), pos, bit=3), c)
    it = read_records(io.BytesIO(blob), path="shard-7.tfrecord", compression=c)
    assert next(it) == RECORDS[0]
    with pytest.raises(RecordError) as info:
        next(it)
    err = info.value
    assert (err.check, err.record, err.offset, err.path) == (
        check,
        1,
        MID_OFFSET,
        "shard-7.tfrecord",
    )
    msg = str(err)
    assert "shard-7.tfrecord" in msg and "record 1" in msg and f"offset {MID_OFFSET}" in msg
    assert "skip_corrupt=True" in msg


def truncation_cases():
    cases = [(MID_OFFSET + k, "truncated_header") for k in range(1, 12)]
    cases += [(MID_OFFSET + 12 + k, "truncated_data") for k in range(0, 20)]
    cases += [(MID_OFFSET + 32 + k, "truncated_footer") for k in range(0, 4)]
    return cases


@pytest.mark.parametrize("c", ALL)
@pytest.mark.parametrize("cut,check", truncation_cases())
def test_truncation_inside_middle_record(c, cut, check):
    blob = compress(framed_stream(RECORDS)[:cut], c)
    got = []
    with pytest.raises(RecordError) as info:
        for r in read_records(io.BytesIO(blob), compression=c):
            got.append(r)
    assert got == RECORDS[:1]
    assert (info.value.check, info.value.record, info.value.offset) == (check, 1, MID_OFFSET)
    assert "cut short" in str(info.value)


@pytest.mark.parametrize("cut,count", [(MID_OFFSET, 1), (MID_END, 2)])
def test_truncation_at_record_boundary_is_clean_eof(cut, count):
    assert read_all(framed_stream(RECORDS)[:cut]) == RECORDS[:count]


@pytest.mark.parametrize("c", [Compression.GZIP, Compression.ZLIB])
def test_cut_compressed_file_is_decompression_error(c):
    records = [bytes(random.Random(1).randbytes(5000)) for _ in range(4)]
    blob = write_all(records, c)
    cut = blob[: len(blob) * 2 // 3]
    with pytest.raises(RecordError) as info:
        read_all(cut, c)
    assert info.value.check == "decompression"
    assert "cut short" in str(info.value)
    seen: list[CorruptRecord] = []
    got = read_all(cut, c, skip_corrupt=True, on_corrupt=seen.append)
    assert got == records[: len(got)] and len(got) < 4
    assert [s.check for s in seen] == ["decompression"]
    assert seen[0].record == len(got)


@pytest.mark.parametrize("c", [Compression.GZIP, Compression.ZLIB])
def test_wrong_compression_is_decompression_error(c):
    with pytest.raises(RecordError) as info:
        read_all(framed_stream(RECORDS), c)
    assert (info.value.check, info.value.record, info.value.offset) == ("decompression", 0, 0)


def test_uncompressed_reader_on_gzip_file_fails_length_crc():
    with pytest.raises(RecordError) as info:
        read_all(write_all(RECORDS, Compression.GZIP), Compression.NONE)
    assert info.value.check in ("length_crc", "truncated_header")


@pytest.mark.parametrize("c", ALL)
def test_skip_corrupt_data_skips_one_record(c):
    blob = compress(flip_bit(framed_stream(RECORDS), PARTS["data"][0] + 5), c)
    seen: list[CorruptRecord] = []
    got = read_all(blob, c, path="p", skip_corrupt=True, on_corrupt=seen.append)
    assert got == [RECORDS[0], RECORDS[2]]
    assert seen == [CorruptRecord("p", 1, MID_OFFSET, "data_crc", MID_END - MID_OFFSET)]


@pytest.mark.parametrize("c", ALL)
@pytest.mark.parametrize("part", ["length", "length_crc"])
def test_skip_corrupt_length_resyncs_to_next_record(c, part):
    blob = compress(flip_bit(framed_stream(RECORDS), PARTS[part][0], bit=6), c)
    seen: list[CorruptRecord] = []
    got = list(
        read_records_with_offsets(
            io.BytesIO(blob), compression=c, skip_corrupt=True, on_corrupt=seen.append
        )
    )
    assert [d for _, _, d in got] == [RECORDS[0], RECORDS[2]]
    assert [o for o, _, _ in got] == [0, MID_END]
    assert seen == [CorruptRecord("<stream>", 1, MID_OFFSET, "length_crc", MID_END - MID_OFFSET)]


def test_resync_over_garbage_longer_than_scan_window():
    rng = random.Random(7)
    garbage = rng.randbytes(150_000) + bytes(70_000) + rng.randbytes(1000)
    blob = frame_record(b"first") + garbage + frame_record(b"second") + frame_record(b"third")
    seen: list[CorruptRecord] = []
    got = list(
        read_records_with_offsets(io.BytesIO(blob), skip_corrupt=True, on_corrupt=seen.append)
    )
    assert [d for _, _, d in got] == [b"first", b"second", b"third"]
    assert got[1][0] == 21 + len(garbage)
    assert [(s.check, s.offset, s.skipped_bytes) for s in seen] == [
        ("length_crc", 21, len(garbage))
    ]


def test_resync_that_finds_nothing_reports_rest_of_file_and_stops():
    blob = frame_record(b"ok") + random.Random(3).randbytes(5000)
    seen: list[CorruptRecord] = []
    assert read_all(blob, skip_corrupt=True, on_corrupt=seen.append) == [b"ok"]
    assert [(s.check, s.offset, s.skipped_bytes) for s in seen] == [("length_crc", 18, 5000)]


@pytest.mark.parametrize("cut", [MID_OFFSET + 5, MID_OFFSET + 20, MID_OFFSET + 33])
def test_skip_corrupt_truncation_reports_and_stops(cut):
    seen: list[CorruptRecord] = []
    got = read_all(framed_stream(RECORDS)[:cut], skip_corrupt=True, on_corrupt=seen.append)
    assert got == RECORDS[:1]
    assert len(seen) == 1
    assert seen[0].check.startswith("truncated_")
    assert (seen[0].record, seen[0].offset, seen[0].skipped_bytes) == (1, MID_OFFSET, cut - 26)


def test_skip_corrupt_without_callback_logs_a_warning(caplog):
    blob = flip_bit(framed_stream(RECORDS), PARTS["data"][0])
    with caplog.at_level(logging.WARNING, logger="recordbeam.tfrecord.framing"):
        assert read_all(blob, path="shard.tfrecord", skip_corrupt=True) == [RECORDS[0], RECORDS[2]]
    assert "shard.tfrecord: record 1" in caplog.text


def test_too_large_is_refused_and_can_be_skipped():
    blob = framed_stream([b"s", b"L" * 100, b"t"])
    with pytest.raises(RecordError) as info:
        read_all(blob, max_record_bytes=50)
    assert (info.value.check, info.value.record, info.value.offset) == ("too_large", 1, 17)
    assert "max_record_bytes" in str(info.value)
    seen: list[CorruptRecord] = []
    assert read_all(blob, max_record_bytes=50, skip_corrupt=True, on_corrupt=seen.append) == [
        b"s",
        b"t",
    ]
    assert seen == [CorruptRecord("<stream>", 1, 17, "too_large", 116)]


def huge_claim_file() -> bytes:
    """A header with a valid length CRC claiming 2**40 data bytes, followed by 100 bytes."""
    length = struct.pack("<Q", 2**40)
    return length + struct.pack("<I", masked_crc32c(length)) + b"x" * 100


def test_huge_length_is_too_large_by_default():
    with pytest.raises(RecordError) as info:
        read_all(huge_claim_file())
    assert info.value.check == "too_large"


@pytest.mark.parametrize("c", ALL)
def test_huge_length_truncated_without_allocating(tmp_path, c):
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(compress(huge_claim_file(), c))
    tracemalloc.start()
    try:
        with open(path, "rb") as f, pytest.raises(RecordError) as info:
            list(read_records(f, compression=c, max_record_bytes=2**41))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.check == "truncated_data"
    assert "100 of 1099511627776" in str(info.value)
    assert peak < 4 * 2**20


def test_large_record_read_in_chunks_round_trips():
    big = random.Random(5).randbytes(3 * 2**20 + 17)  # crosses the chunked-read threshold
    assert read_all(write_all([b"a", big, b"b"], Compression.NONE)) == [b"a", big, b"b"]


def test_record_error_is_picklable_and_keeps_fields():
    err = RecordError("f.tfrecord", 3, 99, "data_crc")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.path, copy.record, copy.offset, copy.check) == ("f.tfrecord", 3, 99, "data_crc")
    assert str(copy) == str(err)
    assert isinstance(copy, ValueError)


# --- write_chunks: one record from several pieces -----------------------------------------------


def write_chunked(records: list[list], c: Compression, **kw) -> bytes:
    buf = io.BytesIO()
    with RecordWriter(buf, c, **kw) as w:
        for chunks in records:
            w.write_chunks(chunks)
    return buf.getvalue()


CHUNKED = [
    [b"head", b"x" * 40_000, b"tail"],  # a chunk above the direct-write size
    [],  # an empty record
    [b"", b"", b"only"],
    [bytearray(b"ab"), memoryview(b"cdef")[1:3], b"y" * 20_000, b"z" * 20_000],
    [memoryview(array.array("i", range(100))), b"!"],  # memoryview of 4-byte items
]


def joined(chunks: list) -> bytes:
    return b"".join(bytes(memoryview(chunk).cast("B")) for chunk in chunks)


@pytest.mark.parametrize("c", ALL)
def test_write_chunks_equals_write_of_joined_chunks(c):
    index_chunks, index_joined = io.StringIO(), io.StringIO()
    got = write_chunked(CHUNKED, c, index=index_chunks)
    expected = write_all([joined(chunks) for chunks in CHUNKED], c, index=index_joined)
    assert got == expected
    assert index_chunks.getvalue() == index_joined.getvalue()
    assert len(index_chunks.getvalue().splitlines()) == len(CHUNKED)
    assert read_all(got, c) == [joined(chunks) for chunks in CHUNKED]


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.lists(st.binary(max_size=40), max_size=5), max_size=4),
    st.sampled_from(ALL),
)
def test_property_write_chunks_matches_write(records, c):
    buf = io.BytesIO()
    with RecordWriter(buf, c) as w:
        for index, record in enumerate(records):
            if index % 2:
                w.write(b"".join(record))  # interleaved with write(): offsets continue
            else:
                w.write_chunks(record)
        counts = (w.records_written, w.bytes_written)
    assert buf.getvalue() == write_all([b"".join(r) for r in records], c)
    assert counts == (len(records), sum(16 + len(b"".join(r)) for r in records))


class RecordingFile:
    def __init__(self) -> None:
        self.writes: list = []

    def write(self, data) -> int:
        self.writes.append(data)
        return len(data)


def test_write_chunks_passes_large_chunks_to_the_file_uncopied():
    image = random.Random(1).randbytes(1 << 20)
    sink = RecordingFile()
    RecordWriter(sink).write_chunks([b"small header", image, b"small tail"])
    assert any(piece is image or getattr(piece, "obj", None) is image for piece in sink.writes)
    assert len(sink.writes) == 3  # header+first chunk, the image, last chunk+footer
    assert b"".join(bytes(piece) for piece in sink.writes) == frame_record(
        b"small header" + image + b"small tail"
    )


def test_write_chunks_crc_is_incremental_crc_of_the_whole_record():
    chunks = [b"foo", b"bar", b"baz" * 5000]
    framed = write_chunked([chunks], Compression.NONE)
    data = b"".join(chunks)
    assert struct.unpack("<I", framed[-4:])[0] == spec_mask(crc32c.crc32c(data))
    assert struct.unpack("<Q", framed[:8])[0] == len(data)


def test_write_chunks_copies_non_contiguous_views():
    strided = memoryview(bytes(range(100)))[::3]
    assert write_chunked([[b"<", strided, b">"]], Compression.NONE) == frame_record(
        b"<" + strided.tobytes() + b">"
    )


def test_write_chunks_refuses_text_and_closed_writer():
    w = RecordWriter(io.BytesIO())
    with pytest.raises(TypeError, match="chunk must be bytes-like, got str"):
        w.write_chunks([b"ok", "text"])
    w.close()
    with pytest.raises(ValueError, match="closed RecordWriter"):
        w.write_chunks([b"x"])
