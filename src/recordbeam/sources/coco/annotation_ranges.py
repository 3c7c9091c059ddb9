"""The annotations list of a COCO file, read in byte ranges by many workers at once
(the passes of :mod:`recordbeam.sources.json_ranges`), so no worker parses the whole list.
Files from :data:`RANGED_FROM_BYTES` on are read this way (:func:`read_in_ranges`); a
smaller one is streamed by one worker.

:class:`ReadAnnotationRanges` cuts the file into ranges (:func:`file_ranges`), and each
range is read three times, each pass by all workers at once, with what the ranges before
it handed over in a few numbers: how it changes the JSON state (:func:`summarize_range`),
then the keys of the top object in it (:func:`events_of_range`), then the annotations that
begin in it (:class:`ParseRange`). The annotations leave as from the streamed pass
(:meth:`ReadInputs._read_annotations`): batches keyed by image id, rejects naming the
position in the whole list (placed once the elements of every range are counted:
:func:`place_reject`), counts, and the ids given twice (the ids are split by value into as
many buckets as there are ranges, each bucket checked on its own: :func:`repeated_ids`).

What no pass parses, the file with its ``annotations``, ``images`` and ``categories``
lists cut out (``info``, ``licenses``, the commas between), is parsed whole
(:func:`skeleton_is_json`). A file whose structure the ranges cannot follow (broken
brackets, a document that is no object, a key given twice, nesting deeper than
``MAX_JSON_DEPTH``, a skeleton that is no JSON) is read by the streamed pass on one
worker, which fails with the streamed parser's message, or reads an odd but valid file
as a small file's is read. An annotation the ranged parse refuses (not JSON, ``NaN``,
bytes that are not UTF-8) fails the run the same way (:func:`fail_as_streamed`).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import AsDict, AsSingleton, TaggedOutput

from recordbeam import filesystems
from recordbeam.records import Reject
from recordbeam.sources import byte_ranges
from recordbeam.sources.byte_ranges import (
    MAX_RANGE_BYTES,
    MIN_RANGE_BYTES,
    ByteRange,
    Entry,
    entry_of_ranges,
    file_ranges,
    parse_span,
    read_bytes,
    read_range,
    refuse_constant,
    spread,
    summarize_range,
)
from recordbeam.sources.coco.input_tasks import (
    IdTally,
    ReadInputs,
    annotation_outputs,
    annotation_reject,
    annotations_not_a_list,
)
from recordbeam.sources.coco.json_stream import CocoFormatError, not_a_list, stream_section
from recordbeam.sources.coco.options import CocoOptions
from recordbeam.sources.coco.records import JoinKey, JoinMessage
from recordbeam.sources.json_depth import BOM
from recordbeam.sources.json_ranges import (
    EntryState,
    JsonRangeError,
    Section,
    TopLevelEvent,
    first_separator,
    sections,
    spans_between,
    top_level_events,
)

#: Annotation files from this size on are read in ranges; a smaller one is streamed whole
#: by one worker beside the images pass and the listing (ReadInputs). The ranged read
#: costs three passes in stages of their own, which the stream's neighbours do not hide:
#: on 2 local workers a full run of 100k images (a 153 MB file) took 32-37 s ranged
#: against 28-29 s streamed, and 20k images (30 MB) ~1 CPU s more. Its own stage runs
#: 1.7x faster on 2 workers than on one at 1M annotations (``coco_annotations_bench.py``)
#: and spreads over every worker of a cluster, which matters once one worker's stream
#: would be long: 512 MiB is ~2.4M annotations, ~35 s of one worker's stream.
RANGED_FROM_BYTES = 512 << 20
#: Bytes read past a range's end at first, for a key that begins in it and ends beyond;
#: multiplied by 16 until it does.
OVERHANG_BYTES = 4096
#: The part of a range first searched for its first comma between annotations.
FIRST_SEARCH_BYTES = 64 << 10


def read_in_ranges(path: str) -> bool:
    """Whether the annotations of ``path`` are read in ranges (:data:`RANGED_FROM_BYTES`);
    a file that cannot be sized is streamed, and fails there with the streamed pass's
    message."""
    return byte_ranges.read_in_ranges(path, RANGED_FROM_BYTES)


def _with_overhang(path: str, rng: ByteRange, attempt) -> Any:
    """``attempt(data, run)`` on the range's bytes and more past its end, as many as it
    needs; raises its :class:`JsonRangeError` when even the whole rest of the file does
    not do."""
    extra = OVERHANG_BYTES
    while True:
        data, run = read_range(path, rng.start, rng.end + extra)
        at_end = len(data) < rng.end - rng.start + extra
        try:
            return attempt(data, run, at_end)
        except JsonRangeError:
            if at_end:
                raise
        extra *= 16


def events_of_range(rng: ByteRange, path: str, entry: Entry,
                    ) -> tuple[ByteRange, list[TopLevelEvent] | None]:
    """The top-level events in the range; None when the structure is broken there."""
    if entry.states is None:
        return rng, []
    state = entry.states[rng.index]
    if entry.floors[rng.index] >= 2:  # inside a top-level value throughout: no key there
        return rng, _first_separator(path, rng, state)
    try:
        return rng, _with_overhang(path, rng, lambda data, run, _at_end: top_level_events(
            data, rng.start, rng.end, state, run))
    except JsonRangeError:
        return rng, None


def _first_separator(path: str, rng: ByteRange, state: EntryState) -> list[TopLevelEvent]:
    """The range's first comma between top-level elements, searched in a growing part of
    the range: the only event of a range inside one top-level list (most ranges)."""
    size = FIRST_SEARCH_BYTES
    while True:
        data, run = read_range(path, rng.start, min(rng.end, rng.start + size))
        found = first_separator(data, rng.start, rng.end, state, run)
        if found is not None:
            return [TopLevelEvent(found, "separator")]
        if rng.start + len(data) >= rng.end:
            return []
        size *= 16


class Plan(NamedTuple):
    """How the annotations are read: ``mode`` "ranges" (each range parses the bytes
    ``spans[index]``, the annotations that begin in it and the commas between them, or
    nothing when None), "streamed" (one worker, as a file the ranges cannot follow) or
    "none" (no annotations in the file)."""

    mode: str
    spans: tuple[tuple[int, int] | None, ...] = ()


def plan_of(found: Iterable[tuple[ByteRange, list[TopLevelEvent] | None]], entry: Entry,
            path: str) -> Plan:
    found = sorted(found)
    if entry.states is None or any(events is None for _rng, events in found):
        return Plan("streamed")
    try:
        values = sections(event for _rng, events in found for event in events)
    except JsonRangeError:
        return Plan("streamed")
    if not skeleton_is_json(path, values):
        return Plan("streamed")
    section = values.get("annotations")
    if section is None:
        return Plan("none")
    if section.first_byte != ord("["):
        held = not_a_list(path, "annotations")
        if held:
            raise annotations_not_a_list(path, held)
        return Plan("streamed")
    return Plan("ranges", annotation_spans(found, section))


#: The top-level lists other passes parse (the images and categories passes) or the
#: ranges do: left out of the skeleton :func:`skeleton_is_json` parses.
PARSED_APART = ("annotations", "images", "categories")
#: The most bytes :func:`skeleton_is_json` reads; a file with more outside those lists
#: is streamed whole, by one worker.
SKELETON_BYTES = 16 << 20


def skeleton_is_json(path: str, values: dict[str, Section]) -> bool:
    """Whether the file is JSON once the lists parsed apart are replaced by ``[]``: what
    lies between and around them (``info``, ``licenses``, the commas, the end of the
    file) is parsed nowhere else. False too when that is more than
    :data:`SKELETON_BYTES`."""
    size = filesystems.size_of(path) or 0
    cuts = sorted((v.begin, v.end + 1) for name, v in values.items()
                  if name in PARSED_APART and v.end >= 0)
    kept, at = [], 0
    for begin, end in cuts:
        kept.append((at, begin))
        at = end
    kept.append((at, size))
    if sum(end - begin for begin, end in kept) > SKELETON_BYTES:
        return False
    skeleton = b"[]".join(read_bytes(path, begin, end) for begin, end in kept)
    skeleton = skeleton.removeprefix(BOM)
    try:
        json.loads(skeleton.decode("utf-8"), parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return False
    return True


def annotation_spans(found: list[tuple[ByteRange, list[TopLevelEvent]]], section: Section,
                     ) -> tuple[tuple[int, int] | None, ...]:
    """For each range, the bytes from its first annotation to the comma before the next
    range's first (or the list's end): its first begins after the list's ``[`` when that
    is in the range, else after the range's first comma between the list's elements."""
    firsts: list[int | None] = []
    for rng, events in found:
        first = None
        if rng.start <= section.begin < rng.end:
            first = section.begin + 1
        else:
            separators = [e.position for e in events if e.kind == "separator"
                          and section.begin < e.position < section.end]
            first = separators[0] + 1 if separators else None
        firsts.append(first)
    return spans_between(firsts, section.end)


def fail_as_streamed(path: str, options: CocoOptions, where: int) -> None:
    """Raise what the streamed pass raises for the file (its first bad annotation, in its
    words); when it raises nothing, raise what the ranged parse found at byte ``where``."""
    for position, item in enumerate(stream_section(path, "annotations")):
        annotation_reject(item, path, position, options)  # raises for a panoptic file...
    raise CocoFormatError(
        f"{path}: malformed JSON while reading 'annotations' (an annotation at byte {where} "
        "is not plain JSON: NaN, bytes that are not UTF-8 or a control character in a "
        "string). Fix or re-export the annotation file.")


class ParseRange(beam.DoFn):
    """The annotations that begin in one range, checked and batched by image id as in the
    streamed pass; rejects leave on ``placed_rejects`` (their position counts from the
    range's first element), the range's element count on ``elements``, its ids by bucket
    on ``id_buckets``."""

    def __init__(self, options: CocoOptions) -> None:
        self._options = options

    def process(self, rng: ByteRange, plan: Plan):
        path = self._options.annotations
        if plan.mode == "streamed":
            if rng.index == 0:
                yield from ReadInputs(self._options).process("annotations")
            return
        span = plan.spans[rng.index] if plan.mode == "ranges" else None
        if span is None:
            return
        paused = gc.isenabled()
        gc.disable()  # millions of small objects and no cycles (see ReadInputs.process)
        try:
            yield from self._parse(rng, plan.spans, path)
        finally:
            if paused:
                gc.enable()

    def _parse(self, rng: ByteRange, spans: tuple[tuple[int, int] | None, ...], path: str):
        begin = spans[rng.index][0]
        try:
            items = parse_span(path, spans, rng.index)
        except (ValueError, RecursionError):
            fail_as_streamed(path, self._options, begin)
            return
        yield TaggedOutput("elements", (rng.index, len(items)))
        tally = IdTally(spill_ids=len(items) + 1)  # one range's ids: parted, never spilled
        try:
            for _position, output in annotation_outputs(
                    enumerate(items), path, self._options, tally, rng.index):
                yield output
        except CocoFormatError:  # a panoptic or captions file: its first item names it
            fail_as_streamed(path, self._options, begin)
        for bucket, part in tally.parts(rng.count):
            yield TaggedOutput("id_buckets", (bucket, part))


def place_reject(pending: tuple[int, int, Any], elements: dict[int, int], path: str,
                 options: CocoOptions) -> Iterator[Reject]:
    """The reject of the ``position``-th annotation of range ``index``, naming its place
    in the whole list."""
    index, position, item = pending
    before = sum(count for other, count in elements.items() if other < index)
    reject = annotation_reject(item, path, before + position, options)
    if reject is not None:
        yield reject


def repeated_ids(bucket: tuple[int, Iterable[tuple[bytes, list[Any]]]]) -> list[Any]:
    _bucket, parts = bucket
    return IdTally.merged(parts).repeated()


class ReadAnnotationRanges(beam.PTransform):
    """The annotations of ``options.annotations``, read in ranges: a tagged result with
    the main output (``(JoinKey, AnnotationBatch)``), ``rejects``, ``counts`` and
    ``duplicate_annotation_ids``, as :class:`ReadInputs` gives them for the section."""

    def __init__(self, options: CocoOptions, smallest: int | None = None,
                 largest: int | None = None) -> None:
        super().__init__()
        self._options = options
        self._smallest = MIN_RANGE_BYTES if smallest is None else smallest
        self._largest = MAX_RANGE_BYTES if largest is None else largest

    def expand(self, pbegin):
        path = self._options.annotations
        keyed = (
            pbegin
            | "AnnotationFile" >> beam.Create([path])
            | "CutRanges" >> beam.FlatMap(file_ranges, self._smallest, self._largest)
        )

        entry = (
            spread(keyed, "Summarize")
            | "SummarizeRanges" >> beam.Map(summarize_range, path)
            | "EntryStates" >> beam.CombineGlobally(beam.combiners.ToListCombineFn())
            | "Entry" >> beam.Map(entry_of_ranges)
        )
        plan = (
            spread(keyed, "Events")
            | "TopLevelEvents" >> beam.Map(events_of_range, path, AsSingleton(entry))
            | "AllEvents" >> beam.CombineGlobally(beam.combiners.ToListCombineFn())
            | "Plan" >> beam.Map(plan_of, AsSingleton(entry), path)
        )
        parsed = (
            spread(keyed, "Parse")
            | "ParseRanges" >> beam.ParDo(ParseRange(self._options), AsSingleton(plan))
            .with_output_types(tuple[JoinKey, JoinMessage])
            .with_outputs("rejects", "placed_rejects", "counts", "elements", "id_buckets",
                          "duplicate_annotation_ids", main="batches")
        )
        placed = parsed.placed_rejects | "PlaceRejects" >> beam.FlatMap(
            place_reject, AsDict(parsed.elements), path, self._options)
        rejects = (parsed.rejects, placed) | "AnnotationRejects" >> beam.Flatten()
        duplicates = (
            parsed.id_buckets
            | "IdsByBucket" >> beam.GroupByKey()
            | "RepeatedIds" >> beam.FlatMap(repeated_ids)
        )
        all_duplicates = ((parsed.duplicate_annotation_ids, duplicates)
                          | "DuplicateAnnotationIds" >> beam.Flatten())
        return {"batches": parsed.batches, "rejects": rejects, "counts": parsed.counts,
                "duplicate_annotation_ids": all_duplicates}
