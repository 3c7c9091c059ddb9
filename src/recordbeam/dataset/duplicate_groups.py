"""Exact duplicates: images with the same bytes, grouped, and ``duplicates.jsonl``.

A *group* is every copy of one image (one SHA-256) among the examples of an output folder,
across all its splits, with at least two members. Each member says its split and source,
and, when written, its shard and record number; a copy a run dropped
(``--duplicates drop``) says so instead. ``duplicates.jsonl`` holds one group per line,
lines in SHA-256 order, each line's members in split order (:func:`split_rank`), then by
shard and record. A group of more than :data:`MAX_LISTED_MEMBERS` copies lists that many
and counts all of them (``size``).

Which copy a drop keeps is decided here too (:func:`copies_to_drop`), from the members'
splits and salted identity hashes only, so every runner keeps the same one. No Beam.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recordbeam.dataset.image_hashes import (
    HashFile,
    HashTable,
    encode_hash_file,
    repeated_digests,
)
from recordbeam.records import DROP_MODES, DUPLICATE_MODES

__all__ = [
    "DROP_MODES",
    "Copy",
    "DropPlan",
    "MAX_LISTED_MEMBERS",
    "MODES",
    "DuplicateCounts",
    "Group",
    "Member",
    "copies_to_drop",
    "copies_to_name",
    "exact_groups",
    "merge_group_lines",
    "split_rank",
]

MODES = DUPLICATE_MODES

#: Members listed per group line; larger groups are counted whole (``size``).
MAX_LISTED_MEMBERS = 100


def split_rank(split: str) -> tuple[int, str]:
    """The order of splits when one must come first: ``train*`` first, ``test*`` last,
    every other name between, each rank in name order. A drop keeps the copy in the
    earliest split."""
    lowered = split.lower()
    rank = 0 if lowered.startswith("train") else 2 if lowered.startswith("test") else 1
    return rank, split


def copies_to_name(members: Sequence[Member], limit: int) -> list[Member]:
    """The copies of one image a message names, in the order of ``members``: the first
    copy of each split, then the others in order, ``limit`` in all, or one per split
    when there are more splits than that. An image in two splits is named in both, even
    when one of them holds many copies."""
    firsts = set({m.split: i for i, m in reversed(list(enumerate(members)))}.values())
    others = [i for i in range(len(members)) if i not in firsts]
    named = firsts | set(others[:max(limit - len(firsts), 0)])
    return [m for i, m in enumerate(members) if i in named]


@dataclass(frozen=True, slots=True)
class Member:
    """One copy of an image: its split and source, and where it was written (``shard``
    and ``record``; None for a copy that was dropped)."""

    split: str
    source: str
    shard: str | None = None
    record: int | None = None
    dropped: bool = False

    def identity(self) -> bytes:
        """16 bytes that tell this copy from any other."""
        return hashlib.blake2b(repr((self.split, self.source, self.shard, self.record,
                                     self.dropped)).encode(), digest_size=16).digest()

    def order(self) -> tuple[Any, ...]:
        return (split_rank(self.split), self.dropped, self.shard or "", self.record or 0,
                self.source)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"split": self.split, "source": self.source}
        if self.shard is not None:
            out["shard"] = self.shard
            out["record"] = self.record
        if self.dropped:
            out["dropped"] = True
        return out

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> Member:
        return Member(str(value["split"]), str(value["source"]), value.get("shard"),
                      value.get("record"), bool(value.get("dropped", False)))


@dataclass(frozen=True)
class Group:
    """Every copy of one image: ``digest`` (hex SHA-256), ``members`` in order (at most
    :data:`MAX_LISTED_MEMBERS`), ``size`` (all of them) and ``splits`` (every split
    holding one, in order)."""

    digest: str
    members: tuple[Member, ...]
    size: int
    splits: tuple[str, ...]

    @property
    def across_splits(self) -> bool:
        return len(self.splits) > 1

    def to_line(self) -> str:
        return json.dumps({"sha256": self.digest, "size": self.size, "splits": list(self.splits),
                           "members": [m.to_json() for m in self.members]},
                          ensure_ascii=False, sort_keys=True)

    @staticmethod
    def from_line(line: str) -> Group:
        value = json.loads(line)
        return Group(str(value["sha256"]), tuple(Member.from_json(m) for m in value["members"]),
                     int(value["size"]), tuple(value["splits"]))


def group_of(digest: str, members: Iterable[Member], splits: Iterable[str] = ()) -> Group:
    """The :class:`Group` of ``members`` (any order, any number, a copy given twice counted
    once) and of ``splits`` besides theirs. Past :data:`MAX_LISTED_MEMBERS`, the first copy
    of each split is listed, then the others in order up to that many.

    One pass that holds the first copies in order, each split's first, and 16 bytes per
    copy to count each once: a group of every blank frame of a large corpus must not hold
    each of its copies whole."""
    seen: set[bytes] = set()
    first_copies: list[_Later] = []  # the MAX_LISTED_MEMBERS first copies, last on top
    firsts: dict[str, tuple[tuple[Any, ...], Member]] = {}
    all_splits = set(splits)
    for member in members:
        identity = member.identity()
        if identity in seen:
            continue
        seen.add(identity)
        order = member.order()
        all_splits.add(member.split)
        first = firsts.get(member.split)
        if first is None or order < first[0]:
            firsts[member.split] = (order, member)
        if len(first_copies) < MAX_LISTED_MEMBERS:
            heapq.heappush(first_copies, _Later(order, member))
        elif order < first_copies[0].order:
            heapq.heapreplace(first_copies, _Later(order, member))
    # Every copy the rule below lists is among these: each split's first, and the
    # MAX_LISTED_MEMBERS first in order (from which the remaining places are filled).
    ordered = sorted({m for _, m in firsts.values()} | {c.member for c in first_copies},
                     key=Member.order)
    listed = ordered
    if len(seen) > MAX_LISTED_MEMBERS:
        in_split_order = sorted(firsts.values(), key=lambda first: first[0])
        chosen = {member for _, member in in_split_order[:MAX_LISTED_MEMBERS]}
        for member in ordered:
            if len(chosen) >= MAX_LISTED_MEMBERS:
                break
            chosen.add(member)
        listed = sorted(chosen, key=Member.order)
    return Group(digest, tuple(listed), len(seen),
                 tuple(sorted(all_splits, key=split_rank)))


class _Later:
    """A heap item ordered last first, so that a heap of them has its latest copy on top."""

    __slots__ = ("member", "order")

    def __init__(self, order: tuple[Any, ...], member: Member) -> None:
        self.order = order
        self.member = member

    def __lt__(self, other: _Later) -> bool:
        return other.order < self.order


def exact_groups(files: Iterable[HashTable | HashFile]) -> list[Group]:
    """The groups (two copies or more) among the entries of ``files``, in SHA-256 order;
    only the entries of repeated digests are decoded."""
    tables = [f if isinstance(f, HashTable) else HashTable(encode_hash_file(f)) for f in files]
    groups = []
    for digest, places in sorted(repeated_digests(tables).items()):
        group = group_of(digest.hex(), (_member(table, i) for table, i in places))
        if group.size > 1:  # an entry given twice is one copy
            groups.append(group)
    return groups


def _member(table: HashTable, i: int) -> Member:
    record = table.record(i)
    written = record >= 0
    return Member(table.split, table.source(i), table.shard if written else None,
                  record if written else None, table.entry(i).dropped)


def merge_group_lines(new: Iterable[str], previous: Iterable[str],
                      owned: Iterable[str]) -> Iterator[str]:
    """The lines of a folder's ``duplicates.jsonl`` after a run that wrote the splits
    ``owned``: the run's ``new`` groups (which hold every copy the kept splits' hash files
    list), merged with the ``previous`` file's copies in the kept splits (copies a
    previous run dropped, and splits written without hash files). Both inputs are in
    SHA-256 order, and so is the result; memory holds one group at a time."""
    owned = set(owned)
    new_groups = (Group.from_line(line) for line in new if line.strip())
    old_groups = (_kept_part(Group.from_line(line), owned) for line in previous if line.strip())
    for digest, parts in _merged_by_digest(new_groups, old_groups):
        group = group_of(digest, [m for part in parts for m in part.members],
                         [s for part in parts for s in part.splits])
        # A part of more than MAX_LISTED_MEMBERS copies lists only some, so the copies two
        # parts share cannot all be told apart: the larger count stands for both.
        size = max(group.size, *(part.size for part in parts))
        if size > 1:
            yield Group(group.digest, group.members, size, group.splits).to_line()


def _kept_part(group: Group, owned: set[str]) -> Group:
    """The copies of ``group`` in splits other than ``owned``; its unlisted copies count
    only when all of them lie there."""
    members = tuple(m for m in group.members if m.split not in owned)
    unlisted = group.size - len(group.members) if not set(group.splits) & owned else 0
    splits = tuple(s for s in group.splits if s not in owned)
    return Group(group.digest, members, len(members) + unlisted, splits)


def _merged_by_digest(*streams: Iterator[Group]) -> Iterator[tuple[str, list[Group]]]:
    """Groups of several digest-ordered streams, those of one digest together."""
    heads = [next(stream, None) for stream in streams]
    while any(h is not None for h in heads):
        digest = min(h.digest for h in heads if h is not None)
        parts = []
        for i, head in enumerate(heads):
            if head is not None and head.digest == digest:
                parts.append(head)
                heads[i] = next(streams[i], None)
        yield digest, parts


@dataclass
class DuplicateCounts:
    """What ``duplicates.jsonl`` holds, for the manifest and the summary."""

    groups: int = 0
    images: int = 0
    across_splits: int = 0
    dropped: int = 0
    first_across: list[Group] = field(default_factory=list)

    def add(self, group: Group, keep_first: int = 3) -> None:
        self.groups += 1
        self.images += group.size
        self.dropped += sum(1 for m in group.members if m.dropped)
        if len({m.split for m in group.members if not m.dropped}) > 1:
            self.across_splits += 1
            if len(self.first_across) < keep_first:
                self.first_across.append(group)

    def to_json(self) -> dict[str, Any]:
        """``groups``, ``images`` (copies in all groups), ``extra_copies`` (images beyond
        one per group), ``across_splits`` (groups written in two splits or more),
        ``dropped`` (copies listed as dropped)."""
        return {"groups": self.groups, "images": self.images,
                "extra_copies": self.images - self.groups, "across_splits": self.across_splits,
                "dropped": self.dropped}


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy of an image as a drop sees it: its split, its salted identity hash
    (``rank``), and whether an earlier run wrote it (``kept_split``: a split of the
    output folder this run does not write)."""

    split: str
    rank: int
    source: str
    kept_split: bool = False


@dataclass(frozen=True)
class DropPlan:
    """Which copies of one image ``mode`` drops, decided from one pass over them
    (:meth:`of`), then asked copy by copy (:meth:`drops`): a group of any size is never
    held whole.

    Copies in splits an earlier run wrote are never dropped (they are written already),
    and they come first: when there is one, every copy of this run is a later one. Else
    the earliest split (:func:`split_rank`) holds the first copy: ``drop-across-splits``
    drops the copies in other splits; ``drop`` keeps only the copy of smallest ``rank``
    in the earliest split (ties by source).
    """

    mode: str
    kept_split: Copy | None  # a copy an earlier run wrote (the smallest, for messages)
    first_split: str | None
    keeper: Copy | None  # drop's one copy kept (when no earlier run wrote one)

    @staticmethod
    def of(mode: str, copies: Iterable[Copy]) -> DropPlan:
        kept_split = first = keeper = None
        mine = 0
        for copy in copies:
            if copy.kept_split:
                if kept_split is None or _copy_order(copy) < _copy_order(kept_split):
                    kept_split = copy
                continue
            mine += 1
            if first is None or split_rank(copy.split) < split_rank(first):
                first, keeper = copy.split, copy
            elif copy.split == first and (copy.rank, copy.source) < (keeper.rank, keeper.source):
                keeper = copy
        return DropPlan(mode if mine + (kept_split is not None) > 1 else "keep",
                        kept_split, first, keeper)

    def drops(self, copy: Copy) -> bool:
        if self.mode not in DROP_MODES or copy.kept_split:
            return False
        if self.kept_split is not None:
            return True
        if self.mode == "drop-across-splits":
            return copy.split != self.first_split
        return (copy.split, copy.rank, copy.source) != (
            self.keeper.split, self.keeper.rank, self.keeper.source)

    def kept_for(self) -> Copy:
        """The copy the dropped ones are the same as: an earlier run's, else the first kept."""
        return self.kept_split or self.keeper


def _copy_order(copy: Copy) -> tuple[Any, ...]:
    return (split_rank(copy.split), copy.rank, copy.source)


def copies_to_drop(mode: str, copies: Sequence[Copy]) -> set[int]:
    """Indexes of the ``copies`` of one image that ``mode`` drops (see :class:`DropPlan`)."""
    plan = DropPlan.of(mode, copies)
    return {i for i, copy in enumerate(copies) if plan.drops(copy)}
