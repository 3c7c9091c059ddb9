"""Incremental runs (``--incremental``): the new version of a split keeps every shard
whose examples did not change, and encodes only what is new or changed.

How it fits in :class:`recordbeam.write.sink.WriteShards`:

1. previous version: one task reads the folder's ``manifest.json`` and decides, per
   split this run writes, whether its shards can be reused: not when the split was not
   written by an incremental run, or with other options, another recordbeam version or
   another kind of input key (the split is then rebuilt, and the manifest says why).
   It emits one :class:`OldShard` per reusable shard, with its compaction group;
2. old keys: one task per old shard reads its key file
   (:mod:`recordbeam.dataset.shard_keys`), checks the shard against the manifest and
   emits each element's ``(split, order key) -> (shard, input key)`` and the shard's
   :class:`ShardSummary` (feature spec, counts, rejects); a shard that fails is
   :class:`UnusableShard` (its examples are then encoded again as new);
3. classify: the new elements, keyed the same way with their input keys, meet the old
   keys in a ``CoGroupByKey`` (spread over workers): an order key whose input keys are
   the same on both sides is unchanged; otherwise its old entries are dropped from their
   shards and its new elements are encoded (added or changed);
4. the elements to encode go through the sink's usual plan and write, into new shards
   with key files; each old shard that lost entries (or sits in a compaction group) is
   rewritten by one task from its surviving records, copied as they are (no image is
   read, nothing is encoded), with their key entries;
5. commit (:mod:`recordbeam.write.incremental_commit`): kept, rewritten and new shards
   make the new version; new files get shard numbers the previous version does not use,
   the manifest is replaced last, and only then are the old files removed.

The new version holds the same examples (``image/source_id`` and serialized bytes) as a
full rebuild from the same inputs: an example is kept only when everything it is made
from is unchanged, and anything else is encoded as a full rebuild would. Which file holds
which example differs from a full rebuild's.
"""

from __future__ import annotations

import heapq
import io
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from recordbeam import filesystems
from recordbeam.dataset import layout, names
from recordbeam.dataset.shard_keys import (
    KeyEntry,
    ShardKeys,
    decode_keys,
    encode_keys,
)
from recordbeam.records import COUNTER_NAMESPACE, Reject
from recordbeam.tfrecord.feature_spec import FeatureSpec, observe_sequence
from recordbeam.tfrecord.framing import RecordWriter, compression_for_path, read_records
from recordbeam.tfrecord.protos import Example, SequenceExample
from recordbeam.write.commit import ShardResult, write_index
from recordbeam.write.input_keys import KEY_KINDS, STAT, settings_change, settings_key
from recordbeam.write.planning import (
    ShardOptions,
    pack_keyed,
    packed_input_key,
    shard_count,
    shard_of,
    unpack_keyed,
)

__all__ = ["Incremental", "OldShard", "PreviousVersion", "RewrittenShard", "ShardSummary",
           "UnusableShard"]

#: What an element's classification counts.
CLASSES = ("added", "changed", "removed", "unchanged")


@dataclass(frozen=True)
class Incremental:
    """What an incremental run compares with the version in its output folder.

    Attributes:
        settings: the run's settings (options, recordbeam version), as the manifest
            records them: when what shapes examples in them differs from the previous
            version's (:func:`recordbeam.write.input_keys.example_settings`), the split is
            rebuilt.
        input_key: ``stat`` (files compared by listed size and modification time) or
            ``content`` (by the hash of their bytes: every file is read).
        compact_below: shards smaller than this fraction of ``--shard-size`` are folded
            together into shards near that size (0: never).
    """

    settings: Mapping[str, Any] = field(default_factory=dict)
    input_key: str = STAT
    compact_below: float = 0.0

    def __post_init__(self) -> None:
        if self.input_key not in KEY_KINDS:
            raise ValueError(f"input_key must be one of {KEY_KINDS}, got {self.input_key!r}")
        if not 0.0 <= self.compact_below <= 1.0:
            raise ValueError(f"compact_below must be between 0 and 1, got {self.compact_below}")

    def record(self, encoder_settings: Mapping[str, Any]) -> dict[str, str]:
        """What a split's manifest entry keeps of this run for the next one to compare."""
        return {"settings_key": settings_key({**self.settings, "encoder": encoder_settings}),
                "input_key": self.input_key}


@dataclass(frozen=True)
class PreviousVersion:
    """The version an incremental run starts from.

    Attributes:
        version: its number (0: the folder holds no finished output).
        rebuilt: split -> why its shards are not reused (it is rebuilt from its inputs).
    """

    version: int
    rebuilt: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OldShard:
    """A shard of the previous version that may be kept. ``group``: the compaction group
    it is folded into (its own name when it stays on its own; else a name no shard has)."""

    split: str
    name: str
    examples: int
    bytes: int
    group: str


@dataclass(frozen=True)
class ShardSummary:
    """What an old shard brings to the new version when kept as it is (its key file's)."""

    split: str
    name: str
    group: str
    examples: int
    bytes: int
    spec: FeatureSpec
    list_spec: FeatureSpec | None
    counts: Mapping[str, int]
    rejects: tuple[Reject, ...]


@dataclass(frozen=True)
class UnusableShard:
    """An old shard that cannot be reused: its examples are encoded again as new."""

    split: str
    name: str
    why: str


@dataclass(frozen=True)
class RewrittenShard:
    """A new shard made of the surviving records of old shards (``replaces``), with the
    counts and rejects of its entries."""

    result: ShardResult
    replaces: tuple[str, ...]
    rejects: tuple[Reject, ...]


# --- 1. the previous version ---------------------------------------------------------------


class _ReadPreviousVersion(beam.DoFn):
    """``None -> PreviousVersion``, and each reusable shard to the ``shards`` output."""

    def __init__(self, output_dir: str, splits: Sequence[str], incremental: Incremental,
                 record: Mapping[str, str], shard_size: int) -> None:
        self._output_dir = output_dir
        self._splits = tuple(dict.fromkeys(splits))  # the default split may be named twice
        self._incremental = incremental
        self._record = dict(record)
        self._shard_size = shard_size

    def process(self, _unused: Any) -> Iterator[Any]:
        found = layout.read_manifest(self._output_dir)
        if found is None:
            yield PreviousVersion(0)
            return
        rebuilt = {}
        for split in self._splits:
            entry = found.get("splits", {}).get(split)
            if entry is None:
                continue
            why = self._why_rebuilt(entry)
            if why is not None:
                rebuilt[split] = why
                continue
            below = self._incremental.compact_below * self._shard_size
            for shard in compaction_groups(split, entry["shards"], below, self._shard_size):
                yield TaggedOutput("shards", shard)
        yield PreviousVersion(int(found.get("version", 0)), rebuilt)

    def _why_rebuilt(self, entry: Mapping[str, Any]) -> str | None:
        recorded = entry.get("incremental")
        if not isinstance(recorded, Mapping):
            return "it was not written by an incremental run"
        if recorded.get("input_key") != self._record["input_key"]:
            return (f"its files were compared by {recorded.get('input_key')} and this run "
                    f"compares them by {self._record['input_key']} (--verify-unchanged)")
        if recorded.get("settings_key") != self._record["settings_key"]:
            return (settings_change(entry.get("settings", {}), self._incremental.settings)
                    or "what the encoder learned of the inputs changed (e.g. a manifest's "
                    "column types)")
        return None


def compaction_groups(split: str, shards: Sequence[Mapping[str, Any]], below: float,
                      target: int) -> list[OldShard]:
    """Each listed shard of ``split`` as an :class:`OldShard`; shards smaller than
    ``below`` bytes are packed, in name order, into groups of at most ``target`` bytes
    (each group becomes one shard; a shard alone in its group is left as it is)."""
    small = [s for s in shards if s["bytes"] < below]
    groups: list[list[Mapping[str, Any]]] = []
    for shard in sorted(small, key=lambda s: s["file"]):
        if groups and sum(s["bytes"] for s in groups[-1]) + shard["bytes"] <= target:
            groups[-1].append(shard)
        else:
            groups.append([shard])
    # A group is named apart from any shard: a shard whose group is its own name is alone.
    group_of = {s["file"]: f"folded into one with {g[0]['file']}" for g in groups if len(g) > 1
                for s in g}
    return [OldShard(split, s["file"], s["examples"], s["bytes"], group_of.get(s["file"], s["file"]))
            for s in shards]


# --- 2. the old keys ----------------------------------------------------------------------


def join_key(split: str, order: int) -> bytes:
    """The key old and new elements meet by: the split and the order key."""
    return split.encode("utf-8") + b"\0" + order.to_bytes(8, "big")


def _split_and_order(key: bytes) -> tuple[str, int]:
    return key[:-9].decode("utf-8"), int.from_bytes(key[-8:], "big")


def read_shard_keys(output_dir: str, shard: OldShard) -> ShardKeys | str:
    """The key file of an old shard, or why it cannot be used: the shard is not the size
    the manifest lists, its key file is missing or damaged, or it lists another number of
    records."""
    path = filesystems.join(output_dir, shard.name)
    size = filesystems.size_of(path)
    if size != shard.bytes:
        return (f"{path} is missing" if size is None else
                f"{path} has {size} bytes where manifest.json lists {shard.bytes}")
    keys_path = path + names.KEYS_SUFFIX
    try:
        data = filesystems.read_bytes(keys_path)
    except Exception:  # noqa: BLE001 - each filesystem says "missing" its own way
        return f"{keys_path} cannot be read"
    try:
        keys = decode_keys(data, keys_path)
    except ValueError as error:
        return str(error)
    if keys.written != shard.examples:
        return (f"{keys_path} lists {keys.written} records where manifest.json lists "
                f"{shard.examples}")
    return keys


class _ReadOldKeys(beam.DoFn):
    """``OldShard -> (join key, (shard name, input key))`` per entry of its key file, and
    the shard's :class:`ShardSummary` (or :class:`UnusableShard`) to their outputs."""

    def __init__(self, output_dir: str) -> None:
        self._output_dir = output_dir

    def process(self, shard: OldShard) -> Iterator[Any]:
        keys = read_shard_keys(self._output_dir, shard)
        if isinstance(keys, str):
            yield TaggedOutput("unusable", UnusableShard(shard.split, shard.name, keys))
            return
        for entry in keys.entries:
            yield join_key(shard.split, entry.order_key), (shard.name, entry.input_key)
        counts: Counter[str] = Counter()
        for entry in keys.entries:
            counts.update(entry.counts)
        yield TaggedOutput("summaries", ShardSummary(
            shard.split, shard.name, shard.group, shard.examples, shard.bytes, keys.spec,
            keys.list_spec, dict(counts), tuple(r for e in keys.entries for r in e.rejects)))


# --- 3. classify ----------------------------------------------------------------------------


class _Classify(beam.DoFn):
    """``(join key, {old: [(shard, input key)], new: [packed element]})`` -> the elements
    to encode as ``(split, order key, bytes, packed)``; ``(shard, order key)`` of each old
    entry dropped to ``drops``; ``((split, class), count)`` to ``classes``. ``size_of``
    gives the planned bytes of a packed element: only those encoded are sized, and only
    they plan the new shards."""

    def __init__(self, size_of: Callable[[bytes], int]) -> None:
        self._size_of = size_of

    def process(self, element: tuple[bytes, Mapping[str, Iterable[Any]]]) -> Iterator[Any]:
        key, grouped = element
        old, new = list(grouped["old"]), list(grouped["new"])
        split, order = _split_and_order(key)
        old_keys = sorted(input_key for _shard, input_key in old)
        new_keys = sorted(packed_input_key(packed) for packed in new)
        if old_keys == new_keys:
            yield TaggedOutput("classes", ((split, "unchanged"), len(new)))
            return
        both = min(len(old), len(new))
        for name, count in (("changed", both), ("added", len(new) - both),
                            ("removed", len(old) - both)):
            if count:
                yield TaggedOutput("classes", ((split, name), count))
        for shard, _input_key in old:
            yield TaggedOutput("drops", (shard, order))
        for packed in new:
            yield split, order, self._size_of(packed), packed


class _PackedSize:
    """The planned bytes (``encoder.size``) of an element packed by
    :func:`~recordbeam.write.planning.pack_keyed` with its input key."""

    def __init__(self, encoder: Any, coder: beam.coders.Coder) -> None:
        self._encoder = encoder
        self._coder = coder

    def __call__(self, packed: bytes) -> int:
        _order, element, _input_key = unpack_keyed(packed, self._coder, input_keys=True)
        return self._encoder.size(element)


class _AssignPackedShard(beam.DoFn):
    """``(split, order key, bytes, packed) -> ((split, shard, shards), packed)``: the
    shard plan of the elements an incremental run encodes."""

    def __init__(self, options: ShardOptions) -> None:
        self._options = options

    def process(self, keyed: tuple[str, int, int, bytes], totals: Mapping[str, int]):
        split, order, _size, packed = keyed
        n = shard_count(totals[split], num_shards=None, shard_size=self._options.shard_size)
        yield (split, shard_of(order, n), n), packed


# --- 4. rewrites ------------------------------------------------------------------------------


class _PlanRewrites(beam.DoFn):
    """``(shard name, {summary: [ShardSummary], drops: [order key]})`` -> the summary of
    a shard kept as it is, or ``(group, (summary, dropped order keys))`` to ``rewrite``."""

    def process(self, element: tuple[str, Mapping[str, Iterable[Any]]]) -> Iterator[Any]:
        _name, grouped = element
        summaries = list(grouped["summary"])
        if not summaries:  # drops of a shard whose keys were read but not summarized
            return
        summary = summaries[0]
        drops = tuple(sorted(set(grouped["drops"])))
        if not drops and summary.group == summary.name:
            yield summary
        else:
            yield TaggedOutput("rewrite", (summary.group, (summary, drops)))


@dataclass
class _Source:
    """One old shard being copied: its key entries, its records, the entries dropped."""

    summary: ShardSummary
    keys: ShardKeys
    records: Iterator[bytes]
    drops: frozenset[int]


class _RewriteShards(beam.DoFn):
    """``(group, [(summary, drops)]) -> RewrittenShard``: the surviving records of the
    group's old shards, merged in order-key order and copied as they are into one new
    shard (temp file), with its key file and index."""

    def __init__(self, output_dir: str, temp_dir: str, options: ShardOptions) -> None:
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._options = options
        self._copied = Metrics.counter(COUNTER_NAMESPACE, "records_copied")

    def process(self, element: tuple[str, Iterable[tuple[ShardSummary, tuple[int, ...]]]]):
        _group, members = element
        members = sorted(members, key=lambda m: m[0].name)
        opened = []
        try:
            for summary, drops in members:
                opened.append(self._open(summary, drops))
            written = self._write([source for source, _f in opened])
            if written.result.examples or written.rejects:  # else: every entry was dropped
                yield written
        finally:
            for _source, file in opened:
                file.close()

    def _open(self, summary: ShardSummary, drops: tuple[int, ...]) -> tuple[_Source, Any]:
        old = OldShard(summary.split, summary.name, summary.examples, summary.bytes,
                       summary.group)
        keys = read_shard_keys(self._output_dir, old)
        if isinstance(keys, str):  # changed since step 2 read it: the lock makes this a bug
            raise RuntimeError(f"{summary.name} changed while this run went on: {keys}")
        path = filesystems.join(self._output_dir, summary.name)
        file = filesystems.open_read(path)
        records = read_records(file, path=path, compression=compression_for_path(path))
        return _Source(summary, keys, records, frozenset(drops)), file

    def _write(self, sources: list[_Source]) -> RewrittenShard:
        first = sources[0].summary
        name = names.shard_name(first.split, 0, 1, self._options.compression)
        temp_path = filesystems.join(self._temp_dir, f"{name}.{uuid.uuid4().hex[:12]}")
        index = io.StringIO() if self._options.index else None
        sequence = any(source.keys.sequence for source in sources)
        spec = FeatureSpec(lists=frozenset().union(*(s.keys.spec.lists for s in sources)))
        list_spec = FeatureSpec() if sequence else None
        entries: list[KeyEntry] = []
        counts: Counter[str] = Counter()
        raw = filesystems.create(temp_path)
        try:
            writer = RecordWriter(raw, self._options.compression, index=index)
            for entry, record in _surviving(sources):
                entries.append(entry)
                counts.update(entry.counts)
                if record is not None:
                    _observe(record, spec, list_spec, sequence)
                    writer.write(record)
            writer.close()
        finally:
            raw.close()
        self._copied.inc(writer.records_written)
        temp_index = write_index(temp_path, index)
        keys = ShardKeys(tuple(entries), spec, list_spec if list_spec and list_spec.examples
                         else None, sequence)
        temp_keys = temp_path + names.KEYS_SUFFIX
        filesystems.write_bytes(temp_keys, encode_keys(keys))
        size = filesystems.size_of(temp_path)
        result = ShardResult(first.split, 0, 1, temp_path, temp_index, writer.records_written,
                             size if size is not None else 0, spec, dict(counts), keys.list_spec,
                             temp_keys_path=temp_keys)
        return RewrittenShard(result, tuple(s.summary.name for s in sources),
                              tuple(r for e in entries for r in e.rejects))


def _surviving(sources: list[_Source]) -> Iterator[tuple[KeyEntry, bytes | None]]:
    """The entries of ``sources`` not dropped, in order-key order (a shard's own order
    within it), each with its record (None for an entry that was rejected)."""
    def entries(number: int, source: _Source) -> Iterator[tuple[int, int, int, KeyEntry]]:
        for position, entry in enumerate(source.keys.entries):
            yield entry.order_key, number, position, entry

    for _order, number, _position, entry in heapq.merge(
            *(entries(n, s) for n, s in enumerate(sources))):
        source = sources[number]
        record = next(source.records) if entry.written else None
        if entry.order_key not in source.drops:
            yield entry, record


def _observe(record: bytes, spec: FeatureSpec, list_spec: FeatureSpec | None,
             sequence: bool) -> None:
    if sequence:
        observe_sequence(SequenceExample.FromString(record), spec, list_spec)
    else:
        spec.observe(Example.FromString(record))


# --- the graph ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IncrementalParts:
    """What :func:`expand_incremental` hands the commit: new shards are written by the
    sink from ``to_encode``; the rest is as named."""

    previous: Any  # PCollection of one PreviousVersion
    to_encode: Any  # (split, order key, bytes, packed element)
    kept: Any  # ShardSummary
    rewritten: Any  # RewrittenShard
    unusable: Any  # UnusableShard
    classes: Any  # ((split, class), count)


def expand_incremental(keyed: Any, output_dir: str, temp_dir: str, splits: Sequence[str],
                       incremental: Incremental, record: Mapping[str, str],
                       options: ShardOptions, encoder: Any,
                       coder: beam.coders.Coder) -> IncrementalParts:
    """Steps 1 to 4 of the module doc, from the sink's keyed elements ``(split, order key,
    bytes, element, input key)`` (their bytes unplanned: ``encoder.size`` is asked only of
    the elements encoded)."""
    p = keyed.pipeline
    previous = (
        p
        | "PreviousTrigger" >> beam.Impulse()
        | "ReadPreviousVersion" >> beam.ParDo(_ReadPreviousVersion(
            output_dir, splits, incremental, record, options.shard_size)
        ).with_outputs("shards", main="version")
    )  # version: PreviousVersion; shards: OldShard
    old = (
        previous.shards
        | "SpreadOldShards" >> beam.Reshuffle()  # one task per old shard
        | "ReadOldKeys" >> beam.ParDo(_ReadOldKeys(output_dir)).with_outputs(
            "summaries", "unusable", main="entries")
    )  # entries: (join key, (shard, input key)); summaries; unusable
    new = keyed | "KeyByInput" >> beam.Map(
        lambda k: (join_key(k[0], k[1]), pack_keyed(k[1], k[3], coder, k[4])))
    classified = (
        {"old": old.entries, "new": new}
        | "JoinOldAndNew" >> beam.CoGroupByKey()  # (join key, {old: [...], new: [packed]})
        | "Classify" >> beam.ParDo(_Classify(_PackedSize(encoder, coder))).with_outputs(
            "drops", "classes", main="encode")
    )  # encode: (split, order key, bytes, packed); drops: (shard, order key)
    classes = classified.classes | "CountClasses" >> beam.CombinePerKey(sum)
    planned = (
        {"summary": old.summaries | "KeyByShard" >> beam.Map(lambda s: (s.name, s)),
         "drops": classified.drops}
        | "JoinDrops" >> beam.CoGroupByKey()  # (shard, {summary: [..], drops: [order key]})
        | "PlanRewrites" >> beam.ParDo(_PlanRewrites()).with_outputs("rewrite", main="kept")
    )  # kept: ShardSummary; rewrite: (group, (summary, drops))
    rewritten = (
        planned.rewrite
        | "GroupRewrites" >> beam.GroupByKey()  # (group, [(summary, drops)])
        | "RewriteShards" >> beam.ParDo(_RewriteShards(output_dir, temp_dir, options))
    )  # RewrittenShard
    return IncrementalParts(previous.version, classified.encode, planned.kept, rewritten,
                            old.unusable, classes)
