"""The commit of an incremental run: the previous version stays whole until the new
manifest replaces it in one step.

In order: the same checks as every commit (shards arrived, reject limits, label maps),
then shard numbers for the new files that the previous version does not use (a plain
reader globbing ``train-*.tfrecord`` never finds a file of either version half-written,
and a kept shard keeps its name), the new shards renamed into place with their key files,
``manifest.json`` replaced (the new version exists from that moment), the metadata files
(``labels.txt``, ``rejects.jsonl``, TFDS's) replaced, and only then the previous
version's files no longer listed deleted, ours only (:mod:`recordbeam.dataset.layout`).

A run killed before the manifest is replaced leaves the previous version whole and
readable (its new files lie beside it under names no manifest lists, recorded in the
lock's temp folder, and the next run removes or replaces them); killed after, the new
version is whole and the next run deletes what the killed one had not.
"""

from __future__ import annotations

import io
import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recordbeam import filesystems
from recordbeam.dataset import folder_lock, layout, manifest, names
from recordbeam.dataset.shard_keys import ShardKeys, encode_keys
from recordbeam.errors import DataError, RecordbeamError
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.framing import RecordWriter
from recordbeam.write.commit import (
    ShardResult,
    _delete_logged,
    _Finalize,
    _record_commit_plan,
    _remove_stale_tfds_files,
    _remove_temp_dirs,
    _rename_logged,
    _split_of_hash_file,
    write_index,
)
from recordbeam.write.incremental import (
    CLASSES,
    PreviousVersion,
    RewrittenShard,
    ShardSummary,
    UnusableShard,
)
from recordbeam.write.planning import MAX_SHARDS, ShardOptions

_LOG = logging.getLogger(__name__)


class FolderChanged(RecordbeamError):
    """The output folder holds another version than the one the run started from."""


@dataclass(frozen=True)
class LiveShard:
    """A shard of the new version: kept in place (no temp paths) or renamed into place."""

    split: str
    name: str
    examples: int
    bytes: int
    spec: FeatureSpec
    counts: Mapping[str, int]
    list_spec: FeatureSpec | None = None
    temp_path: str | None = None
    temp_index_path: str | None = None
    temp_keys_path: str | None = None

    @classmethod
    def kept(cls, summary: ShardSummary) -> LiveShard:
        return cls(summary.split, summary.name, summary.examples, summary.bytes, summary.spec,
                   summary.counts, summary.list_spec)

    @classmethod
    def placed(cls, result: ShardResult, name: str) -> LiveShard:
        return cls(result.split, name, result.examples, result.bytes, result.spec,
                   result.counts, result.list_spec, result.temp_path, result.temp_index_path,
                   result.temp_keys_path)

    def moves(self) -> Iterator[tuple[str, str]]:
        """``(temp path, final name)`` of each of its files to rename into place."""
        for temp, final in ((self.temp_path, self.name),
                            (self.temp_index_path, self.name + ".idx"),
                            (self.temp_keys_path, names.keys_file_name(self.name))):
            if temp:
                yield temp, final


class IncrementalFinalize(_Finalize):
    """The finalize step of an incremental :class:`~recordbeam.write.sink.WriteShards`."""

    def __init__(self, output_dir: str, temp_dir: str, options: ShardOptions,
                 declared_splits: tuple[str, ...], record: Mapping[str, str]) -> None:
        super().__init__(output_dir, temp_dir, options, declared_splits)
        self._record = dict(record)
        self._run: dict[str, Any] = {}

    def process(self, _unused, shards, rewritten, kept, unusable, classes, previous, rejects,
                counts, metadata, totals, plan_written):
        self._check_lock()
        current = layout.read_manifest(self._output_dir)
        found = int(current.get("version", 0)) if current else 0
        if found != previous.version:
            filesystems.remove_tree(self._temp_dir)
            raise FolderChanged(
                f"{self._output_dir} holds version {found} of its output, and this run started "
                f"from version {previous.version}: another run committed meanwhile. Nothing "
                "was committed by this run; run it again")
        owned = sorted(set(totals) | set(self._declared))
        live = self._live_shards(current or {}, list(shards), list(rewritten), list(kept), owned)
        carried = [r for k in kept for r in k.rejects] + [r for w in rewritten for r in w.rejects]
        self._run = _run_entry(owned, previous, current or {}, live, list(kept), list(rewritten),
                               list(unusable), dict(classes))
        for shard in unusable:
            _LOG.warning("%s: %s cannot be kept (%s); its examples are encoded again",
                         self._output_dir, shard.name, shard.why)
        yield self._finish(live, [*rejects, *carried], counts, metadata, owned)

    def _live_shards(self, current: Mapping[str, Any], shards: list[ShardResult],
                     rewritten: list[RewrittenShard], kept: list[ShardSummary],
                     owned: Sequence[str]) -> list[LiveShard]:
        """Kept shards under their names; rewritten, then new shards under the lowest
        numbers the previous version of their split does not use."""
        live = [LiveShard.kept(summary) for summary in kept]
        fresh = [w.result for w in sorted(rewritten, key=lambda w: (w.result.split, w.replaces))]
        fresh += sorted(shards, key=lambda s: (s.split, s.index))
        with_shards = {shard.split for shard in live} | {result.split for result in fresh}
        fresh += [self._empty_shard(split) for split in owned if split not in with_shards]
        free = {split: _free_numbers(current, split, self._output_dir) for split in owned}
        for result in fresh:
            number = next(free[result.split])
            if number >= MAX_SHARDS:
                raise DataError(
                    f"split {result.split} of {self._output_dir} would need shard number "
                    f"{number}, above {MAX_SHARDS - 1}: compact it (reshard it into a new "
                    "folder, or run with --compact-below)")
            live.append(LiveShard.placed(result, names.indexed_shard_name(
                result.split, number, self._options.compression)))
        return sorted(live, key=lambda s: (s.split, s.name))

    def _empty_shard(self, split: str) -> ShardResult:
        """The one empty shard of a split no example reaches (a split lists a shard)."""
        temp_path = filesystems.join(self._temp_dir, f"{split}.empty")
        data = io.BytesIO()
        RecordWriter(data, self._options.compression).close()
        filesystems.write_bytes(temp_path, data.getvalue())
        temp_index = write_index(temp_path, io.StringIO() if self._options.index else None)
        temp_keys = temp_path + names.KEYS_SUFFIX
        filesystems.write_bytes(temp_keys, encode_keys(ShardKeys((), FeatureSpec())))
        return ShardResult(split, 0, 1, temp_path, temp_index, 0, len(data.getvalue()),
                           FeatureSpec(), {}, temp_keys_path=temp_keys)

    def _versioned(self, final: dict[str, Any], previous: Mapping[str, Any],
                   owned: list[str]) -> dict[str, Any]:
        for split in owned:
            final["splits"][split]["incremental"] = dict(self._record)
        return manifest.with_version(final, previous, self._run)

    def _place(self, results: list[LiveShard], staged: list[str], owned: list[str],
               final: dict) -> None:
        """Rename the new shards into place, replace the manifest, then the metadata
        files, then delete what the previous version held and this one does not."""
        out = self._output_dir
        lock = self._check_lock()
        _temp_folders, recorded_files = folder_lock.owned_names(lock)
        files = layout.existing_files(out)
        known = layout.known_files(out, files)
        moves = [move for shard in results for move in shard.moves()]
        _record_commit_plan(out, self._temp_dir, files,
                            {name for _temp, name in moves} | set(staged) | {names.MANIFEST})
        _rename_logged(out, [temp for temp, _name in moves],
                       [filesystems.join(out, name) for _temp, name in moves],
                       f"{len(moves)} new files (shards, key files, indexes)")
        _rename_logged(out, [filesystems.join(self._temp_dir, names.MANIFEST)],
                       [filesystems.join(out, names.MANIFEST)],
                       f"{names.MANIFEST} (the new version {final['version']})")
        _rename_logged(out, [filesystems.join(self._temp_dir, name) for name in staged],
                       [filesystems.join(out, name) for name in staged],
                       "the metadata files of the new version")
        listed = _listed_names(final)
        stale = [p for p in sorted(known) if p not in listed and (
            ("/" not in p and p in recorded_files)
            or ("/" not in p and names.is_shard_file(p) and manifest.split_of_shard_file(p) in owned)
            # a plain run's image hashes and duplicate lists: an incremental run keeps none
            or (names.is_hash_file(p) and _split_of_hash_file(p) in owned)
            or (p in (names.DUPLICATES, names.NEAR_DUPLICATES) and p not in staged))]
        _delete_logged(out, stale, f"files of the previous version, no longer listed "
                                   f"(version {final['version']} is committed)")
        if any(names.is_hash_file(p) for p in stale) and not any(
                names.is_hash_file(p) for p in known if p not in stale):
            filesystems.remove_tree(filesystems.join(out, names.HASHES_FOLDER))  # now empty
        _remove_stale_tfds_files(out, final, known)
        _remove_temp_dirs(out, self._temp_dir, lock)


def _listed_names(final: Mapping[str, Any]) -> set[str]:
    """Every shard file, index and key file a manifest lists, over all its splits."""
    listed = set()
    for entry in final.get("splits", {}).values():
        for shard in entry.get("shards", []):
            name = shard["file"]
            listed |= {name, name + ".idx", names.keys_file_name(name)}
    return listed


def _free_numbers(current: Mapping[str, Any], split: str, output_dir: str) -> Iterator[int]:
    """Shard numbers of ``split`` the version ``current`` does not use, nor a file we did
    not write (kept with ``--overwrite``), lowest first: new files never take the name of
    a file of the version still in force, and never replace someone else's."""
    entry = current.get("splits", {}).get(split, {})
    used = {names.indexed_shard_number(s["file"]) for s in entry.get("shards", [])}
    used |= _foreign_numbers(output_dir, split)
    return (n for n in itertools.count() if n not in used)


def _foreign_numbers(output_dir: str, split: str) -> set[int]:
    """Numbers of ``split``'s shard names (``train-00003.tfrecord``, its ``.idx`` or
    ``.keys``) taken by files of ``output_dir`` that are not ours."""
    files = layout.existing_files(output_dir)
    known = layout.known_files(output_dir, files)
    numbers = set()
    for name in files:
        if "/" in name or name in known or not name.startswith(split + "-"):
            continue
        number = names.indexed_shard_number(
            name.removesuffix(names.KEYS_SUFFIX).removesuffix(".idx"))
        if number is not None:
            numbers.add(number)
    return numbers


def _run_entry(owned: Sequence[str], previous: PreviousVersion, current: Mapping[str, Any],
               live: Sequence[LiveShard], kept: Sequence[ShardSummary],
               rewritten: Sequence[RewrittenShard], unusable: Sequence[UnusableShard],
               classes: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    """What this run did, per split, for the manifest's history."""
    splits = {}
    for split in owned:
        before = current.get("splits", {}).get(split, {}).get("shards", [])
        now = {s.name for s in live if s.split == split}
        mine = [w for w in rewritten if w.result.split == split]
        done: dict[str, Any] = {name: classes.get((split, name), 0) for name in CLASSES}
        done.update({
            "examples": sum(s.examples for s in live if s.split == split),
            "shards_kept": sum(1 for k in kept if k.split == split),
            "shards_rewritten": len(mine),
            "records_copied": sum(w.result.examples for w in mine),
            "shards_written": sum(1 for s in live if s.split == split and s.temp_path)
            - len(mine),
            "shards_removed": sum(1 for s in before if s["file"] not in now),
        })
        if split in previous.rebuilt:
            done["rebuilt"] = previous.rebuilt[split]
        lost = sorted((u.name, u.why) for u in unusable if u.split == split)
        if lost:
            done["shards_unusable"] = [{"file": name, "why": why} for name, why in lost]
        splits[split] = done
    return {"incremental": True, "splits": splits}


