"""Read one JSON document in byte ranges, on many workers at once.

A JSON text can be cut anywhere, but a cut lands in an unknown place: inside a string or
not, at an unknown depth of nesting. A range is read without knowing it, in passes whose
only hand-over is a few numbers per range:

1. :func:`summarize` a range alone: whether it flips "inside a string" (the parity of its
   unescaped quotes) and how its depth changes, for both states it may start in;
2. :func:`entry_states`: from the document's start (outside any string, depth 0), the
   summaries in order give every range its true starting state;
3. :func:`top_level_events` of a range, now that its start is known: the keys of the
   document's top object and where their values open and close; :func:`sections` puts the
   events of all ranges together into the span of each top-level value;
4. :func:`section_elements`: the elements of a top-level array that begin in a range, as
   byte slices for ``json.loads``.

Whether a quote is escaped depends on the backslashes just before it, which may lie in the
previous range: every pass takes ``preceding_backslashes``, the length of the run of
backslashes that ends where the range begins (:func:`backslashes_before` counts it).

The scans are vectorized with NumPy: they look only at quotes, backslashes and the six
structural characters, and build arrays as long as those, never as long as the range.
What is checked: the structure (brackets that match, strings that end, one top-level
object and nothing after it) and every element handed out. Values outside the sections
read (COCO's ``info``, ``licenses``) are not parsed, so a broken one there goes unnoticed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np


class JsonRangeError(ValueError):
    """The document's structure is broken at ``position`` (a byte offset)."""

    def __init__(self, position: int, problem: str) -> None:
        super().__init__(f"byte {position}: {problem}")
        self.position = position
        self.problem = problem


_OTHER, _QUOTE, _BACKSLASH, _OPEN, _CLOSE, _COMMA, _COLON = range(7)
_CLASSES = np.zeros(256, dtype=np.uint8)
_CLASSES[ord('"')] = _QUOTE
_CLASSES[ord("\\")] = _BACKSLASH
_CLASSES[[ord("{"), ord("[")]] = _OPEN
_CLASSES[[ord("}"), ord("]")]] = _CLOSE
_CLASSES[ord(",")] = _COMMA
_CLASSES[ord(":")] = _COLON
_CLASS_TABLE = _CLASSES.tobytes()  # for bytes.translate, faster than indexing by the bytes
_WHITESPACE = b" \t\r\n"


class _Scan(NamedTuple):
    """The characters of a range that matter, by position within it."""

    quotes: np.ndarray  # positions of unescaped quotes
    marks: np.ndarray  # positions of ``{ } [ ] , :``
    kinds: np.ndarray  # their classes
    parity: np.ndarray  # unescaped quotes before each mark, mod 2


def _scan(data: bytes, preceding_backslashes: int) -> _Scan:
    codes = np.frombuffer(data.translate(_CLASS_TABLE), dtype=np.uint8)
    special = np.flatnonzero(codes)
    kinds = codes[special]
    is_quote = kinds == _QUOTE
    backslashes = special[kinds == _BACKSLASH]
    if backslashes.size or preceding_backslashes:
        at = np.flatnonzero(is_quote)
        is_quote[at[_escaped(special[at], backslashes, preceding_backslashes)]] = False
    structural = kinds >= _OPEN
    # No mark is a quote: the quotes up to a mark are the quotes before it.
    parity = (np.cumsum(is_quote, dtype=np.int64)[structural] & 1).astype(np.int8)
    return _Scan(special[is_quote], special[structural], kinds[structural], parity)


def _escaped(quotes: np.ndarray, backslashes: np.ndarray, preceding: int) -> np.ndarray:
    """Which quotes follow an odd run of backslashes (a run may begin before the range)."""
    starts = np.ones(backslashes.size, dtype=bool)
    starts[1:] = backslashes[1:] != backslashes[:-1] + 1
    run_first = backslashes[starts]
    run_last = backslashes[np.append(starts[1:], True)] if backslashes.size else backslashes
    lengths = run_last - run_first + 1
    if preceding:  # the run before the range goes on into it, or ends right before it
        if run_first.size and run_first[0] == 0:
            lengths[0] += preceding
        else:
            run_last = np.insert(run_last, 0, -1)
            lengths = np.insert(lengths, 0, preceding)
    at = np.minimum(np.searchsorted(run_last, quotes - 1), max(run_last.size - 1, 0))
    if not run_last.size:
        return np.zeros(quotes.size, dtype=bool)
    return (run_last[at] == quotes - 1) & (lengths[at] % 2 == 1)


def _steps(scan: _Scan, inside_at_start: int) -> tuple[np.ndarray, np.ndarray]:
    """The marks outside strings (as a mask over ``scan.marks``) and their depth steps."""
    outside = scan.parity == inside_at_start  # even quotes before it and started outside, or odd and inside
    steps = np.zeros(scan.marks.size, dtype=np.int64)
    steps[outside & (scan.kinds == _OPEN)] = 1
    steps[outside & (scan.kinds == _CLOSE)] = -1
    return outside, steps


class RangeSummary(NamedTuple):
    """What a range does to the state, for each state it may start in (index 0: outside
    a string, 1: inside one)."""

    quote_parity: int
    depth_change: tuple[int, int]
    lowest_depth: tuple[int, int]  # relative to the start, at most 0
    highest_depth: tuple[int, int] = (0, 0)  # relative to the start, at least 0


def summarize(data: bytes, preceding_backslashes: int = 0) -> RangeSummary:
    scan = _scan(data, preceding_backslashes)
    changes, lowest, highest = [], [], []
    for inside in (0, 1):
        _outside, steps = _steps(scan, inside)
        depths = np.cumsum(steps)
        changes.append(int(depths[-1]) if depths.size else 0)
        lowest.append(min(0, int(depths.min())) if depths.size else 0)
        highest.append(max(0, int(depths.max())) if depths.size else 0)
    return RangeSummary(int(scan.quotes.size & 1), (changes[0], changes[1]),
                        (lowest[0], lowest[1]), (highest[0], highest[1]))


class EntryState(NamedTuple):
    """Where a range starts: inside a string or not, and at which depth."""

    inside_string: int
    depth: int


def entry_states(summaries: Sequence[tuple[int, RangeSummary]]) -> list[EntryState]:
    """The state at the start of each range, given ``(start, summary)`` of every range of
    the document in order. Raises :class:`JsonRangeError` where the structure breaks: a
    bracket closed more often than opened, or a document that ends inside a string or
    with brackets still open."""
    states, inside, depth = [], 0, 0
    for start, summary in summaries:
        states.append(EntryState(inside, depth))
        if depth + summary.lowest_depth[inside] < 0:
            raise JsonRangeError(start, "a closing bracket without its opening one, in the "
                                 "range that starts here")
        depth += summary.depth_change[inside]
        inside ^= summary.quote_parity
    end = summaries[-1][0] if summaries else 0
    if inside:
        raise JsonRangeError(end, "the document ends inside a string")
    if depth:
        raise JsonRangeError(end, f"the document ends with {depth} bracket(s) still open")
    return states


class TopLevelEvent(NamedTuple):
    """A key of the top object (``kind`` "key": its ``name``, where its value starts and
    the value's first byte), or the opening or closing bracket of a top-level value
    ("open", "close") or of the document itself ("document-open", "document-close"), with
    the bracket as ``value_byte``; or ("separator") the range's first comma between the
    elements of a top-level list or object. Positions are offsets in the document."""

    position: int
    kind: str
    name: str = ""
    value_at: int = -1
    value_byte: int = 0


def _depths(scan: _Scan, state: EntryState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The marks outside strings: positions, the depth just before each, and classes."""
    outside, steps = _steps(scan, state.inside_string)
    before = state.depth + np.cumsum(steps) - steps
    return scan.marks[outside], before[outside], scan.kinds[outside]


def top_level_events(data: bytes, start: int, end: int, state: EntryState,
                     preceding_backslashes: int = 0) -> list[TopLevelEvent]:
    """The top-level events at positions in ``[start, end)``. ``data`` holds the document
    from ``start`` on, and past ``end`` far enough to hold a key that begins before
    ``end`` and the first byte of its value (a few hundred bytes do for COCO); raises
    :class:`JsonRangeError` when it does not."""
    import json

    scan = _scan(data, preceding_backslashes)
    marks, before, kinds = _depths(scan, state)
    limit = end - start
    events: list[TopLevelEvent] = []
    brackets = (marks < limit) & (((kinds == _OPEN) & (before <= 1))
                                  | ((kinds == _CLOSE) & (before <= 2)))
    for position, kind, depth in zip(marks[brackets].tolist(), kinds[brackets].tolist(),
                                     before[brackets].tolist(), strict=True):
        name = ("document-" if depth == (0 if kind == _OPEN else 1) else "") + (
            "open" if kind == _OPEN else "close")
        events.append(TopLevelEvent(start + position, name, value_byte=data[position]))
    separators = np.flatnonzero((marks < limit) & (kinds == _COMMA) & (before == 2))
    if separators.size:
        events.append(TopLevelEvent(start + int(marks[separators[0]]), "separator"))
    # A string opens at an unescaped quote with an even number of them before it (counting
    # from the state the range starts in); at depth 1 it is a key when a colon follows it.
    openings = np.arange(state.inside_string, scan.quotes.size, 2)
    openings = openings[scan.quotes[openings] < limit]
    final_depth = state.depth + int(np.sum(kinds == _OPEN)) - int(np.sum(kinds == _CLOSE))
    # The depth at a quote is the depth before the first mark after it.
    depth_at = np.append(before, final_depth)[np.searchsorted(marks, scan.quotes[openings])]
    for opening in openings[depth_at == 1].tolist():
        if opening + 1 >= scan.quotes.size:
            raise JsonRangeError(start + int(scan.quotes[opening]),
                                 "a string that does not end in the bytes read")
        first, last = int(scan.quotes[opening]), int(scan.quotes[opening + 1])
        after = np.searchsorted(marks, last)
        if after >= marks.size:
            raise JsonRangeError(start + first, "a string not followed by ':', ',' or a bracket")
        if kinds[after] != _COLON:
            continue  # a top-level string value, not a key
        try:
            name = json.loads(data[first:last + 1])
        except ValueError:
            raise JsonRangeError(start + first, "a key that is not a JSON string") from None
        value = _skip_whitespace(data, int(marks[after]) + 1)
        if value >= len(data):
            raise JsonRangeError(start + first, f"the value of {name!r} lies beyond the bytes read")
        events.append(TopLevelEvent(start + first, "key", name, start + value, data[value]))
    return sorted(events)


def _skip_whitespace(data: bytes, at: int) -> int:
    while at < len(data) and data[at] in _WHITESPACE:
        at += 1
    return at


class Section(NamedTuple):
    """A top-level value: its key, where it begins, where it ends (its closing bracket,
    for a list or an object; -1 for a plain value), and its first byte."""

    name: str
    begin: int
    end: int
    first_byte: int


def sections(events: Iterable[TopLevelEvent]) -> dict[str, Section]:
    """The top-level values by key, from the events of every range. Raises
    :class:`JsonRangeError` for a document that is no object, holds a second top-level
    value, or gives a key twice."""
    found: dict[str, Section] = {}
    pending: Section | None = None
    opened = closed = False
    for event in sorted(events):
        if event.kind == "document-open":
            if opened:
                raise JsonRangeError(event.position, "a second top-level value")
            if event.value_byte != ord("{"):
                raise JsonRangeError(event.position, "the document is a list, not an object")
            opened = True
        elif event.kind == "document-close":
            closed = True
        elif event.kind == "key":
            if event.name in found:
                raise JsonRangeError(event.position, f"the key {event.name!r} a second time")
            found[event.name] = Section(event.name, event.value_at, -1, event.value_byte)
            pending = found[event.name] if event.value_byte in b"[{" else None
        elif event.kind == "close" and pending is not None:
            found[pending.name] = Section(pending.name, pending.begin, event.position,
                                          pending.first_byte)
            pending = None
    if not (opened and closed):
        raise JsonRangeError(0, "the document is not one JSON object")
    return found


def section_elements(data: bytes, start: int, end: int, state: EntryState,
                     section: Section, preceding_backslashes: int = 0,
                     ) -> tuple[list[tuple[int, bytes]], bool]:
    """The elements of the top-level list ``section`` whose separator (the list's ``[``
    or the comma before them) lies in ``[start, end)``, as ``(offset, bytes)``; and
    whether ``data`` (the document from ``start`` on) held all of the last one. When it
    did not, call again with more data."""
    marks, before, kinds = _depths(_scan(data, preceding_backslashes), state)
    absolute = marks + start
    boundaries = (absolute >= section.begin) & (absolute <= section.end) & (
        ((kinds == _COMMA) & (before == 2)) | ((kinds == _OPEN) & (before == 1))
        | ((kinds == _CLOSE) & (before == 2)))
    positions, kinds = marks[boundaries], kinds[boundaries]
    elements: list[tuple[int, bytes]] = []
    for index in np.flatnonzero((positions + start < end) & (kinds != _CLOSE)):
        if index + 1 >= positions.size:
            return elements, False
        first, after = int(positions[index]) + 1, int(positions[index + 1])
        body = data[first:after]
        if not body.strip():
            if kinds[index] == _OPEN and kinds[index + 1] == _CLOSE:
                continue  # []
            raise JsonRangeError(start + first, f"an empty element in '{section.name}'")
        elements.append((start + first, body))
    return elements, True


def first_separator(data: bytes, start: int, end: int, state: EntryState,
                    preceding_backslashes: int = 0) -> int | None:
    """Where the first comma between the elements of a top-level value lies in
    ``[start, end)``, searched in ``data`` (the document from ``start`` on; a part of the
    range will do); None when ``data`` holds none there."""
    marks, before, kinds = _depths(_scan(data, preceding_backslashes), state)
    found = np.flatnonzero((marks < end - start) & (kinds == _COMMA) & (before == 2))
    return start + int(marks[found[0]]) if found.size else None


def backslashes_before(data: bytes) -> int:
    """The length of the run of backslashes that ``data`` ends with."""
    return len(data) - len(data.rstrip(b"\\"))


def split_ranges(size: int, range_bytes: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` ranges of at most ``range_bytes`` that cover ``size`` bytes."""
    for start in range(0, size, range_bytes):
        yield start, min(size, start + range_bytes)


class ArrayMarks(NamedTuple):
    """What one range holds of the structure of a document that should be one array: the
    brackets that open at depth 0 and close to it (``(position, byte)``), the commas
    between the array's elements (how many, and the first), and whether a comma lies
    outside any value (no array then)."""

    opens: tuple[tuple[int, int], ...]
    closes: tuple[tuple[int, int], ...]
    separators: int
    first_separator: int | None
    stray: bool


def array_marks(data: bytes, start: int, state: EntryState,
                preceding_backslashes: int = 0) -> ArrayMarks:
    """The :class:`ArrayMarks` of the range ``data`` that begins at ``start`` in ``state``."""
    marks, before, kinds = _depths(_scan(data, preceding_backslashes), state)
    commas = marks[(kinds == _COMMA) & (before == 1)]

    def brackets(kind: int, depth: int) -> tuple[tuple[int, int], ...]:
        return tuple((start + int(p), data[int(p)])
                     for p in marks[(kinds == kind) & (before == depth)].tolist())

    return ArrayMarks(brackets(_OPEN, 0), brackets(_CLOSE, 1), int(commas.size),
                      start + int(commas[0]) if commas.size else None,
                      bool(np.any((kinds == _COMMA) & (before == 0))))


class ArrayPlan(NamedTuple):
    """How the elements of a document that is one array are read in ranges: for each
    range, the bytes from its first element to the comma before the next range's first
    (or the array's ``]``), or None when no element begins in it; and the index of that
    first element in the array. ``begin`` and ``end``: the array's brackets."""

    spans: tuple[tuple[int, int] | None, ...]
    first_index: tuple[int, ...]
    begin: int
    end: int


def array_plan(starts: Sequence[int], marks: Sequence[ArrayMarks]) -> ArrayPlan:
    """The :class:`ArrayPlan` from the marks of every range (``starts``: where each range
    begins, in order). Raises :class:`JsonRangeError` for a document that is not one
    array (an object, a second top-level value, a comma outside it)."""
    opens = [o for m in marks for o in m.opens]
    closes = [c for m in marks for c in m.closes]
    stray = next((start for start, m in zip(starts, marks, strict=True) if m.stray), None)
    if stray is not None:
        raise JsonRangeError(stray, "a comma outside the array, in the range that starts here")
    if (len(opens) != 1 or opens[0][1] != ord("[") or len(closes) != 1
            or closes[0][1] != ord("]")):
        raise JsonRangeError(opens[1][0] if len(opens) > 1 else 0,
                             "the document is not one JSON array")
    begin, end = opens[0][0], closes[0][0]
    firsts: list[int | None] = []
    first_index: list[int] = []
    commas = 0
    for m in marks:
        if m.opens:
            firsts.append(begin + 1)
            first_index.append(0)
        elif m.first_separator is not None:
            firsts.append(m.first_separator + 1)
            first_index.append(commas + 1)
        else:
            firsts.append(None)
            first_index.append(-1)
        commas += m.separators
    return ArrayPlan(spans_between(firsts, end), tuple(first_index), begin, end)


def spans_between(firsts: Sequence[int | None], end: int) -> tuple[tuple[int, int] | None, ...]:
    """For each range, the bytes of a list's elements that begin in it: from its first
    element's start (``firsts``: None when none begins there) to the comma before the next
    range's first, or to the list's closing bracket at ``end``."""
    spans: list[tuple[int, int] | None] = []
    following = end
    for first in reversed(firsts):
        spans.append(None if first is None else (first, following))
        following = following if first is None else first - 1
    return tuple(reversed(spans))
