"""The image hashes of a shard: one compact binary file per shard, ``hashes/<shard>.hashes``.

Each written example with one image gets an entry: the SHA-256 of the image's bytes as
read (before any ``--transcode`` or ``--max-side`` fix), the record's number in its shard,
where the image came from, and, when near duplicates were looked for, its
:class:`~recordbeam.images.perceptual_hash.PerceptualHash`. A later run into the same
folder (``--split val`` after a ``train`` run) reads the files of the splits it keeps
to find its own images among theirs, without reading their shards.

The same layout carries hashes between the stages of a run (a shard's entries of one
bucket, the copies a run drops), so one codec serves both.

The layout is by column, entries sorted by SHA-256 (then record), so that finding
repeated digests, or cutting a file into ranges of digests, never decodes an entry
(:class:`HashTable`). Big-endian::

    magic "RBHASH1\\n" | split: u16 length + UTF-8 | shard: u16 length + UTF-8
    | flags: u8 (1: perceptual hashes were computed) | count: u32
    | count x SHA-256 (32 bytes) | count x record: i32 (-1: not written)
    | count x entry flags: u8 (1: dropped, 2: has a perceptual hash)
    | [count x perceptual hash (40 bytes; zeros where there is none), when flags say so]
    | count x end of source: u32 | sources, UTF-8, one after the other

The same entries give the same bytes on every runner. No Beam.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from recordbeam.errors import DataError
from recordbeam.images.perceptual_hash import HASH_BYTES

__all__ = [
    "DIGEST_BYTES",
    "DamagedHashFile",
    "HashEntry",
    "HashFile",
    "HashTable",
    "decode_hash_file",
    "digest_bucket",
    "encode_hash_file",
    "encode_rows",
    "repeated_digests",
    "repeated_rows",
    "split_by_bucket",
]

MAGIC = b"RBHASH1\n"
DIGEST_BYTES = 32
_HEAD = struct.Struct(">BI")
_LENGTH16 = struct.Struct(">H")
_DROPPED = 1
_HAS_NEAR = 2
_NEAR_COMPUTED = 1
_NO_NEAR = bytes(HASH_BYTES)


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
    rows = [(e.digest, e.record, e.source, e.near, e.dropped) for e in hashes.entries]
    return encode_rows(hashes.split, hashes.shard, rows, hashes.near_computed)


def encode_rows(split: str, shard: str,
                rows: list[tuple[bytes, int, str, bytes | None, bool]],
                near_computed: bool = False) -> bytes:
    """:func:`encode_hash_file` of entries given as ``(digest, record, source, near,
    dropped)`` tuples (what a shard's writer collects, without an object per image)."""
    rows = sorted(rows, key=lambda r: (r[0], r[1], r[2]))
    near = near_computed or any(r[3] for r in rows)
    sources = [r[2].encode("utf-8", "surrogateescape") for r in rows]
    ends = np.cumsum([len(s) for s in sources], dtype=np.uint64)
    if len(ends) and ends[-1] >= 2**32:
        raise ValueError("the sources of one hash file exceed 4 GiB")
    parts = [MAGIC, _text16(split), _text16(shard),
             _HEAD.pack(_NEAR_COMPUTED if near else 0, len(rows)),
             b"".join(r[0] for r in rows),
             np.array([r[1] for r in rows], dtype=">i4").tobytes(),
             bytes((_DROPPED if r[4] else 0) | (_HAS_NEAR if r[3] else 0) for r in rows)]
    if near:
        parts.append(b"".join(r[3] or _NO_NEAR for r in rows))
    parts += [ends.astype(">u4").tobytes(), b"".join(sources)]
    return b"".join(parts)


class HashTable:
    """A hash file's bytes read by column, an entry decoded only when asked for
    (:meth:`entry`, :meth:`source`...).

    Raises:
        DamagedHashFile: the bytes are not a whole hash file.
    """

    def __init__(self, data: bytes, path: str = "<hashes>") -> None:
        self.data = data
        self.path = path
        if not data.startswith(MAGIC):
            raise DamagedHashFile(f"{path} is not a recordbeam hash file (it does not start "
                                  f"with {MAGIC!r}); rewrite the split it belongs to")
        try:
            self._read_columns()
        except (struct.error, UnicodeDecodeError, ValueError) as error:
            raise DamagedHashFile(f"{path} is cut short or damaged ({error}); rewrite the "
                                  "split it belongs to") from None

    def _read_columns(self) -> None:
        data = self.data
        at = len(MAGIC)
        self.split, at = _read_text16(data, at)
        self.shard, at = _read_text16(data, at)
        flags, n = _HEAD.unpack_from(data, at)
        at += _HEAD.size
        self.count = n
        self.near_computed = bool(flags & _NEAR_COMPUTED)
        self._digests_at = at
        at += DIGEST_BYTES * n
        self._records_at = at
        at += 4 * n
        self._flags_at = at
        at += n
        self._near_at = at if self.near_computed else None
        at += HASH_BYTES * n if self.near_computed else 0
        self._ends = np.frombuffer(data, dtype=">u4", count=n, offset=at) if n else \
            np.zeros(0, dtype=">u4")
        at += 4 * n
        self._sources_at = at
        size = int(self._ends[-1]) if n else 0
        if at + size != len(data):
            raise ValueError(f"{len(data) - at - size} bytes more or less than its entries")
        if n and np.any(self._ends[1:] < self._ends[:-1]):
            raise ValueError("its sources overlap")

    def __len__(self) -> int:
        return self.count

    def digests(self) -> bytes:
        """Every entry's SHA-256, one after the other, in order."""
        start = self._digests_at
        return self.data[start:start + DIGEST_BYTES * self.count]

    def digest(self, i: int) -> bytes:
        start = self._digests_at + DIGEST_BYTES * i
        return self.data[start:start + DIGEST_BYTES]

    def record(self, i: int) -> int:
        return struct.unpack_from(">i", self.data, self._records_at + 4 * i)[0]

    def flags(self, i: int) -> int:
        return self.data[self._flags_at + i]

    def near(self, i: int) -> bytes | None:
        if self._near_at is None or not self.flags(i) & _HAS_NEAR:
            return None
        start = self._near_at + HASH_BYTES * i
        return self.data[start:start + HASH_BYTES]

    def source(self, i: int) -> str:
        begin = int(self._ends[i - 1]) if i else 0
        raw = self.data[self._sources_at + begin:self._sources_at + int(self._ends[i])]
        return raw.decode("utf-8", "surrogateescape")

    def entry(self, i: int) -> HashEntry:
        return HashEntry(self.digest(i), self.record(i), self.source(i), self.near(i),
                         bool(self.flags(i) & _DROPPED))

    def entries(self) -> Iterator[HashEntry]:
        return (self.entry(i) for i in range(self.count))

    def part(self, start: int, stop: int) -> bytes:
        """The hash file of entries ``start`` to ``stop``, cut out column by column (the
        bytes :func:`encode_hash_file` gives for those entries)."""
        data, n = self.data, stop - start
        head = [MAGIC, _text16(self.split), _text16(self.shard),
                _HEAD.pack(_NEAR_COMPUTED if self.near_computed else 0, n)]
        columns = [
            data[self._digests_at + DIGEST_BYTES * start:self._digests_at + DIGEST_BYTES * stop],
            data[self._records_at + 4 * start:self._records_at + 4 * stop],
            data[self._flags_at + start:self._flags_at + stop],
        ]
        if self._near_at is not None:
            columns.append(data[self._near_at + HASH_BYTES * start:self._near_at + HASH_BYTES * stop])
        begin = int(self._ends[start - 1]) if start else 0
        end = int(self._ends[stop - 1]) if n else begin
        ends = (self._ends[start:stop].astype(np.uint64) - np.uint64(begin)).astype(">u4")
        columns += [ends.tobytes(), data[self._sources_at + begin:self._sources_at + end]]
        return b"".join(head + columns)


def decode_hash_file(data: bytes, path: str = "<hashes>") -> HashFile:
    """The :class:`HashFile` in ``data`` (the bytes of ``path``), every entry decoded.

    Raises:
        DamagedHashFile: the bytes are not a whole hash file.
    """
    table = HashTable(data, path)
    return HashFile(table.split, table.shard, tuple(table.entries()), table.near_computed)


def _text16(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _LENGTH16.pack(len(raw)) + raw


def _read_text16(data: bytes, at: int) -> tuple[str, int]:
    (length,) = _LENGTH16.unpack_from(data, at)
    at += _LENGTH16.size
    raw = data[at:at + length]
    if len(raw) != length:
        raise ValueError("a name is cut short")
    return raw.decode("utf-8"), at + length


def digest_bucket(digest: bytes, buckets: int) -> int:
    """Which of ``buckets`` contiguous ranges of SHA-256 values ``digest`` falls in: the
    buckets in order hold the digests in order."""
    return (int.from_bytes(digest[:4], "big") * buckets) >> 32


def split_by_bucket(table: HashTable, buckets: int) -> Iterator[tuple[int, bytes]]:
    """``table`` cut into one hash file per bucket its digests fall in (its entries are in
    digest order, so each bucket's are a contiguous run); a file falling in one bucket
    whole is passed on as it is."""
    if not table.count:
        return
    prefixes = np.frombuffer(table.digests(), dtype=">u4").reshape(-1, DIGEST_BYTES // 4)[:, 0]
    of_entry = (prefixes.astype(np.uint64) * np.uint64(buckets)) >> np.uint64(32)
    starts = np.flatnonzero(np.diff(of_entry, prepend=of_entry[0] + 1))
    stops = [*starts[1:].tolist(), table.count]
    if len(starts) == 1:
        yield int(of_entry[0]), table.data
        return
    for start, stop in zip(starts.tolist(), stops, strict=True):
        yield int(of_entry[start]), table.part(start, stop)


def repeated_rows(digests: bytes) -> dict[bytes, np.ndarray]:
    """The SHA-256s found more than once in ``digests`` (32 bytes each, one after the
    other), each with the indexes it is found at, ascending: a sort of their first 8
    bytes, then the few equal prefixes sorted whole. The indexes stay numpy arrays (8
    bytes each): a digest found a million times costs 8 MB here, not a list of ints."""
    rows = np.frombuffer(digests, dtype=np.uint8).reshape(-1, DIGEST_BYTES)
    if len(rows) < 2:
        return {}
    prefixes = rows[:, :8].copy().view(">u8").ravel()
    order = np.argsort(prefixes, kind="stable")
    ordered = prefixes[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if not len(same):
        return {}
    candidates = np.unique(np.concatenate([order[same], order[same + 1]]))
    words = rows[candidates].view(">u8")  # (n, 4): each digest as four big-endian words
    # lexsort's last key sorts first; it is stable, so equal digests keep ascending indexes
    by_digest = np.lexsort(words.T[::-1])
    words = words[by_digest]
    changes = np.any(words[1:] != words[:-1], axis=1)
    runs = np.split(candidates[by_digest], np.flatnonzero(changes) + 1)
    return {rows[run[0]].tobytes(): run for run in runs if len(run) > 1}


def repeated_digests(tables: Iterable[HashTable]) -> dict[bytes, Iterator[tuple[HashTable, int]]]:
    """The digests found more than once among ``tables``, each with its ``(table, entry
    index)`` places, given one at a time; the other entries are never decoded."""
    tables = [t for t in tables if t.count]
    owners = np.cumsum([t.count for t in tables])
    starts = owners - [t.count for t in tables]  # each table's first global index
    return {digest: _places(tables, owners, starts, indexes)
            for digest, indexes in repeated_rows(b"".join(t.digests() for t in tables)).items()}


def _places(tables: list[HashTable], owners: np.ndarray, starts: np.ndarray,
            indexes: np.ndarray) -> Iterator[tuple[HashTable, int]]:
    for chunk in range(0, len(indexes), _PLACES_CHUNK):  # a few ints at a time
        part = indexes[chunk:chunk + _PLACES_CHUNK]
        which = np.searchsorted(owners, part, side="right")
        for index, table in zip((part - starts[which]).tolist(), which.tolist(), strict=True):
            yield tables[table], index


_PLACES_CHUNK = 4096
