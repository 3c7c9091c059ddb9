"""Fault injection for the reliability tests, from the test side: a shard writer that fails
part-way through one shard, installed in place of the sink's own.

The product's write loop has no hook for this; :class:`FailingShardWriter` subclasses the
sink's shard-writing DoFn and wraps the record writer it opens, so a test can make "a
worker fails mid-shard" happen where it would happen for real: after some records reached
the shard's temp file. :func:`install` puts it into every ``WriteShards`` built afterwards
(the test's ``monkeypatch`` undoes it). Worker processes started by the run must be able
to import this module (see :func:`importable_by_workers`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from recordbeam.tfrecord.framing import RecordWriter
from recordbeam.write import sink


class InjectedFault(RuntimeError):
    """The failure a test asked for; never raised outside these tests."""


class FailingShardWriter(sink._WriteShard):
    """Writes shards as the sink does, except shard ``shard`` of a split: once ``after``
    records reached its temp file, raises :class:`InjectedFault` and creates ``marker``.
    While ``marker`` exists it fails no more, so a retry (or a rerun) goes through."""

    def __init__(self, *args: Any, shard: int, after: int, marker: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shard = shard
        self.after = after
        self.marker = marker
        self._current: int | None = None

    def process(self, group):
        (_split, index, _count), _packed = group
        self._current = index
        yield from super().process(group)

    def _record_writer(self, file: BinaryIO, index: TextIO | None) -> RecordWriter:
        writer = super()._record_writer(file, index)
        if self._current != self.shard or os.path.exists(self.marker):
            return writer
        write_chunks = writer.write_chunks

        def write_then_fail(chunks) -> None:
            if writer.records_written >= self.after:
                Path(self.marker).write_bytes(b"fired\n")
                raise InjectedFault(
                    f"test fault: shard {self.shard} failed after {writer.records_written} records")
            write_chunks(chunks)

        writer.write_chunks = write_then_fail
        return writer


def install(monkeypatch: Any, *, shard: int, after: int, marker: str | os.PathLike[str]) -> None:
    """Make every ``WriteShards`` built from now on write with a :class:`FailingShardWriter`."""
    monkeypatch.setattr(sink, "_WriteShard", functools.partial(
        FailingShardWriter, shard=shard, after=after, marker=os.fspath(marker)))


def importable_by_workers(monkeypatch: Any) -> None:
    """Let worker processes started from now on import this module (by its name, as the
    pickled DoFn refers to it): its folder goes on their ``PYTHONPATH``."""
    here = str(Path(__file__).parent)
    monkeypatch.syspath_prepend(here)
    paths = [here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
