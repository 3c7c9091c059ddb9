"""Fault injection for the reliability tests, from outside the product: a shard's temp file
whose writes fail part-way, as a disk or an object store fails under a worker.

The sink opens each shard's temp file through Beam's filesystem (``FileSystem.create``);
:func:`failing_creates` wraps a filesystem's ``create`` so that the temp file of shard
``shard`` (of any split) fails once ``after`` whole records reached it: the next write
raises :class:`InjectedFault` (or runs the ``fault`` given) and creates ``marker``. While
``marker`` exists no file fails, so a retry (or a rerun) goes through. :func:`install`
puts it on Beam's local filesystem in this process for one test (the test's
``monkeypatch`` undoes it): enough for in-memory runs and workers forked from here.
:func:`install_in_workers` also has every Python process started afterwards import this
module (``tests/in_new_processes.py``), which installs it there from :data:`VARIABLE`:
worker processes however the runner starts them.

Records are counted from the TFRecord framing of the bytes written, so shards must be
uncompressed.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from apache_beam.io.localfilesystem import LocalFileSystem

from recordbeam.dataset.names import TEMP_PREFIX

#: ``{"shard": ..., "after": ..., "marker": ...}``: what a worker importing this module fails.
VARIABLE = "RECORDBEAM_TEST_SHARD_FAULT"
_HEADER_BYTES = 12  # length (8) and its masked crc (4)
_FOOTER_BYTES = 4


class InjectedFault(RuntimeError):
    """The failure a test asked for; never raised outside these tests."""


class _Framing:
    """Follows TFRecord framing through the bytes written: how many records have begun."""

    def __init__(self) -> None:
        self.records_begun = 0
        self._header = b""
        self._to_skip = 0  # the rest of the current record's data and footer

    def at_record_boundary(self) -> bool:
        return not self._header and not self._to_skip

    def follow(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        at = 0
        while at < len(view):
            if self._to_skip:
                step = min(self._to_skip, len(view) - at)
                self._to_skip -= step
                at += step
                continue
            needed = _HEADER_BYTES - len(self._header)
            self._header += bytes(view[at:at + needed])
            at += needed
            if len(self._header) == _HEADER_BYTES:
                (length,) = struct.unpack_from("<Q", self._header)
                self._header = b""
                self._to_skip = length + _FOOTER_BYTES
                self.records_begun += 1


class _FailingFile:
    """A shard's temp file that runs ``fault`` instead of writing record ``after + 1``."""

    def __init__(self, raw: BinaryIO, after: int, fault: Callable[[_FailingFile], None]) -> None:
        self.raw = raw
        self.framing = _Framing()
        self._after = after
        self._fault = fault

    def write(self, data: Any) -> int:
        framing = self.framing
        if framing.at_record_boundary() and framing.records_begun >= self._after:
            self._fault(self)
        framing.follow(data)
        return self.raw.write(data)

    def __getattr__(self, name: str) -> Any:  # flush, close, closed...: the file's own
        return getattr(self.raw, name)

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.raw.close()


def failing_creates(create: Callable[..., BinaryIO], *, shard: int, after: int,
                    marker: str | os.PathLike[str],
                    fault: Callable[[_FailingFile], None] | None = None,
                    hold: bool = False) -> Callable[..., BinaryIO]:
    """``create`` (a filesystem's), whose temp files of shard ``shard`` fail after ``after``
    records while ``marker`` does not exist. ``fault(file)`` runs in place of the failing
    write; by default it creates ``marker`` and raises :class:`InjectedFault`. With
    ``hold``, it creates ``marker`` and holds the write instead, until ``<marker>.release``
    exists (at most a minute), so that a run is surely writing when a test stops it."""
    # {output}/.recordbeam-tmp-{run}/{split}-{shard}-of-{count}.tfrecord.{attempt}
    temp_shard = re.compile(
        rf"{re.escape(TEMP_PREFIX)}[^/]*/[^/]+-{shard:05d}-of-\d{{5}}\.tfrecord\.[0-9a-f]+$")
    marker = os.fspath(marker)

    def raise_fault(file: _FailingFile) -> None:
        Path(marker).write_bytes(b"fired\n")
        raise InjectedFault(
            f"test fault: shard {shard} failed after {file.framing.records_begun} records")

    def hold_write(file: _FailingFile) -> None:
        Path(marker).write_bytes(b"holding\n")
        released = time.monotonic() + 60
        while not os.path.exists(f"{marker}.release") and time.monotonic() < released:
            time.sleep(0.01)

    if hold:
        fault = hold_write

    def wrapped(self: Any, path: str, *args: Any, **kwargs: Any) -> BinaryIO:
        raw = create(self, path, *args, **kwargs)
        if not temp_shard.search(path) or os.path.exists(marker):
            return raw
        return _FailingFile(raw, after, fault or raise_fault)

    return wrapped


def install(monkeypatch: Any, *, shard: int, after: int, marker: str | os.PathLike[str]) -> None:
    """Make shard ``shard``'s temp files on the local disk fail after ``after`` records
    (:func:`failing_creates`), for the rest of the test."""
    monkeypatch.setattr(LocalFileSystem, "create", failing_creates(
        LocalFileSystem.create, shard=shard, after=after, marker=marker))


def install_in_workers(monkeypatch: Any, *, shard: int, after: int,
                       marker: str | os.PathLike[str]) -> None:
    """:func:`install`, here and in every Python process started from now on in the test."""
    import in_new_processes  # tests/: on the test process's path

    install(monkeypatch, shard=shard, after=after, marker=marker)
    monkeypatch.setenv(VARIABLE, json.dumps(
        {"shard": shard, "after": after, "marker": os.fspath(marker)}))
    in_new_processes.register(monkeypatch, __name__, str(Path(__file__).parent))


def holding_environment(marker: str | os.PathLike[str]) -> dict[str, str]:
    """What to add to a command's environment so that its shard 0 holds its second record
    (``hold``): it creates ``marker`` then, and writes on once ``<marker>.release`` exists
    (:func:`release`). A test stops or races a run surely while it writes, however fast
    or loaded the machine."""
    import in_new_processes  # tests/: on the test process's path

    held = {"shard": 0, "after": 1, "marker": os.fspath(marker), "hold": True}
    return {**in_new_processes.environment(__name__, str(Path(__file__).parent), os.environ),
            VARIABLE: json.dumps(held)}


def release(marker: str | os.PathLike[str]) -> None:
    """Let a write held by :func:`holding_environment` go on."""
    Path(f"{os.fspath(marker)}.release").touch()


def in_new_process() -> None:
    """In a process started by the test (``tests/startup``): fail as :data:`VARIABLE` says."""
    LocalFileSystem.create = failing_creates(LocalFileSystem.create,
                                             **json.loads(os.environ[VARIABLE]))
