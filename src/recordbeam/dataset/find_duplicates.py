"""Duplicates among the records of a finished folder, for ``recordbeam check`` and
``recordbeam report``: the same grouping as a conversion (:mod:`duplicate_groups`,
:mod:`near_groups`), fed by one pass over the written records instead of the inputs.

Exact duplicates are records whose images have one SHA-256 (``image/key/sha256`` when the
record holds a valid one, else the hash of ``image/encoded``): the written bytes, where a
conversion compares the bytes it read (the same unless ``--transcode`` or ``--max-side``
changed them). Memory holds about 50 bytes per record (90 with near duplicates), in
arrays, plus the groups found.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass

from recordbeam.dataset.duplicate_groups import Group, Member, group_of
from recordbeam.dataset.image_hashes import repeated_rows
from recordbeam.dataset.near_groups import NearComponents, NearImage, near_components, near_pairs
from recordbeam.images.perceptual_hash import (
    HASH_BYTES,
    NEAR_THRESHOLD,
    PerceptualHash,
    UnhashableImage,
    perceptual_hash,
)

__all__ = ["DuplicateFinder", "RecordPlace"]

_DIGEST = 32


@dataclass(frozen=True, slots=True)
class RecordPlace:
    """Where a record is: its split, shard file and number in the shard."""

    split: str
    shard: str
    record: int


class DuplicateFinder:
    """Collects each record's image hash as a folder is read (:meth:`add`), then groups them.

    Args:
        near: also compute perceptual hashes (a small decode per image) for
            :meth:`near_groups`.
        threshold: most differing bits of near duplicates.
    """

    def __init__(self, *, near: bool = False, threshold: int = NEAR_THRESHOLD) -> None:
        self.near = near
        self.threshold = threshold
        self.unhashable = 0  # images whose perceptual hash failed: the image does not decode
        self._digests = bytearray()
        self._near = bytearray()
        self._has_near = bytearray()
        self._shards: list[tuple[str, str]] = []  # (split, shard file)
        self._shard_of = array("I")
        self._record = array("I")
        self._shard_index: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._record)

    def add(self, place: RecordPlace, image: bytes, stored_sha256: str | bytes | None = None) -> None:
        """One record's image (``image/encoded``) and its stored ``image/key/sha256``."""
        self._digests += _digest(image, stored_sha256)
        shard_key = (place.split, place.shard)
        index = self._shard_index.get(shard_key)
        if index is None:
            index = self._shard_index[shard_key] = len(self._shards)
            self._shards.append(shard_key)
        self._shard_of.append(index)
        self._record.append(place.record)
        if self.near:
            try:
                self._near += perceptual_hash(image).to_bytes()
                self._has_near.append(1)
            except UnhashableImage:
                self._near += bytes(HASH_BYTES)
                self._has_near.append(0)
                self.unhashable += 1

    def place(self, index: int) -> RecordPlace:
        split, shard = self._shards[self._shard_of[index]]
        return RecordPlace(split, shard, self._record[index])

    def _member(self, index: int) -> Member:
        place = self.place(index)
        return Member(place.split, "", place.shard, place.record)

    def _digest_at(self, index: int) -> bytes:
        return bytes(self._digests[index * _DIGEST:(index + 1) * _DIGEST])

    def exact_groups(self) -> list[Group]:
        """Records sharing an image, in SHA-256 order."""
        repeated = repeated_rows(bytes(self._digests))
        return [group_of(digest.hex(), (self._member(i) for i in indexes.tolist()))
                for digest, indexes in sorted(repeated.items())]

    def near_groups(self) -> NearComponents:
        """Near-duplicate groups among the records' distinct images (empty unless ``near``)."""
        if not self.near:
            return NearComponents([], 0, 0)
        images = []
        for index in range(len(self)):
            if not self._has_near[index]:
                continue
            raw = bytes(self._near[index * HASH_BYTES:(index + 1) * HASH_BYTES])
            images.append(NearImage(self._digest_at(index), PerceptualHash.from_bytes(raw),
                                    self._member(index)))
        standing: dict[bytes, Member] = {}
        for image in images:
            known = standing.get(image.digest)
            if known is None or image.member.order() < known.order():
                standing[image.digest] = image.member
        found = near_pairs(images, threshold=self.threshold)
        return near_components(found.pairs, standing, beyond=found.beyond)


def _digest(image: bytes, stored: str | bytes | None) -> bytes:
    """The stored hex SHA-256 when it is one, else the hash of ``image``."""
    if isinstance(stored, bytes):
        stored = stored.decode("ascii", "replace")
    if stored and len(stored) == 2 * _DIGEST:
        try:
            return bytes.fromhex(stored)
        except ValueError:
            pass
    return hashlib.sha256(image).digest()
