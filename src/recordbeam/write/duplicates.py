"""Finding duplicates while converting: the stages the sink adds for ``--duplicates``.

No image bytes cross a shuffle. The task that writes a shard already reads each image and
hashes it (``image/key/sha256``); it also writes the shard's hash file
(:mod:`recordbeam.dataset.image_hashes`: one SHA-256, source and record number per
example, a perceptual hash with ``--near-duplicates``) and passes it on as one small
element. Those, and the hash files of the splits the folder keeps from earlier runs (read
on workers, never the shards), are cut by SHA-256 range into buckets; one task per bucket
finds the groups whose copies fall in it and writes them to a part of
``duplicates.jsonl`` in the temp folder. The commit joins the parts in bucket order (they
are in SHA-256 order) with the previous file's lines for the splits it keeps.

Near duplicates go the same way, keyed by the bands of their perceptual hashes
(:mod:`recordbeam.dataset.near_groups`): one task per bucket of keys compares the images
sharing a key; the pairs found (few) are grouped into components by one task, which
writes ``near-duplicates.jsonl``; the pairs it groups are bounded
(:data:`~recordbeam.dataset.near_groups.MAX_NEAR_PAIRS`).

``--duplicates drop`` and ``drop-across-splits`` must decide which copy to keep before any
is written (a shard is written once, never rewritten), so they add a stage before the
sink: every image is read and hashed once more (:meth:`ExampleEncoder.image_digest`),
the small records are grouped by SHA-256 with the kept splits' entries, and each group
keeps one copy (:func:`recordbeam.dataset.duplicate_groups.copies_to_drop`); the others
become ``duplicate`` rejects and never reach the shards.
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import AsDict, TaggedOutput

from recordbeam import feature_keys, filesystems
from recordbeam.dataset import layout, names
from recordbeam.dataset.duplicate_groups import Copy, DropPlan, Member, exact_groups
from recordbeam.dataset.image_hashes import (
    DamagedHashFile,
    HashEntry,
    HashFile,
    HashTable,
    decode_hash_file,
    encode_hash_file,
    encode_rows,
    split_by_bucket,
)
from recordbeam.dataset.near_groups import (
    MAX_NEAR_PAIRS,
    NearImage,
    NearPair,
    image_keys,
    key_bucket,
    near_components,
    near_pairs,
)
from recordbeam.images.perceptual_hash import PerceptualHash, UnhashableImage, perceptual_hash
from recordbeam.records import Reject
from recordbeam.write.encoder import Encoded, ExampleEncoder
from recordbeam.write.planning import ShardOptions, order_key

__all__ = ["BUCKET_BYTES", "BUCKET_IMAGES", "DropDuplicates", "EarlierSplits", "FindDuplicates",
           "ReadKeptHashes", "ShardHashes", "bucket_count", "earlier_splits"]

_LOG = logging.getLogger(__name__)

#: Input bytes per bucket, and images per bucket: whichever makes more buckets. A
#: bucket is one element of its shuffle: its hash entries (~350 bytes per image with
#: their paths) go from the launcher to one worker in one message, which the local
#: runner holds a few times over while it sends it, and the bucket's task holds ~160
#: bytes per image while it groups them. 512 MiB are ~3,700 images of 140 KB; 16,384
#: images of small files are ~6 MB of entries where bytes alone would put 100,000.
BUCKET_BYTES = 512 << 20
BUCKET_IMAGES = 16_384
MAX_BUCKETS = 4096

#: The count of written images whose perceptual hash failed (they do not decode whole).
NEAR_UNHASHABLE = "near_duplicates_unhashable"


def bucket_count(run_bytes: int, earlier_bytes: int, images: int = 0) -> int:
    """How many buckets the hashes of a run (and of the splits it keeps) are cut into:
    one per :data:`BUCKET_BYTES` of their shards or per :data:`BUCKET_IMAGES` of their
    ``images``, whichever gives more, within 1 and :data:`MAX_BUCKETS`."""
    by_bytes = math.ceil((run_bytes + earlier_bytes) / BUCKET_BYTES)
    by_images = math.ceil(images / BUCKET_IMAGES)
    return max(1, min(MAX_BUCKETS, max(by_bytes, by_images)))


class ShardHashes:
    """The hash entries of one shard as its task writes it (no Beam)."""

    def __init__(self, near: bool) -> None:
        self.near = near
        self.rows: list[tuple[bytes, int, str, bytes | None, bool]] = []
        self.unhashable = 0

    def add(self, encoded: Encoded, record: int, source: str) -> None:
        near = None
        if self.near:
            image = (encoded.features or {}).get(feature_keys.ENCODED)
            try:
                near = perceptual_hash(bytes(image)).to_bytes() if image is not None else None
            except UnhashableImage:
                near = None
            if near is None:
                self.unhashable += 1
        self.rows.append((encoded.image_digest, record, source, near, False))

    def encode(self, split: str, shard: str) -> bytes:
        """The shard's hash file."""
        return encode_rows(split, shard, self.rows, self.near)


# ---------------------------------------------------------------- the splits kept


@dataclass(frozen=True)
class EarlierSplits:
    """What a run needs of the splits its output folder keeps from earlier runs.

    Attributes:
        files: their hash files (full paths).
        without_hashes: kept splits with no (or some missing) hash files: their images
            are not all compared with this run's.
        without_near: kept splits whose hash files hold no perceptual hashes.
        bytes: their shards' bytes (the buckets are sized for them too).
        images: their examples (likewise).
    """

    files: tuple[str, ...] = ()
    without_hashes: tuple[str, ...] = ()
    without_near: tuple[str, ...] = ()
    bytes: int = 0
    images: int = 0

    def buckets(self, planned: Mapping[str, tuple[int, int]]) -> int:
        """The bucket count of a run whose splits plan ``(bytes, images)`` as ``planned``
        says, with these splits kept."""
        return bucket_count(sum(b for b, _ in planned.values()), self.bytes,
                            sum(n for _, n in planned.values()) + self.images)


def earlier_splits(output_dir: str, written: Iterable[str]) -> EarlierSplits:
    """The :class:`EarlierSplits` of ``output_dir`` for a run writing the splits
    ``written``, from its manifest and one listing of its ``hashes/`` folder."""
    manifest = layout.recorded_manifest(output_dir) or {}
    kept = {split: entry for split, entry in manifest.get("splits", {}).items()
            if split not in set(written)}
    if not kept:
        return EarlierSplits()
    folder = filesystems.join(output_dir, names.HASHES_FOLDER)
    present = {filesystems.relative_name(output_dir, m.path)
               for m in filesystems.list_files(folder)}
    files, without, without_near, size, images = [], [], [], 0, 0
    for split in sorted(kept):
        entry = kept[split]
        size += int(entry.get("bytes", 0))
        images += int(entry.get("examples", 0))
        wanted = [names.hash_file_name(s["file"]) for s in entry.get("shards", [])]
        found = [w for w in wanted if w in present] if entry.get("image_hashes") else []
        if len(found) < len(wanted):
            without.append(split)
        if found and not (entry.get("image_hashes") or {}).get("near"):
            without_near.append(split)
        files += [filesystems.join(output_dir, name) for name in found]
    if without:
        _LOG.warning("%s: the split(s) %s have no image hashes (written without them, or "
                     "hashes/ was changed): their images are not all compared with this "
                     "run's; rewrite them to compare them", output_dir, ", ".join(without))
    return EarlierSplits(tuple(files), tuple(without), tuple(without_near), size, images)


class _ReadHashFile(beam.DoFn):
    """``path -> hash file bytes`` of a kept split. An unreadable file is passed on as
    ``unreadable`` and counted, not fatal: the folder's shards are whole without it."""

    def process(self, path: str) -> Iterator[Any]:
        try:
            data = filesystems.read_bytes(path)
            HashTable(data, path)
        except (OSError, DamagedHashFile) as error:
            _LOG.warning("%s cannot be read (%s): its split's images are not all compared "
                         "with this run's", path, error)
            yield TaggedOutput("unreadable", path)
            return
        yield data


# ---------------------------------------------------------------- finding the groups


class _SpreadByBucket(beam.DoFn):
    """``hash file bytes -> (bucket, hash file bytes)`` per SHA-256 bucket its entries
    fall in; with near duplicates also, tagged ``near``, per bucket of LSH keys."""

    def __init__(self, near: bool, earlier: EarlierSplits) -> None:
        self._near = near
        self._earlier = earlier

    def process(self, data: bytes, planned: Mapping[str, tuple[int, int]]) -> Iterator[Any]:
        buckets = self._earlier.buckets(planned)
        table = HashTable(data)
        yield from split_by_bucket(table, buckets)
        if not self._near or not table.near_computed:
            return
        by_bucket: dict[int, list[HashEntry]] = {}
        for i in range(table.count):
            near = table.near(i)
            if near is None:
                continue
            entry = table.entry(i)
            indexed, asks = image_keys(PerceptualHash.from_bytes(near))
            for bucket in {key_bucket(key, buckets) for key in indexed | asks}:
                by_bucket.setdefault(bucket, []).append(entry)
        for bucket, entries in sorted(by_bucket.items()):
            part = HashFile(table.split, table.shard, tuple(entries), True)
            yield TaggedOutput("near", (bucket, encode_hash_file(part)))


class _WriteGroups(beam.DoFn):
    """``(bucket, [hash file bytes]) -> (bucket, part path)``: the groups of the bucket's
    digests, written in SHA-256 order to a part of ``duplicates.jsonl``."""

    def __init__(self, temp_dir: str) -> None:
        self._temp_dir = temp_dir

    def process(self, keyed: tuple[int, Iterable[bytes]]) -> Iterator[tuple[int, str]]:
        bucket, blobs = keyed
        groups = exact_groups(HashTable(blob) for blob in blobs)
        if not groups:
            return
        path = filesystems.join(self._temp_dir, f"{names.DUPLICATES}.{bucket:05d}")
        filesystems.write_bytes(path, "".join(g.to_line() + "\n" for g in groups).encode("utf-8"))
        yield bucket, path


def _near_images(blobs: Iterable[bytes]) -> Iterator[NearImage]:
    for blob in blobs:
        hashes = decode_hash_file(blob)
        for entry in hashes.entries:
            written = entry.record >= 0
            member = Member(hashes.split, entry.source, hashes.shard if written else None,
                            entry.record if written else None, entry.dropped)
            yield NearImage(entry.digest, PerceptualHash.from_bytes(entry.near), member)


def _member_tuple(member: Member) -> tuple:
    return (member.split, member.source, member.shard, member.record, member.dropped)


class _FindNearPairs(beam.DoFn):
    """``(bucket, [hash file bytes]) -> (pairs, members of their images, pairs let go)``:
    the near pairs found through the keys of the bucket."""

    def __init__(self, earlier: EarlierSplits) -> None:
        self._earlier = earlier

    def process(self, keyed: tuple[int, Iterable[bytes]],
                planned: Mapping[str, tuple[int, int]]) -> Iterator[tuple]:
        bucket, blobs = keyed
        buckets = self._earlier.buckets(planned)
        images = list(_near_images(blobs))
        found = near_pairs(images, bucket=bucket, buckets=buckets)
        if not found.pairs and not found.beyond:
            return
        wanted = {d for p in found.pairs for d in (p.first, p.second)}
        members: dict[bytes, Member] = {}
        for image in images:
            if image.digest in wanted:
                known = members.get(image.digest)
                if known is None or image.member.order() < known.order():
                    members[image.digest] = image.member
        yield ([(p.first, p.second, p.distance) for p in found.pairs],
               [(d, *_member_tuple(m)) for d, m in sorted(members.items())], found.beyond)


class _WriteNearGroups(beam.DoFn):
    """``(None, [pairs of a bucket]) -> summary``: the components of every bucket's
    pairs (the first :data:`MAX_NEAR_PAIRS`), written to ``near-duplicates.jsonl`` in
    the temp folder."""

    def __init__(self, temp_dir: str) -> None:
        self._temp_dir = temp_dir

    def process(self, keyed: tuple[None, Iterable[tuple]]) -> Iterator[dict[str, Any]]:
        _key, found = keyed
        pairs: set[NearPair] = set()
        members: dict[bytes, Member] = {}
        beyond = 0
        for bucket_pairs, bucket_members, let_go in found:
            beyond += let_go
            pairs.update(NearPair(a, b, d) for a, b, d in bucket_pairs)
            for digest, *fields in bucket_members:
                member = Member(*fields)
                known = members.get(digest)
                if known is None or member.order() < known.order():
                    members[digest] = member
            if len(pairs) > 2 * MAX_NEAR_PAIRS:
                kept = sorted(pairs)[:MAX_NEAR_PAIRS]
                beyond += len(pairs) - len(kept)
                pairs = set(kept)
        components = near_components(pairs, members, beyond=beyond)
        path = filesystems.join(self._temp_dir, names.NEAR_DUPLICATES)
        if components.groups:
            lines = "".join(g.to_line() + "\n" for g in components.groups)
            filesystems.write_bytes(path, lines.encode("utf-8"))
        yield {"path": path, **components.to_json()}


class ReadKeptHashes(beam.PTransform):
    """``PBegin -> {"hashes": hash file bytes, "unreadable": path}``: the hash files of
    the splits the folder keeps (every source names its splits before the run, so these
    are never splits the run writes), read on workers."""

    def __init__(self, earlier: EarlierSplits) -> None:
        super().__init__()
        self._earlier = earlier

    def expand(self, pbegin):
        read = (
            pbegin
            | "HashFilePaths" >> beam.Create(list(self._earlier.files))  # path
            | "SpreadReads" >> beam.Reshuffle()
            | "ReadHashFiles" >> beam.ParDo(_ReadHashFile()).with_outputs(
                "unreadable", main="hashes")
        )  # hashes: hash file bytes; unreadable: path
        return {"hashes": read.hashes, "unreadable": read.unreadable}


class FindDuplicates(beam.PTransform):
    """``hash file bytes`` (this run's shards', the kept splits', the copies dropped) ->
    ``{"parts": (bucket, part path), "near": summary dict}`` (``near`` only with near
    duplicates).

    Args:
        temp_dir: the run's temp folder, where the parts are written.
        options: the sink's options (``near_duplicates``).
        earlier: the splits the folder keeps (their bytes and images size the buckets).
        planned: the sink's planned bytes and images per split (a ``(split, (bytes,
            images))`` PCollection).
    """

    def __init__(self, temp_dir: str, options: ShardOptions, earlier: EarlierSplits,
                 planned: beam.PCollection) -> None:
        super().__init__()
        self._temp_dir = temp_dir
        self._near = options.near_duplicates
        self._earlier = earlier
        self._planned = planned

    def expand(self, hashes):
        planned = AsDict(self._planned)
        spread = hashes | "SpreadByBucket" >> beam.ParDo(
            _SpreadByBucket(self._near, self._earlier), planned=planned
        ).with_outputs("near", main="exact")
        # exact / near: (bucket, hash file bytes of the entries in it)
        parts = (
            spread.exact
            | "GroupByDigestRange" >> beam.GroupByKey()  # (bucket, [hash file bytes])
            | "WriteGroups" >> beam.ParDo(_WriteGroups(self._temp_dir))
        )  # (bucket, part path)
        result = {"parts": parts}
        if self._near:
            result["near"] = (
                spread.near
                | "GroupByKeyBucket" >> beam.GroupByKey()  # (bucket, [hash file bytes])
                | "FindNearPairs" >> beam.ParDo(
                    _FindNearPairs(self._earlier), planned=planned)
                # (pairs, members, pairs let go)
                | "AllNearPairs" >> beam.Map(lambda found: (None, found))
                | "GatherNearPairs" >> beam.GroupByKey()  # (None, [per-bucket pairs])
                | "WriteNearGroups" >> beam.ParDo(_WriteNearGroups(self._temp_dir))
            )  # one summary dict
        return result


# ---------------------------------------------------------------- dropping copies


_COPY = struct.Struct(">Q?")


def _pack_copy(split: str, rank: int, source: str, payload: bytes, kept_split: bool) -> bytes:
    head = json.dumps([split, source], ensure_ascii=False).encode("utf-8")
    return _COPY.pack(rank, kept_split) + struct.pack(">I", len(head)) + head + payload


def _unpack_copy(blob: bytes) -> tuple[Copy, bytes]:
    rank, kept_split = _COPY.unpack_from(blob)
    at = _COPY.size
    (length,) = struct.unpack_from(">I", blob, at)
    at += 4
    split, source = json.loads(blob[at:at + length])
    return Copy(split, rank, source, kept_split), blob[at + length:]


class _HashForDrop(beam.DoFn):
    """``element -> (SHA-256, packed copy with the element)``; elements without an image
    to compare pass on untouched (tagged ``unhashed``)."""

    def __init__(self, encoder: ExampleEncoder, salt: str, coder: beam.coders.Coder) -> None:
        self._encoder = encoder
        self._salt = salt
        self._coder = coder

    def setup(self) -> None:
        self._encoder.setup()

    def process(self, element: Any) -> Iterator[Any]:
        enc = self._encoder
        digest = enc.image_digest(element)
        if digest is None:
            yield TaggedOutput("unhashed", element)
            return
        source = getattr(element, "path", None) or enc.identity(element)
        yield digest, _pack_copy(names.check_split_name(enc.split(element)),
                                 order_key(enc.identity(element), self._salt), source,
                                 self._coder.encode(element), False)


class _KeptSplitCopies(beam.DoFn):
    """``hash file bytes of a kept split -> (SHA-256, packed copy)`` per entry."""

    def process(self, data: bytes) -> Iterator[tuple[bytes, bytes]]:
        hashes = decode_hash_file(data)
        for entry in hashes.entries:
            yield entry.digest, _pack_copy(hashes.split, 0, entry.source, b"", True)


class _Decide(beam.DoFn):
    """``(SHA-256, [packed copies]) -> element`` for every copy kept; the others become
    ``duplicate`` rejects (and the losses they carry), tagged ``rejects``, and hash
    entries marked dropped, tagged ``dropped``. Two passes over the copies (the first
    reads only their heads), so a group of any size is never held whole."""

    def __init__(self, mode: str, encoder: ExampleEncoder, coder: beam.coders.Coder) -> None:
        self._mode = mode
        self._encoder = encoder
        self._coder = coder

    def process(self, keyed: tuple[bytes, Iterable[bytes]]) -> Iterator[Any]:
        digest, packed = keyed
        plan = DropPlan.of(self._mode, (_unpack_copy(blob)[0] for blob in packed))
        for blob in packed:
            copy, payload = _unpack_copy(blob)
            if copy.kept_split:
                continue
            element = self._coder.decode(payload)
            if not plan.drops(copy):
                yield element
                continue
            reject = Reject("image", copy.source, "duplicate",
                            _why(plan.kept_for(), self._mode), copy.split)
            yield TaggedOutput("rejects", reject)
            for lost in self._encoder.lost_with(element, reject):
                yield TaggedOutput("rejects", lost)
            entry = HashEntry(digest, -1, copy.source, None, True)
            yield TaggedOutput("dropped", encode_hash_file(HashFile(copy.split, "", (entry,))))


def _why(keeper: Copy, mode: str) -> str:
    if keeper.kept_split:
        where = f"an image of split {keeper.split}, written to this folder by an earlier run"
    else:
        where = f"{keeper.source} (split {keeper.split}), which is written"
    rule = ("writes one copy of each image" if mode == "drop"
            else "drops a later split's copies of an earlier split's image")
    return (f"the same bytes as {where}; --duplicates {mode} {rule} (--duplicates keep "
            "writes every copy and lists them in duplicates.jsonl)")


class DropDuplicates(beam.PTransform):
    """``element -> element``, the copies ``options.duplicates`` drops removed before any
    is written: ``{"records": elements kept, "rejects": Reject, "dropped": hash file
    bytes of the copies dropped}``.

    Args:
        encoder: gives each element's image digest, split and identity.
        options: ``duplicates`` (a drop mode) and ``salt`` (the identity hash that picks
            the copy kept).
        coder: the elements' coder (they cross a shuffle packed with it).
        kept_hashes: the hash files of the splits the folder keeps
            (:class:`ReadKeptHashes`; None when it keeps none): their copies are never
            dropped, and this run's copies of their images are.
    """

    def __init__(self, encoder: ExampleEncoder, options: ShardOptions,
                 coder: beam.coders.Coder, kept_hashes: beam.PCollection | None) -> None:
        super().__init__()
        self._encoder = encoder
        self._options = options
        self._coder = coder
        self._kept_hashes = kept_hashes

    def expand(self, elements):
        hashed = elements | "HashImages" >> beam.ParDo(
            _HashForDrop(self._encoder, self._options.salt, self._coder)
        ).with_outputs("unhashed", main="copies")  # copies: (SHA-256, packed copy)
        copies = [hashed.copies]
        if self._kept_hashes is not None:
            copies.append(self._kept_hashes | "KeptSplitCopies" >> beam.ParDo(
                _KeptSplitCopies()))  # (SHA-256, packed copy)
        decided = (
            tuple(copies)
            | "AllCopies" >> beam.Flatten()
            | "GroupCopies" >> beam.GroupByKey()  # (SHA-256, [packed copies])
            | "KeepOneCopy" >> beam.ParDo(
                _Decide(self._options.duplicates, self._encoder, self._coder)
            ).with_outputs("rejects", "dropped", main="kept")
        )  # kept: element; rejects: Reject; dropped: hash file bytes
        records = (decided.kept, hashed.unhashed) | "KeptAndUnhashed" >> beam.Flatten(
        ).with_output_types(elements.element_type)
        return {"records": records, "rejects": decided.rejects, "dropped": decided.dropped}
