"""What the files of an output folder are called: shard names, split names, metadata files.

Pure naming rules, no I/O and no Beam: the encoder protocol checks split names with them
on any worker, and :mod:`recordbeam.dataset.layout` (which lists and reads the folder)
builds on them.
"""

from __future__ import annotations

import re

from recordbeam.errors import UsageError
from recordbeam.tfrecord.framing import Compression, shard_suffix

MANIFEST = "manifest.json"
LABELS = "labels.txt"
REJECTS = "rejects.jsonl"
FAILED_REJECTS = "failed-run-rejects.jsonl"
TEMP_PREFIX = ".recordbeam-tmp-"
PREVIOUS_MANIFEST = "previous-manifest.json"  # in a temp folder: the manifest a commit replaces
COMMIT_PLAN = "commit.json"  # in a temp folder: the names a commit places
PLAN = "plan.json"  # in a temp folder: the planned input bytes, read by progress reports
DUPLICATES = "duplicates.jsonl"
NEAR_DUPLICATES = "near-duplicates.jsonl"
HASHES_FOLDER = "hashes"  # one <shard>.hashes per shard (dataset/image_hashes.py)

#: The metadata files of a finished folder (shards and TFDS files aside).
METADATA_FILES = frozenset({MANIFEST, LABELS, REJECTS, FAILED_REJECTS, DUPLICATES,
                            NEAR_DUPLICATES})

_SHARD_NAME = re.compile(
    r"^[A-Za-z0-9_.\-]+-\d{5}(-of-\d{5})?\.tfrecord(\.gz|\.zz)?(\.idx|\.keys)?$"
)
_INDEXED_SHARD = re.compile(r"^([A-Za-z0-9_]+)-(\d{5})\.tfrecord(\.gz|\.zz)?$")

#: The suffix of a shard's key file (:mod:`recordbeam.dataset.shard_keys`), written beside
#: each shard of a split kept by ``--incremental`` runs.
KEYS_SUFFIX = ".keys"
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_HASH_FILE = re.compile(rf"^{HASHES_FOLDER}/[A-Za-z0-9_.\-]+-\d{{5}}-of-\d{{5}}\.hashes$")


class OutputFolderError(UsageError):
    """The output folder cannot be written as asked (foreign files, bad split name)."""


def shard_name(split: str, index: int, count: int, compression: Compression) -> str:
    return f"{split}-{index:05d}-of-{count:05d}{shard_suffix(compression)}"


def indexed_shard_name(split: str, index: int, compression: Compression) -> str:
    """The name of shard ``index`` of a split that incremental runs keep:
    ``train-00012.tfrecord``. Its number never depends on how many shards the split has,
    so a shard that does not change keeps its name from one version to the next."""
    return f"{split}-{index:05d}{shard_suffix(compression)}"


def indexed_shard_number(name: str) -> int | None:
    """The number of an incremental run's shard (``train-00012.tfrecord`` -> 12), None for
    any other name (``train-00000-of-00004.tfrecord`` included)."""
    match = _INDEXED_SHARD.match(name)
    return int(match.group(2)) if match else None


def keys_file_name(shard: str) -> str:
    """The key file beside the shard ``shard``: ``train-00012.tfrecord.keys``."""
    return shard + KEYS_SUFFIX


#: The longest split name: shard files are named ``<split>-00000-of-00001.tfrecord.gz.idx``
#: (and a temporary suffix while written), in the 255 bytes file systems allow a name.
MAX_SPLIT_NAME = 128


def check_split_name(split: str) -> str:
    if not _SPLIT_NAME.match(split):
        raise OutputFolderError(
            f"split name {split!r} must be letters, digits and underscores (it becomes part of file names)"
        )
    if len(split) > MAX_SPLIT_NAME:
        raise OutputFolderError(
            f"split name {split[:20]}... is {len(split)} characters long; at most "
            f"{MAX_SPLIT_NAME} (it becomes part of file names)"
        )
    return split


def is_shard_file(name: str) -> bool:
    """A shard, its index or its key file, by name:
    ``{split}-{i:05d}-of-{n:05d}.tfrecord[.gz|.zz][.idx|.keys]``, or
    ``{split}-{i:05d}.tfrecord...`` for the shards incremental runs keep."""
    return bool(_SHARD_NAME.match(name))


def hash_file_name(shard_file: str) -> str:
    """The image hashes of a shard: ``train-00001-of-00004.tfrecord.gz`` ->
    ``hashes/train-00001-of-00004.hashes`` (beside the shards, a glob such as
    ``train-*`` must not find them)."""
    return f"{HASHES_FOLDER}/{shard_file.split('.tfrecord', 1)[0]}.hashes"


def is_hash_file(relative_path: str) -> bool:
    """A shard's image-hash file, by its path in the output folder."""
    return bool(_HASH_FILE.match(relative_path))
