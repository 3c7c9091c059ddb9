"""Does a finished output folder fit a named trainer or loader? The rules of ``recordbeam
check OUT --for CONSUMER``, without Beam (local folders) and without TensorFlow.

Each consumer is a list of rules. A *record rule* looks at one Example and says what is
wrong with it, if anything; a *folder rule* looks at the folder's files (compression,
index files, metadata). The checker streams every shard once, record by record (constant
memory, however large the folder), feeding each record to every record rule and each
shard's ``(offset, framed length)`` to the index rules. A rule keeps its first few
violations, each naming the shard, the record number and what is wrong, and counts the
rest.

Where the rules come from (read in their sources, written here in our own words):

- ``model-garden``: ``official/vision/dataloaders/tf_example_decoder.py`` (tensorflow/models)
  parses ``image/encoded`` and ``image/source_id`` as required scalars, boxes, labels,
  areas and crowd flags as variable-length lists of fixed dtypes, and for instance
  segmentation ``image/object/mask`` as PNGs stacked into one ``[N, H, W]`` tensor; its
  detection parsers then turn ``source_id`` into an int64 with ``tf.strings.to_number``.
- ``od-api``: the Object Detection API's decoder reads the same keys (plus
  ``image/object/class/text``) and its configs need a ``label_map.pbtxt`` whose ids start
  at 1 (0 is the background).
- ``efficientdet``: google/automl's ``efficientdet/dataloader.py`` turns ``source_id`` into a
  float32 number (an empty one first becomes ``-1``), so it must be a decimal integer small
  enough for float32 to hold exactly, or COCO evaluation matches the wrong images.
- ``tfds``: ``tfds.builder_from_directory`` reads ``dataset_info.json`` and
  ``features.json``; their shard lengths must be the shards' real record counts.
- ``dali``: DALI's TFRecord reader needs uncompressed shards and an index per shard in the
  format of its ``tfrecord2idx`` (``<offset> <framed length>`` per line), which is the
  format of our ``.idx`` files, so DALI reads them as they are when they match the shard.
- ``torch``: the ``tfrecord`` package (``TFRecordDataset`` / ``MultiTFRecordDataset``) reads
  uncompressed or gzip shards (not zlib) and needs the index to split a shard between
  workers; its ``description`` gives one type per key, so every record must store a key
  with the type the manifest lists, and it takes a feature's type from its first value
  list, so it fails on an empty feature written without one. recordbeam's own torch dataset reads any folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from recordbeam.dataset import tfds
from recordbeam.dataset.example_rules import (
    MASK,
    Record,
    RecordCheck,
    boxes_normalized,
    image_size,
    keys_rule,
    kinds_match_manifest,
    labels_from_one,
    labels_in_map,
    masks_match_image,
    numeric_source_id,
    object_lists,
    parse_record,
)
from recordbeam.dataset.manifest import parse_manifest
from recordbeam.errors import UsageError, counted
from recordbeam.tfrecord.framing import (
    Compression,
    RecordError,
    compression_for_path,
    read_records_with_offsets,
)
from recordbeam.tfrecord.index import index_path_for

if TYPE_CHECKING:  # numpy and Pillow load with the finder, not when the command line is parsed
    from recordbeam.dataset.find_duplicates import DuplicateFinder

__all__ = [
    "CONSUMERS",
    "DEFAULT_MAX_SHOWN",
    "CheckResult",
    "RuleResult",
    "check_folder",
    "label_map_pbtxt",
    "summary_line",
]

DEFAULT_MAX_SHOWN = 5
_MANIFEST = "manifest.json"


# ---------------------------------------------------------------- rules and results


@dataclass
class RuleResult:
    """What one rule found: ``shown`` violations in full, ``more`` counted only."""

    name: str
    meaning: str
    checked: int = 0
    shown: list[str] = field(default_factory=list)
    more: int = 0
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.shown

    def fail(self, message: str, max_shown: int) -> None:
        if len(self.shown) < max_shown:
            self.shown.append(message)
        else:
            self.more += 1


@dataclass
class CheckResult:
    consumer: str
    rules: list[RuleResult]
    records: int
    stopped_early: bool
    manifest: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(rule.ok for rule in self.rules)


@dataclass
class _RecordRule:
    result: RuleResult
    check: RecordCheck


@dataclass
class _Shard:
    path: str
    name: str
    listed: int
    split: str = ""


# ---------------------------------------------------------------- consumers

_DETECTION_KINDS = {
    "image/height": "int64", "image/width": "int64",
    "image/object/bbox/xmin": "float", "image/object/bbox/xmax": "float",
    "image/object/bbox/ymin": "float", "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64", "image/object/area": "float",
    "image/object/is_crowd": "int64", MASK: "bytes",
}
_SCALARS = ("image/encoded", "image/source_id", "image/height", "image/width", "image/format",
            "image/filename", "image/key/sha256")

CONSUMERS: dict[str, str] = {
    "model-garden": "TensorFlow Model Garden's TfExampleDecoder (detection, instance segmentation)",
    "od-api": "the TensorFlow Object Detection API (its decoder and a label_map.pbtxt)",
    "efficientdet": "google/automl EfficientDet's dataloader",
    "tfds": "tfds.builder_from_directory (TFDS metadata files)",
    "dali": "NVIDIA DALI's TFRecord reader (uncompressed shards with index files)",
    "torch": "the tfrecord package's TFRecordDataset and recordbeam's torch dataset",
}


def _has_masks(manifest: Mapping[str, Any]) -> bool:
    return MASK in manifest.get("features", {})


def _detection_rules(consumer: str, manifest: Mapping[str, Any]) -> list[tuple[str, str, RecordCheck]]:
    """(rule name, what it means, check) for the three detection trainers."""
    required = {"image/encoded": "bytes"}
    optional = dict(_DETECTION_KINDS)
    if consumer == "model-garden":
        required["image/source_id"] = "bytes"
    else:
        optional["image/source_id"] = "bytes"
    if consumer == "od-api":
        optional.update({"image/format": "bytes", "image/filename": "bytes",
                         "image/key/sha256": "bytes", "image/object/class/text": "bytes"})
    rules: list[tuple[str, str, RecordCheck]] = [
        ("keys", "the decoder's keys are present with its dtypes",
         keys_rule(required, optional, _SCALARS)),
        ("objects", "box, label, area and crowd lists agree in length", object_lists),
        ("boxes", "boxes are normalized to [0, 1] with min <= max", boxes_normalized),
        ("labels", "object labels are 1 or more (0 is the background)", labels_from_one),
        ("image-size", "image/height and image/width are the encoded image's size", image_size),
    ]
    if consumer == "model-garden":
        rules.append(("source-id", "image/source_id is a decimal integer (to_number int64)",
                      numeric_source_id(empty_allowed=False, float32=False)))
    if consumer == "efficientdet":
        rules.append(("source-id", "image/source_id is empty or a decimal integer float32 holds exactly",
                      numeric_source_id(empty_allowed=True, float32=True)))
    if consumer == "od-api":
        rules.append(("label-map", "labels and class/text are those of the manifest's label map",
                      labels_in_map(manifest)))
    if consumer in ("model-garden", "od-api") and _has_masks(manifest):
        rules.append(("masks", "one PNG mask per object, of the image's height and width",
                      masks_match_image))
    return rules


def _record_rules(consumer: str, manifest: Mapping[str, Any]) -> list[tuple[str, str, RecordCheck]]:
    if consumer in ("model-garden", "od-api", "efficientdet"):
        return _detection_rules(consumer, manifest)
    if consumer == "torch":
        return [("kinds", "every record stores each key typed, with the manifest's type",
                 kinds_match_manifest(manifest))]
    return []


# ---------------------------------------------------------------- the folder


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name if "://" in folder else os.path.join(folder, name)


def _open(path: str) -> BinaryIO:
    if "://" in path:
        from recordbeam import filesystems  # Beam, only for remote folders

        return filesystems.open_read(path)
    return open(path, "rb")


def _exists(path: str) -> bool:
    if "://" in path:
        from recordbeam import filesystems

        return filesystems.exists(path)
    return os.path.exists(path)


def _read_manifest(folder: str) -> dict[str, Any]:
    path = _join(folder, _MANIFEST)
    if not _exists(path):
        raise UsageError(f"{folder}: no {_MANIFEST}; point check at a finished recordbeam output folder")
    with _open(path) as f:
        # Any JSON object: the readers never asked for the format field.
        return parse_manifest(f.read(), path, check_format=False)


def _shards(folder: str, manifest: Mapping[str, Any]) -> list[_Shard]:
    return [_Shard(_join(folder, s["file"]), s["file"], int(s["examples"]), split)
            for split, entry in sorted(manifest.get("splits", {}).items())
            for s in entry.get("shards", [])]


def _index_lines(path: str) -> Iterator[tuple[int, str]]:
    with _open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield number, line.decode("ascii", "replace").strip()


class _IndexFollower:
    """Compares a shard's records, as they are read, with its ``.idx`` lines, one at a time."""

    def __init__(self, shard: _Shard, result: RuleResult, max_shown: int) -> None:
        self.shard, self.result, self.max_shown = shard, result, max_shown
        self.lines = _index_lines(index_path_for(shard.path))
        self.broken = False

    def record(self, number: int, offset: int, framed: int) -> None:
        if self.broken:
            return
        line = next(self.lines, None)
        where = f"{self.shard.name}.idx"
        if line is None:
            self._fail(f"{where}: ends before record {number} of the shard; re-create it "
                       f"with recordbeam index {self.shard.name}")
            return
        expected = f"{offset} {framed}"
        if " ".join(line[1].split()) != expected:
            self._fail(f"{where} line {line[0]}: {line[1]!r}, but record {number} is at "
                       f"offset {offset} with {framed} bytes ({expected!r}); re-create it with "
                       f"recordbeam index {self.shard.name}")

    def finish(self, complete: bool) -> None:
        if complete and not self.broken:
            extra = sum(1 for _ in self.lines)
            if extra:
                self._fail(f"{self.shard.name}.idx: {counted(extra, 'line')} more than the "
                           f"shard has records; re-create it with recordbeam index {self.shard.name}")

    def _fail(self, message: str) -> None:
        self.broken = True  # one violation per index: later lines are off by the same cause
        self.result.fail(message, self.max_shown)


def _compression_rule(folder: str, shards: list[_Shard], allowed: Sequence[Compression],
                      why: str, max_shown: int) -> RuleResult:
    names = " or ".join("uncompressed" if c is Compression.NONE else c.name.lower() for c in allowed)
    result = RuleResult("compression", f"shards are {names}", checked=len(shards))
    for shard in shards:
        compression = compression_for_path(shard.name)
        if compression not in allowed:
            pattern = f"{folder.rstrip('/')}/*{shard.name[shard.name.rindex('.tfrecord'):]}"
            result.fail(f"{shard.name}: {compression.name.lower()} compressed; {why}. Rewrite "
                        f"them: recordbeam reshard '{pattern}' NEW_FOLDER --compression none "
                        "--index", max_shown)
    return result


def _tfds_files_rule(folder: str, manifest: Mapping[str, Any], max_shown: int) -> RuleResult:
    expected = tfds.files_for(manifest)
    result = RuleResult("metadata", "dataset_info.json and features.json are there and match "
                        "the manifest", checked=len(expected))
    if not expected:
        result.fail("TFDS cannot read this folder (compressed shards or no features), so "
                    "recordbeam wrote no TFDS metadata; reshard with --compression none", max_shown)
        return result
    for name, content in sorted(expected.items()):
        path = _join(folder, name)
        if not _exists(path):
            result.fail(f"{name} is missing; TFDS needs it (convert again, or reshard into a new folder)",
                        max_shown)
            continue
        with _open(path) as f:
            found = f.read()
        if found != content:
            result.fail(f"{name} does not match manifest.json (edited, or from another run); "
                        "convert again into this folder to rewrite it", max_shown)
    return result


def _index_follower(shard: _Shard, rule: RuleResult | None, required: bool,
                    max_shown: int) -> _IndexFollower | None:
    if rule is None:
        return None
    present = _exists(index_path_for(shard.path))
    compressed = compression_for_path(shard.name) is not Compression.NONE
    if not required and not present:
        return None
    rule.checked += 1
    if compressed:
        rule.fail(f"{shard.name}: compressed, so no reader can seek to its records by an "
                  "index (offsets count uncompressed bytes)", max_shown)
    elif not present:
        rule.fail(f"{shard.name}: no {shard.name}.idx beside it; write one with "
                  f"recordbeam index {shard.name} (or convert with --index)", max_shown)
    else:
        return _IndexFollower(shard, rule, max_shown)
    return None


def check_folder(folder: str, consumer: str | None, *, max_records: int | None = None,
                 max_shown: int = DEFAULT_MAX_SHOWN,
                 finder: DuplicateFinder | None = None) -> CheckResult:
    """Check a finished output folder against ``consumer``'s rules (a key of
    :data:`CONSUMERS`), reading its shards once, record by record.

    Args:
        folder: the folder holding ``manifest.json`` (local, or any Beam filesystem).
        consumer: which consumer's rules (None: only that every record is an Example and
            every shard holds the records the manifest lists).
        max_records: stop after this many records in all (None: read every record); rules
            that need whole shards (counts, index ends) then skip the shards not read to
            their end, and the result says it stopped early.
        max_shown: violations kept in full per rule; the rest are counted.
        finder: fed every record's one image (``image/encoded``), for the duplicate rules
            (:mod:`recordbeam.dataset.duplicate_rules`).

    Raises:
        UsageError: an unknown consumer, or no manifest in ``folder``.
    """
    if consumer is not None and consumer not in CONSUMERS:
        raise UsageError(f"unknown consumer {consumer!r}; choose one of {', '.join(CONSUMERS)}")
    manifest = _read_manifest(folder)
    shards = _shards(folder, manifest)
    folder_rules: list[RuleResult] = []
    if consumer == "dali":
        folder_rules.append(_compression_rule(
            folder, shards, [Compression.NONE], "DALI's reader takes uncompressed shards only",
            max_shown))
    if consumer == "torch":
        folder_rules.append(_compression_rule(
            folder, shards, [Compression.NONE, Compression.GZIP],
            "the tfrecord package reads uncompressed and gzip shards, not zlib", max_shown))
    if consumer == "tfds":
        folder_rules.append(_tfds_files_rule(folder, manifest, max_shown))
    record_rules = [_RecordRule(RuleResult(name, meaning), check)
                    for name, meaning, check in _record_rules(consumer, manifest)]
    parse_rule = RuleResult("examples", "every record is intact and a tf.train.Example")
    counts = RuleResult("counts", "each shard holds the records the manifest (and TFDS's "
                        "shardLengths) list")
    # DALI cannot read a shard without its index; the tfrecord package reads one whole
    # without it, but follows a stale one to wrong offsets: there only present ones must match.
    index_required = consumer == "dali"
    index_rule = None
    if consumer in ("dali", "torch"):
        index_rule = RuleResult("index", "each shard has a .idx that matches its records"
                                if index_required else "every .idx present matches its shard")
    reader = _ShardReader(parse_rule, counts, record_rules, max_records, max_shown, finder)
    for shard in shards:
        if not reader.budget_left():
            reader.stopped = True
            break
        reader.read(shard, _index_follower(shard, index_rule, index_required, max_shown))
    rules = [*folder_rules, parse_rule, counts, *([index_rule] if index_rule else []),
             *(rule.result for rule in record_rules)]
    if consumer in ("model-garden", "od-api") and not _has_masks(manifest):
        note = RuleResult("masks", "one PNG mask per object, of the image's height and width")
        note.note = "not applicable: the folder has no image/object/mask (detection only)"
        rules.append(note)
    return CheckResult(consumer, rules, reader.records, reader.stopped, manifest)


class _ShardReader:
    """Reads shards one after the other, record by record, feeding every rule, until the
    record budget (``max_records``) is spent."""

    def __init__(self, parse_rule: RuleResult, counts: RuleResult, record_rules: list[_RecordRule],
                 max_records: int | None, max_shown: int,
                 finder: DuplicateFinder | None = None) -> None:
        self.parse_rule, self.counts, self.record_rules = parse_rule, counts, record_rules
        self.max_records, self.max_shown = max_records, max_shown
        self.records, self.stopped = 0, False
        self.finder = finder

    def budget_left(self) -> bool:
        return self.max_records is None or self.records < self.max_records

    def read(self, shard: _Shard, follower: _IndexFollower | None) -> None:
        number, complete = -1, True
        try:
            with _open(shard.path) as f:
                for offset, framed, data in read_records_with_offsets(f, path=shard.path):
                    if not self.budget_left():
                        complete, self.stopped = False, True
                        break
                    number += 1
                    self.records += 1
                    if follower is not None:
                        follower.record(number, offset, framed)
                    record = _check_record(shard.name, number, data, self.parse_rule,
                                           self.record_rules, self.max_shown)
                    if self.finder is not None and record is not None:
                        _find_duplicates(self.finder, shard, record)
        except RecordError as error:  # the rest of a damaged shard cannot be trusted
            problem = error.problem.removeprefix(f"{error.path}: ")  # named as the shard below
            self.parse_rule.fail(f"{shard.name} {problem}; `recordbeam verify` lists every "
                                 "damaged record: re-create the shard", self.max_shown)
            return
        except OSError as error:
            self.counts.fail(f"{shard.name}: listed in the manifest but cannot be read "
                             f"({error.strerror or error}); the folder is incomplete", self.max_shown)
            return
        if follower is not None:
            follower.finish(complete)
        if complete:
            self.counts.checked += 1
            if number + 1 != shard.listed:
                self.counts.fail(f"{shard.name}: {counted(number + 1, 'record')}, the manifest "
                                 f"lists {shard.listed}; the shard was changed after the run",
                                 self.max_shown)


def _check_record(shard: str, number: int, data: bytes, parse_rule: RuleResult,
                  record_rules: list[_RecordRule], max_shown: int) -> Record | None:
    """Run the record rules on one record; returns it parsed (None: not an Example)."""
    parse_rule.checked += 1
    record = parse_record(shard, number, data)
    if isinstance(record, str):
        parse_rule.fail(f"{shard} record {number}: {record}", max_shown)
        return None
    for rule in record_rules:
        rule.result.checked += 1
        problem = rule.check(record)
        if problem:
            rule.result.fail(f"{shard} record {number}: {problem}", max_shown)
    return record


def _find_duplicates(finder: DuplicateFinder, shard: _Shard, record: Record) -> None:
    """Give the finder the record's image, when it holds exactly one."""
    from recordbeam.dataset.find_duplicates import RecordPlace

    images = record.values("image/encoded")
    if len(images) == 1:
        stored = record.values("image/key/sha256")
        finder.add(RecordPlace(shard.split, shard.name, record.number), images[0],
                   stored[0] if len(stored) == 1 else None)


# ---------------------------------------------------------------- the label map file


def label_map_pbtxt(manifest: Mapping[str, Any]) -> str:
    """The Object Detection API's ``label_map.pbtxt`` for the manifest's label map.

    Raises:
        UsageError: the manifest has no label map, or one whose ids are not whole numbers of
            1 or more (the API reserves 0 for the background).
    """
    label_map = manifest.get("label_map") or {}
    if not label_map:
        raise UsageError("the manifest has no label map (a folder without class labels); "
                         "there is nothing to write into label_map.pbtxt")
    items = []
    for key, name in label_map.items():
        text = str(key)
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise UsageError(f"label {text!r} ({name}) is not a whole number of 1 or more; the "
                             "Object Detection API reserves 0 for the background. Convert with "
                             "--contiguous-labels to number the classes from 1")
        items.append((int(text), str(name)))
    lines = []
    for label, name in sorted(items):
        quoted = json.dumps(name, ensure_ascii=False)  # a double-quoted string pbtxt reads
        lines.append(f"item {{\n  id: {label}\n  name: {quoted}\n  display_name: {quoted}\n}}\n")
    return "".join(lines)


def summary_line(rule: RuleResult) -> str:
    """One line per rule for the command's output."""
    if rule.note:
        return f"  {rule.name}: {rule.note}"
    if rule.ok:
        return f"  {rule.name}: ok ({rule.meaning}; {rule.checked} checked)"
    failed = len(rule.shown) + rule.more
    return f"  {rule.name}: FAILED, {counted(failed, 'violation')} ({rule.meaning})"
