"""Near duplicates: different bytes, nearly the same picture (re-encoded, resized, slightly
cropped), found with :mod:`recordbeam.images.perceptual_hash` and locality-sensitive
hashing, never by comparing all pairs.

Each distinct image (one SHA-256; exact copies are one image here) is *indexed* under the
four 16-bit bands of its whole-frame hash and *asks* under the bands of all five of its
hashes. Two images are compared only when one asks under a key the other is indexed
under; a copy within :data:`~recordbeam.images.perceptual_hash.NEAR_THRESHOLD` bits of one
of the original's hashes shares a band with it whenever the two differ in at most 3 bits,
and most of the time at 4 to 6. Keys are spread over buckets (:func:`key_bucket`), so the
comparing runs on many workers; each compares the images of its keys
(:func:`near_pairs`).

Bounds, and what happens past them:

- a key shared by so many images that comparing all of them would take more than
  :data:`MAX_COMPARISONS_PER_KEY` comparisons (a cluster of near-identical pictures, or
  placeholders) is searched greedily: each image, in SHA-256 order, is compared with the
  *leaders* (the first :data:`MAX_LEADERS` images that matched no earlier leader) and
  linked to every leader within the threshold; an image matching none after the leaders
  are full is not linked through that key. A cluster of n near-identical pictures then
  costs about n comparisons and n - 1 links, not n * n / 2;
- groups are the connected components of the pairs found (:func:`near_components`), built
  from the first :data:`MAX_NEAR_PAIRS` pairs in SHA-256 order; pairs past that are
  counted (``pairs_not_grouped``), not grouped.

No Beam.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from recordbeam.dataset.duplicate_groups import Member, split_rank
from recordbeam.images.perceptual_hash import (
    BAND_BITS,
    NEAR_THRESHOLD,
    PerceptualHash,
    band_values,
    near_distance,
)

__all__ = [
    "MAX_COMPARISONS_PER_KEY",
    "MAX_LEADERS",
    "MAX_NEAR_PAIRS",
    "FoundPairs",
    "NearComponents",
    "NearGroup",
    "NearImage",
    "NearPair",
    "image_keys",
    "images_in_bucket",
    "key_bucket",
    "near_components",
    "near_pairs",
]

MAX_COMPARISONS_PER_KEY = 10_000
MAX_LEADERS = 500
MAX_NEAR_PAIRS = 200_000
#: Members listed per near-duplicate group line; larger groups are counted (``size``).
MAX_LISTED_NEAR = 100

_MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads band values over the buckets
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class NearImage:
    """One distinct image: its SHA-256, its perceptual hash, and the copy that stands for
    it in a group line (the first in :meth:`Member.order`)."""

    digest: bytes
    hash: PerceptualHash
    member: Member


@dataclass(frozen=True, slots=True, order=True)
class NearPair:
    """Two near-duplicate images (``first`` < ``second``, SHA-256s) and their distance."""

    first: bytes
    second: bytes
    distance: int


def _key(band: int, value: int) -> int:
    return band << BAND_BITS | value


def image_keys(hash_: PerceptualHash) -> tuple[frozenset[int], frozenset[int]]:
    """``(indexed under, asks under)``: the keys of the frame's bands, and of the bands of
    all five hashes."""
    indexed = frozenset(_key(b, v) for b, v in enumerate(hash_.bands()))
    asks = frozenset(_key(b, v) for h in hash_.all() for b, v in enumerate(band_values(h)))
    return indexed, asks


def key_bucket(key: int, buckets: int) -> int:
    """Which of ``buckets`` compares the images of ``key``."""
    return (((key + 1) * _MIX) & _MASK64) * buckets >> 64


def images_in_bucket(images: Iterable[NearImage], bucket: int, buckets: int) -> Iterator[NearImage]:
    """The images with a key (indexed or asked) that falls in ``bucket``."""
    for image in images:
        indexed, asks = image_keys(image.hash)
        if any(key_bucket(k, buckets) == bucket for k in indexed | asks):
            yield image


@dataclass(frozen=True)
class FoundPairs:
    """Pairs found, in order, at most :data:`MAX_NEAR_PAIRS` of them; ``beyond`` counts
    the pairs found past that bound (they are not kept)."""

    pairs: list[NearPair]
    beyond: int = 0


def near_pairs(images: Iterable[NearImage], *, threshold: int = NEAR_THRESHOLD,
               bucket: int | None = None, buckets: int = 1) -> FoundPairs:
    """The near-duplicate pairs among ``images`` found through their shared keys (only the
    keys of ``bucket`` of ``buckets`` when given), each once, in order. ``images`` may hold
    one image several times (its exact copies): it is compared once."""
    distinct: dict[bytes, NearImage] = {}
    for image in images:
        known = distinct.get(image.digest)
        if known is None or image.member.order() < known.member.order():
            distinct[image.digest] = image
    indexed: dict[int, list[NearImage]] = {}
    asking: dict[int, list[NearImage]] = {}
    keys_of: dict[bytes, tuple[frozenset[int], frozenset[int]]] = {}
    for digest in sorted(distinct):
        image = distinct[digest]
        index_keys, ask_keys = keys_of[digest] = image_keys(image.hash)
        for key in index_keys:
            if bucket is None or key_bucket(key, buckets) == bucket:
                indexed.setdefault(key, []).append(image)
        for key in ask_keys:
            if bucket is None or key_bucket(key, buckets) == bucket:
                asking.setdefault(key, []).append(image)
    search = _KeySearch(threshold, keys_of)
    for key in sorted(indexed):
        askers = asking.get(key, [])
        if len(askers) * len(indexed[key]) > MAX_COMPARISONS_PER_KEY:
            search.link_to_leaders(key, indexed[key], askers)
        else:
            search.compare_all(key, indexed[key], askers)
        if len(search.found) > 2 * MAX_NEAR_PAIRS:
            search.keep_first()
    if len(search.found) > MAX_NEAR_PAIRS:
        search.keep_first()
    return FoundPairs(sorted(NearPair(a, b, d) for (a, b), d in search.found.items()),
                      search.let_go)


class _KeySearch:
    """Compares the images of one key after another, recording each pair under one key
    only: the smallest key the two share, wherever it is searched (another bucket's)."""

    def __init__(self, threshold: int,
                 keys_of: Mapping[bytes, tuple[frozenset[int], frozenset[int]]]) -> None:
        self.threshold = threshold
        self.keys_of = keys_of
        self.found: dict[tuple[bytes, bytes], int] = {}
        self.let_go = 0

    def _owner(self, a: bytes, b: bytes) -> int:
        """The key a pair is recorded under: the smallest where one asks and the other is
        indexed; for two images that only ask under common keys (compared there by the
        leader search alone), the smallest of those."""
        a_indexed, a_asks = self.keys_of[a]
        b_indexed, b_asks = self.keys_of[b]
        return min((a_asks & b_indexed) | (b_asks & a_indexed) or a_asks & b_asks)

    def _try(self, key: int, a: NearImage, b: NearImage) -> bool:
        """Compare two images under ``key``; True when they are near."""
        pair = (a.digest, b.digest) if a.digest < b.digest else (b.digest, a.digest)
        if pair in self.found:
            return True
        distance = near_distance(a.hash, b.hash)
        if distance > self.threshold:
            return False
        if self._owner(*pair) == key:
            self.found[pair] = distance
        return True

    def compare_all(self, key: int, indexed: list[NearImage], askers: list[NearImage]) -> None:
        for asker in askers:
            for target in indexed:
                if asker.digest != target.digest:
                    self._try(key, asker, target)

    def link_to_leaders(self, key: int, indexed: list[NearImage],
                        askers: list[NearImage]) -> None:
        members = {image.digest: image for image in (*indexed, *askers)}
        leaders: list[NearImage] = []
        for digest in sorted(members):
            image = members[digest]
            near = [self._try(key, image, leader) for leader in leaders]
            if not any(near) and len(leaders) < MAX_LEADERS:
                leaders.append(image)

    def keep_first(self) -> None:
        """Keep the first :data:`MAX_NEAR_PAIRS` pairs in order (those the components are
        built from), counting the others let go."""
        let_go = sorted(self.found)[MAX_NEAR_PAIRS:]
        for pair in let_go:
            del self.found[pair]
        self.let_go += len(let_go)


@dataclass(frozen=True)
class NearGroup:
    """One connected component of near-duplicate pairs: its images' standing copies in
    order (at most :data:`MAX_LISTED_NEAR`), their SHA-256s, ``size`` (images in it),
    ``splits`` and the largest distance of a pair in it."""

    members: tuple[tuple[str, Member], ...]
    size: int
    splits: tuple[str, ...]
    max_distance: int

    @property
    def across_splits(self) -> bool:
        return len(self.splits) > 1

    def to_line(self) -> str:
        members = [{**member.to_json(), "sha256": digest} for digest, member in self.members]
        return json.dumps({"size": self.size, "splits": list(self.splits),
                           "max_distance": self.max_distance, "members": members},
                          ensure_ascii=False, sort_keys=True)

    @staticmethod
    def from_line(line: str) -> NearGroup:
        value = json.loads(line)
        members = tuple((str(m["sha256"]), Member.from_json(m)) for m in value["members"])
        return NearGroup(members, int(value["size"]), tuple(value["splits"]),
                         int(value["max_distance"]))


@dataclass
class NearComponents:
    """The near-duplicate groups, and how many pairs were found and left ungrouped."""

    groups: list[NearGroup]
    pairs: int
    pairs_not_grouped: int

    def to_json(self) -> dict[str, Any]:
        return {"groups": len(self.groups), "images": sum(g.size for g in self.groups),
                "across_splits": sum(1 for g in self.groups if g.across_splits),
                "pairs": self.pairs, "pairs_not_grouped": self.pairs_not_grouped}


def near_components(pairs: Iterable[NearPair], members: Mapping[bytes, Member], *,
                    max_pairs: int = MAX_NEAR_PAIRS, beyond: int = 0) -> NearComponents:
    """Group ``pairs`` (any order, repeats allowed) into connected components; ``members``
    gives each image's standing copy. Only the first ``max_pairs`` distinct pairs in
    order are grouped; ``beyond`` counts pairs let go before (:class:`FoundPairs`)."""
    distinct = sorted(set(pairs))
    used = distinct[:max_pairs]
    found = len(distinct) + beyond
    beyond += max(0, len(distinct) - max_pairs)
    parent: dict[bytes, bytes] = {}

    def root(x: bytes) -> bytes:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for pair in used:
        a, b = root(pair.first), root(pair.second)
        if a != b:
            parent[max(a, b)] = min(a, b)
    components: dict[bytes, list[bytes]] = {}
    for digest in parent:
        components.setdefault(root(digest), []).append(digest)
    worst: dict[bytes, int] = {}
    for pair in used:
        top = root(pair.first)
        worst[top] = max(worst.get(top, 0), pair.distance)
    groups = [_group(sorted(images), members, worst[top]) for top, images in components.items()]
    groups.sort(key=lambda g: (g.members[0][1].order(), g.members[0][0]))
    return NearComponents(groups, found, beyond)


def _group(digests: list[bytes], members: Mapping[bytes, Member], worst: int) -> NearGroup:
    listed = sorted(((d.hex(), members[d]) for d in digests), key=lambda dm: (dm[1].order(), dm[0]))
    splits = sorted({members[d].split for d in digests}, key=split_rank)
    return NearGroup(tuple(listed[:MAX_LISTED_NEAR]), len(digests), tuple(splits), worst)

