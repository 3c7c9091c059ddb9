"""The key file beside each shard of a split that ``--incremental`` runs keep.

``train-00012.tfrecord.keys`` says, for every element the shard's task was given, in the
shard's order: the element's order key (the salted hash of its identity that placed it),
its *input key* (a digest of what it was made from, :mod:`recordbeam.write.input_keys`),
whether it was written (a rejected element has no record, but its rejects are kept here,
so an unchanged input is not read again to be rejected again), and its counts (boxes
written, fixes...). The header holds the shard's feature spec, so a later run that keeps
the shard as it is merges the manifest's spec without reading the shard.

A later incremental run reads these files on its workers (one task per shard), joins their
keys with the new inputs' and keeps a shard whose every key survives; a shard that lost
elements is rewritten from its surviving records, whose counts and rejects come from here.

Layout (integers big-endian)::

    8 bytes   magic b"RBKEYS\\x00\\x01"
    uint32    header length, then the header: UTF-8 JSON
              {"entries": N, "count_names": [...], "spec": ..., "list_spec": ... | null,
               "sequence": bool}
    N times   uint64 order key | 16 bytes input key | uint8 flags (1: written) |
              one varint per count name (zigzag: counts may be negative)
    uint32    length of the rejects, then UTF-8 JSON [[entry number, reject], ...]
    uint32    masked CRC-32C of every byte before it

No Beam: readers of a finished folder and the sink's workers both use it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from recordbeam.errors import DataError
from recordbeam.records import Reject
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.framing import masked_crc32c

MAGIC = b"RBKEYS\x00\x01"
INPUT_KEY_BYTES = 16
_U32 = struct.Struct(">I")
_ENTRY = struct.Struct(f">Q{INPUT_KEY_BYTES}sB")
_WRITTEN = 1


class DamagedKeys(DataError):
    """A key file is not one recordbeam wrote whole (cut short, changed, another file)."""


@dataclass(frozen=True)
class KeyEntry:
    """One element a shard's task was given.

    Attributes:
        order_key: the salted hash of its identity (:func:`recordbeam.write.planning.order_key`).
        input_key: digest of its inputs (:func:`recordbeam.write.input_keys.input_key`).
        written: False when it was rejected (``rejects`` says why).
        counts: what its encoding counted (``boxes_written``...), added to the manifest.
        rejects: its rejects and warnings, with their split.
    """

    order_key: int
    input_key: bytes
    written: bool
    counts: Mapping[str, int] = field(default_factory=dict)
    rejects: tuple[Reject, ...] = ()


@dataclass(frozen=True)
class ShardKeys:
    """A key file's content: the entries in shard order and the shard's feature specs."""

    entries: tuple[KeyEntry, ...]
    spec: FeatureSpec
    list_spec: FeatureSpec | None = None
    sequence: bool = False

    @property
    def written(self) -> int:
        return sum(1 for entry in self.entries if entry.written)


def _zigzag(n: int) -> int:
    return n * 2 if n >= 0 else -n * 2 - 1


def _unzigzag(n: int) -> int:
    return n >> 1 if not n & 1 else -((n + 1) >> 1)


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("a varint longer than 10 bytes")


def encode_keys(keys: ShardKeys) -> bytes:
    """The bytes of a key file holding ``keys``."""
    names = sorted({name for entry in keys.entries for name in entry.counts})
    header = json.dumps({
        "entries": len(keys.entries), "count_names": names, "spec": keys.spec.to_state(),
        "list_spec": keys.list_spec.to_state() if keys.list_spec is not None else None,
        "sequence": keys.sequence,
    }, sort_keys=True, separators=(",", ":")).encode("utf-8")
    out = bytearray(MAGIC)
    out += _U32.pack(len(header)) + header
    rejects = []
    for number, entry in enumerate(keys.entries):
        if len(entry.input_key) != INPUT_KEY_BYTES:
            raise ValueError(f"an input key has {INPUT_KEY_BYTES} bytes, not {len(entry.input_key)}")
        out += _ENTRY.pack(entry.order_key, entry.input_key, _WRITTEN if entry.written else 0)
        for name in names:
            _varint(_zigzag(entry.counts.get(name, 0)), out)
        rejects += [[number, json.loads(reject.to_json())] for reject in entry.rejects]
    rejects_bytes = json.dumps(rejects, sort_keys=True, ensure_ascii=False,
                               separators=(",", ":")).encode("utf-8")
    out += _U32.pack(len(rejects_bytes)) + rejects_bytes
    out += _U32.pack(masked_crc32c(bytes(out)))
    return bytes(out)


def decode_keys(data: bytes, path: str) -> ShardKeys:
    """The content of the key file ``path`` whose bytes are ``data``; raises
    :class:`DamagedKeys` naming it when they are not a whole key file."""
    try:
        return _decode(data)
    except (ValueError, KeyError, TypeError, IndexError, struct.error) as error:
        raise DamagedKeys(f"{path}: not a whole recordbeam key file ({error}); the shard beside "
                          "it is written again from its inputs by the next incremental run") from None


def _decode(data: bytes) -> ShardKeys:
    if data[:len(MAGIC)] != MAGIC:
        raise ValueError("it does not start as one")
    if len(data) < len(MAGIC) + 12 or _U32.unpack(data[-4:])[0] != masked_crc32c(data[:-4]):
        raise ValueError("its checksum does not match its bytes")
    view = memoryview(data)
    pos = len(MAGIC)
    (length,) = _U32.unpack_from(view, pos)
    header = json.loads(bytes(view[pos + 4:pos + 4 + length]))
    pos += 4 + length
    names = [str(name) for name in header["count_names"]]
    plain = []
    for _ in range(int(header["entries"])):
        order, input_key, flags = _ENTRY.unpack_from(view, pos)
        pos += _ENTRY.size
        counts = {}
        for name in names:
            value, pos = _read_varint(view, pos)
            if value:
                counts[name] = _unzigzag(value)
        plain.append((order, input_key, bool(flags & _WRITTEN), counts))
    (length,) = _U32.unpack_from(view, pos)
    rejects: dict[int, list[Reject]] = {}
    for number, reject in json.loads(bytes(view[pos + 4:pos + 4 + length])):
        rejects.setdefault(int(number), []).append(Reject.from_json(json.dumps(reject)))
    if pos + 4 + length + 4 != len(data):
        raise ValueError("its length does not match its entries")
    entries = tuple(KeyEntry(order, key, written, counts, tuple(rejects.get(n, ())))
                    for n, (order, key, written, counts) in enumerate(plain))
    list_spec = header.get("list_spec")
    return ShardKeys(entries, FeatureSpec.from_state(header["spec"]),
                     FeatureSpec.from_state(list_spec) if list_spec is not None else None,
                     bool(header["sequence"]))

