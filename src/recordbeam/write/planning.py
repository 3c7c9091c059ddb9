"""Shard planning: which shard each example goes to, and in which order; and
:class:`ShardOptions`, how shards are cut and written.

Everything here is a pure function of the example's identity, so the same inputs give
the same shards on every runner, whatever the bundle order. No Beam.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

from recordbeam.dataset.shard_keys import INPUT_KEY_BYTES
from recordbeam.records import DEFAULT_MAX_REJECT_FRACTION, DUPLICATE_MODES
from recordbeam.tfrecord.framing import Compression, parse_compression

#: Salt mixed into every key; changing it reshuffles every dataset, so it is fixed.
DEFAULT_SALT = "recordbeam/v1"

#: Default target bytes per shard. TensorFlow's performance guide advises files of
#: 100 MB or more; 128 MiB keeps reads sequential on object stores while giving a
#: 100 GB corpus ~800 shards to spread over reading hosts.
DEFAULT_SHARD_SIZE = 128 * 1024 * 1024

MAX_SHARDS = 99_999  # the file name carries five digits

#: Bytes TFRecord framing adds to every record: length (8), its CRC (4), data CRC (4).
RECORD_FRAMING = 16


def order_key(identity: str, salt: str = DEFAULT_SALT) -> int:
    """A 64-bit key from an example's identity; it fixes both shard and position."""
    digest = hashlib.blake2b(identity.encode("utf-8"), digest_size=8, key=salt.encode())
    return int.from_bytes(digest.digest(), "big")


def shard_of(key: int, num_shards: int) -> int:
    """Shard index for an order key: contiguous key ranges, so each shard is a slice
    of the shuffled order and the concatenation of all shards is fully sorted."""
    return (key * num_shards) >> 64


ORDER_KEY = struct.Struct(">Q")


def pack_keyed(key: int, element: Any, coder: Any, input_key: bytes | None = None) -> bytes:
    """One element as bytes for the shuffle (``coder``: a Beam coder of the element): its
    order key (big-endian, so the bytes sort as the keys do), its input key when the run
    keeps key files, its encoding."""
    return ORDER_KEY.pack(key) + (input_key or b"") + coder.encode(element)


def unpack_keyed(blob: bytes, coder: Any, input_keys: bool = False) -> tuple[Any, ...]:
    """``(order key, element)`` of :func:`pack_keyed`'s bytes; ``(order key, element,
    input key)`` with ``input_keys``."""
    key = ORDER_KEY.unpack_from(blob)[0]
    if not input_keys:
        return key, coder.decode(blob[ORDER_KEY.size:])
    start = ORDER_KEY.size + INPUT_KEY_BYTES
    return key, coder.decode(blob[start:]), blob[ORDER_KEY.size:start]


def packed_input_key(blob: bytes) -> bytes:
    """The input key inside :func:`pack_keyed`'s bytes of an incremental run."""
    return blob[ORDER_KEY.size:ORDER_KEY.size + INPUT_KEY_BYTES]


def shard_count(total_bytes: int, *, num_shards: int | None, shard_size: int) -> int:
    """Shards for a split: ``num_shards`` when given, else enough to keep each shard
    near ``shard_size`` bytes (at least one)."""
    if num_shards is not None:
        if not 1 <= num_shards <= MAX_SHARDS:
            raise ValueError(f"--shards must be between 1 and {MAX_SHARDS}, got {num_shards}")
        return num_shards
    if shard_size <= 0:
        raise ValueError(f"--shard-size must be positive, got {shard_size}")
    return max(1, min(MAX_SHARDS, math.ceil(total_bytes / shard_size)))


_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1000, "KIB": 1024, "M": 1024**2, "MB": 1000**2,
               "MIB": 1024**2, "G": 1024**3, "GB": 1000**3, "GIB": 1024**3}


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([A-Z]*)")


def parse_size(text: str) -> int:
    """Parse a size such as ``128MiB``, ``200MB`` or ``1048576``."""
    match = _SIZE.fullmatch(text.strip().upper().replace(" ", ""))
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ValueError(f"cannot read size {text!r}: use a number with B, KiB, MiB, GiB, KB, MB or GB")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


@dataclass(frozen=True)
class ShardOptions:
    """How shards are cut and written.

    Attributes:
        num_shards: shards per split; None derives it from ``shard_size``.
        shard_size: target bytes per shard when ``num_shards`` is None.
        compression: ``none``, ``gzip`` or ``zlib`` (as TensorFlow names them).
        index: also write ``<shard>.idx`` files (offset and length per record);
            uncompressed shards only.
        salt: mixed into order keys; the default keeps runs comparable.
        max_reject_fraction: fail the run when more than this fraction of elements
            (``image`` rejects over images seen) was rejected.
        max_annotation_reject_fraction: fail the run when more than this fraction of the
            annotations seen was rejected on their own account (unknown image or
            category, invalid box or mask, duplicate id...; annotations lost with their
            image count against ``max_reject_fraction``). None: ``max_reject_fraction``.
        incremental: keep the shards of the output folder's version whose examples did
            not change and encode only what is new or changed (``--incremental``; see
            :mod:`recordbeam.write.incremental`). New shards are cut by ``shard_size``, so
            ``num_shards`` cannot be combined with it.
        input_key: how an incremental run tells that an input file changed: ``stat`` (its
            listed size and modification time) or ``content`` (its bytes' hash,
            ``--verify-unchanged``).
        compact_below: in an incremental run, fold shards smaller than this fraction of
            ``shard_size`` into shards near ``shard_size`` (0: never).
        duplicates: what to do with images written more than once (the same bytes), in
            one split or across the folder's splits: ``keep`` (list them in
            ``duplicates.jsonl``), ``drop`` (write one copy), ``drop-across-splits``
            (drop a later split's copies of an earlier split's image) or ``off`` (do not
            look). See :mod:`recordbeam.dataset.duplicate_groups`.
        near_duplicates: also look for near duplicates (re-encoded, resized, slightly
            cropped copies) and list them in ``near-duplicates.jsonl``.
    """

    num_shards: int | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    compression: Compression = Compression.NONE
    index: bool = False
    salt: str = DEFAULT_SALT
    max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION
    max_annotation_reject_fraction: float | None = None
    incremental: bool = False
    input_key: str = "stat"
    compact_below: float = 0.0
    duplicates: str = "keep"
    near_duplicates: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression", parse_compression(self.compression))
        if self.duplicates not in DUPLICATE_MODES:
            raise ValueError(f"duplicates must be one of {', '.join(DUPLICATE_MODES)}, "
                             f"got {self.duplicates!r}")
        if self.near_duplicates and self.duplicates == "off":
            raise ValueError("--near-duplicates cannot be combined with --duplicates off: "
                             "drop one of them")
        for name in ("max_reject_fraction", "max_annotation_reject_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        shard_count(0, num_shards=self.num_shards, shard_size=self.shard_size)  # validates
        self._check_incremental()
        if self.index and self.compression is not Compression.NONE:
            # An index of a compressed shard could only count bytes of the decompressed
            # stream: no reader (ours, DALI, the tfrecord package) can seek to those.
            raise ValueError(
                f"--index cannot be combined with --compression {self.compression.name.lower()}: "
                "a compressed shard cannot be entered in the middle, so its offsets would be "
                "of no use. Write uncompressed shards with --index, or compressed shards "
                "without it."
            )

    def _check_incremental(self) -> None:
        if self.input_key not in ("stat", "content"):
            raise ValueError(f"input_key must be 'stat' or 'content', got {self.input_key!r}")
        if not 0.0 <= self.compact_below <= 1.0:
            raise ValueError(f"--compact-below must be between 0 and 1, got {self.compact_below}")
        if self.incremental and self.num_shards is not None:
            raise ValueError(
                "--shards cannot be combined with --incremental: an incremental run keeps the "
                "shards that did not change and cuts its new ones by --shard-size; drop --shards")
        if not self.incremental and (self.input_key != "stat" or self.compact_below):
            given = "--verify-unchanged" if self.input_key != "stat" else "--compact-below"
            raise ValueError(f"{given} applies to incremental runs only: add --incremental, "
                             f"or drop {given}")

    def to_json(self) -> dict[str, Any]:
        settings = {
            "num_shards": self.num_shards,
            "shard_size": self.shard_size,
            "compression": self.compression.name.lower(),
            "index": self.index,
            "salt": self.salt,
            "max_reject_fraction": self.max_reject_fraction,
            "max_annotation_reject_fraction": self.annotation_limit,
            # Recorded only when not the defaults, so that the settings (and the inputs
            # fingerprint --if-changed compares) of outputs made without them stay the same.
            **({"duplicates": self.duplicates} if self.duplicates != "keep" else {}),
            **({"near_duplicates": True} if self.near_duplicates else {}),
        }
        if self.incremental:  # only then: other runs keep their settings and fingerprints
            settings["incremental"] = {"input_key": self.input_key,
                                       "compact_below": self.compact_below}
        return settings

    @property
    def annotation_limit(self) -> float:
        """``max_annotation_reject_fraction``, or ``max_reject_fraction`` when unset."""
        if self.max_annotation_reject_fraction is None:
            return self.max_reject_fraction
        return self.max_annotation_reject_fraction
