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
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import json
import logging
import os
import struct
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsDict, AsIter, AsList, PCollection, TaggedOutput

from recordbeam import __version__, filesystems
from recordbeam.dataset import layout as folder
from recordbeam.dataset import manifest
from recordbeam.dataset import tfds as tfds_metadata
from recordbeam.errors import DataError
from recordbeam.records import DEFAULT_MAX_REJECT_FRACTION, LOST_WITH_IMAGE, Reject
from recordbeam.tfrecord.example import Example, FeatureError, make_sequence_example
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.framing import Compression, RecordWriter, parse_compression
from recordbeam.tfrecord.wire import encode_example_observed
from recordbeam.write.planning import (
    DEFAULT_SALT,
    DEFAULT_SHARD_SIZE,
    RECORD_FRAMING,
    order_key,
    shard_count,
    shard_of,
)

COUNTER_NAMESPACE = "recordbeam"
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Encoded:
    """What an encoder made of one element.

    Give ``features`` (a mapping for :func:`recordbeam.tfrecord.example.make_example`) or
    ``serialized`` (bytes of an ``Example`` written as they are), or neither when the
    element was rejected. ``kinds`` fixes the kind of features whose lists may be empty. ``counts`` are added up into the manifest (e.g. boxes clipped).
    """

    features: Mapping[str, Any] | None = None
    kinds: Mapping[str, str] | None = None
    serialized: bytes | None = None
    rejects: tuple[Reject, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    #: ``(context, feature_lists)`` for a ``SequenceExample`` (arguments of
    #: :func:`recordbeam.tfrecord.example.make_sequence_example`, with ``kinds``).
    sequence: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None


class ExampleEncoder:
    """How ``WriteShards`` turns elements into examples.

    The base class writes elements that are already serialized ``Example`` bytes.
    Subclasses override ``encode`` to do the heavy work (reading image bytes) on the
    worker that writes the shard, after the shuffle.

    ``list_features`` names the features that are lists by nature (one value per object,
    a list column): the manifest declares them variable-length even when every example
    happens to hold the same number of values, so readers see one shape on every dataset.
    """

    #: Features that are lists whatever the data holds (see the class docstring).
    list_features: frozenset[str] = frozenset()

    def __init__(self, split: str = "train", *, list_features: Iterable[str] = ()) -> None:
        self.default_split = folder.check_split_name(split)
        if list_features:
            self.list_features = frozenset(list_features)

    def setup(self) -> None:
        """Called once per worker before the first ``encode``."""

    def identity(self, element: Any) -> str:
        """A stable identity; its hash orders the output. Must not depend on where data lives."""
        return hashlib.sha256(element).hexdigest()

    def size(self, element: Any) -> int:
        """Expected bytes of the element's framed record in the shard, for planning shard
        counts (``--shard-size`` is a target for the shard files)."""
        return len(element) + RECORD_FRAMING

    def size_overhead(self) -> int:
        """Bytes a typical record adds to the payload sizes a reader gives upfront
        (``WriteShards(sizes=...)``, e.g. the image files' listed sizes): the framing
        and the features the encoder writes beside the payload."""
        return RECORD_FRAMING

    def split(self, element: Any) -> str:
        return self.default_split

    def encode(self, element: Any) -> Encoded:
        return Encoded(serialized=bytes(element))

    def lost_with(self, element: Any, reject: Reject) -> tuple[Reject, ...]:
        """Rejects for what is lost along with a rejected element besides the element
        itself (COCO: its objects, listed as annotation rejects). None by default."""
        return ()


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
    """

    num_shards: int | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    compression: Compression = Compression.NONE
    index: bool = False
    salt: str = DEFAULT_SALT
    max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION
    max_annotation_reject_fraction: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression", parse_compression(self.compression))
        for name in ("max_reject_fraction", "max_annotation_reject_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        shard_count(0, num_shards=self.num_shards, shard_size=self.shard_size)  # validates
        if self.index and self.compression is not Compression.NONE:
            # An index of a compressed shard could only count bytes of the decompressed
            # stream: no reader (ours, DALI, the tfrecord package) can seek to those.
            raise ValueError(
                f"--index cannot be combined with --compression {self.compression.name.lower()}: "
                "a compressed shard cannot be entered in the middle, so its offsets would be "
                "of no use. Write uncompressed shards with --index, or compressed shards "
                "without it."
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "num_shards": self.num_shards,
            "shard_size": self.shard_size,
            "compression": self.compression.name.lower(),
            "index": self.index,
            "salt": self.salt,
            "max_reject_fraction": self.max_reject_fraction,
            "max_annotation_reject_fraction": self.annotation_limit,
        }

    @property
    def annotation_limit(self) -> float:
        """``max_annotation_reject_fraction``, or ``max_reject_fraction`` when unset."""
        if self.max_annotation_reject_fraction is None:
            return self.max_reject_fraction
        return self.max_annotation_reject_fraction


@dataclass(frozen=True)
class ShardResult:
    """A written temporary shard, waiting for the finalizer to commit it."""

    split: str
    index: int
    count: int
    temp_path: str
    temp_index_path: str | None
    examples: int
    bytes: int
    spec: FeatureSpec
    counts: Mapping[str, int]
    list_spec: FeatureSpec | None = None  # feature lists of SequenceExamples, per step

    @property
    def name(self) -> str:
        return self.temp_path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


class RejectLimitExceeded(DataError, RuntimeError):
    """More of the input was rejected than ``max_reject_fraction`` (or its annotation limit) allows."""


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
    def __init__(self, encoder: ExampleEncoder, salt: str) -> None:
        self._encoder = encoder
        self._salt = salt

    def process(self, element: Any) -> Iterable[tuple[str, int, int, Any]]:
        enc = self._encoder
        split = folder.check_split_name(enc.split(element))
        yield split, order_key(enc.identity(element), self._salt), enc.size(element), element


_ORDER_KEY = struct.Struct(">Q")


def _pack_keyed(key: int, element: Any, coder: beam.coders.Coder) -> bytes:
    return _ORDER_KEY.pack(key) + coder.encode(element)


def _unpack_keyed(blob: bytes, coder: beam.coders.Coder) -> tuple[int, Any]:
    return _ORDER_KEY.unpack_from(blob)[0], coder.decode(blob[_ORDER_KEY.size:])


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


#: Test-only fault injection, ``"<shard index>:<after N records>:<marker file>"``: the
#: writer of that shard raises :class:`InjectedFault` once, after N records reached its
#: temp file, and creates the marker file so that a retry (or a rerun) goes through.
FAULT_ENV = "RECORDBEAM_TEST_FAIL_SHARD"


class InjectedFault(RuntimeError):
    """The failure :data:`FAULT_ENV` asks for; never raised in normal runs."""


def _parse_fault(value: str | None) -> tuple[int, int, str] | None:
    if not value:
        return None
    index, after, marker = value.split(":", 2)
    return int(index), int(after), marker


class _WriteShard(beam.DoFn):
    """Writes one shard: sort by key, encode one element at a time, stream to a temp file."""

    def __init__(self, encoder: ExampleEncoder, options: ShardOptions, temp_dir: str,
                 coder: beam.coders.Coder) -> None:
        self._encoder = encoder
        self._options = options
        self._temp_dir = temp_dir
        self._coder = coder
        self._examples = Metrics.counter(COUNTER_NAMESPACE, "examples_written")
        self._bytes = Metrics.counter(COUNTER_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(COUNTER_NAMESPACE, "shards_written")
        self._rejects = Metrics.counter(COUNTER_NAMESPACE, "rejects")

    def setup(self) -> None:
        self._encoder.setup()
        self._fault = _parse_fault(os.environ.get(FAULT_ENV))  # read once: the hot loop stays cheap

    def _fail_after(self, index: int) -> int | None:
        fault = getattr(self, "_fault", None)
        if fault is None or fault[0] != index or filesystems.exists(fault[2]):
            return None
        return fault[1]

    def process(self, group):
        (split, index, count), packed = group
        enc = self._encoder
        fail_after = self._fail_after(index)
        ordered = _in_key_order((_unpack_keyed(blob, self._coder) for blob in packed), enc)
        name = folder.shard_name(split, index, count, self._options.compression)
        attempt = uuid.uuid4().hex[:12]  # a retried task never reuses another attempt's file
        temp_path = filesystems.join(self._temp_dir, f"{name}.{attempt}")
        index_buffer = io.StringIO() if self._options.index else None
        spec = FeatureSpec(lists=enc.list_features)
        list_spec = FeatureSpec(lists=enc.list_features)
        counts: Counter[str] = Counter()
        raw = filesystems.create(temp_path)
        sink = _CountingWriter(raw)
        try:
            writer = RecordWriter(sink, self._options.compression, index=index_buffer)
            for _key, element in ordered:
                encoded = _encode_guarded(enc, element)
                counts.update(encoded.counts)
                for reject in encoded.rejects:
                    self._rejects.inc()
                    yield TaggedOutput("rejects", reject if reject.split else
                                       dataclasses.replace(reject, split=split))
                try:
                    chunks = _serialize(encoded, spec, list_spec)
                except (FeatureError, ValueError) as error:
                    reject = Reject(
                        "image", getattr(element, "path", None) or enc.identity(element),
                        "encode_error", f"{error}; fix the input value", split)
                    listed = {r.source for r in encoded.rejects}  # objects rejected already
                    lost = [r for r in _also_lost(enc, element, reject) if r.source not in listed]
                    for each in (reject, *lost):
                        self._rejects.inc()
                        yield TaggedOutput("rejects", each if each.split else
                                           dataclasses.replace(each, split=split))
                    continue
                if fail_after is not None and writer.records_written >= fail_after:
                    filesystems.write_bytes(self._fault[2], b"fired\n")
                    raise InjectedFault(
                        f"test fault: shard {index} failed after {writer.records_written} records")
                if chunks is not None:
                    writer.write_chunks(chunks)
                    self._examples.inc()
            writer.close()
        finally:
            raw.close()
        temp_index = None
        if index_buffer is not None:
            temp_index = temp_path + ".idx"
            filesystems.write_bytes(temp_index, index_buffer.getvalue().encode("ascii"))
        self._bytes.inc(sink.written)
        self._shards.inc()
        yield ShardResult(
            split, index, count, temp_path, temp_index, writer.records_written, sink.written,
            spec, dict(counts), list_spec if list_spec.examples else None,
        )


PLAN = "plan.json"


def _write_plan(_unused: None, temp_dir: str, totals: Mapping[str, int]) -> None:
    """Expected input bytes per split, for progress reports while shards are written."""
    plan = json.dumps({"input_bytes": dict(sorted(totals.items()))}).encode()
    filesystems.write_bytes(filesystems.join(temp_dir, PLAN), plan)


def _in_key_order(keyed_elements: Iterable[tuple[int, Any]], enc: ExampleEncoder) -> list:
    """Elements sorted by order key, then identity; elements sharing both (the same
    identity given twice) by their content, so arrival order never shows in the bytes."""
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
    spec.observe(SimpleNamespace(features=message.context))
    if list_spec is not None:
        feature_lists = message.feature_lists.feature_list
        steps = max((len(fl.feature) for fl in feature_lists.values()), default=0)
        for i in range(steps):
            step = {name: fl.feature[i] for name, fl in feature_lists.items() if i < len(fl.feature)}
            list_spec.observe(SimpleNamespace(features=SimpleNamespace(feature=step)))
    return message.SerializeToString(deterministic=True)


class _Finalize(beam.DoFn):
    def __init__(self, output_dir: str, temp_dir: str, options: ShardOptions,
                 declared_splits: tuple[str, ...]) -> None:
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._options = options
        self._declared = declared_splits

    def process(self, _unused, shards, rejects, counts, metadata, totals, plan_written):
        default_split = self._declared[0]
        owned = sorted(set(totals) | set(self._declared))
        results = _complete_shards(list(shards), totals, self._options, self._temp_dir)
        rejects = sorted(
            (r if r.split else dataclasses.replace(r, split=default_split) for r in rejects),
            key=lambda r: (r.split, r.kind, r.source, r.reason, r.detail),
        )
        dataset_meta: dict[str, Any] = {}
        for part in metadata:
            dataset_meta.update(part)
        entries = {
            split: self._split_entry(split, results, rejects, counts if split == default_split else {},
                                     dataset_meta)
            for split in owned
        }
        previous = folder.recorded_manifest(self._output_dir) or {}
        # The launcher checked this before the run (pipeline.check_labels_before_run); a
        # folder changed since then, or a caller that skipped it, is stopped here.
        conflict = manifest.label_map_conflict(previous, dataset_meta, owned, self._output_dir)
        if conflict:
            filesystems.remove_tree(self._temp_dir)
            raise manifest.LabelMapMismatch(conflict)
        exceeded = _limit_exceeded(entries, rejects, self._output_dir, self._options)
        if exceeded is not None:
            self._write_rejects(folder.FAILED_REJECTS, rejects)
            filesystems.remove_tree(self._temp_dir)
            raise RejectLimitExceeded(exceeded)
        for split, entry in previous.get("splits", {}).items():
            entries.setdefault(split, entry)  # splits this run does not write are kept
        final = manifest.dataset_manifest(entries, dataset_meta, self._options.to_json(), __version__)
        self._commit(results, rejects, owned, final)
        for split in owned:
            warning = manifest.empty_shards_warning(split, final["splits"][split])
            if warning:
                _LOG.warning("%s: %s", self._output_dir, warning)
        yield final

    def _split_entry(self, split, results, rejects, upstream_counts, meta) -> dict[str, Any]:
        mine = [r for r in results if r.split == split]
        spec = FeatureSpec()
        counts: Counter[str] = Counter(dict(upstream_counts))
        lists = FeatureSpec()
        for shard in mine:
            spec = spec.merge(shard.spec)
            counts.update(shard.counts)
            lists = lists.merge(shard.list_spec) if shard.list_spec else lists
        entry = manifest.split_entry(
            [(r.name, r.examples, r.bytes) for r in mine], spec,
            [r for r in rejects if r.split == split], counts, meta,
        )
        if lists.examples:
            entry["feature_lists"] = lists.to_json()
        return entry

    def _write_rejects(self, name: str, rejects: Iterable[Reject]) -> None:
        data = "".join(r.to_json() + "\n" for r in rejects).encode("utf-8")
        filesystems.write_bytes(filesystems.join(self._output_dir, name), data)

    def _kept_rejects(self, owned: list[str]) -> list[Reject]:
        """Rejects of splits this run does not write, from the previous rejects file."""
        path = filesystems.join(self._output_dir, folder.REJECTS)
        if not filesystems.exists(path):
            return []
        lines = filesystems.read_bytes(path).decode("utf-8").splitlines()
        return [r for r in map(Reject.from_json, filter(None, lines)) if r.split not in owned]

    def _commit(self, results: list[ShardResult], rejects: list[Reject], owned: list[str],
                final: dict) -> None:
        out = self._output_dir
        manifest_path = filesystems.join(out, folder.MANIFEST)
        kept_rejects = self._kept_rejects(owned)
        # Every byte is written into the temp folder before anything in the output changes:
        # a full disk (or any write error) fails the run here, the previous output intact.
        staged_files = []
        labels = final.get("label_names")
        if labels:
            staged_files.append((folder.LABELS, "".join(f"{name}\n" for name in labels).encode("utf-8")))
        all_rejects = sorted(kept_rejects + rejects,
                             key=lambda r: (r.split or "", r.kind, r.source, r.reason, r.detail))
        staged_files.append((folder.REJECTS, "".join(r.to_json() + "\n" for r in all_rejects).encode("utf-8")))
        for name, data in staged_files:
            filesystems.write_bytes(filesystems.join(self._temp_dir, name), data)
        staged = filesystems.join(self._temp_dir, folder.MANIFEST)
        filesystems.write_bytes(staged, (json.dumps(final, indent=2, sort_keys=True) + "\n").encode())
        new_names = {r.name for r in results} | {r.name + ".idx" for r in results if r.temp_index_path}
        # What a later run needs if this commit is cut short: the manifest it replaces (so
        # other splits stay listed) and the names it places (so they count as ours).
        files = folder.existing_files(out)
        known = folder.known_files(out, files)
        previous = folder.recorded_manifest(out, files)
        if previous is not None:
            filesystems.write_bytes(filesystems.join(self._temp_dir, folder.PREVIOUS_MANIFEST),
                                    json.dumps(previous).encode())
        placed = sorted(new_names | {name for name, _ in staged_files} | {folder.MANIFEST}
                        | set(tfds_metadata.files_for(final)))
        filesystems.write_bytes(filesystems.join(self._temp_dir, folder.COMMIT_PLAN),
                                json.dumps({"files": placed}).encode())
        filesystems.delete([manifest_path])  # from here on the folder does not look finished
        stale = [
            filesystems.join(out, p) for p in sorted(known)
            if "/" not in p and p not in new_names and (
                p == folder.FAILED_REJECTS
                or (folder.is_shard_file(p) and manifest.split_of_shard_file(p) in owned)
            )
        ]
        filesystems.delete(stale)
        sources, targets = [], []
        for r in results:
            sources.append(r.temp_path)
            targets.append(filesystems.join(out, r.name))
            if r.temp_index_path:
                sources.append(r.temp_index_path)
                targets.append(filesystems.join(out, r.name + ".idx"))
        for name, _data in staged_files:
            sources.append(filesystems.join(self._temp_dir, name))
            targets.append(filesystems.join(out, name))
        filesystems.rename(sources, targets)
        _write_tfds_files(out, final)  # TFDS's dataset_info.json etc., before the manifest
        filesystems.rename([staged], [manifest_path])
        _remove_temp_dirs(out)


def _remove_temp_dirs(output_dir: str) -> None:
    """Remove every temp folder of ours, including those left by killed earlier runs."""
    tops = {p.split("/", 1)[0] for p in folder.existing_files(output_dir)}
    for top in sorted(t for t in tops if t.startswith(folder.TEMP_PREFIX)):
        filesystems.remove_tree(filesystems.join(output_dir, top))


def _complete_shards(shards: list[ShardResult], totals: Mapping[str, int],
                     options: ShardOptions, temp_dir: str) -> list[ShardResult]:
    """One result per shard name, in name order. A shard no element fell into still
    gets its (empty) file: readers expect every name from 0 to N-1."""
    by_key: dict[tuple[str, int], ShardResult] = {}
    for shard in sorted(shards, key=lambda s: (s.split, s.index, s.temp_path)):
        by_key.setdefault((shard.split, shard.index), shard)
    results = []
    for split in sorted(totals):
        n = shard_count(totals[split], num_shards=options.num_shards, shard_size=options.shard_size)
        for i in range(n):
            shard = by_key.get((split, i)) or _write_empty_shard(split, i, n, options, temp_dir)
            results.append(shard)
    return results


def _write_empty_shard(split: str, index: int, count: int, options: ShardOptions,
                       temp_dir: str) -> ShardResult:
    name = folder.shard_name(split, index, count, options.compression)
    temp_path = filesystems.join(temp_dir, f"{name}.empty")
    raw = filesystems.create(temp_path)
    sink = _CountingWriter(raw)
    try:
        RecordWriter(sink, options.compression).close()
    finally:
        raw.close()
    temp_index = None
    if options.index:
        temp_index = temp_path + ".idx"
        filesystems.write_bytes(temp_index, b"")
    return ShardResult(split, index, count, temp_path, temp_index, 0, sink.written, FeatureSpec(), {})


def _limit_exceeded(entries: Mapping[str, Mapping[str, Any]], rejects: Sequence[Reject],
                    output_dir: str, options: ShardOptions) -> str | None:
    """The failure message when a split lost more images, or more annotations, than the
    limits allow; None when every split is within them."""
    failed = filesystems.join(output_dir, folder.FAILED_REJECTS)
    split = max(entries, key=lambda s: entries[s]["rejects"]["image_fraction"])
    summary = entries[split]["rejects"]
    if summary["image_fraction"] > options.max_reject_fraction:
        return (
            f"{summary['images']} of {summary['images'] + entries[split]['examples']} images "
            f"were rejected ({summary['image_fraction']:.1%}), above --max-reject-fraction "
            f"{options.max_reject_fraction:g}. Nothing was committed to {output_dir}; the "
            f"rejects are listed in {failed} ({_reasons(summary, 'image')}). "
            f"{_example(rejects, split, 'image')}Fix the inputs, or raise "
            "--max-reject-fraction if these losses are acceptable."
        )
    split = max(entries, key=lambda s: entries[s]["rejects"]["annotation_fraction"])
    summary = entries[split]["rejects"]
    if summary["annotation_fraction"] > options.annotation_limit:
        return (
            f"{summary['annotations_dropped']} of {summary['annotations_seen']} annotations "
            f"were rejected ({summary['annotation_fraction']:.1%}), above "
            f"--max-annotation-reject-fraction {options.annotation_limit:g}. Nothing was "
            f"committed to {output_dir}; the rejects are listed in {failed} "
            f"({_reasons(summary, 'annotation')}). {_example(rejects, split, 'annotation')}"
            "Fix the annotations, or raise --max-annotation-reject-fraction if these losses "
            "are acceptable."
        )
    return None


def _reasons(summary: Mapping[str, Any], kind: str) -> str:
    """``reason: count`` of one kind of rejects, most frequent first."""
    found = [(key.split(":", 1)[1], n) for key, n in summary["by_reason"].items()
             if key.startswith(f"{kind}:") and key.split(":", 1)[1] not in (
                 LOST_WITH_IMAGE if kind == "annotation" else ())]
    return ", ".join(f"{reason}: {n}" for reason, n in sorted(found, key=lambda rn: -rn[1]))


def _example(rejects: Sequence[Reject], split: str, kind: str) -> str:
    """The first reject of the most frequent reason, quoted: most failures are one
    problem repeated, and its own words say what it is."""
    mine = [r for r in rejects if r.split == split and r.kind == kind
            and not (kind == "annotation" and r.reason in LOST_WITH_IMAGE)]
    if not mine:
        return ""
    common = Counter(r.reason for r in mine).most_common(1)[0][0]
    first = next(r for r in mine if r.reason == common)
    return f"The most frequent, {common}, e.g. {first.source}: {first.detail.rstrip('.')}. "


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
        counts: ``(name, number)`` pairs found before the sink, summed into the manifest.
        metadata: dicts merged into the manifest (label map, inputs fingerprint...). A
            ``label_names`` list is also written as ``labels.txt``; the keys in
            ``manifest.SPLIT_KEYS`` go to the entries of the splits this run writes.
        splits: splits this run owns besides the encoder's default split, even if no
            element reaches them (their old shards are then replaced by nothing).
        sizes: ``(split, bytes)`` pairs, one per element, to plan shard counts from,
            when the reader knows the input sizes before it builds the elements (COCO: the
            listed size of every file that joined an image entry); the sink adds
            ``encoder.size_overhead()`` to each. Shards are then assigned in the same pass
            that keys the elements, one pass over them fewer. Without it the sink sums
            ``encoder.size`` over the elements. Either way the target is the size of the
            shard files, so small images do not make shards larger than asked.

    One output folder may hold several splits; a run replaces only the splits it writes
    and keeps the others (and their manifest entries and rejects).

    Returns:
        A PCollection holding the manifest dict once the output is committed.
    """

    def __init__(self, output_dir: str, encoder: ExampleEncoder | None = None, *,
                 options: ShardOptions | None = None, rejects: PCollection | None = None,
                 counts: PCollection | None = None, metadata: PCollection | None = None,
                 splits: Sequence[str] = (), sizes: PCollection | None = None) -> None:
        super().__init__()
        self._output_dir = output_dir.rstrip("/")
        self._encoder = encoder or ExampleEncoder()
        self._options = options or ShardOptions()
        self._rejects = rejects
        self._counts = counts
        self._metadata = metadata
        self._splits = tuple(folder.check_split_name(s) for s in splits)
        self._sizes = sizes
        self.temp_dir = filesystems.join(self._output_dir, folder.TEMP_PREFIX + uuid.uuid4().hex[:12])

    def expand(self, elements):
        p = elements.pipeline
        keyed = elements | "KeyByIdentity" >> beam.ParDo(_KeyElements(self._encoder, self._options.salt))
        sizes = self._sizes
        if sizes is None:
            sizes = keyed | "SizeBySplit" >> beam.Map(lambda k: (k[0], k[2]))
        else:
            overhead = self._encoder.size_overhead()
            sizes = sizes | "AddRecordOverhead" >> beam.Map(
                lambda split_bytes: (split_bytes[0], split_bytes[1] + overhead))
        totals = sizes | "SumSizes" >> beam.CombinePerKey(sum)
        plan_written = (
            p
            | "PlanTrigger" >> beam.Create([None])
            | "WritePlan" >> beam.Map(_write_plan, self.temp_dir, AsDict(totals))
        )
        coder = beam.coders.registry.get_coder(elements.element_type)
        written = (
            keyed
            | "AssignShard" >> beam.ParDo(_AssignShard(self._options, coder), totals=AsDict(totals))
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(
                _WriteShard(self._encoder, self._options, self.temp_dir, coder)
            ).with_outputs("rejects", main="shards")
        )
        upstream = [written.rejects]
        if self._rejects is not None:
            upstream.append(self._rejects)
        all_rejects = tuple(upstream) | "AllRejects" >> beam.Flatten()
        counts = self._counts if self._counts is not None else p | "NoCounts" >> beam.Create([])
        summed = counts | "SumCounts" >> beam.CombinePerKey(sum)
        metadata = self._metadata if self._metadata is not None else p | "NoMetadata" >> beam.Create([])
        return (
            p
            | "FinalizeTrigger" >> beam.Create([None])
            | "Finalize" >> beam.ParDo(
                _Finalize(self._output_dir, self.temp_dir, self._options,
                          (self._encoder.default_split, *self._splits)),
                shards=AsList(written.shards),
                rejects=AsList(all_rejects),
                counts=AsDict(summed),
                metadata=AsIter(metadata),
                totals=AsDict(totals),
                plan_written=AsList(plan_written),  # finalize only after the plan file exists
            )
        )


def _write_tfds_files(output_dir: str, manifest: Mapping[str, Any]) -> list[str]:
    """Write the TFDS files for ``manifest`` into ``output_dir`` and remove stale ones
    (none for compressed shards, which TFDS cannot read); returns the names written."""
    files = tfds_metadata.files_for(manifest)
    stale = [
        filesystems.join(output_dir, name)
        for name in folder.existing_files(output_dir)
        if "/" not in name and tfds_metadata.is_tfds_file(name) and name not in files
    ]
    filesystems.delete(stale)
    for name, data in sorted(files.items()):
        filesystems.write_bytes(filesystems.join(output_dir, name), data)
    return sorted(files)
