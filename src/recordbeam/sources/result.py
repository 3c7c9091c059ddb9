"""What every format's read transform returns: :class:`SourceRead`."""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam


class SourceRead(NamedTuple):
    """The PCollections a read transform (``ReadCoco``, ``ReadVoc``...) hands to
    :class:`~recordbeam.write.sink.WriteShards`. A named tuple, so Beam labels each output
    by its field name (``Read/records``...).

    Attributes:
        records: :class:`~recordbeam.records.ImageRecord`, one per example to write, typed
            as such so the writer's shuffle uses their compact coder.
        rejects: :class:`~recordbeam.records.Reject`, everything not written and why.
        counts: ``(name, n)`` pairs summed into the manifest's counts (may be empty).
        metadata: one dict: the ``task``, the label map or schema, and ``inputs`` (the
            files read, for the fingerprint).
        sizes: ``(split, bytes)`` per record when the source knows them before its records
            are built, so shards are planned earlier; None when it does not.
    """

    records: beam.PCollection
    rejects: beam.PCollection
    counts: beam.PCollection
    metadata: beam.PCollection
    sizes: beam.PCollection | None = None
