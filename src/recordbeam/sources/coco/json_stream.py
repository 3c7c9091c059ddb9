"""Reading a COCO JSON file one top-level list at a time, streaming with ``ijson``: a
448 MB train2017 file never sits in memory. The images pass stops where its list ends,
the categories are parsed from the file's end when that is certain to give the same
items, and the file's nesting is bounded (:mod:`recordbeam.sources.json_depth`)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import ijson

from recordbeam import filesystems
from recordbeam.errors import DataError
from recordbeam.sources.json_depth import (
    PARSERS,
    DepthLimitedReader,
    JsonTooDeep,
    bounded,
    items_of_either_parser,
    refused_by_c_parser,
)


class CocoFormatError(DataError, ValueError):
    """The annotation file cannot be used at all (malformed JSON, no images...)."""


def stream_section(path: str, section: str, stop_early: bool = False) -> Iterator[Any]:
    """Yield the items of one top-level list of a COCO file, streaming, with ijson's Python
    parser reading on where its C parser refuses valid JSON
    (:func:`~recordbeam.sources.json_depth.items_of_either_parser`).

    ``stop_early`` stops reading where the section's list ends (see
    :func:`_events_to_section_end`); the file's syntax after that point is left to the
    annotations read (:mod:`~recordbeam.sources.coco.annotation_ranges`).
    """
    return items_of_either_parser(
        lambda parser: _section_items(path, section, parser, stop_early))


def _open_json(path: str) -> DepthLimitedReader:
    return bounded(filesystems.open_read(path))


def _section_items(path: str, section: str, parser: Any, stop_early: bool) -> Iterator[Any]:
    f = _open_json(path)
    try:
        if stop_early:
            try:
                yield from parser.items(_events_to_section_end(f, section, parser),
                                        f"{section}.item")
                return
            except _SectionNotNearStart:  # nothing was yielded: read the whole file
                f.close()
                f = _open_json(path)
        yield from parser.items(f, f"{section}.item", use_float=True)
    except JsonTooDeep as error:
        raise CocoFormatError(f"{path}: {error}, while reading '{section}'; a COCO file nests "
                              "5 levels deep. Fix or re-export the annotation file.") from None
    except (ijson.JSONError, UnicodeDecodeError) as error:
        if refused_by_c_parser(parser, error):
            raise
        position = _tell(f)
        raise CocoFormatError(
            f"{path}: malformed JSON while reading '{section}' (in the 64 KiB before byte "
            f"{position}): {error}. Fix or re-export the annotation file."
        ) from None
    finally:
        f.close()


#: How many parser events :func:`_events_to_section_end` reads looking for the start of its
#: section before it gives up (about 0.1 s; COCO's own files start with their images).
SECTION_SEARCH_EVENTS = 1_000_000


class _SectionNotNearStart(Exception):
    """The section did not begin within :data:`SECTION_SEARCH_EVENTS` events."""


def _events_to_section_end(f: Any, section: str, backend: Any) -> Iterator[tuple]:
    """The parser's events up to the end of the top-level list ``section``.

    A JSON object's members do not interleave, so nothing of the section comes after
    that: in COCO's own files the images list comes first, and reading it this way takes
    a tenth of the time of a pass over the whole file (0.07 against 0.5 s at 20k images).
    Every event passes through Python here, so when the section does not begin near
    the start of the file this gives up (:class:`_SectionNotNearStart`) before any item.
    """
    started = False
    for count, event in enumerate(backend.parse(f, use_float=True)):
        yield event
        if event[0] == section:
            if event[1] == "end_array":
                return
            started = True
        elif not started and count >= SECTION_SEARCH_EVENTS:
            raise _SectionNotNearStart()


#: How much of the file's end :func:`section_at_end` keeps, looking for its section there
#: (COCO's 80 categories take 8 KB, LVIS's 1203 about 0.5 MB).
TAIL_BYTES = 4 << 20


#: The size of the reads of :func:`section_at_end`.
READ_BYTES = 1 << 20


def section_at_end(path: str, section: str) -> list[Any] | None:
    """The items of the top-level list ``section``, parsed from the end of the file
    alone when that is certain to give what a pass over the whole file gives; else None.

    COCO's categories come last, after the annotations: parsing the whole file for them
    costs as much as the annotations pass (0.85 s of CPU at 20k images). Here the file
    is read, not parsed: the bytes ``"categories"`` are counted and the last
    :data:`TAIL_BYTES` kept. When the key appears once in the whole file, inside that
    tail and not after a backslash, and ``{`` followed by the tail from the key on is a
    whole JSON object, then the key is the top-level one (only a member of the
    outermost object is closed by the file's last ``}``), and that object's ``section``
    list is the file's. Anything else (the key also named elsewhere, early in a large
    file, spelled with escapes) returns None and the caller parses the whole file.
    Whether the bytes before the key are valid JSON is left to the annotations read
    (:mod:`~recordbeam.sources.coco.annotation_ranges`), which parses them or the
    images pass does.
    """
    key = f'"{section}"'.encode()
    chunks: list[bytes] = []
    kept = mentions = 0
    overlap = b""  # a key split between two reads is counted once, in the later one
    f = filesystems.open_read(path)
    try:
        while chunk := f.read(READ_BYTES):
            mentions += (overlap + chunk).count(key)
            if mentions > 1:
                return None
            overlap = chunk[-(len(key) - 1):]
            chunks.append(chunk)
            kept += len(chunk)
            while kept - len(chunks[0]) >= TAIL_BYTES:
                kept -= len(chunks.pop(0))
    finally:
        f.close()
    tail = b"".join(chunks)
    start = tail.find(key)
    if mentions != 1 or start < 1 or tail[start - 1:start] == b"\\":
        return None
    try:
        return list(ijson.items(DepthLimitedReader(io.BytesIO(b"{" + tail[start:])),
                                f"{section}.item", use_float=True))
    except (ijson.JSONError, ValueError):  # not a whole object, or an odd value: parse all
        return None


def _tell(f: Any) -> str:
    try:
        return str(f.tell())
    except (OSError, AttributeError, ValueError):
        return "?"


#: How the parser names the value a section holds, in words for messages.
_JSON_KINDS = {"null": "null", "string": "a string", "number": "a number",
               "boolean": "true or false", "start_map": "an object"}


def not_a_list(path: str, section: str) -> str | None:
    """What the top-level ``section`` holds, in words (``a string``, ``an object``...),
    when it is no list; None when it is a list or the file has no such key. Runs only
    after a pass found the section empty, so its cost does not matter."""
    kind = _section_value_kind(path, section)
    return None if kind in (None, "start_array") else _JSON_KINDS.get(kind, kind)


def _section_value_kind(path: str, section: str) -> str | None:
    """The parser event that starts the top-level ``section``'s value (``start_array``,
    ``null``, ``start_map``...), or None when the file has no such key."""
    for backend in PARSERS:
        f = _open_json(path)
        try:
            for prefix, event, _value in backend.parse(f):
                if prefix == section and event != "map_key":
                    return event
            return None
        except (ijson.JSONError, UnicodeDecodeError):
            continue  # the C parser refused valid JSON (see stream_section): try Python's
        finally:
            f.close()
    return None
