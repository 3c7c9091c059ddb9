"""Which duplicate groups ``recordbeam report`` draws, and the records it draws them from.

The report's pass over the records feeds a
:class:`~recordbeam.dataset.find_duplicates.DuplicateFinder`; the first groups (those in
more than one split first, then in SHA-256 order; near groups in their order) become one
row of thumbnails each, drawn from the written records, as the gallery is. The records are
fetched afterwards by shard and number, each shard read once up to the last one needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recordbeam.dataset.duplicate_groups import Group, Member, copies_to_name, split_rank
from recordbeam.dataset.find_duplicates import RecordPlace
from recordbeam.dataset.near_groups import NearGroup
from recordbeam.dataset.reader import SplitReader

__all__ = ["DUPLICATE_ROWS", "ROW_FIGURES", "DuplicateRow", "exact_rows", "fetch_examples",
           "near_rows"]

#: Groups drawn per kind (exact, near); the others are counted.
DUPLICATE_ROWS = 8
#: Copies drawn per group (one of each split at least).
ROW_FIGURES = 6


@dataclass(frozen=True)
class DuplicateRow:
    """One group as the report draws it: a caption and the copies to draw."""

    caption: str
    places: tuple[RecordPlace, ...]
    more: int  # copies not drawn


def _place(member: Member) -> RecordPlace:
    return RecordPlace(member.split, member.shard or "", member.record or 0)


def _splits_text(splits: Sequence[str], copies: int) -> str:
    if len(splits) > 1:
        return f"{copies} copies in {' and '.join(splits)}"
    return f"{copies} copies in {splits[0]}"


def exact_rows(groups: Sequence[Group], limit: int = DUPLICATE_ROWS) -> list[DuplicateRow]:
    """Rows for the first ``limit`` exact groups, those in several splits first."""
    ordered = sorted(groups, key=lambda g: (not g.across_splits, g.digest))
    rows = []
    for group in ordered[:limit]:
        drawn = copies_to_name([m for m in group.members if m.shard is not None], ROW_FIGURES)
        rows.append(DuplicateRow(f"{_splits_text(group.splits, group.size)} (sha256 "
                                 f"{group.digest[:12]}...)",
                                 tuple(_place(m) for m in drawn), group.size - len(drawn)))
    return rows


def near_rows(groups: Sequence[NearGroup], limit: int = DUPLICATE_ROWS) -> list[DuplicateRow]:
    """Rows for the first ``limit`` near-duplicate groups, those in several splits first."""
    ordered = sorted(groups, key=lambda g: not g.across_splits)
    rows = []
    for group in ordered[:limit]:
        members = [m for _digest, m in group.members]
        splits = sorted({m.split for m in members}, key=split_rank)
        caption = (f"{_splits_text(splits, group.size).replace('copies', 'pictures')}, at most "
                   f"{group.max_distance} bits apart")
        drawn = copies_to_name(members, ROW_FIGURES)
        rows.append(DuplicateRow(caption, tuple(_place(m) for m in drawn), group.size - len(drawn)))
    return rows


def fetch_examples(output_dir: str, places: Iterable[RecordPlace]
                   ) -> Mapping[RecordPlace, dict[str, np.ndarray]]:
    """The examples at ``places``, each shard read once, up to its last record wanted."""
    wanted: dict[tuple[str, str], set[int]] = {}
    for place in places:
        wanted.setdefault((place.split, place.shard), set()).add(place.record)
    readers: dict[str, SplitReader] = {}
    found: dict[RecordPlace, dict[str, Any]] = {}
    for (split, shard), numbers in sorted(wanted.items()):
        reader = readers.get(split)
        if reader is None:
            reader = readers[split] = SplitReader(output_dir, split)
        if shard not in reader.shard_files:
            continue
        path = reader.shard_paths[reader.shard_files.index(shard)]
        last = max(numbers)
        for number, example in enumerate(reader.iter_file(path)):
            if number in numbers:
                found[RecordPlace(split, shard, number)] = example
            if number >= last:
                break
    return found
