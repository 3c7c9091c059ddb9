"""Whether a finished folder still holds what its commit wrote: each shard the size
``manifest.json`` lists, as many records as it lists, an ``.idx`` that indexes the shard.

A shard cut at a record boundary, emptied, or with its records doubled still reads as a
valid TFRecord file: only the manifest tells it changed. Every command and reader of a
finished folder asks here before trusting a shard, and fails naming it
(:class:`ShardChanged`, exit 1). Imports Beam only for paths on other filesystems, as
:mod:`recordbeam.dataset.reader` does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from recordbeam.errors import DataError

_REDO = "the folder changed after its commit: re-run the conversion"


class ShardChanged(DataError, ValueError):
    """A shard, or its index, is not what the manifest says the commit wrote."""


def check_size(path: str, listed_bytes: int | None) -> None:
    """Raise :class:`ShardChanged` when the shard ``path`` is missing or its size is not
    ``listed_bytes`` (None: the manifest does not say)."""
    if listed_bytes is None:
        return
    size = _size_of(path)
    if size is None:
        raise ShardChanged(f"{path}: listed in manifest.json but missing; {_REDO}")
    if size != listed_bytes:
        how = "emptied" if size == 0 else ("cut short" if size < listed_bytes else "grown")
        raise ShardChanged(f"{path}: {size} bytes, but manifest.json lists {listed_bytes}: the "
                           f"shard was {how}; {_REDO}")


def _size_of(path: str) -> int | None:
    if "://" in path:
        from recordbeam import filesystems  # Beam, only for remote paths

        return filesystems.size_of(path)
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def check_count(path: str, records: int, listed: int | None) -> None:
    """Raise :class:`ShardChanged` when a shard read to its end held ``records`` records
    and the manifest lists another number."""
    if listed is not None and records != listed:
        raise ShardChanged(f"{path}: {records} records, but manifest.json lists {listed}; "
                           f"{_REDO}")


def check_index(index_path: str, entries: Sequence[tuple[int, int]], shard_bytes: int) -> None:
    """Raise :class:`ShardChanged` when the ``(offset, length)`` entries of ``index_path``
    are not the records of its shard (of ``shard_bytes`` bytes) in file order: each record
    starts where the one before it ends, the first at 0, the last ending at the end. Lines
    swapped, dropped or doubled would read other records, silently, in another order."""
    expected = 0
    for number, (offset, length) in enumerate(entries):
        if offset != expected:
            raise ShardChanged(
                f"{index_path}: entry {number} points at byte {offset}, where its shard's "
                f"record {number} starts at byte {expected}: the index does not match the "
                f"shard. Re-create it: recordbeam index {index_path.removesuffix('.idx')}")
        expected = offset + length
    if expected != shard_bytes:
        raise ShardChanged(
            f"{index_path}: its entries end at byte {expected}, its shard at {shard_bytes}: "
            f"the index does not match the shard. Re-create it: recordbeam index "
            f"{index_path.removesuffix('.idx')}")
