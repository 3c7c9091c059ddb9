"""The output folder: which of its files are ours, and reading its manifest.

What the files are called is :mod:`recordbeam.dataset.names`.

A folder is *finished* when it holds ``manifest.json``; the manifest is always written
last and removed first, so a killed run never leaves a folder that looks finished.

A file is ours when our own records name it, never because its name looks like ours
(Beam's ``WriteToTFRecord`` also writes ``train-00000-of-00003.tfrecord``, a user may keep
``.recordbeam-tmp-notes/``): files listed in the manifest, the metadata files beside a
manifest, the temp folders and loose files the folder's lock records
(:mod:`recordbeam.dataset.folder_lock`), and what a commit that was cut short was placing
(each commit leaves the manifest it replaces and the names it places in its temp folder
until it finishes). Any other file is foreign: we refuse to write beside it unless asked
(``overwrite``) and we never delete it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from recordbeam import filesystems
from recordbeam.dataset import folder_lock
from recordbeam.dataset.manifest import FORMAT as MANIFEST_FORMAT
from recordbeam.dataset.manifest import check_label_maps_agree, parse_manifest, shape_problem
from recordbeam.dataset.names import (
    COMMIT_PLAN,
    DUPLICATES,
    FAILED_REJECTS,
    LABELS,
    MANIFEST,
    METADATA_FILES,
    NEAR_DUPLICATES,
    PREVIOUS_MANIFEST,
    REJECTS,
    TEMP_PREFIX,
    OutputFolderError,
    check_split_name,
    hash_file_name,
    is_hash_file,
    is_shard_file,
    keys_file_name,
    shard_name,
)
from recordbeam.dataset.tfds import files_for as tfds_files_for
from recordbeam.dataset.tfds import is_tfds_file

# The naming rules live in recordbeam.dataset.names (no Beam); they are named here too
# because callers that read and write a folder use both.
__all__ = [
    "COMMIT_PLAN", "FAILED_REJECTS", "LABELS", "MANIFEST", "PREVIOUS_MANIFEST", "REJECTS",
    "TEMP_PREFIX", "OutputFolderError", "check_labels_agree", "check_split_name",
    "check_creatable", "check_writable", "existing_files", "is_ours", "is_shard_file",
    "finished_manifest", "known_files", "read_manifest", "recorded_manifest", "shard_name",
]


def is_ours(relative_path: str) -> bool:
    """True for names a recordbeam run gives its files (shards, indexes, metadata, temp
    files): for advice about a file named to a command. Whether a file in an output folder
    *is* ours is :func:`known_files`'s to say, from our records."""
    top = relative_path.split("/", 1)[0]
    if top.startswith(TEMP_PREFIX):
        return True
    return is_hash_file(relative_path) or "/" not in relative_path and (
        relative_path in METADATA_FILES or is_shard_file(relative_path)
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

    Even with ``overwrite`` those files are left alone; it only allows writing beside them
    (a foreign file with exactly the name of one we write is replaced).
    """
    if "://" not in output_dir and _is_plain_file(output_dir):
        raise OutputFolderError(f"{output_dir} is a file; --output must be a folder")
    blocking = _non_files_named_like_ours(output_dir)
    if blocking:
        named = ", ".join(f"{name} (a {kind})" for name, kind in blocking[:3])
        more = f" and {len(blocking) - 3} more" if len(blocking) > 3 else ""
        raise OutputFolderError(
            f"{output_dir} holds {named}{more}, named like files recordbeam writes there: its "
            "commit could not put its files in place; move them away or choose another folder")
    files = existing_files(output_dir)
    ours = known_files(output_dir, files)
    foreign = [p for p in files if p not in ours]
    if foreign and not overwrite:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputFolderError(
            f"{output_dir} holds files recordbeam did not write ({shown}). Choose an empty or "
            "recordbeam-only folder, or pass --overwrite to write beside them (they are never deleted)."
        )


def _non_files_named_like_ours(output_dir: str) -> list[tuple[str, str]]:
    """``(name, what it is)`` of each entry of a local output folder that is not a file (a
    folder, pipe, socket, broken link) but has the name of a file a run writes there: its
    commit could not rename a file into its place. Object stores have no such entries."""
    import os  # the local launcher's own argument, not a data path
    import stat

    local = filesystems.local_path(output_dir)
    if local is None or not os.path.isdir(local):
        return []
    found = []
    with os.scandir(local) as entries:
        for entry in entries:
            if not is_ours(entry.name) or entry.name.startswith(TEMP_PREFIX) or entry.is_file():
                continue
            try:
                mode = entry.stat().st_mode
            except OSError:
                found.append((entry.name, "broken symbolic link"))
                continue
            kind = ("folder" if stat.S_ISDIR(mode) else "pipe" if stat.S_ISFIFO(mode)
                    else "socket" if stat.S_ISSOCK(mode) else "special file")
            found.append((entry.name, kind))
    return sorted(found)


def _is_plain_file(path: str) -> bool:
    import os

    return os.path.isfile(path)  # the local launcher's own argument, not a data path


def check_creatable(output_dir: str) -> None:
    """Refuse a local output folder that cannot be created or written, before the job reads
    anything (the write stage would find it after the whole read). For local runs: on a
    cluster the folder is the workers' to write, wherever it is mounted there. Object
    stores are never probed; only a write tells their permissions.

    Probes with an empty folder created and removed in the output folder, or in its
    nearest existing parent: nothing is left behind."""
    local = filesystems.local_path(output_dir)
    if local is None:
        return
    existing = filesystems.nearest_existing_local(local)
    problem = _name_too_long(local, existing) or _unwritable(existing)
    if problem:
        raise OutputFolderError(f"cannot write the output folder {output_dir}: {problem}; "
                                "choose a folder that can be created and written")


def _unwritable(existing: str) -> str | None:
    """Why no folder can be made in the existing local folder ``existing``, or None."""
    import os  # the local launcher's own argument, not a data path
    import tempfile

    if os.path.islink(existing) and not os.path.exists(existing):
        return f"{existing} is a broken symbolic link"
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".recordbeam-probe-", dir=existing))
    except OSError as error:
        return f"{error.strerror or error} in {existing}"
    return None


#: Bytes the paths below an output folder add to it at most: the temporary folder, a shard
#: of the longest split name with its suffixes, and the suffix of a file being written.
_NAMES_INSIDE = 256


def _name_too_long(local: str, existing: str) -> str | None:
    """What to say when a folder of ``local`` still to be created (below ``existing``) has
    a name longer than the file system allows, or when the paths of the files written in
    it would be, else None."""
    import os  # the local launcher's own argument, not a data path

    try:
        longest, whole = os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        longest, whole = 255, 4096
    size = len(os.fsencode(os.path.abspath(local)))
    if size + _NAMES_INSIDE > whole:
        return (f"its path is {size} bytes long; with the temporary folder and shard names "
                f"inside it, paths would pass the {whole} bytes this file system allows")
    missing = os.path.relpath(os.path.abspath(local), os.path.abspath(existing))
    for part in missing.split(os.sep):
        size = len(os.fsencode(part))
        if size > longest:
            return (f"the folder name {part[:40]}... is {size} bytes long, more than the "
                    f"{longest} this file system allows in one name")
    return None


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        value = json.loads(filesystems.read_bytes(path))
    except (ValueError, OSError):
        return None
    return value if isinstance(value, dict) else None


def read_manifest(output_dir: str) -> dict[str, Any] | None:
    """The manifest of a finished output, or None when the folder is not finished."""
    path = filesystems.join(output_dir, MANIFEST)
    if not filesystems.exists(path):
        return None
    manifest = _read_json(path)
    return manifest if _is_ours(manifest) else None


def _is_ours(manifest: dict[str, Any] | None) -> bool:
    """Whether ``manifest`` is a recordbeam manifest whose shards lie in its folder (one
    naming files elsewhere claims nothing there, and is no finished output). What the
    readers add for a whole output (a shard at least, each with its counts) is theirs to
    ask: a folder is ours to replace either way."""
    return (bool(manifest) and manifest.get("format") == MANIFEST_FORMAT
            and not shape_problem(manifest, complete=False))


def finished_manifest(output_dir: str) -> dict[str, Any] | None:
    """For the commands that read a finished folder: its manifest, or None when the folder
    holds no ``manifest.json``. Unlike :func:`read_manifest` (the writer's question, "is
    it finished?"), a manifest that is there but unreadable raises
    :class:`recordbeam.dataset.manifest.DamagedManifest` naming it."""
    path = filesystems.join(output_dir, MANIFEST)
    if not filesystems.exists(path):
        return None
    return parse_manifest(filesystems.read_bytes(path), path)


def recorded_manifest(output_dir: str, files: list[str] | None = None) -> dict[str, Any] | None:
    """``manifest.json``, or, when a commit was cut short after removing it, the manifest
    that commit was replacing (kept in its temp folder, which the lock records)."""
    manifest = read_manifest(output_dir)
    if manifest is not None:
        return manifest
    files = existing_files(output_dir) if files is None else files
    for path in _in_recorded_temp_folders(output_dir, files, PREVIOUS_MANIFEST):
        full = filesystems.join(output_dir, path)
        previous = _read_json(full)
        if _is_ours(previous):
            return previous
    return None


def _in_recorded_temp_folders(output_dir: str, files: list[str], name: str) -> list[str]:
    """``<temp folder>/<name>`` for each temp folder the lock records that holds ``name``."""
    temp_folders, _loose = folder_lock.owned_names(_lock_record(output_dir))
    return sorted(p for p in files if p.split("/", 1)[0] in temp_folders
                  and p.endswith("/" + name) and p.count("/") == 1)


def _lock_record(output_dir: str) -> folder_lock.LockRecord | None:
    """The lock's record; None for none, or for a file of its name we did not write
    (:func:`folder_lock.read` refuses that one where it matters: taking the lock)."""
    try:
        return folder_lock.read(output_dir)
    except OutputFolderError:
        return None


def known_files(output_dir: str, files: list[str] | None = None) -> set[str]:
    """The files of ``output_dir`` that our records say we wrote (see the module doc)."""
    files = existing_files(output_dir) if files is None else files
    record = _lock_record(output_dir)
    temp_folders, loose = folder_lock.owned_names(record)
    known = {p for p in files if p.split("/", 1)[0] in temp_folders or p in loose}
    if record is not None:
        known.add(folder_lock.LOCK)
    names: set[str] = set()
    manifest = recorded_manifest(output_dir, files)
    if manifest is not None:
        names |= {MANIFEST, LABELS, REJECTS, DUPLICATES, NEAR_DUPLICATES} | _listed_files(manifest)
    for path in _in_recorded_temp_folders(output_dir, files, COMMIT_PLAN):
        plan = _read_json(filesystems.join(output_dir, path)) or {}
        names |= set(plan.get("files", []))
    # An incremental commit cut short after its manifest: the files of the version it
    # replaced are still there, listed by the manifest its temp folder keeps.
    for path in _in_recorded_temp_folders(output_dir, files, PREVIOUS_MANIFEST):
        previous = _read_json(filesystems.join(output_dir, path))
        if _is_ours(previous):
            names |= _listed_files(previous)
    return known | {p for p in files if p in names}


def _listed_files(manifest: dict[str, Any]) -> set[str]:
    """The shards a manifest lists with their index, key and hash files, and its TFDS
    files."""
    names = set()
    for entry in manifest.get("splits", {}).values():
        for shard in entry.get("shards", []):
            names |= {shard["file"], shard["file"] + ".idx", keys_file_name(shard["file"])}
            if entry.get("image_hashes"):
                names.add(hash_file_name(shard["file"]))
    return names | set(tfds_files_for(manifest))  # dataset_info.json, features.json, *.labels.txt


def check_labels_agree(output_dir: str, owned: Iterable[str],
                       labels: Callable[[], Mapping[str, Any] | None]) -> None:
    """Before a run: raise :class:`recordbeam.dataset.manifest.LabelMapMismatch` when
    ``output_dir`` holds splits this run does not write and ``labels()`` (the run's
    ``label_map`` / ``category_ids``, or None when they cannot be known before the run)
    disagrees with theirs. ``labels`` is called only when there are such splits: it may
    have to read a file or list a folder.
    """
    owned = set(owned)
    previous = recorded_manifest(output_dir)
    if previous is None or not set(previous.get("splits", {})) - owned:
        return
    found = labels()
    if found is not None:
        check_label_maps_agree(previous, found, owned, output_dir)
