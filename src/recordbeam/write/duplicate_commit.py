"""The commit's share of duplicate finding: ``duplicates.jsonl`` and
``near-duplicates.jsonl`` staged in the temp folder (only when they hold a group: no
file means no group), and the manifest's ``duplicates``.

``duplicates.jsonl`` describes the whole folder: the run's groups (parts written by the
bucket tasks, each in SHA-256 order, joined in bucket order) merged with the previous
file's copies in the splits the run keeps (:func:`merge_group_lines`), streamed line by
line. ``near-duplicates.jsonl`` is the run's when it looked for near duplicates (its
groups span the kept splits whose hash files hold perceptual hashes); otherwise the
previous file's groups, less the copies in the splits the run writes. No Beam.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recordbeam import filesystems
from recordbeam.dataset import manifest, names
from recordbeam.dataset.duplicate_groups import (
    DuplicateCounts,
    Group,
    copies_to_name,
    merge_group_lines,
    split_rank,
)
from recordbeam.dataset.near_groups import NearGroup
from recordbeam.images.perceptual_hash import NEAR_THRESHOLD
from recordbeam.write.duplicates import EarlierSplits
from recordbeam.write.planning import ShardOptions

__all__ = ["StagedDuplicates", "stage_duplicates"]

#: Groups across splits named in the manifest's summary (the file has them all).
_FIRST_ACROSS = 3


@dataclass(frozen=True)
class StagedDuplicates:
    """Files written into the temp folder to rename into place, and the manifest's
    ``duplicates`` entry (None when the folder has no duplicate lists)."""

    files: tuple[str, ...]
    summary: dict[str, Any] | None


def stage_duplicates(output_dir: str, temp_dir: str, owned: Sequence[str],
                     options: ShardOptions, finding: bool, earlier: EarlierSplits,
                     parts: Iterable[tuple[int, str]], near: Sequence[Mapping[str, Any]],
                     unreadable: Iterable[str]) -> StagedDuplicates:
    """Stage the two lists for a run that wrote ``owned`` (``finding``: it looked for
    duplicates; ``parts``, ``near`` and ``unreadable`` are what its stages gave)."""
    previous = filesystems.join(output_dir, names.DUPLICATES)
    had_list = filesystems.exists(previous)
    if not finding and not had_list:
        return StagedDuplicates((), None)
    new_lines = _lines_of(path for _bucket, path in sorted(parts)) if finding else iter(())
    old_lines = _lines_of([previous]) if had_list else iter(())
    counts = DuplicateCounts()
    with _LinesFile(filesystems.join(temp_dir, names.DUPLICATES)) as out:
        for line in merge_group_lines(new_lines, old_lines, owned):
            counts.add(Group.from_line(line), keep_first=_FIRST_ACROSS)
            out.write(line)
    files = [names.DUPLICATES] if counts.groups else []
    summary: dict[str, Any] = {"mode": options.duplicates, **counts.to_json()}
    if counts.first_across:
        summary["first_across_splits"] = [_written(g) for g in counts.first_across]
    not_compared = set(earlier.without_hashes) | {_split_of_hash_file(p) for p in unreadable}
    if finding and not_compared:
        summary["not_compared"] = sorted(not_compared)
    near_summary = _stage_near(output_dir, temp_dir, owned, options, earlier, near)
    if near_summary is not None:
        if near_summary["groups"]:
            files.append(names.NEAR_DUPLICATES)
        summary["near"] = near_summary
    return StagedDuplicates(tuple(files), summary)


class _LinesFile:
    """A text file written line by line, created at its first line: an empty list is
    no file (Beam's S3 filesystem cannot write an empty one)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._file: Any = None

    def write(self, line: str) -> None:
        if self._file is None:
            self._file = filesystems.create(self._path)
        self._file.write((line + "\n").encode("utf-8"))

    def __enter__(self) -> _LinesFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()


def _written(group: Group) -> dict[str, Any]:
    """A group across splits as the summary names it: its written copies."""
    written = [m for m in group.members if not m.dropped]
    splits = sorted({m.split for m in written}, key=split_rank)
    return {"sha256": group.digest, "splits": splits,
            "sources": [f"{m.split}: {m.source}" for m in copies_to_name(written, 4)]}


def _stage_near(output_dir: str, temp_dir: str, owned: Sequence[str], options: ShardOptions,
                earlier: EarlierSplits, near: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``near-duplicates.jsonl`` staged (the run's, or the previous one's groups less
    ``owned``); its summary, or None when there is none."""
    if options.near_duplicates:
        found = dict(near[0]) if near else {"groups": 0, "images": 0, "across_splits": 0,
                                            "pairs": 0, "pairs_not_grouped": 0}
        found.pop("path", None)  # written there when it found groups
        summary = {**found, "threshold": NEAR_THRESHOLD}
        if earlier.without_near or earlier.without_hashes:
            summary["not_compared"] = sorted(set(earlier.without_near) | set(earlier.without_hashes))
        return summary
    previous = filesystems.join(output_dir, names.NEAR_DUPLICATES)
    if not filesystems.exists(previous):
        return None
    kept = [g for g in map(NearGroup.from_line, _lines_of([previous]))]
    kept = [_without(g, set(owned)) for g in kept]
    kept = [g for g in kept if g.size > 1]
    with _LinesFile(filesystems.join(temp_dir, names.NEAR_DUPLICATES)) as out:
        for group in kept:
            out.write(group.to_line())
    return {"groups": len(kept), "images": sum(g.size for g in kept),
            "across_splits": sum(1 for g in kept if g.across_splits), "kept_from_earlier_runs": True}


def _without(group: NearGroup, owned: set[str]) -> NearGroup:
    members = tuple((d, m) for d, m in group.members if m.split not in owned)
    splits = tuple(s for s in group.splits if s not in owned)
    return NearGroup(members, len(members), splits, group.max_distance)


def _lines_of(paths: Iterable[str]) -> Iterator[str]:
    """The lines of the files ``paths``, one file after the other, read as a stream."""
    for path in paths:
        with filesystems.open_read(path) as f:
            for raw in f:
                line = raw.decode("utf-8").rstrip("\n")
                if line.strip():
                    yield line


def _split_of_hash_file(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].removesuffix(".hashes")
    return manifest.split_of_shard_file(stem)

