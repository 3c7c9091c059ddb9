"""The few file operations the pipeline needs, on any Beam filesystem.

Data paths go through Beam's ``FileSystems`` only (local, ``gs://``, ``s3://``...), never
``open()`` or ``os.path``, so a pipeline that works on a laptop works on a cluster. Files
are opened and created through the filesystem Beam would pick, with local paths served by
one ``LocalFileSystem`` kept for the process (see :func:`_filesystem_of`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

from recordbeam import gcs_credentials
from recordbeam.local.internals import streamed_match

_RAW = CompressionTypes.UNCOMPRESSED
_OCTETS = "application/octet-stream"

# Beam's LocalFileSystem holds no state (its pipeline options are unused), so one instance
# serves every local path: ``FileSystems.get_filesystem`` would build a new one per call
# after walking every FileSystem subclass (~15 µs, once per image read).
_LOCAL_FILESYSTEM = LocalFileSystem(pipeline_options=None)


def _filesystem_of(path: str) -> FileSystem:
    if local_path(path) is not None:
        return _LOCAL_FILESYSTEM
    _before_remote_access(path)
    return FileSystems.get_filesystem(path)


def _before_remote_access(path: str) -> None:
    """A process's first ``gs://`` access finds its credentials at once and says which
    (:mod:`recordbeam.gcs_credentials`), instead of Beam's search with retries."""
    if path.startswith("gs://"):
        gcs_credentials.settle()


def open_read(path: str) -> BinaryIO:
    """Open a file for reading, bytes as stored (Beam would otherwise gunzip ``*.gz``)."""
    return _filesystem_of(path).open(path, _OCTETS, compression_type=_RAW)


def create(path: str) -> BinaryIO:
    """Create (or replace) a file for writing, bytes as given."""
    return _filesystem_of(path).create(path, _OCTETS, compression_type=_RAW)


def read_bytes(path: str) -> bytes:
    with open_read(path) as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    with create(path) as f:
        f.write(data)


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def exists(path: str) -> bool:
    _before_remote_access(path)
    return FileSystems.exists(path)


def list_files(directory: str) -> Iterator[FileMetadata]:
    """Every file below ``directory``, recursively, with size and modification time;
    streamed (see :func:`iter_match`)."""
    return iter_match(everything_below(directory))


def iter_match(pattern: str) -> Iterator[FileMetadata]:
    """The files a Beam glob matches, one at a time.

    ``FileSystems.match`` returns a whole listing as one list, ~270 bytes per file (80
    MB for 300k images, measured; GBs for a bucket of millions). Where Beam's own
    ``match`` lists through the filesystem's lister, the listing is streamed from that
    lister through the same filter (:func:`recordbeam.local.internals.streamed_match`,
    where Beam's private members are fenced); otherwise (patterns without a glob,
    filesystems with a ``match`` of their own, a Beam whose ``match`` works another way)
    it goes through ``FileSystems.match``: the same files, as one list.
    """
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    _before_remote_access(pattern)
    streamed = streamed_match(FileSystems.get_filesystem(pattern), pattern)
    if streamed is not None:
        yield from streamed
        return
    for result in FileSystems.match([pattern]):
        yield from result.metadata_list


def has_files(directory: str) -> bool:
    """Whether any file lies below ``directory``; stops at the first one found (a listing
    of a million-object bucket is not needed to know it is not empty)."""
    _before_remote_access(directory)
    matches = FileSystems.match([everything_below(directory)], limits=[1])
    return any(result.metadata_list for result in matches)


def everything_below(directory: str) -> str:
    """The glob of every file below ``directory``, recursively, on any filesystem."""
    return directory.rstrip("/") + "/**"


def relative_name(directory: str, path: str) -> str:
    """``path`` relative to ``directory`` with ``/`` separators."""
    prefix = directory.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not below {directory}")
    return path[len(prefix):]


def size_of(path: str) -> int | None:
    """Size in bytes of one file (no glob expansion), or None when it does not exist."""
    _before_remote_access(path)
    try:
        return FileSystems.get_filesystem(path).size(path)
    except Exception:  # noqa: BLE001 - each filesystem reports a missing file its own way
        return None


def local_path(path: str) -> str | None:
    """The local path ``path`` names (``file://`` dropped), or None on another filesystem
    (``gs://``, ``s3://``...)."""
    if FileSystems.get_scheme(path) not in (None, "file"):
        return None
    return path.removeprefix("file://")


def nearest_existing_local(local: str) -> str:
    """The local path ``local`` when it exists, else its nearest parent that does: where a
    file or folder there would be created. Relative paths are joined to the working
    folder, not normalized: ``..`` after a symbolic link is the kernel's to resolve."""
    import os  # local paths only

    existing = local.rstrip("/") or "/"
    if not os.path.isabs(existing):
        existing = os.path.join(os.getcwd(), existing)
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    return existing


def local_real_path(path: str, real_folders: dict[str, str] | None = None) -> str | None:
    """``path`` with symbolic links resolved, for local paths; None on object stores
    (``gs://``, ``s3://``...), which have no links to follow.

    ``real_folders``, a dict the caller keeps, remembers the resolved folders: then a
    file that is not itself a link costs one ``lstat`` instead of one per component of
    its path (33 µs down to 5 µs a file here).
    """
    local = local_path(path)
    if local is None:
        return None
    import os  # local paths only
    import stat

    folder, slash, name = local.rpartition("/")
    if real_folders is None or not slash or name in ("", ".", ".."):
        return os.path.realpath(local)
    try:
        if stat.S_ISLNK(os.lstat(local).st_mode):
            return os.path.realpath(local)
    except OSError:
        return os.path.realpath(local)
    real_folder = real_folders.get(folder)
    if real_folder is None:
        real_folder = real_folders[folder] = os.path.realpath(folder or "/")
    return os.path.join(real_folder, name)


def outside_root(real_root: str, path: str, real_folders: dict[str, str] | None = None) -> str | None:
    """Where ``path`` really leads when links take it outside ``real_root`` (a path from
    :func:`local_real_path`), else None. Always None for object stores."""
    real = local_real_path(path, real_folders)
    if real is None or real == real_root:
        return None
    prefix = real_root if real_root.endswith("/") else real_root + "/"
    return None if real.startswith(prefix) else real


def delete(paths: list[str]) -> None:
    """Delete files that exist; missing ones are fine (a retried cleanup)."""
    present = [p for p in paths if exists(p)]
    if present:
        FileSystems.delete(present)


def remove_tree(directory: str) -> None:
    """Delete a folder and everything below it, on filesystems with or without folders."""
    delete([m.path for m in list_files(directory)])
    if exists(directory):
        FileSystems.delete([directory])


def rename(sources: list[str], destinations: list[str]) -> None:
    if sources:
        _before_remote_access(sources[0])
        FileSystems.rename(sources, destinations)


def make_folder(path: str) -> None:
    """Create a folder (and its parents) unless it exists; filesystems without folders
    (object stores) need none."""
    if not FileSystems.exists(path):
        FileSystems.mkdirs(path)


def leaves_root(name: str, *, urls_allowed: bool = False) -> str | None:
    """Why a path named by the input data would leave its root folder, or None.

    Absolute paths (``/x``, ``C:\\x``) and ``..`` components leave it; so do URLs
    (``gs://...``) unless the input kind allows them.
    """
    if "://" in name:
        return None if urls_allowed else "is an absolute path"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "is an absolute path"
    if ".." in name.replace("\\", "/").split("/"):
        return "contains '..'"
    return None


def prefix_below(folder: str, inner: str) -> str | None:
    """How the paths a listing of ``folder`` gives start when they lie in ``inner`` (with
    a trailing ``/``), or None when ``inner`` is not a folder strictly inside ``folder``.

    A listing spells paths the way ``folder`` is spelled (``data/a.jpg``, ``./data/a.jpg``
    or ``/abs/data/a.jpg``); local paths are compared as absolute paths, so ``inner`` may
    be spelled another way. Used to leave an output folder placed inside an input folder
    out of the input's listing.
    """
    base = folder.rstrip("/")
    if FileSystems.get_scheme(folder) not in (None, "file"):
        inside = inner.rstrip("/")
        return inside + "/" if inside.startswith(base + "/") else None
    import os  # local paths only: the launcher's own arguments, not data

    relative = os.path.relpath(os.path.abspath(inner.removeprefix("file://")),
                               os.path.abspath(base.removeprefix("file://") or "/"))
    if relative == "." or relative == ".." or relative.startswith("../"):
        return None
    return f"{base}/{relative.replace(os.sep, '/')}/"
