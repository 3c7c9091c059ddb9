"""Reading untrusted TFRecords: fuzzed bytes end in a clear error, within bounded time and
memory, and ``recordbeam verify`` pins every injected corruption to its file, record and
byte offset.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lanes import examples

from recordbeam.cli import main as cli
from recordbeam.tfrecord.example import decode_example, decode_sequence_example, encode_example
from recordbeam.tfrecord.framing import Compression, RecordError, RecordWriter, read_records

CASE = pytest.mark.case
FUZZ = settings(max_examples=examples(300), deadline=2000, suppress_health_check=[HealthCheck.too_slow])
MEMORY_LIMIT = 16 * 2**20  # peak Python allocation while reading a few KB of input


def _records(n: int = 6) -> list[bytes]:
    return [
        encode_example({"id": [i], "name": f"record {i}", "values": [float(i)] * (i * 7)})
        for i in range(n)
    ]


def _stream(records: list[bytes], compression: Compression = Compression.NONE) -> bytes:
    buffer = io.BytesIO()
    with RecordWriter(buffer, compression, close_fileobj=False) as writer:
        for r in records:
            writer.write(r)
    return buffer.getvalue()


VALID = {c: _stream(_records(), c) for c in Compression}


def _bounded(read) -> None:
    """Run ``read``; only our documented errors may escape, in bounded time and memory."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        read()
    except (RecordError, ValueError):
        pass
    finally:
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.monotonic() - started < 2.0
    assert peak < MEMORY_LIMIT, peak


def _read_all(data: bytes, compression: Compression, skip_corrupt: bool = False) -> None:
    for _ in read_records(
        io.BytesIO(data),
        compression=compression,
        skip_corrupt=skip_corrupt,
        on_corrupt=lambda _c: None,
    ):
        pass


@CASE(
    "Fuzz: random bytes into the record reader (none, gzip, zlib; strict and skip_corrupt)",
    "only `RecordError`/`ValueError`; < 2 s and < 16 MiB each (300 examples)",
)
@FUZZ
@given(
    data=st.binary(max_size=4096),
    compression=st.sampled_from(list(Compression)),
    skip=st.booleans(),
)
def test_fuzz_random_bytes_into_the_reader(data, compression, skip):
    _bounded(lambda: _read_all(data, compression, skip))


_mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "cut"]),
    st.integers(0, 10**6),
    st.binary(min_size=1, max_size=64),
)


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, where, payload in mutations:
        at = where % (len(out) + 1)
        if kind == "flip" and out:
            out[at % len(out)] ^= payload[0] or 1
        elif kind == "insert":
            out[at:at] = payload
        elif kind == "delete":
            del out[at : at + len(payload)]
        else:
            del out[at:]
    return bytes(out)


@CASE(
    "Fuzz: mutated valid files (flips, inserts, deletes, cuts; also of compressed bytes)",
    "only `RecordError`/`ValueError`; bounded time and memory (300 examples)",
)
@FUZZ
@given(
    compression=st.sampled_from(list(Compression)),
    mutations=st.lists(_mutation, min_size=1, max_size=4),
    skip=st.booleans(),
)
def test_fuzz_mutated_valid_files(compression, mutations, skip):
    _bounded(lambda: _read_all(_mutate(VALID[compression], mutations), compression, skip))


@CASE(
    "Decompression bomb in a `.gz` shard (64 MiB of zeros in 64 KiB)",
    "`RecordError` at record 0 without inflating it all into memory",
)
def test_gzip_bomb_is_read_in_bounded_memory():
    bomb = gzip.compress(b"\0" * (64 * 2**20), compresslevel=9)
    assert len(bomb) < 100_000
    with pytest.raises(RecordError) as info:
        _bounded_raise(lambda: _read_all(bomb, Compression.GZIP))
    assert (info.value.record, info.value.offset) == (0, 0)


def _bounded_raise(read) -> None:
    tracemalloc.start()
    try:
        read()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < MEMORY_LIMIT, peak


def _decode_both(data: bytes) -> None:
    for decode in (decode_example, decode_sequence_example):
        try:
            decode(data)
        except ValueError as error:
            assert "not a serialized" in str(error)


@CASE(
    "Fuzz: random and mutated bytes into `decode_example` / `decode_sequence_example`",
    "a result or `ValueError` ('not a serialized ...'); bounded time and memory (300 examples)",
)
@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=2048),
        st.tuples(st.sampled_from(_records()), st.lists(_mutation, min_size=1, max_size=3)).map(
            lambda t: _mutate(t[0], t[1])
        ),
    )
)
def test_fuzz_example_decoders(data):
    tracemalloc.start()
    started = time.monotonic()
    try:
        _decode_both(data)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.monotonic() - started < 2.0
    assert peak < MEMORY_LIMIT


@CASE("Protobuf nested 100,000 groups deep (recursion bomb)", "`ValueError`, no crash")
def test_deeply_nested_message_is_a_value_error():
    with pytest.raises(ValueError, match="not a serialized"):
        decode_example(b"\x0b" * 100_000)
    with pytest.raises(ValueError, match="not a serialized"):
        decode_sequence_example(b"\x12\x80\x80\x04" + b"\x0a\x80\x80\x04" * 50_000)


# ----------------------------------------------------------------- verify


def _offsets(records: list[bytes]) -> list[int]:
    out, at = [], 0
    for r in records:
        out.append(at)
        at += len(r) + 16
    return out


def _damage(data: bytes, how: str, start: int, length: int) -> bytes:
    """Corrupt the record framed at ``start`` with ``length`` data bytes."""
    out = bytearray(data)
    part = {
        "length": start + 2,
        "length CRC": start + 9,
        "data": start + 12 + length // 2,
        "data CRC": start + 12 + length + 1,
    }
    if how in part:
        out[part[how]] ^= 0x10
    elif how == "zeroed 64 bytes":
        out[start + 4 : start + 68] = bytes(len(out[start + 4 : start + 68]))
    elif how == "cut inside":
        del out[start + 12 + length // 2 :]
    elif how == "not an Example":
        record = b"\xff\xff\xff not protobuf"
        framed = io.BytesIO()
        RecordWriter(framed, close_fileobj=False).write(record)
        out[start : start + length + 16] = framed.getvalue()
    return bytes(out)


KINDS = [
    "length",
    "length CRC",
    "data",
    "data CRC",
    "zeroed 64 bytes",
    "cut inside",
    "not an Example",
]


@CASE(
    "`verify` on 3 shards, each kind of damage (bit flip in length, length CRC, data, data "
    "CRC; 64 zeroed bytes; cut; a non-Example record) at the first, a middle and the last record",
    "exit 1; the damaged file, record number and byte offset named; other files ok",
)
@pytest.mark.parametrize("how", KINDS)
def test_verify_names_file_record_and_offset(tmp_path, capsys, how):
    records = _records()
    offsets = _offsets(records)
    paths = []
    for shard in range(3):
        path = tmp_path / f"train-0000{shard}-of-00003.tfrecord"
        path.write_bytes(VALID[Compression.NONE])
        paths.append(str(path))
    for target in (0, 3, len(records) - 1):
        damaged = _damage(VALID[Compression.NONE], how, offsets[target], len(records[target]))
        with open(paths[1], "wb") as f:
            f.write(damaged)
        assert cli.main(["verify", *paths]) == 1
        captured = capsys.readouterr()
        assert f"{paths[1]}: record {target} at byte {offsets[target]}" in captured.out
        assert f"{paths[1]}: record {target} at byte {offsets[target]}" in captured.err
        for ok in (paths[0], paths[2]):
            assert f"{ok}: {len(records)} records, ok" in captured.out


@CASE(
    "`verify` on a `.gz` shard with a flipped byte in the compressed stream",
    "exit 1 naming the file and the record where reading failed",
)
def test_verify_compressed_shard(tmp_path, capsys):
    data = bytearray(VALID[Compression.GZIP])
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "train-00000-of-00001.tfrecord.gz"
    path.write_bytes(bytes(data))
    assert cli.main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: record " in err and " at byte " in err


@CASE(
    "Property: any single corrupted byte of an uncompressed shard (300 examples)",
    "`verify` reports exactly that byte's record and offset",
)
@FUZZ
@given(position=st.integers(0, len(VALID[Compression.NONE]) - 1), mask=st.integers(1, 255))
def test_any_corrupted_byte_is_pinned_to_its_record(position, mask):
    from recordbeam.cli.verify import verify_file

    records = _records()
    offsets = _offsets(records)
    data = bytearray(VALID[Compression.NONE])
    data[position] ^= mask
    record = max(i for i, at in enumerate(offsets) if at <= position)
    fd, path = tempfile.mkstemp(suffix=".tfrecord")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(data))
        clean, problems = verify_file(path)
    finally:
        os.unlink(path)
    assert problems, "a corrupted byte went unnoticed"
    assert problems[0].startswith(f"{path}: record {record} at byte {offsets[record]}:")
    assert clean == len(records) - 1
