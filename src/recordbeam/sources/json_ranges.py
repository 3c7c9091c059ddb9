"""Read one JSON document in byte ranges, on many workers at once.

A JSON text can be cut anywhere, but a cut lands in an unknown place: inside a string or
not, at an unknown depth of nesting. A range is read without knowing it, in passes whose
only hand-over is a few numbers per range:

1. :func:`summarize` a range alone: whether it flips "inside a string" (the parity of its
   unescaped quotes) and how its depth changes, for both states it may start in;
2. :func:`entry_states`: from the document's start (outside any string, depth 0), the
   summaries in order give every range its true starting state;
3. :func:`array_marks` of a range, now that its start is known: the structure around the
   array read (the document's brackets, the keys of its top object, their values'
   brackets) and how many commas between the array's elements it holds; from those of
   every range, :func:`array_plan` tells each range which bytes hold the elements that
   begin in it (for ``json.loads``), and the index of the first in the whole array.

Whether a quote is escaped depends on the backslashes just before it, which may lie in the
previous range: every pass takes ``preceding_backslashes``, the length of the run of
backslashes that ends where the range begins (:func:`backslashes_before` counts it).

The scans are vectorized with NumPy: they look only at quotes, backslashes and the six
structural characters, and build arrays as long as those, never as long as the range.
What is checked: the structure (brackets that balance, strings that end, one top-level
value and nothing after it, keys given once) and every element handed out; what lies
outside the array is parsed by the caller (``byte_ranges.plan_of``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
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


def _depths(scan: _Scan, state: EntryState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The marks outside strings: positions, the depth just before each, and classes."""
    outside, steps = _steps(scan, state.inside_string)
    before = state.depth + np.cumsum(steps) - steps
    return scan.marks[outside], before[outside], scan.kinds[outside]


def backslashes_before(data: bytes) -> int:
    """The length of the run of backslashes that ``data`` ends with."""
    return len(data) - len(data.rstrip(b"\\"))


def split_ranges(size: int, range_bytes: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` ranges of at most ``range_bytes`` that cover ``size`` bytes."""
    for start in range(0, size, range_bytes):
        yield start, min(size, start + range_bytes)


class ArrayMarks(NamedTuple):
    """What one range holds of the structure around an array at ``depth`` 0 (the whole
    document) or 1 (a value of the top object). ``frame``: the brackets that open at that
    depth or above or close to it, and the commas and colons at it or above, as
    ``(position, byte)``; ``separators``: in each stretch between two brackets of the
    frame, the commas one level deeper (between the elements of a value at ``depth``), as
    ``(the first one's position, how many)``."""

    frame: tuple[tuple[int, int], ...]
    separators: tuple[tuple[int, int], ...]


def array_marks(data: bytes, start: int, state: EntryState, depth: int,
                preceding_backslashes: int = 0) -> ArrayMarks:
    """The :class:`ArrayMarks` of the range ``data`` that begins at ``start`` in ``state``."""
    marks, before, kinds = _depths(_scan(data, preceding_backslashes), state)
    framing = (before <= depth) | ((kinds == _CLOSE) & (before == depth + 1))
    between = (kinds == _COMMA) & (before == depth + 1)
    stretch = np.cumsum(framing & (kinds <= _CLOSE))[between]  # brackets of the frame before
    stretches, first = np.unique(stretch, return_index=True)
    counts = np.bincount(stretch)[stretches] if stretch.size else stretch
    firsts = start + marks[between][first]
    return ArrayMarks(tuple((start + p, data[p]) for p in marks[framing].tolist()),
                      tuple(zip(firsts.tolist(), counts.tolist(), strict=True)))


class ArrayPlan(NamedTuple):
    """How the elements of an array are read in ranges: for each range, the bytes from its
    first element to the comma before the next range's first (or the array's ``]``), or
    None when no element begins in it; and the index of that first element in the array.
    ``values``: the brackets (first and last byte) of the document's top-level values that
    are arrays or objects, by key (the document's own, when it is the array: by None)."""

    spans: tuple[tuple[int, int] | None, ...]
    first_index: tuple[int, ...]
    values: dict[str | None, tuple[int, int]]


#: The longest key of the top object :func:`array_plan` reads.
KEY_BYTES = 64 << 10


def array_plan(marks: Sequence[ArrayMarks], key: str | None,
               read: Callable[[int, int], bytes]) -> ArrayPlan:
    """The :class:`ArrayPlan` of the array that is the value of ``key`` in the document's
    top object, or (``key`` None) the whole document, from the marks of every range in
    order; ``read(begin, end)`` gives the document's bytes there (the keys). Without that
    key, no element begins anywhere. Raises :class:`JsonRangeError` where the structure
    is not one array (one object with ``key``), a key is given twice, or ``key`` holds
    no array."""
    depth = 0 if key is None else 1
    values: dict[str | None, list[int]] = {}
    keys: set[str] = set()
    level, member, value, name, in_array = 0, -1, None, None, False
    firsts: list[int | None] = []
    first_index: list[int] = []
    commas = 0
    for found in marks:
        first, index = None, -1
        for position, byte, count in sorted([*((p, b, 0) for p, b in found.frame),
                                             *((p, ord(","), c) for p, c in found.separators)]):
            if count:  # commas between the elements of a value at the array's depth
                if in_array:
                    if first is None:
                        first, index = position + 1, commas + 1
                    commas += count
            elif byte in b"[{":
                if level == depth:
                    if (level == 0 and values) or (level == 1 and name is None):
                        raise JsonRangeError(position, "a value where none can be")
                    value, name = name, None
                    values[value] = [position, -1]
                    in_array = value == key
                    if in_array:
                        first, index = position + 1, 0
                    if in_array and byte != ord("["):
                        raise JsonRangeError(position, "not an array")
                elif level == 0:
                    if byte != ord("{") or member >= 0:
                        raise JsonRangeError(position, "the document is not one object")
                    member = position
                level += 1
            elif byte in b"]}":
                level -= 1
                if level == depth:
                    values[value][1] = position
                    if in_array and byte != ord("]"):
                        raise JsonRangeError(position, "an array closed by '}'")
                    in_array = False
            elif level == 0:
                raise JsonRangeError(position, "a comma or colon outside the document's value")
            elif byte == ord(","):
                member, name = position, None
            else:  # the colon after a key of the top object
                if position - member > KEY_BYTES:
                    raise JsonRangeError(member, "a key longer than the plan reads")
                try:
                    name = json.loads(read(member + 1, position))
                except ValueError:
                    name = None
                if not isinstance(name, str) or name in keys:
                    raise JsonRangeError(member, "a key that is no string, or given twice")
                keys.add(name)
        firsts.append(first)
        first_index.append(index)
    if not values or (key in keys and key not in values):
        raise JsonRangeError(0, f"no array where {key!r} should be")
    end = values[key][1] if key in values else -1
    spans = spans_between(firsts, end) if key in values else (None,) * len(marks)
    return ArrayPlan(spans, tuple(first_index), {k: (b, e) for k, (b, e) in values.items()})


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
