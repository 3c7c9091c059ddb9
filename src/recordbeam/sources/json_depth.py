"""Streaming a JSON file with ijson: its nesting bounded, a byte order mark skipped, and
ijson's Python parser reading on where its C parser refuses valid JSON.

A bound on how deeply a streamed JSON file nests, checked on its bytes as they are read.

ijson keeps, for every open array or object, the path to it as a string
(``annotations.item.segmentation.item...``): at a depth of d they hold about d^2
characters, so 100 KB of ``[`` would take 50 GB before the parser says anything. A COCO
file nests 5 levels deep; :class:`DepthLimitedReader` stands between the file and the
parser and stops the read past :data:`MAX_JSON_DEPTH`, at C speed (escapes and strings are
dropped with ``bytes.replace``/``translate``, the depth is a numpy running sum).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import ijson
import numpy as np

#: How deeply a streamed JSON file may nest (arrays and objects): COCO needs 5.
MAX_JSON_DEPTH = 128

_QUOTE = ord('"')
#: Every byte but brackets and quotes, deleted before the depth is counted.
_NOT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')
#: What each byte does to the depth: +1 opens, -1 closes.
_STEP = np.zeros(256, dtype=np.int64)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


class JsonTooDeep(ValueError):
    """The file nests deeper than the limit; ``offset`` is the end of the read it did so in."""

    def __init__(self, limit: int, offset: int) -> None:
        super().__init__(f"it nests arrays or objects more than {limit} levels deep (within "
                         f"the read ending at byte {offset})")
        self.offset = offset


class DepthLimitedReader:
    """A binary file for a JSON parser that raises :class:`JsonTooDeep` once the bytes
    read so far open more than ``limit`` arrays and objects at once."""

    def __init__(self, f: Any, limit: int = MAX_JSON_DEPTH) -> None:
        self._f = f
        self._limit = limit
        self._depth = 0
        self._in_string = 0
        self._pending = b""  # a backslash whose escaped byte is in the next read
        self._offset = 0

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._offset += len(data)
        self._scan(data)
        return data

    def _scan(self, data: bytes) -> None:
        data = self._pending + data
        self._pending = b""
        if b"\\" in data:  # rare in annotation files: the replaces cost 5 times the rest
            trailing = len(data) - len(data.rstrip(b"\\"))
            if trailing % 2:
                data, self._pending = data[:-1], b"\\"
            # Escapes pair from the left: "\\" first, then "\"" is an escaped quote.
            data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
        marks = data.translate(None, _NOT_MARKS)
        if not marks:
            return
        codes = np.frombuffer(marks, dtype=np.uint8)
        quotes = codes == _QUOTE
        inside = ((np.cumsum(quotes) - quotes + self._in_string) & 1).astype(bool)
        step = _STEP[codes]
        step[inside] = 0
        depth = self._depth + np.cumsum(step)
        if depth.max() > self._limit:
            raise JsonTooDeep(self._limit, self._offset)
        self._depth = int(depth[-1])
        self._in_string = (self._in_string + int(quotes.sum())) & 1

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> DepthLimitedReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


#: The UTF-8 byte order mark some Windows tools write before JSON: RFC 8259 lets a reader
#: skip it; ijson's C parser refuses it.
BOM = b"\xef\xbb\xbf"
#: ijson's parsers: its C one, then its Python one (see :func:`items_of_either_parser`).
PARSERS = (ijson, ijson.get_backend("python"))


def bounded(f: Any) -> DepthLimitedReader:
    """``f`` (binary, seekable, at its start) for a JSON parser: past a byte order mark,
    its nesting bounded."""
    if f.read(len(BOM)) != BOM:
        f.seek(0)
    return DepthLimitedReader(f)


def refused_by_c_parser(parser: Any, error: Exception) -> bool:
    """Whether ``error`` is ijson's C parser refusing valid JSON that its Python parser
    reads: an integer beyond 64 bits, a ``\\udcxx`` escape (how Python's ``json`` writes
    a file name that is not UTF-8)."""
    return parser is PARSERS[0] and (isinstance(error, UnicodeDecodeError)
                                     or "integer overflow" in str(error))


def items_of_either_parser(read: Callable[[Any], Iterable[Any]]) -> Iterator[Any]:
    """What ``read(parser)`` yields with ijson's C parser; where that parser refuses valid
    JSON (:func:`refused_by_c_parser`, which ``read`` lets through), what it yields with
    the Python parser past the items already yielded: one odd value costs a slower read,
    and becomes a reject downstream instead of failing the run."""
    done = 0
    for parser in PARSERS:
        try:
            for position, item in enumerate(read(parser)):
                if position >= done:
                    done += 1
                    yield item
            return
        except (ijson.JSONError, UnicodeDecodeError) as error:
            if not refused_by_c_parser(parser, error):
                raise
