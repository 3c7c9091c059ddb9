"""Listing the folder a source reads: every file below it, less the output folder's.

Users put the output folder inside the images folder (``--output images/records``); its
shards are neither images nor inputs, so every source leaves them out of its listing and
of the inputs fingerprint, the same way.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from recordbeam import filesystems


def skipped_prefix(root: str, skip_below: str | None) -> str | None:
    """The path prefix of ``skip_below`` when it lies inside ``root``, for :func:`is_skipped`;
    None when nothing is to be skipped."""
    return filesystems.prefix_below(root, skip_below) if skip_below else None


def is_skipped(path: str, prefix: str | None) -> bool:
    """True for a listed path inside the skipped (output) folder."""
    return prefix is not None and path.startswith(prefix)


class ListFilesBelow(beam.PTransform):
    """Every file below ``root`` as ``FileMetadata``, less those under ``prefix``
    (:func:`skipped_prefix`). An empty folder lists nothing (the source says what that
    means), it is no error here."""

    def __init__(self, root: str, prefix: str | None) -> None:
        super().__init__()
        self._root = root
        self._prefix = prefix

    def expand(self, pbegin):
        # Streamed on one worker (filesystems.iter_match): Beam's MatchFiles holds the whole
        # listing there as one list, ~270 bytes per file (2.7 GB for 10M images).
        files = (
            pbegin
            | "Folder" >> beam.Impulse()
            | "Match" >> beam.FlatMap(lambda _, glob: filesystems.iter_match(glob),
                                      filesystems.everything_below(self._root))
            .with_output_types(Any)  # FileMetadata
        )
        if self._prefix:
            files = files | "SkipOutputFolder" >> beam.Filter(
                lambda meta, prefix: not is_skipped(meta.path, prefix), self._prefix)
        return files


class MatchFile(beam.PTransform):
    """The ``FileMetadata`` of one named file (nothing when it is not there), for the inputs
    fingerprint. The name is literal: Beam's ``MatchFiles`` would read ``*?[`` in it as a
    glob (a manifest in ``photos [2019]/`` would match nothing)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, pbegin):
        return (pbegin
                | "Name" >> beam.Impulse()
                | "Metadata" >> beam.FlatMap(
                    lambda _, path: [m for m in [filesystems.file_metadata(path)] if m is not None],
                    self._path).with_output_types(Any))
