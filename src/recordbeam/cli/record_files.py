"""Which files ``inspect``, ``verify`` and ``index`` read: TFRecord files, globs, or an
output folder (the shards its manifest lists), on any Beam filesystem."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from recordbeam.errors import DataError, UsageError


def expand_paths(patterns: Sequence[str]) -> list[str]:
    """Files matching each path or glob, in order; a pattern matching nothing is an error.
    A file that exists under the very name given is that file, even when its name holds
    glob characters (``out [v2]/train-00000-of-00001.tfrecord``)."""
    from recordbeam import filesystems

    paths: list[str] = []
    for pattern in patterns:
        if filesystems.file_metadata(pattern) is not None:
            paths.append(pattern)
            continue
        found = sorted(m.path for m in filesystems.iter_match(pattern))
        found = [p for p in found if not p.endswith(".idx")] if any(c in pattern for c in "*?[") else found
        if not found:
            raise UsageError(f"{pattern}: no such file (check the path or quote the glob)")
        paths.extend(found)
    return paths


def open_record_file(path: str) -> BinaryIO:
    from recordbeam import filesystems

    return filesystems.open_read(path)


def read_file_records(path: str) -> Iterator[bytes]:
    """The records of one file, uncompressed as its name says; damage raises RecordError."""
    from recordbeam.tfrecord.framing import compression_for_path, read_records

    with open_record_file(path) as f:
        yield from read_records(f, path=path, compression=compression_for_path(path))


@dataclass(frozen=True)
class RecordFile:
    """A file ``inspect``, ``verify`` or ``index`` reads; ``listed`` and ``listed_bytes``
    are its example count and size in ``manifest.json`` when it was found through its
    output folder."""

    path: str
    listed: int | None = None
    listed_bytes: int | None = None


def missing_text(file: RecordFile) -> str:
    """What to say of a shard ``manifest.json`` lists that is not there."""
    return (f"{file.path}: listed in manifest.json but missing; the folder is incomplete "
            "(re-run the conversion)")


def check_listed_exist(files: Sequence[RecordFile]) -> None:
    """Raise :class:`DataError` for the first shard an output folder's manifest lists that
    is not there, or not of the size it lists (cut, emptied, grown since the commit),
    before a command reads any."""
    from recordbeam import filesystems
    from recordbeam.dataset.wholeness import check_size

    for file in files:
        if file.listed is not None and not filesystems.exists(file.path):
            raise DataError(missing_text(file))
        check_size(file.path, file.listed_bytes)


def record_files(arguments: Sequence[str]) -> list[RecordFile]:
    """The files named by each argument: an output folder (the shards its manifest lists,
    every split), a file, or a glob (see :func:`expand_paths`)."""
    files: list[RecordFile] = []
    for argument in arguments:
        shards = _output_folder_shards(argument)
        if shards is None:
            files += [RecordFile(path) for path in expand_paths([argument])]
        else:
            files += shards
    return files


def _output_folder_shards(argument: str) -> list[RecordFile] | None:
    """The shards of the output folder ``argument``; None when it names no folder."""
    from recordbeam import filesystems
    from recordbeam.dataset.layout import MANIFEST, finished_manifest

    manifest_path = filesystems.join(argument, MANIFEST)
    # On object stores a folder is a prefix: it counts as one when a manifest is below it.
    local = filesystems.local_path(argument)
    if not (os.path.isdir(local) if local is not None else filesystems.exists(manifest_path)):
        return None
    manifest = finished_manifest(argument)
    if manifest is None:
        raise UsageError(
            f"{argument} is a folder without a finished recordbeam manifest ({MANIFEST}); "
            f"give its TFRecord files instead, e.g. '{filesystems.join(argument, '*.tfrecord*')}'"
        )
    splits = manifest.get("splits", {})
    return [
        RecordFile(filesystems.join(argument, shard["file"]), int(shard["examples"]),
                   int(shard["bytes"]))
        for name in sorted(splits)
        for shard in splits[name]["shards"]
    ]
