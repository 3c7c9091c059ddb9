"""The output folder: what our files are called, and which files are ours.

A folder is *finished* when it holds ``manifest.json``; the manifest is always written
last and removed first, so a killed run never leaves a folder that looks finished.
Files that do not match our names are foreign: we refuse to write beside them unless
asked (``overwrite``) and we never delete them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from recordbeam import filesystems
from recordbeam.framing import Compression, shard_suffix
from recordbeam.tfds_metadata import is_tfds_file

MANIFEST = "manifest.json"
LABELS = "labels.txt"
REJECTS = "rejects.jsonl"
FAILED_REJECTS = "failed-run-rejects.jsonl"
TEMP_PREFIX = ".recordbeam-tmp-"

_SHARD_NAME = re.compile(
    r"^[A-Za-z0-9_.\-]+-\d{5}-of-\d{5}\.tfrecord(\.gz|\.zz)?(\.idx)?$"
)
_OUR_FILES = {MANIFEST, LABELS, REJECTS, FAILED_REJECTS}
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class OutputFolderError(Exception):
    """The output folder cannot be written as asked (foreign files, bad split name)."""


def shard_name(split: str, index: int, count: int, compression: Compression) -> str:
    return f"{split}-{index:05d}-of-{count:05d}{shard_suffix(compression)}"


def check_split_name(split: str) -> str:
    if not _SPLIT_NAME.match(split):
        raise OutputFolderError(
            f"split name {split!r} must be letters, digits and underscores (it becomes part of file names)"
        )
    return split


def is_shard_file(name: str) -> bool:
    """A shard or its index, by name: ``{split}-{i:05d}-of-{n:05d}.tfrecord[.gz|.zz][.idx]``."""
    return bool(_SHARD_NAME.match(name))


def is_ours(relative_path: str) -> bool:
    """True for files a recordbeam run writes (shards, indexes, metadata, temp files)."""
    top = relative_path.split("/", 1)[0]
    if top.startswith(TEMP_PREFIX):
        return True
    return "/" not in relative_path and (
        relative_path in _OUR_FILES or bool(_SHARD_NAME.match(relative_path))
        or is_tfds_file(relative_path)  # dataset_info.json, features.json, *.labels.txt
    )


def existing_files(output_dir: str) -> list[str]:
    """Relative paths of every file under ``output_dir`` (empty when it does not exist).

    Listed, never ``exists()``-checked: on object stores a "folder" is only a prefix.
    """
    return sorted(
        filesystems.relative_name(output_dir, m.path) for m in filesystems.list_files(output_dir)
    )


def check_writable(output_dir: str, *, overwrite: bool) -> None:
    """Refuse an output folder holding files that are not ours, unless ``overwrite``.

    Even with ``overwrite`` those files are left alone; it only allows writing beside them.
    """
    foreign = [p for p in existing_files(output_dir) if not is_ours(p)]
    if foreign and not overwrite:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputFolderError(
            f"{output_dir} holds files recordbeam did not write ({shown}). Choose an empty or "
            "recordbeam-only folder, or pass --overwrite to write beside them (they are never deleted)."
        )


def read_manifest(output_dir: str) -> dict[str, Any] | None:
    """The manifest of a finished output, or None when the folder is not finished."""
    path = filesystems.join(output_dir, MANIFEST)
    if not filesystems.exists(path):
        return None
    return json.loads(filesystems.read_bytes(path))
