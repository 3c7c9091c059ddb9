"""Text read from files and listings that may not be writable as UTF-8: file names that
are not UTF-8 on disk, and JSON ``\\udcxx`` escapes, reach Python as strings holding lone
surrogates. Formats that take names from their inputs tell them apart with
:func:`is_text`, and name them in rejects with :func:`printable`. Numbers written as
text (XML attributes, table cells, label lines) are read by :func:`as_number`
and :func:`as_whole`, a JSON document's by :func:`json_number` (its ``[x, y]`` points by
:func:`json_points`)."""

from __future__ import annotations

import math
from typing import Any


def is_text(value: str) -> bool:
    """False for strings holding lone surrogates (JSON ``\\udcff`` escapes, or file names
    that are not UTF-8 on disk): they cannot be written as UTF-8 anywhere downstream."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(value: str) -> str:
    """``value`` with lone surrogates shown as ``\\udcff``, safe in UTF-8 reports."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def as_number(text: str | None) -> float | None:
    """The finite number ``text`` writes (spaces around it allowed), else None."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def as_whole(text: str | None, least: int | None = None) -> int | None:
    """The whole number ``text`` writes (``1``, ``1.0``), at least ``least``, else None."""
    value = as_number(text)
    if value is None or value != int(value) or (least is not None and value < least):
        return None
    return int(value)


def json_number(value: Any) -> float | None:
    """A JSON value that is a finite number (not a boolean, not past a float's range),
    as a float, else None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range (10^400)
        return None
    return number if math.isfinite(number) else None


def json_points(value: Any) -> list[tuple[float, float]] | None:
    """A JSON list of ``[x, y]`` points whose values are :func:`json_number`s, as pairs of
    floats; None when it is no such list."""
    if not isinstance(value, list):
        return None
    points = []
    for point in value:  # written out long-hand: this runs for every point of every shape
        if not isinstance(point, list) or len(point) != 2:
            return None
        x, y = json_number(point[0]), json_number(point[1])
        if x is None or y is None:
            return None
        points.append((x, y))
    return points
