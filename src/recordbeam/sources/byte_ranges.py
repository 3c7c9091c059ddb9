"""A JSON array read in byte ranges by many workers at once (:class:`ReadJsonArray`): the
array that is the whole file (an export, :class:`recordbeam.sources.exports.ReadArrayRanges`)
or the value of a key of its top object (COCO's annotations,
:mod:`recordbeam.sources.coco.annotation_ranges`). The file is cut into ranges, and each
range is read in passes by all workers at once (:mod:`recordbeam.sources.json_ranges`):
the JSON state each range starts in (:func:`summarize_range`), the structure around the
array in it (:func:`marks_of_range`), from which :func:`plan_of` tells each range which
bytes hold the elements that begin in it, and their index in the whole array; then each
range parses its elements (:class:`ParseRanges`). A file the ranges cannot follow (broken
brackets, no such array, nesting deeper than ``MAX_JSON_DEPTH``, no JSON around the array)
has no plan: it is streamed by one worker.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import AsSingleton

from recordbeam import filesystems
from recordbeam.sources.json_depth import BOM, MAX_JSON_DEPTH
from recordbeam.sources.json_ranges import (
    ArrayMarks,
    ArrayPlan,
    EntryState,
    JsonRangeError,
    RangeSummary,
    array_marks,
    array_plan,
    backslashes_before,
    entry_states,
    split_ranges,
    summarize,
)

#: Array exports from this size on are read in ranges (:func:`read_in_ranges`); a smaller
#: one is streamed by one worker. The ranged read costs three passes in stages of their
#: own; it pays once one worker's stream would be long (COCO's annotations, measured the
#: same way: ``coco.annotation_ranges.RANGED_FROM_BYTES``).
RANGED_FROM_BYTES = 512 << 20
#: The largest range a worker reads, and holds with the elements parsed from it (a
#: worker's memory grows by about 8 times the range's bytes while it parses COCO's).
MAX_RANGE_BYTES = 32 << 20
#: The smallest range, but for a file smaller than it (read as one range).
MIN_RANGE_BYTES = 1 << 20
#: Ranges a file is cut into between those bounds: more than the local runner's workers,
#: few enough that each range's task costs little beside its parse (a task per range and
#: pass; at 1M COCO annotations, 219 MB, a range parses in about 0.8 s).
RANGES_PER_FILE = 8
#: What the streamed parser (ijson's C backend) reads otherwise than ``json.loads``: a
#: form feed or vertical tab between tokens (white space to it, an error to ``json``), and
#: a lone high surrogate escape (``?`` to it, the surrogate to ``json``). A range holding
#: one (or what looks like one: an escaped backslash before ``u``) has no summary: the file
#: is streamed.
_READ_OTHERWISE = re.compile(
    rb"[\x0b\x0c]|\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")


class ByteRange(NamedTuple):
    """``[start, end)`` of the file, the ``index``-th of ``count`` ranges."""

    index: int
    count: int
    start: int
    end: int


def range_bytes_for(size: int, smallest: int, largest: int) -> int:
    return max(smallest, min(largest, -(-size // RANGES_PER_FILE)))


def file_ranges(path: str, smallest: int, largest: int) -> list[tuple[int, ByteRange]]:
    """The file's ranges, keyed by index (the join spreads them over the workers)."""
    size = filesystems.size_of(path) or 0
    cuts = list(split_ranges(size, range_bytes_for(size, smallest, largest))) or [(0, 0)]
    return [(index, ByteRange(index, len(cuts), start, end))
            for index, (start, end) in enumerate(cuts)]


def read_range(path: str, start: int, end: int) -> tuple[bytes, int]:
    """The bytes ``[start, end)`` (fewer at the file's end) and the length of the run of
    backslashes just before ``start``."""
    f = filesystems.open_read(path)
    try:
        look, run = 64, 0
        while start:
            look = min(look, start)
            f.seek(start - look)
            run = backslashes_before(f.read(look))
            if run < look or look == start:
                break
            look *= 16
        f.seek(start)
        return f.read(end - start), run
    finally:
        f.close()


def read_bytes(path: str, start: int, stop: int) -> bytes:
    f = filesystems.open_read(path)
    try:
        f.seek(start)
        return f.read(stop - start)
    finally:
        f.close()


def summarize_range(rng: ByteRange, path: str) -> tuple[ByteRange, RangeSummary | None]:
    """The range's :class:`RangeSummary`; None where the stream reads it otherwise than
    the ranges' parse would (:data:`_READ_OTHERWISE`)."""
    data, run = read_range(path, rng.start, rng.end)
    # An escape cut by the range's edges is looked for in the bytes around them too.
    edges = (read_bytes(path, max(0, rng.start - 6), rng.start) + data
             + read_bytes(path, rng.end, rng.end + 12))
    if _READ_OTHERWISE.search(edges):
        return rng, None
    return rng, summarize(data, run)


def entry_of_ranges(summaries: Iterable[tuple[ByteRange, RangeSummary | None]],
                    ) -> tuple[EntryState, ...] | None:
    """Every range's starting state, or None when the file's structure is broken (then
    the streamed pass reads it)."""
    ordered = sorted(summaries)
    if any(summary is None for _rng, summary in ordered):
        return None
    try:
        states = entry_states([(rng.start, summary) for rng, summary in ordered])
    except JsonRangeError:
        return None
    for state, (_rng, summary) in zip(states, ordered, strict=True):
        if state.depth + summary.highest_depth[state.inside_string] > MAX_JSON_DEPTH:
            return None
    return tuple(states)


def _ranges_of_key(keyed: tuple[int, Iterable[ByteRange]]) -> Iterable[ByteRange]:
    return keyed[1]


def spread(keyed: beam.PCollection, name: str) -> beam.PCollection:
    """The ranges, for one pass: a stage fed by a shuffle with one key per range (the
    local runner deals keys to its workers in turn, and reads a stored PCollection in one
    bundle, on one worker)."""
    return (keyed | f"Spread{name}" >> beam.GroupByKey()
            | f"RangesTo{name}" >> beam.FlatMap(_ranges_of_key))


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a float")
    return value


def parse_span(path: str, spans: Sequence[tuple[int, int] | None], index: int) -> list[Any]:
    """The elements of a list that begin in range ``index`` (its span: the elements and
    the commas between them), as the streamed parser gives them: floats for numbers with a
    fraction or exponent, and a ``ValueError`` where it fails (NaN, a number past a
    float's range, an empty element: white space only, unless the span is the list's
    only one)."""
    begin, end = spans[index]
    text = read_bytes(path, begin, end).decode("utf-8")
    alone = sum(span is not None for span in spans) == 1
    if not alone and not text.strip():  # [1,,2] or [1,] cut at the comma
        raise ValueError("an empty element")
    return json.loads(f"[{text}]", parse_constant=refuse_constant, parse_float=_finite_float)


def marks_of_range(rng: ByteRange, path: str, states: tuple[EntryState, ...] | None,
                   depth: int = 0) -> tuple[ByteRange, ArrayMarks | None]:
    if states is None:
        return rng, None
    data, run = read_range(path, rng.start, rng.end)
    return rng, array_marks(data, rng.start, states[rng.index], depth, run)


#: The most bytes :func:`plan_of` parses of what lies around the arrays read apart; a file
#: with more is streamed whole, by one worker.
SKELETON_BYTES = 16 << 20


def plan_of(found: Iterable[tuple[ByteRange, ArrayMarks | None]], path: str,
            key: str | None = None, apart: tuple[str, ...] = ()) -> ArrayPlan | None:
    """The plan of the ranges' reads of the array ``key`` (:func:`array_plan`); None when
    the file is streamed instead: the ranges cannot follow it, or it is no JSON once the
    array and the top-level values named in ``apart`` (which other passes parse) are each
    replaced by ``[]`` (what is left, ``info`` or the white space around an array, is
    parsed nowhere else)."""
    found = sorted(found)
    if any(marks is None for _rng, marks in found):
        return None
    try:
        plan = array_plan([marks for _rng, marks in found], key,
                          lambda begin, end: read_bytes(path, begin, end))
    except JsonRangeError:
        return None
    cuts = sorted(span for name, span in plan.values.items() if name == key or name in apart)
    kept, at = [], 0
    for begin, end in cuts:
        kept.append((at, begin))
        at = end + 1
    kept.append((at, filesystems.size_of(path) or 0))
    if sum(end - begin for begin, end in kept) > SKELETON_BYTES:
        return None
    skeleton = b"[]".join(read_bytes(path, begin, end) for begin, end in kept)
    try:
        json.loads(skeleton.removeprefix(BOM).decode("utf-8"), parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return None
    return plan


class ParseRanges(beam.DoFn):
    """The elements of the array that begin in one range, parsed (:func:`parse_span`) and
    handed to :meth:`elements` with the index of the first in the whole array; without a
    plan, the file read by :meth:`streamed` on the first range's worker. A subclass names
    its outputs: ``main`` (of ``output_type``) and the tagged ``outputs``."""

    output_type: Any = Any
    main = "elements"
    outputs: tuple[str, ...] = ()

    def __init__(self, path: str) -> None:
        self.path = path

    def process(self, rng: ByteRange, plan: ArrayPlan | None):
        if plan is None:
            if rng.index == 0:
                yield from self.streamed()
            return
        span = plan.spans[rng.index]
        if span is None:
            return
        paused = gc.isenabled()
        gc.disable()  # millions of small objects and no cycles
        try:
            try:
                items = parse_span(self.path, plan.spans, rng.index)
            except (ValueError, RecursionError):
                self.fail_as_streamed(span[0])
            yield from self.elements(rng, span, plan.first_index[rng.index], items)
        finally:
            if paused:
                gc.enable()

    def streamed(self) -> Iterable[Any]:
        """The outputs of the whole file, streamed."""
        raise NotImplementedError

    def elements(self, rng: ByteRange, span: tuple[int, int], first: int,
                 items: list[Any]) -> Iterable[Any]:
        """The outputs of ``items``, the elements of range ``rng`` (bytes ``span``), the
        first of them the ``first``-th of the array."""
        raise NotImplementedError

    def fail_as_streamed(self, where: int) -> None:
        """Raise what the streamed read raises for the file; when it raises nothing, name
        the element the ranges' parse refused at byte ``where``."""
        raise NotImplementedError


class ReadJsonArray(beam.PTransform):
    """The elements of a JSON array read in byte ranges by all workers at once: the value
    of ``key`` in the top object of the file ``parse.path`` (``key`` None: the array that
    is the whole file), parsed by ``parse`` (a :class:`ParseRanges`), whose outputs this
    returns. ``apart``: the file's other top-level values that other passes parse. Ranges
    are from ``smallest`` to ``largest`` bytes (by default :data:`MIN_RANGE_BYTES` and
    :data:`MAX_RANGE_BYTES`)."""

    def __init__(self, parse: ParseRanges, key: str | None = None, apart: tuple[str, ...] = (),
                 smallest: int | None = None, largest: int | None = None) -> None:
        super().__init__()
        self._parse, self._key, self._apart = parse, key, apart
        self._smallest, self._largest = smallest, largest

    def expand(self, pbegin):
        path, parse = self._parse.path, self._parse
        keyed = (pbegin | "JsonFile" >> beam.Create([path])
                 | "CutRanges" >> beam.FlatMap(file_ranges, self._smallest or MIN_RANGE_BYTES,
                                               self._largest or MAX_RANGE_BYTES))
        states = (
            spread(keyed, "Summarize")
            | "SummarizeRanges" >> beam.Map(summarize_range, path)
            | "EntryStates" >> beam.CombineGlobally(beam.combiners.ToListCombineFn())
            | "Entry" >> beam.Map(entry_of_ranges)
        )
        plan = (
            spread(keyed, "Marks")
            | "ArrayMarks" >> beam.Map(marks_of_range, path, AsSingleton(states),
                                       0 if self._key is None else 1)
            | "AllMarks" >> beam.CombineGlobally(beam.combiners.ToListCombineFn())
            | "Plan" >> beam.Map(plan_of, path, self._key, self._apart)
        )
        return (spread(keyed, "Parse")
                | "ParseRanges" >> beam.ParDo(parse, AsSingleton(plan))
                .with_output_types(parse.output_type)
                .with_outputs(*parse.outputs, main=parse.main))


def read_in_ranges(path: str, from_bytes: int) -> bool:
    """Whether ``path`` is read in ranges: it is ``from_bytes`` or more. A file that cannot
    be sized is streamed, and fails there with the streamed parser's message."""
    size = filesystems.size_of(path)
    return size is not None and size >= from_bytes
