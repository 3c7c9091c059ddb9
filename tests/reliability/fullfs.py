"""``fullfs://``: the local disk behind a Beam filesystem that runs out of space.

``fullfs:///tmp/x`` is the local path ``/tmp/x``. Every file created through it counts
against one byte budget shared by the whole process (:func:`set_budget`); the write that
would go past it raises ``OSError(ENOSPC)``, as a full disk does. Importing this module
registers the scheme (Beam finds filesystems by subclass), so tests run it in Beam's
in-memory mode, where workers share the test's process and its budget.
"""

from __future__ import annotations

import errno
import os
import threading

from apache_beam.io.filesystem import FileMetadata, MatchResult
from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "fullfs"
PREFIX = SCHEME + "://"

_lock = threading.Lock()
_state = {"budget": None, "written": 0, "refused": 0, "files": {}}


def set_budget(nbytes: int | None) -> None:
    """Allow ``nbytes`` more bytes to be written in all (None: unlimited); resets counters."""
    with _lock:
        _state.update(budget=nbytes, written=0, refused=0, files={})


def refused_writes() -> int:
    """How many writes failed with ENOSPC since the last :func:`set_budget`."""
    return _state["refused"]


def bytes_by_file() -> dict[str, int]:
    """Bytes written per file name (last path part) since the last :func:`set_budget`."""
    return dict(_state["files"])


def url(local_path: str | os.PathLike[str]) -> str:
    return PREFIX + os.fspath(local_path)


def _local(path: str) -> str:
    return path[len(PREFIX) :] if path.startswith(PREFIX) else path


def _as_asked(asked: str, local_path: str) -> str:
    return PREFIX + local_path if asked.startswith(PREFIX) else local_path


class _FullFile:
    """A writable file that stops with ENOSPC once the shared budget is spent."""

    def __init__(self, raw, path: str) -> None:
        self._raw = raw
        self._name = path.rsplit("/", 1)[-1]

    def write(self, data) -> int:
        n = len(data)
        with _lock:
            budget = _state["budget"]
            if budget is not None and _state["written"] + n > budget:
                _state["refused"] += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            _state["written"] += n
            _state["files"][self._name] = _state["files"].get(self._name, 0) + n
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self._raw.close()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class FullFileSystem(LocalFileSystem):
    """Local files under the ``fullfs://`` scheme, with a byte budget on writes."""

    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath, *paths):
        return PREFIX + super().join(_local(basepath), *paths)

    def split(self, path):
        head, tail = super().split(_local(path))
        return PREFIX + head, tail

    def mkdirs(self, path):
        return super().mkdirs(_local(path))

    def match(self, patterns, limits=None):
        # Matched as local paths; the names come back as they were asked for.
        results = LocalFileSystem(None).match([_local(p) for p in patterns], limits)
        return [
            MatchResult(pattern, [FileMetadata(_as_asked(pattern, m.path), m.size_in_bytes,
                                               m.last_updated_in_seconds)
                                  for m in result.metadata_list])
            for pattern, result in zip(patterns, results, strict=True)
        ]

    def create(self, path, *args, **kwargs):
        return _FullFile(super().create(_local(path), *args, **kwargs), path)

    def open(self, path, *args, **kwargs):
        return super().open(_local(path), *args, **kwargs)

    def copy(self, sources, destinations):
        return super().copy([_local(p) for p in sources], [_local(p) for p in destinations])

    def rename(self, sources, destinations):
        return super().rename([_local(p) for p in sources], [_local(p) for p in destinations])

    def exists(self, path):
        return super().exists(_local(path))

    def size(self, path):
        return super().size(_local(path))

    def last_updated(self, path):
        return super().last_updated(_local(path))

    def checksum(self, path):
        return super().checksum(_local(path))

    def metadata(self, path):
        meta = super().metadata(_local(path))
        return FileMetadata(PREFIX + meta.path, meta.size_in_bytes, meta.last_updated_in_seconds)

    def delete(self, paths):
        return super().delete([_local(p) for p in paths])

    def report_lineage(self, path, lineage):
        return None
