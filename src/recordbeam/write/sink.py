"""``WriteShards``: our Beam sink for sharded TFRecord datasets.

Why not Beam's ``WriteToTFRecord``: with a fixed shard count it shuffles every record's
bytes, a crash leaves ``beam-temp-*`` folders behind and a rerun with another count
leaves stale shards. This sink shuffles only small elements (paths and labels), reads
the heavy bytes on the worker that writes the shard, and commits the output atomically:

1. key: each element gets a 64-bit order key from its identity (salted hash); the key
   fixes its shard and its position in the shard, so output is shuffled yet
   byte-identical on every runner;
2. plan: shards per split from ``num_shards`` or from total bytes / ``shard_size``;
3. write: one task per shard sorts its elements by key, encodes them one at a time and
   streams them into a uniquely named temporary file (a retried task writes a new
   file; only the committed attempt's file is ever renamed);
4. finalize: check every shard arrived, enforce the reject limits (images, annotations),
   remove the previous manifest, delete stale outputs of ours, rename shards into place, write
   ``labels.txt``, ``rejects.jsonl`` and finally ``manifest.json``.

The roles live apart: the encoder protocol in :mod:`recordbeam.write.encoder` (no Beam),
the key and shard plan in :mod:`recordbeam.write.planning`, this module's graph and
per-shard DoFns (steps 1 to 3), and the commit (step 4) in :mod:`recordbeam.write.commit`.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsDict, AsIter, AsList, AsSingleton, PCollection, TaggedOutput

from recordbeam import filesystems
from recordbeam.dataset import names
from recordbeam.dataset.shard_keys import KeyEntry, ShardKeys, encode_keys
from recordbeam.records import COUNTER_NAMESPACE, DROP_MODES, Reject
from recordbeam.tfrecord.example import Example, FeatureError, make_sequence_example
from recordbeam.tfrecord.feature_spec import FeatureSpec, observe_sequence
from recordbeam.tfrecord.framing import RecordWriter
from recordbeam.tfrecord.wire import encode_example_observed
from recordbeam.write.commit import ShardResult, _Finalize, write_index
from recordbeam.write.duplicates import (
    NEAR_UNHASHABLE,
    DropDuplicates,
    EarlierSplits,
    FindDuplicates,
    ReadKeptHashes,
    ShardHashes,
    earlier_splits,
)
from recordbeam.write.encoder import Encoded, ExampleEncoder
from recordbeam.write.incremental import Incremental, _AssignPackedShard, expand_incremental
from recordbeam.write.incremental_commit import IncrementalFinalize
from recordbeam.write.input_keys import element_input_key
from recordbeam.write.planning import ORDER_KEY as _ORDER_KEY
from recordbeam.write.planning import ShardOptions, order_key, shard_count, shard_of
from recordbeam.write.planning import pack_keyed as _pack_keyed
from recordbeam.write.planning import unpack_keyed as _unpack_keyed

__all__ = ["COUNTER_NAMESPACE", "Encoded", "ExampleEncoder", "Incremental", "ShardOptions",
           "ShardResult", "WriteShards"]


class _CountingWriter:
    """A write-only file wrapper that counts the bytes reaching the file."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.written = 0

    def write(self, data: bytes) -> int:
        self._raw.write(data)
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        self._raw.flush()


class _KeyElements(beam.DoFn):
    """``element -> (split, order key, planned bytes, element)``; the planned bytes are 0
    when the shard plan comes from sizes the reader gave (``WriteShards(sizes=...)``), or
    in an incremental run, which sizes only the elements it encodes.
    With ``input_keys`` (``stat`` or ``content``, an incremental run) the element's input
    key follows: ``(split, order key, planned bytes, element, input key)``."""

    def __init__(self, encoder: ExampleEncoder, salt: str, sized: bool,
                 input_keys: str | None = None) -> None:
        self._encoder = encoder
        self._salt = salt
        self._sized = sized
        self._input_keys = input_keys

    def process(self, element: Any) -> Iterable[tuple[Any, ...]]:
        enc = self._encoder
        split = names.check_split_name(enc.split(element))
        size = enc.size(element) if self._sized else 0
        keyed = (split, order_key(enc.identity(element), self._salt), size, element)
        if self._input_keys is None:
            yield keyed
        else:
            yield (*keyed, element_input_key(enc, element, self._input_keys))


@beam.typehints.with_output_types(Any)
class _BytesAndImages(beam.CombineFn):
    """``planned bytes`` of one split's elements -> ``(total bytes, elements)``: the shard
    count and the duplicate buckets are sized from one combine."""

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add_input(self, accumulator: tuple[int, int], size: int) -> tuple[int, int]:
        return accumulator[0] + size, accumulator[1] + 1

    def merge_accumulators(self, accumulators: Iterable[tuple[int, int]]) -> tuple[int, int]:
        total = images = 0
        for size, count in accumulators:
            total += size
            images += count
        return total, images

    def extract_output(self, accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator


class _AssignShard(beam.DoFn):
    """``(split, index, count) -> packed element``: its order key and its encoding in one
    ``bytes``. Beam's local runner keeps a shuffle's values as decoded Python objects in
    the launcher, where a record of paths and labels costs several times its encoded size."""

    def __init__(self, options: ShardOptions, coder: beam.coders.Coder) -> None:
        self._options = options
        self._coder = coder

    def process(self, keyed, totals):
        split, key, _size, element = keyed
        if split not in totals:
            raise ValueError(
                f"an element of split {split!r} arrived, but the planned sizes have no such "
                "split; give WriteShards(sizes=...) a total for every split the encoder names")
        n = shard_count(
            totals[split], num_shards=self._options.num_shards, shard_size=self._options.shard_size
        )
        yield (split, shard_of(key, n), n), _pack_keyed(key, element, self._coder)


class _WriteShard(beam.DoFn):
    """Writes one shard: sort by key, encode one element at a time, stream to a temp file.
    With ``keys`` (an incremental run: the packed elements carry their input keys) it
    also writes the shard's key file (:mod:`recordbeam.dataset.shard_keys`)."""

    def __init__(self, encoder: ExampleEncoder, options: ShardOptions, temp_dir: str,
                 coder: beam.coders.Coder, keys: bool = False, hashes: bool = False) -> None:
        self._encoder = encoder
        self._options = options
        self._temp_dir = temp_dir
        self._coder = coder
        self._keys = keys
        self._hashes = hashes  # write the shard's image hashes, pass them on tagged "hashes"
        self._examples = Metrics.counter(COUNTER_NAMESPACE, "examples_written")
        self._bytes = Metrics.counter(COUNTER_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(COUNTER_NAMESPACE, "shards_written")
        self._rejects = Metrics.counter(COUNTER_NAMESPACE, "rejects")

    def setup(self) -> None:
        self._encoder.setup()

    def process(self, group):
        (split, index, count), packed = group  # ((split, shard index, shard count), [packed])
        enc = self._encoder
        ordered = _decoded_in_key_order(packed, self._coder, enc, self._keys)
        name = names.shard_name(split, index, count, self._options.compression)
        attempt = uuid.uuid4().hex[:12]  # a retried task never reuses another attempt's file
        temp_path = filesystems.join(self._temp_dir, f"{name}.{attempt}")
        index_buffer = io.StringIO() if self._options.index else None
        spec = FeatureSpec(lists=enc.list_features)
        list_spec = FeatureSpec(lists=enc.list_features)
        counts: Counter[str] = Counter()
        entries: list[KeyEntry] = []
        sequence = False
        hashes = ShardHashes(self._options.near_duplicates) if self._hashes else None
        raw = filesystems.create(temp_path)
        sink = _CountingWriter(raw)
        try:
            writer = RecordWriter(sink, self._options.compression, index=index_buffer)
            for key, element, *input_key in ordered:
                encoded = _encode_guarded(enc, element)
                counts.update(encoded.counts)
                sequence = sequence or encoded.sequence is not None
                rejects = [reject if reject.split else dataclasses.replace(reject, split=split)
                           for reject in encoded.rejects]
                try:
                    chunks = _serialize(encoded, spec, list_spec)
                except (FeatureError, ValueError) as error:
                    reject = Reject(
                        "image", getattr(element, "path", None) or enc.identity(element),
                        "encode_error", f"{error}; fix the input value", split)
                    listed = {r.source for r in encoded.rejects}  # objects rejected already
                    lost = [r for r in _also_lost(enc, element, reject) if r.source not in listed]
                    rejects += [each if each.split else dataclasses.replace(each, split=split)
                                for each in (reject, *lost)]
                    chunks = None
                for reject in rejects:
                    self._rejects.inc()
                    yield TaggedOutput("rejects", reject)
                if chunks is not None:
                    if hashes is not None and encoded.image_digest is not None:
                        source = getattr(element, "path", None) or enc.identity(element)
                        hashes.add(encoded, writer.records_written, source)
                    writer.write_chunks(chunks)
                if input_key:
                    entries.append(KeyEntry(key, input_key[0], chunks is not None,
                                            dict(encoded.counts), tuple(rejects)))
            writer.close()
        finally:
            raw.close()
        # Counted once per shard: a Beam counter's inc costs microseconds per image.
        self._examples.inc(writer.records_written)
        temp_index = write_index(temp_path, index_buffer)
        temp_keys = None
        if self._keys:
            temp_keys = temp_path + names.KEYS_SUFFIX
            filesystems.write_bytes(temp_keys, encode_keys(ShardKeys(
                tuple(entries), spec, list_spec if list_spec.examples else None, sequence)))
        temp_hashes = None
        if hashes is not None:
            temp_hashes = temp_path + ".hashes"
            data = hashes.encode(split, name)
            filesystems.write_bytes(temp_hashes, data)
            yield TaggedOutput("hashes", data)
            if hashes.unhashable:
                counts[NEAR_UNHASHABLE] += hashes.unhashable
        self._bytes.inc(sink.written)
        self._shards.inc()
        yield ShardResult(
            split, index, count, temp_path, temp_index, writer.records_written, sink.written,
            spec, dict(counts), list_spec if list_spec.examples else None,
            temp_hashes_path=temp_hashes, temp_keys_path=temp_keys,
        )


def _write_plan(_unused: bytes, temp_dir: str, totals: Mapping[str, int]) -> None:
    """Expected input bytes per split, for progress reports while shards are written."""
    plan = json.dumps({"input_bytes": dict(sorted(totals.items()))}).encode()
    filesystems.write_bytes(filesystems.join(temp_dir, names.PLAN), plan)


def _order_key_bytes(blob: bytes) -> bytes:
    return blob[:_ORDER_KEY.size]


def _decoded_in_key_order(packed: Iterable[bytes], coder: beam.coders.Coder,
                          enc: ExampleEncoder, input_keys: bool = False) -> Iterator[tuple]:
    """A shard's packed elements in the order :func:`_in_key_order` gives, decoded one at
    a time as they are written: the shard waits as bytes, which the garbage collector
    does not scan, rather than as thousands of records (with their labels) it scans on
    every full collection. The big-endian key prefix sorts as the key does. Yields
    ``(order key, element)``, and the input key third with ``input_keys``."""
    blobs = sorted(packed, key=_order_key_bytes)
    for _, same_key in itertools.groupby(blobs, key=_order_key_bytes):
        group = list(same_key)
        if len(group) == 1:
            yield _unpack_keyed(group[0], coder, input_keys)
        else:  # elements sharing a key: by identity, then content, as _in_key_order does
            yield from _in_key_order(
                [_unpack_keyed(blob, coder, input_keys) for blob in group], enc)


def _in_key_order(keyed_elements: Iterable[tuple], enc: ExampleEncoder) -> list:
    """``(order key, element, ...)`` sorted by order key, then identity; elements sharing
    both (the same identity given twice) by their content, so arrival order never shows
    in the bytes."""
    ordered = sorted(keyed_elements, key=lambda kv: (kv[0], enc.identity(kv[1])))
    result: list = []
    for _, group in itertools.groupby(ordered, key=lambda kv: (kv[0], enc.identity(kv[1]))):
        ties = list(group)
        result.extend(ties if len(ties) == 1 else sorted(ties, key=lambda kv: repr(kv[1])))
    return result


def _encode_guarded(encoder: ExampleEncoder, element: Any) -> Encoded:
    """Encode one element; an unexpected error rejects that element instead of the job."""
    try:
        return encoder.encode(element)
    except Exception as error:  # noqa: BLE001 - one bad element must not stop a 10-hour job
        source = getattr(element, "path", None) or f"element {encoder.identity(element)[:16]}"
        reject = Reject("image", source, "encode_error",
                        f"{type(error).__name__}: {error}. This is a recordbeam bug "
                        "or an input it does not handle; please report it.")
        return Encoded(rejects=(reject, *_also_lost(encoder, element, reject)))


def _also_lost(encoder: ExampleEncoder, element: Any, reject: Reject) -> tuple[Reject, ...]:
    """``encoder.lost_with``, guarded like ``encode``: listing the losses must not fail
    the job either (the element's own reject is listed regardless)."""
    try:
        return tuple(encoder.lost_with(element, reject))
    except Exception:  # noqa: BLE001 - see _encode_guarded
        return ()


def _serialize(encoded: Encoded, spec: FeatureSpec,
               list_spec: FeatureSpec | None = None) -> list[bytes | memoryview] | None:
    """The example's bytes as pieces to frame (large values are not copied), or None."""
    if encoded.sequence is not None:
        return [_serialize_sequence(encoded, spec, list_spec)]
    if encoded.serialized is not None:
        spec.observe(Example.FromString(encoded.serialized))
        return [encoded.serialized]
    if encoded.features is None:
        return None
    # Our wire encoder: the same bytes as protobuf's deterministic serialization (map
    # keys sorted; plain serialization orders them differently in every process), but
    # the image bytes are handed to the writer as they are instead of copied twice.
    chunks, observed = encode_example_observed(encoded.features, encoded.kinds)
    spec.observe_lengths(observed)
    return chunks


def _serialize_sequence(encoded: Encoded, spec: FeatureSpec,
                        list_spec: FeatureSpec | None) -> bytes:
    """A SequenceExample: ``spec`` learns its context, ``list_spec`` each step of its lists
    (so a list's ``fixed_length`` is its values per step, ``present_in`` counts steps)."""
    context, lists = encoded.sequence
    message = make_sequence_example(context, lists, encoded.kinds)
    observe_sequence(message, spec, list_spec)
    return message.SerializeToString(deterministic=True)


class WriteShards(beam.PTransform):
    """Write a PCollection as a sharded TFRecord dataset in ``output_dir``, atomically.

    Args:
        output_dir: folder on any Beam filesystem. Files of ours from an earlier run are
            replaced; the caller checks for foreign files first
            (:func:`recordbeam.dataset.layout.check_writable`).
        encoder: turns elements into examples on the writing worker; the default writes
            serialized ``Example`` bytes as they are.
        options: shard count or size, compression, index files, reject limit.
        rejects: rejects found before the sink (join, annotation checks), to be counted
            and listed in ``rejects.jsonl``.
        counts: ``(name, number)`` pairs found before the sink, summed into the manifest
            (the default split's); ``((split, name), number)`` for a count of one split.
        metadata: dicts merged into the manifest (label map, inputs fingerprint...). A
            ``label_names`` list is also written as ``labels.txt``; the keys in
            ``manifest.SPLIT_KEYS`` go to the entries of the splits this run writes.
        splits: splits this run owns besides the encoder's default split, even if no
            element reaches them (their old shards are then replaced by nothing).
        incremental: keep the shards of the version in ``output_dir`` whose examples did
            not change, and encode only new and changed elements
            (:mod:`recordbeam.write.incremental`); shards then carry key files and numbers
            that do not depend on their count (``train-00012.tfrecord``).
        sizes: ``(split, bytes)`` pairs, one per element, to plan shard counts from,
            when the reader knows the input sizes before it builds the elements (COCO: the
            listed size of every file that joined an image entry); the sink adds
            ``encoder.size_overhead()`` to each. Shards are then assigned in the same pass
            that keys the elements, one pass over them fewer. Without it the sink sums
            ``encoder.size`` over the elements. Either way the target is the size of the
            shard files, so small images do not make shards larger than asked.

    One output folder may hold several splits; a run replaces only the splits it writes
    and keeps the others (and their manifest entries and rejects). ``sizes`` is not used
    by an incremental run, which plans its new shards from the elements it encodes.

    Returns:
        A PCollection holding the manifest dict once the output is committed.
    """

    def __init__(self, output_dir: str, encoder: ExampleEncoder | None = None, *,
                 options: ShardOptions | None = None, rejects: PCollection | None = None,
                 counts: PCollection | None = None, metadata: PCollection | None = None,
                 splits: Sequence[str] = (), sizes: PCollection | None = None,
                 incremental: Incremental | None = None) -> None:
        super().__init__()
        self._output_dir = output_dir.rstrip("/")
        self._encoder = encoder or ExampleEncoder()
        self._options = options or ShardOptions()
        self._rejects = rejects
        self._counts = counts
        self._metadata = metadata
        self._splits = tuple(names.check_split_name(s) for s in splits)
        self._sizes = sizes
        self._incremental = incremental
        self.temp_dir = filesystems.join(self._output_dir, names.TEMP_PREFIX + uuid.uuid4().hex[:12])

    def expand(self, elements):
        if self._incremental is not None:
            return self._expand_incremental(elements)
        p = elements.pipeline
        coder = beam.coders.registry.get_coder(elements.element_type)
        finding = self._options.duplicates != "off" and self._encoder.has_images
        earlier, duplicate_inputs, dropped_rejects = EarlierSplits(), [], []
        sizes = self._sizes
        kept = {}
        if finding:
            earlier = earlier_splits(self._output_dir, (self._encoder.default_split, *self._splits))
            if earlier.files:  # hash files of the splits the folder keeps
                kept = p | "ReadKeptHashes" >> ReadKeptHashes(earlier)
                duplicate_inputs.append(kept["hashes"])
            if self._options.duplicates in DROP_MODES:
                dropped = elements | "DropDuplicates" >> DropDuplicates(
                    self._encoder, self._options, coder, kept.get("hashes"))
                elements = dropped["records"]  # element, one copy of each image kept
                duplicate_inputs.append(dropped["dropped"])
                dropped_rejects.append(dropped["rejects"])
                sizes = None  # the reader's sizes count the copies dropped too
        keyed = (
            elements  # element, as the encoder reads it
            | "KeyByIdentity" >> beam.ParDo(
                _KeyElements(self._encoder, self._options.salt, sized=sizes is None))
        )  # (split, order_key, planned_bytes, element)
        if sizes is None:
            sizes = keyed | "SizeBySplit" >> beam.Map(lambda k: (k[0], k[2]))  # (split, bytes)
        else:
            overhead = self._encoder.size_overhead()
            sizes = sizes | "AddRecordOverhead" >> beam.Map(
                lambda split_bytes: (split_bytes[0], split_bytes[1] + overhead))  # (split, bytes)
        planned = sizes | "SumSizes" >> beam.CombinePerKey(_BytesAndImages())
        # (split, (total_bytes, images))
        totals = planned | "TotalBytes" >> beam.Map(lambda kv: (kv[0], kv[1][0]))
        # (split, total_bytes)
        plan_written = self._plan_written(p, totals)
        written = (
            keyed
            | "AssignShard" >> beam.ParDo(_AssignShard(self._options, coder), totals=AsDict(totals))
            # ((split, shard_index, shard_count), order_key + encoded element as bytes)
            | "GroupByShard" >> beam.GroupByKey()
            # ((split, shard_index, shard_count), [packed element])
            | "WriteShard" >> beam.ParDo(
                _WriteShard(self._encoder, self._options, self.temp_dir, coder, hashes=finding)
            ).with_output_types(Any).with_outputs("rejects", "hashes", main="shards")
        )  # shards: ShardResult (one per written temp file); rejects: Reject;
        # hashes: the shard's hash file bytes (with duplicates looked for)
        duplicates = {}
        if finding:
            found = (
                (written.hashes, *duplicate_inputs)
                | "AllImageHashes" >> beam.Flatten()  # hash file bytes
                | "FindDuplicates" >> FindDuplicates(self.temp_dir, self._options, earlier, planned)
            )
            duplicates = {"duplicate_parts": AsList(found["parts"])}
            if kept:
                duplicates["unreadable_hashes"] = AsList(kept["unreadable"])
            if "near" in found:
                duplicates["near_found"] = AsList(found["near"])
        all_rejects, summed, metadata = self._rejects_counts_metadata(
            p, written.rejects, *dropped_rejects)
        return (
            p
            | "FinalizeTrigger" >> beam.Impulse()
            | "Finalize" >> beam.ParDo(
                _Finalize(self._output_dir, self.temp_dir, self._options,
                          (self._encoder.default_split, *self._splits), finding, earlier),
                shards=AsList(written.shards),
                rejects=AsList(all_rejects),
                counts=AsDict(summed),
                metadata=AsIter(metadata),  # dicts merged into the manifest
                totals=AsDict(totals),
                plan_written=AsList(plan_written),  # finalize only after the plan file exists
                **duplicates,  # the parts of duplicates.jsonl, near groups, unread hash files
            ).with_output_types(Any)
        )  # the manifest dict, once the output is committed

    def _plan_written(self, p, totals):
        return (
            p
            | "PlanTrigger" >> beam.Impulse()
            | "WritePlan" >> beam.Map(_write_plan, self.temp_dir, AsDict(totals))
            .with_output_types(Any)  # None
        )

    def _rejects_counts_metadata(self, p, *written_rejects):
        """Every reject (the sources' and the writers'), the sources' counts summed, and
        the metadata dicts: what the finalize step takes besides the shards."""
        upstream = list(written_rejects)
        if self._rejects is not None:
            upstream.append(self._rejects)
        all_rejects = tuple(upstream) | "AllRejects" >> beam.Flatten()  # Reject
        counts = self._counts if self._counts is not None else p | "NoCounts" >> beam.Create([])
        summed = counts | "SumCounts" >> beam.CombinePerKey(sum)  # (count_name, number)
        metadata = self._metadata if self._metadata is not None else p | "NoMetadata" >> beam.Create([])
        return all_rejects, summed, metadata

    def _expand_incremental(self, elements):
        p = elements.pipeline
        enc, options, incremental = self._encoder, self._options, self._incremental
        declared = (enc.default_split, *self._splits)
        record = incremental.record(enc.example_settings())
        coder = beam.coders.registry.get_coder(elements.element_type)
        keyed = elements | "KeyByIdentity" >> beam.ParDo(_KeyElements(
            enc, options.salt, sized=False, input_keys=incremental.input_key)
        )  # (split, order_key, 0, element, input_key)
        parts = expand_incremental(keyed, self._output_dir, self.temp_dir, declared,
                                   incremental, record, options, enc, coder)
        totals = (
            parts.to_encode
            | "SizeBySplit" >> beam.Map(lambda k: (k[0], k[2]))  # (split, bytes)
            | "SumSizes" >> beam.CombinePerKey(sum)  # (split, total_bytes) to encode
        )
        plan_written = self._plan_written(p, totals)
        written = (
            parts.to_encode  # (split, order_key, planned_bytes, packed element)
            | "AssignShard" >> beam.ParDo(_AssignPackedShard(options), totals=AsDict(totals))
            # ((split, shard_index, shard_count), packed element)
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(
                _WriteShard(enc, options, self.temp_dir, coder, keys=True)
            ).with_output_types(Any).with_outputs("rejects", main="shards")
        )  # shards: ShardResult with its key file; rejects: Reject
        all_rejects, summed, metadata = self._rejects_counts_metadata(p, written.rejects)
        return (
            p
            | "FinalizeTrigger" >> beam.Impulse()
            | "Finalize" >> beam.ParDo(
                IncrementalFinalize(self._output_dir, self.temp_dir, options, declared, record),
                shards=AsList(written.shards),
                rewritten=AsList(parts.rewritten),  # RewrittenShard
                kept=AsList(parts.kept),  # ShardSummary
                unusable=AsList(parts.unusable),  # UnusableShard
                classes=AsDict(parts.classes),  # ((split, class), count)
                previous=AsSingleton(parts.previous),  # PreviousVersion
                rejects=AsList(all_rejects),
                counts=AsDict(summed),
                metadata=AsIter(metadata),
                totals=AsDict(totals),
                plan_written=AsList(plan_written),
            ).with_output_types(Any)
        )  # the manifest dict, once the new version is committed
