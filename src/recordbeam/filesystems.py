"""The few file operations the pipeline needs, on any Beam filesystem.

Data paths go through Beam's ``FileSystems`` only (local, ``gs://``, ``s3://``...), never
``open()`` or ``os.path``, so a pipeline that works on a laptop works on a cluster. Files
are opened and created through the filesystem Beam would pick, with local paths served by
one ``LocalFileSystem`` kept for the process (see :func:`_filesystem_of`).

Every path taken from a user or a dataset is a literal name, never a pattern: Beam's
``match`` (and its local and GCS ``delete``) reads ``*``, ``?`` and ``[`` as glob
characters, so a folder named ``photos [2019]`` is escaped (:func:`literal`) wherever it
becomes part of a pattern, and a single file is looked up without one
(:func:`file_metadata`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

from recordbeam import gcs_credentials, s3_client, store_access
from recordbeam.errors import DataError
from recordbeam.local.internals import streamed_match

_RAW = CompressionTypes.UNCOMPRESSED
_OCTETS = "application/octet-stream"

# Beam's LocalFileSystem holds no state (its pipeline options are unused), so one instance
# serves every local path: ``FileSystems.get_filesystem`` would build a new one per call
# after walking every FileSystem subclass (~15 µs, once per image read).
_LOCAL_FILESYSTEM = LocalFileSystem(pipeline_options=None)


def _filesystem_of(path: str) -> FileSystem:
    """The filesystem of ``path``: one ``LocalFileSystem`` for local paths, one S3 client
    per thread for ``s3://`` (:mod:`recordbeam.s3_client`), else the one Beam picks."""
    if local_path(path) is not None:
        return _LOCAL_FILESYSTEM
    _before_remote_access(path)
    if path.startswith("s3://"):
        shared = s3_client.for_this_thread()
        if shared is not None:
            return shared
    return FileSystems.get_filesystem(path)


def _before_remote_access(path: str) -> None:
    """A process's first ``gs://`` access finds its credentials at once and says which
    (:mod:`recordbeam.gcs_credentials`), instead of Beam's search with retries; its first
    access to a bucket checks that the bucket can be used (:mod:`recordbeam.store_access`),
    instead of minutes of retries against a store that cannot answer."""
    if path.startswith("gs://"):
        gcs_credentials.settle()
    store_access.check_once(path)


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
    return _filesystem_of(path).exists(path)


def list_files(directory: str) -> Iterator[FileMetadata]:
    """Every file below ``directory``, recursively, with size and modification time;
    streamed (see :func:`iter_match`)."""
    return iter_match(everything_below(directory))


def iter_match(pattern: str) -> Iterator[FileMetadata]:
    """The files a Beam glob matches, one at a time. User paths in ``pattern`` must be
    escaped (:func:`literal`, :func:`everything_below`, :func:`glob_below`).

    ``FileSystems.match`` returns a whole listing as one list, ~270 bytes per file (80
    MB for 300k images, measured; GBs for a bucket of millions). Local folders are walked
    here (:func:`_local_files_below`), following links to folders as to files; elsewhere,
    where Beam's own ``match`` lists through the filesystem's lister, the listing is
    streamed from that lister through the same filter
    (:func:`recordbeam.local.internals.streamed_match`, where Beam's private members are
    fenced); otherwise (filesystems with a ``match`` of their own, a Beam whose ``match``
    works another way) it goes through ``FileSystems.match``: the same files, as one list.
    """
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    _before_remote_access(pattern)
    where, rest = pattern_parts(pattern)
    if not rest:  # no wildcard: one file, or none
        found = file_metadata(where)
        if found is not None:
            yield found
        return
    if FileSystems.get_scheme(pattern) is None:  # a local path
        yield from _match_local(_LOCAL_FILESYSTEM, pattern, where)
    else:
        yield from match_listed(_filesystem_of(pattern), pattern, where)


def _match_local(system: FileSystem, pattern: str, where: str) -> Iterator[FileMetadata]:
    """:func:`iter_match` of a local pattern whose literal part is ``where``."""
    head, slash, _name = where.rpartition("/")
    files = _local_files_below((head or "/") if slash else ".")
    if not slash:  # a pattern of the working folder spells its files without "./"
        files = (FileMetadata(m.path[2:], m.size_in_bytes, m.last_updated_in_seconds)
                 for m in files)
    return system.match_files(files, pattern)


def match_listed(system: FileSystem, pattern: str, where: str) -> Iterator[FileMetadata]:
    """:func:`iter_match` through ``system``'s own listing: streamed where Beam's ``match``
    lists through its lister, else ``FileSystems.match``."""
    streamed = streamed_match(system, pattern, where)
    if streamed is not None:
        return streamed
    return (meta for result in FileSystems.match([pattern]) for meta in result.metadata_list)


def has_files(directory: str) -> bool:
    """Whether any file lies below ``directory``; stops at the first one found (a listing
    of a million-object bucket is not needed to know it is not empty)."""
    return next(iter_match(everything_below(directory)), None) is not None


def file_metadata(path: str) -> FileMetadata | None:
    """One file's metadata (path, size, modification time), as a listing gives it, or None
    when there is no such file. ``path`` is a literal name, never a pattern."""
    try:
        system = _filesystem_of(path)
        return system.metadata(path) if system.exists(path) else None
    except Exception:  # noqa: BLE001 - each filesystem reports a missing file its own way
        return None


def everything_below(directory: str) -> str:
    """The glob of every file below ``directory``, recursively, on any filesystem."""
    return literal(directory.rstrip("/")) + "/**"


def glob_below(directory: str, *parts: str) -> str:
    """``directory`` (a literal name) joined with glob ``parts`` (``"*"``, ``"*.txt"``)."""
    return join(literal(directory.rstrip("/")), *parts)


#: How :func:`literal` writes each glob character: as a one-character class. ``[`` cannot
#: be ``[[]``, which Beam's pattern translation (fnmatch's, from Python 2.7) hands to
#: ``re`` as a set opening with ``[`` (a FutureWarning, "possible nested set"); it is the
#: class of every character but ``[`` negated: ``[!`` NUL-``Z`` ``\\``-U+10FFFF ``]`` (Beam
#: doubles the backslash and turns ``!`` into ``^``).
_ESCAPES = {"*": "[*]", "?": "[?]", "[": "[!\x00-Z\\-\U0010ffff]"}
_UNESCAPES = {escaped: character for character, escaped in _ESCAPES.items()}


def literal(path: str) -> str:
    """``path`` as a Beam pattern matching that name only (``*``, ``?``, ``[`` escaped),
    on the local filesystem and on object stores alike."""
    if not any(c in path for c in "*?["):
        return path
    return "".join(_ESCAPES.get(c, c) for c in path)


def pattern_parts(pattern: str) -> tuple[str, str]:
    """``(name, rest)``: a pattern's leading literal part, :func:`literal`'s escapes
    undone, and the rest from its first wildcard on ("" when it has none)."""
    name, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c in "*?":
            return "".join(name), pattern[i:]
        if c == "[":
            escaped = next((e for e in _UNESCAPES if pattern.startswith(e, i)), None)
            if escaped is None:
                return "".join(name), pattern[i:]
            name.append(_UNESCAPES[escaped])
            i += len(escaped)
            continue
        name.append(c)
        i += 1
    return "".join(name), ""


#: How often one folder may be entered through symbolic links in one listing: links that
#: fan out (each folder linking twice to the next) would list the last one 2^depth times.
MAX_LINKED_ENTRIES = 32


class LinkFanOut(DataError):
    """A listing would enter one folder through more links than :data:`MAX_LINKED_ENTRIES`."""


def _local_files_below(folder: str) -> Iterator[FileMetadata]:
    """Every file below a local ``folder``, spelled from it, with size and modification
    time. Links to folders are followed as links to files are (what they lead to is the
    readers' to judge, see :class:`InputRoots`), except a link back to a folder the walk
    is in (a loop). Entries that vanish or cannot be read are left out, as Beam's listing
    leaves them.

    A folder's entries are taken from the open folder one at a time: holding them in a
    list (with the stat each caches) kept ~600 bytes per file in the lister's worker,
    600 MB for a folder of a million images."""
    import os  # local paths only

    entered: dict[str, int] = {}
    stack = [(folder, (os.path.realpath(folder),))]
    while stack:
        current, ancestors = stack.pop()
        try:
            listing = os.scandir(current)
        except OSError:
            continue
        with listing:
            for entry in _readable(listing):
                try:
                    if entry.is_dir():
                        real = (os.path.realpath(entry.path) if entry.is_symlink()
                                else os.path.join(ancestors[-1], entry.name))
                        if real not in ancestors:
                            _count_entry(entered, real, entry.path, folder)
                            stack.append((entry.path, (*ancestors, real)))
                    else:
                        stat = entry.stat()
                        yield FileMetadata(entry.path, stat.st_size, stat.st_mtime)
                except OSError:
                    continue


def _readable(listing: Iterator[Any]) -> Iterator[Any]:
    """A folder's entries until reading the folder fails part way (what was read stands)."""
    try:
        yield from listing
    except OSError:
        return


def _count_entry(entered: dict[str, int], real: str, path: str, top: str) -> None:
    entered[real] = entered.get(real, 0) + 1
    if entered[real] > MAX_LINKED_ENTRIES:
        raise LinkFanOut(
            f"{path}: listing {top} enters the folder {real} more than {MAX_LINKED_ENTRIES} "
            "times through symbolic links; links that fan out this way list it exponentially "
            "often. Remove the links that lead to it twice")


def relative_name(directory: str, path: str) -> str:
    """``path`` relative to ``directory`` with ``/`` separators."""
    prefix = directory.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not below {directory}")
    return path[len(prefix):]


def size_of(path: str) -> int | None:
    """Size in bytes of one file (no glob expansion), or None when it does not exist."""
    try:
        return _filesystem_of(path).size(path)
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
    its path (~5 µs a file instead of ~33).
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


class InputRoots:
    """The folders a run was given to read (``--input``, ``--images``, a manifest's folder):
    a local file whose real path, links resolved, lies in none of them is *outside* and is
    never opened (readers reject it ``outside_root``). Files on object stores, which have
    no links, are never outside. A run that allows reading outside has no InputRoots.

    The real paths are found where the files are read (on workers), once per process; a
    pickled InputRoots carries only the folders.
    """

    #: Resolved folders remembered per process at most (a dataset of many folders).
    MAX_REMEMBERED = 100_000

    def __init__(self, folders: Sequence[str]) -> None:
        self.folders = tuple(folders)
        self._real_roots: tuple[str, ...] | None = None
        self._real_folders: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"folders": self.folders}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folders"])

    def __repr__(self) -> str:
        return f"InputRoots({list(self.folders)!r})"

    def describe(self) -> str:
        """The folders, for messages."""
        return " or ".join(self.folders)

    def outside(self, path: str) -> str | None:
        """Where ``path`` really leads when that lies outside every folder, else None."""
        if len(self._real_folders) > self.MAX_REMEMBERED:
            self._real_folders.clear()
        real = local_real_path(path, self._real_folders)
        if real is None:
            return None
        if self._real_roots is None:
            found = (local_real_path(folder) for folder in self.folders)
            self._real_roots = tuple(r.rstrip("/") + "/" for r in found if r is not None)
        inside = any(real.startswith(root) or real + "/" == root for root in self._real_roots)
        return None if inside else real


def input_roots(folders: Sequence[str | None], allow_outside_root: bool) -> InputRoots | None:
    """The :class:`InputRoots` of the folders given (None entries left out), or None when
    the run reads files wherever links lead (``allow_outside_root``)."""
    return None if allow_outside_root else InputRoots([f for f in folders if f])


class RootAndImagesInputs:
    """For the options of a format read from ``root`` and, where given, an images folder
    ``images_dir`` of its own: their :meth:`input_roots`. The options hold
    ``root``, ``images_dir`` and ``allow_outside_root``."""

    def input_roots(self) -> InputRoots | None:
        """The folders this run reads (see :class:`InputRoots`)."""
        return input_roots((self.root, self.images_dir), self.allow_outside_root)


class LeadsOutside(DataError):
    """A file a command found in the folders it was given (a CVAT XML, a table, a YOLO
    ``data.yaml``...) that links lead outside them, and which it needs whole."""


def refuse_outside(roots: InputRoots | None, path: str, what: str) -> None:
    """Raise :class:`LeadsOutside` for ``path`` (a ``what``, for the message), unopened,
    when links lead it out of ``roots``."""
    target = roots.outside(path) if roots is not None else None
    if target is not None:
        raise LeadsOutside(
            f"{path}: symbolic links lead this {what} to {target!r}, outside "
            f"{roots.describe()}; it was not read (pass --allow-outside-root to read files "
            "links lead elsewhere)")


def delete(paths: list[str]) -> None:
    """Delete files, and folders with what they hold, that exist; missing ones are fine (a
    retried cleanup). Paths are literal names: Beam's own ``delete`` matches each path as
    a glob on the local filesystem (where it cannot match a folder whose name holds one)
    and on GCS, so local paths are removed here and GCS paths escaped."""
    present = [p for p in paths if exists(p)]
    remote = []
    for path in present:
        local = local_path(path)
        if local is not None:
            _remove_local(local)
        else:
            remote.append(literal(path) if FileSystems.get_scheme(path) == "gs"
                          and not path.endswith("/") else path)
    if remote:
        _filesystem_of(remote[0]).delete(remote)


def _remove_local(path: str) -> None:
    """What Beam's ``LocalFileSystem.delete`` does with one path, without its glob."""
    import os  # local paths only
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def remove_tree(directory: str) -> None:
    """Delete a folder and everything below it, on filesystems with or without folders."""
    if local_path(directory) is None:
        delete([m.path for m in list_files(directory)])
    delete([directory])


def rename(sources: list[str], destinations: list[str]) -> None:
    if sources:
        _filesystem_of(sources[0]).rename(sources, destinations)


def make_folder(path: str) -> None:
    """Create a folder (and its parents) unless it exists; filesystems without folders
    (object stores) need none."""
    if not exists(path):
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
