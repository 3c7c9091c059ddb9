"""Reading back what a conversion wrote, by split, for the format tests."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records


def split_examples(output: str | os.PathLike[str], split: str, key: str = "image/source_id",
                   kinds: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The decoded Examples of ``split``'s shards in ``output``, by the text of their
    ``key`` feature; ``kinds`` (feature -> kind) decodes empty lists with their kind."""
    names = sorted(n for n in os.listdir(output) if n.startswith(f"{split}-"))
    return {example[key][0].decode(): example
            for name in names for record in open_records(os.path.join(output, name))
            for example in [decode_example(record, dict(kinds or {}))]}


def folder_files(output: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file below ``output`` (``hashes/`` too), by its path relative to it. A file
    gone between the listing and its read (a run writing the folder stages its lock
    beside its name for a moment) is not there."""
    found = {}
    for folder, _dirs, names in os.walk(output):
        for name in names:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, output)] = f.read()
            except FileNotFoundError:
                continue
    return found


def write_folder_files(output: str | os.PathLike[str], files: Mapping[str, bytes]) -> None:
    """Write ``files`` (relative path -> bytes, as :func:`folder_files` gives them) below
    ``output``, making their folders (``hashes/``) as needed."""
    for name, data in files.items():
        path = os.path.join(output, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
