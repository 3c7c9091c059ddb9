"""Text read from files and listings that may not be writable as UTF-8: file names that
are not UTF-8 on disk, and JSON ``\\udcxx`` escapes, reach Python as strings holding lone
surrogates. Formats that take names from their inputs tell them apart with
:func:`is_text`, and name them in rejects with :func:`printable`."""

from __future__ import annotations


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
