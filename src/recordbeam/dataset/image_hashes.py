"""The image hashes of a shard: one compact binary file per shard, ``hashes/<shard>.hashes``.

Each written example with one image gets an entry: the SHA-256 of the image's bytes as
read (before any ``--transcode`` or ``--max-side`` fix), the record's number in its shard,
where the image came from, and, when near duplicates were looked for, its
:class:`~recordbeam.images.perceptual_hash.PerceptualHash`. A later run into the same
folder (``--split val`` after a ``train`` run) reads the files of the splits it keeps
to find its own images among theirs, without reading their shards.

The same layout carries hashes between the stages of a run (a shard's entries of one
bucket, the copies a run drops), so one codec serves both.

Layout (big-endian)::

    magic "RBHASH1\\n" | split: u16 length + UTF-8 | shard: u16 length + UTF-8
    | flags: u8 (1: perceptual hashes were computed) | count: u32
    | count x entry

    entry: SHA-256 (32 bytes) | record: i32 (-1: not written) | flags: u8 (1: dropped,
    2: perceptual hash follows) | [perceptual hash (40 bytes)] | source: u32 length + UTF-8

A file's entries are sorted by SHA-256, then record, so the same shard gives the same
bytes on every runner. No Beam.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from recordbeam.errors import DataError
from recordbeam.images.perceptual_hash import HASH_BYTES

__all__ = [
    "DIGEST_BYTES",
    "DamagedHashFile",
    "HashEntry",
    "HashFile",
    "decode_hash_file",
    "digest_bucket",
    "encode_hash_file",
]

MAGIC = b"RBHASH1\n"
DIGEST_BYTES = 32
_HEAD = struct.Struct(">BI")
_ENTRY = struct.Struct(">32siB")
_LENGTH16 = struct.Struct(">H")
_LENGTH32 = struct.Struct(">I")
_DROPPED = 1
_HAS_NEAR = 2
_NEAR_COMPUTED = 1


class DamagedHashFile(DataError):
    """A ``.hashes`` file that does not read as one (cut short, or not ours)."""


@dataclass(frozen=True, slots=True)
class HashEntry:
    """One image's hashes.

    Attributes:
        digest: SHA-256 of the image's bytes as read.
        record: the example's record number in its shard; -1 for a copy not written
            (``--duplicates drop``).
        source: the image's path (or the element named in rejects when it has none).
        near: a packed :class:`~recordbeam.images.perceptual_hash.PerceptualHash`, or None.
        dropped: a copy this run dropped as a duplicate.
    """

    digest: bytes
    record: int
    source: str
    near: bytes | None = None
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class HashFile:
    """The entries of one shard (``shard`` is its file name; empty for copies not
    written) of one split; ``near_computed`` says whether perceptual hashes were asked
    for, so an entry without one is an image that did not decode."""

    split: str
    shard: str
    entries: tuple[HashEntry, ...]
    near_computed: bool = False


def encode_hash_file(hashes: HashFile) -> bytes:
    """The bytes of ``hashes``, entries sorted (see the module doc)."""
    parts = [MAGIC, _text16(hashes.split), _text16(hashes.shard),
             _HEAD.pack(_NEAR_COMPUTED if hashes.near_computed else 0, len(hashes.entries))]
    for entry in sorted(hashes.entries, key=lambda e: (e.digest, e.record, e.source)):
        flags = (_DROPPED if entry.dropped else 0) | (_HAS_NEAR if entry.near else 0)
        parts.append(_ENTRY.pack(entry.digest, entry.record, flags))
        if entry.near:
            parts.append(entry.near)
        source = entry.source.encode("utf-8", "surrogateescape")
        parts.append(_LENGTH32.pack(len(source)) + source)
    return b"".join(parts)


def decode_hash_file(data: bytes, path: str = "<hashes>") -> HashFile:
    """The :class:`HashFile` in ``data`` (the bytes of ``path``).

    Raises:
        DamagedHashFile: the bytes are not a whole hash file.
    """
    if not data.startswith(MAGIC):
        raise DamagedHashFile(f"{path} is not a recordbeam hash file (it does not start with "
                              f"{MAGIC!r}); rewrite the split it belongs to")
    try:
        at = len(MAGIC)
        split, at = _read_text16(data, at)
        shard, at = _read_text16(data, at)
        flags, count = _HEAD.unpack_from(data, at)
        at += _HEAD.size
        entries = []
        for _ in range(count):
            entry, at = _read_entry(data, at)
            entries.append(entry)
    except (struct.error, UnicodeDecodeError, IndexError) as error:
        raise DamagedHashFile(f"{path} is cut short or damaged ({error}); rewrite the split "
                              "it belongs to") from None
    if at != len(data):
        raise DamagedHashFile(f"{path} has {len(data) - at} bytes after its last entry; "
                              "rewrite the split it belongs to")
    return HashFile(split, shard, tuple(entries), bool(flags & _NEAR_COMPUTED))


def _read_entry(data: bytes, at: int) -> tuple[HashEntry, int]:
    digest, record, flags = _ENTRY.unpack_from(data, at)
    at += _ENTRY.size
    near = None
    if flags & _HAS_NEAR:
        near = data[at:at + HASH_BYTES]
        if len(near) != HASH_BYTES:
            raise IndexError("a perceptual hash is cut short")
        at += HASH_BYTES
    (length,) = _LENGTH32.unpack_from(data, at)
    at += _LENGTH32.size
    raw = data[at:at + length]
    if len(raw) != length:
        raise IndexError("a source is cut short")
    source = raw.decode("utf-8", "surrogateescape")
    return HashEntry(digest, record, source, near, bool(flags & _DROPPED)), at + length


def _text16(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _LENGTH16.pack(len(raw)) + raw


def _read_text16(data: bytes, at: int) -> tuple[str, int]:
    (length,) = _LENGTH16.unpack_from(data, at)
    at += _LENGTH16.size
    raw = data[at:at + length]
    if len(raw) != length:
        raise IndexError("a name is cut short")
    return raw.decode("utf-8"), at + length


def digest_bucket(digest: bytes, buckets: int) -> int:
    """Which of ``buckets`` contiguous ranges of SHA-256 values ``digest`` falls in: the
    buckets in order hold the digests in order."""
    return (int.from_bytes(digest[:4], "big") * buckets) >> 32


def split_by_bucket(hashes: HashFile, buckets: int) -> Iterator[tuple[int, HashFile]]:
    """``hashes`` cut into one :class:`HashFile` per bucket its digests fall in."""
    by_bucket: dict[int, list[HashEntry]] = {}
    for entry in hashes.entries:
        by_bucket.setdefault(digest_bucket(entry.digest, buckets), []).append(entry)
    for bucket in sorted(by_bucket):
        yield bucket, HashFile(hashes.split, hashes.shard, tuple(by_bucket[bucket]),
                               hashes.near_computed)


def entries_with_place(files: Iterable[HashFile]) -> Iterator[tuple[HashFile, HashEntry]]:
    """Every entry of ``files`` beside the file (split, shard) it belongs to."""
    for hashes in files:
        for entry in hashes.entries:
            yield hashes, entry
