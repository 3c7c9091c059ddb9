"""The commit of :class:`recordbeam.write.sink.WriteShards`: one task, once every shard is
written, turns the temp folder into a finished output folder.

In order: check that every planned shard arrived (an empty file for a shard no element
fell into), enforce the reject limits (images, annotations) and the label map of the
splits kept, stage ``labels.txt``, ``rejects.jsonl`` and ``manifest.json`` in the temp
folder, then touch the output: remove the manifest (the folder stops looking finished),
delete the stale outputs of ours, rename the shards and files into place, write the TFDS
files and finally rename the manifest into place. Only files our records name are ever
deleted (:mod:`recordbeam.dataset.layout`); each deletion and rename is logged.

The commit changes the folder only while the folder's lock names its run (or when the
folder has no lock: a pipeline built without :func:`recordbeam.pipeline.run`), and gives
the lock up once it is done (:mod:`recordbeam.dataset.folder_lock`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from recordbeam import __version__, filesystems
from recordbeam.dataset import folder_lock, layout, manifest, names, tfds
from recordbeam.dataset.class_names import label_file_text
from recordbeam.dataset.image_hashes import HashFile, encode_hash_file
from recordbeam.errors import DataError
from recordbeam.records import LOST_WITH_IMAGE, Reject
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.framing import RecordWriter
from recordbeam.write.duplicate_commit import stage_duplicates
from recordbeam.write.duplicates import EarlierSplits
from recordbeam.write.planning import ShardOptions, shard_count

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardResult:
    """A written temporary shard, waiting for the finalizer to commit it."""

    split: str
    index: int
    count: int
    temp_path: str
    temp_index_path: str | None
    examples: int
    bytes: int
    spec: FeatureSpec
    counts: Mapping[str, int]
    list_spec: FeatureSpec | None = None  # feature lists of SequenceExamples, per step
    temp_keys_path: str | None = None  # its key file, in an incremental run
    temp_hashes_path: str | None = None  # the shard's image hashes (hashes/<shard>.hashes)

    @property
    def name(self) -> str:
        return self.temp_path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


class RejectLimitExceeded(DataError, RuntimeError):
    """More of the input was rejected than ``max_reject_fraction`` (or its annotation limit) allows."""


class _Finalize(beam.DoFn):
    def __init__(self, output_dir: str, temp_dir: str, options: ShardOptions,
                 declared_splits: tuple[str, ...], finding: bool = False,
                 earlier: EarlierSplits | None = None) -> None:
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._options = options
        self._declared = declared_splits
        self._finding = finding  # duplicates looked for: hash files, duplicates.jsonl
        self._earlier = earlier or EarlierSplits()

    def process(self, _unused, shards, rejects, counts, metadata, totals, plan_written,
                duplicate_parts=(), near_found=(), unreadable_hashes=()):
        self._check_lock()  # a run that lost the folder stops before reading its state
        owned = sorted(set(totals) | set(self._declared))
        results = _complete_shards(list(shards), totals, self._options, self._temp_dir,
                                   self._finding)
        yield self._finish(results, rejects, counts, metadata, owned,
                           duplicate_parts, near_found, unreadable_hashes)

    def _finish(self, results: list[Any], rejects: Iterable[Reject], counts: Mapping[Any, int],
                metadata: Iterable[Mapping[str, Any]], owned: list[str],
                duplicate_parts: Iterable[tuple[int, str]] = (),
                near_found: Sequence[Mapping[str, Any]] = (),
                unreadable_hashes: Iterable[str] = ()) -> dict[str, Any]:
        """Check, then commit the splits ``owned`` made of ``results`` (each with a name,
        a split, examples, bytes, specs and counts) and the duplicate lists its stages
        found; returns the manifest committed."""
        default_split = self._declared[0]
        rejects = sorted(
            (r if r.split else dataclasses.replace(r, split=default_split) for r in rejects),
            key=lambda r: (r.split, r.kind, r.source, r.reason, r.detail),
        )
        dataset_meta: dict[str, Any] = {}
        for part in metadata:
            dataset_meta.update(part)
        split_counts = counts_by_split(counts, default_split)
        entries = {
            split: self._split_entry(split, results, rejects, split_counts.get(split, {}),
                                     dataset_meta)
            for split in owned
        }
        previous = layout.recorded_manifest(self._output_dir) or {}
        # The launcher checked this before the run (pipeline.check_labels_before_run); a
        # folder changed since then, or a caller that skipped it, is stopped here.
        conflict = manifest.label_map_conflict(previous, dataset_meta, owned, self._output_dir)
        if conflict:
            filesystems.remove_tree(self._temp_dir)
            raise manifest.LabelMapMismatch(conflict)
        exceeded = _limit_exceeded(entries, rejects, self._output_dir, self._options)
        if exceeded is not None:
            self._write_rejects(names.FAILED_REJECTS, rejects)
            filesystems.remove_tree(self._temp_dir)
            raise RejectLimitExceeded(exceeded)
        for split, entry in previous.get("splits", {}).items():
            entries.setdefault(split, entry)  # splits this run does not write are kept
        final = manifest.dataset_manifest(entries, dataset_meta, self._options.to_json(), __version__)
        final = self._versioned(final, previous, owned)
        duplicates = stage_duplicates(self._output_dir, self._temp_dir, owned, self._options,
                                      self._finding, self._earlier, duplicate_parts, near_found,
                                      unreadable_hashes)
        if duplicates.summary is not None:
            final["duplicates"] = duplicates.summary
        self._commit(results, rejects, owned, final, duplicates.files)
        for split in owned:
            warning = manifest.empty_shards_warning(split, final["splits"][split])
            if warning:
                _LOG.warning("%s: %s", self._output_dir, warning)
        return final

    def _versioned(self, final: dict[str, Any], previous: Mapping[str, Any],
                   owned: list[str]) -> dict[str, Any]:
        """``final`` with the next version number and this run in its history, in a folder
        whose manifest counts versions (one an incremental run wrote); else as it is."""
        if "version" not in previous:
            return final
        run = {"full_rebuild": True, "splits": {
            split: {"examples": final["splits"][split]["examples"],
                    "shards_written": len(final["splits"][split]["shards"])} for split in owned}}
        return manifest.with_version(final, previous, run)

    def _check_lock(self) -> folder_lock.LockRecord | None:
        try:
            return folder_lock.check_held(self._output_dir, folder_lock.run_id_of(self._temp_dir))
        except folder_lock.FolderLocked:
            filesystems.remove_tree(self._temp_dir)  # ours alone: the lock no longer names it
            raise

    def _split_entry(self, split, results, rejects, upstream_counts, meta) -> dict[str, Any]:
        mine = [r for r in results if r.split == split]
        spec = FeatureSpec()
        counts: Counter[str] = Counter(dict(upstream_counts))
        lists = FeatureSpec()
        for shard in mine:
            spec = spec.merge(shard.spec)
            counts.update(shard.counts)
            lists = lists.merge(shard.list_spec) if shard.list_spec else lists
        entry = manifest.split_entry(
            [(r.name, r.examples, r.bytes) for r in mine], spec,
            [r for r in rejects if r.split == split], counts, meta,
        )
        if lists.examples:
            entry["feature_lists"] = lists.to_json()
        if self._finding:
            entry["image_hashes"] = {"near": self._options.near_duplicates}
        return entry

    def _write_rejects(self, name: str, rejects: Iterable[Reject]) -> None:
        data = "".join(r.to_json() + "\n" for r in rejects).encode("utf-8")
        filesystems.write_bytes(filesystems.join(self._output_dir, name), data)

    def _kept_rejects(self, owned: list[str]) -> list[Reject]:
        """Rejects of splits this run does not write, from the previous rejects file."""
        path = filesystems.join(self._output_dir, names.REJECTS)
        if not filesystems.exists(path):
            return []
        lines = filesystems.read_bytes(path).decode("utf-8").splitlines()
        return [r for r in map(Reject.from_json, filter(None, lines)) if r.split not in owned]

    def _commit(self, results: list[ShardResult], rejects: list[Reject], owned: list[str],
                final: dict, also_staged: Sequence[str] = ()) -> None:
        # Every byte is written into the temp folder before anything in the output changes:
        # a full disk (or any write error) fails the run here, the previous output intact.
        staged = self._stage(rejects, owned, final) + list(also_staged)
        self._place(results, staged, owned, final)

    def _stage(self, rejects: list[Reject], owned: list[str], final: dict) -> list[str]:
        """Write ``labels.txt``, ``rejects.jsonl`` and ``manifest.json`` into the temp
        folder; returns the names to rename into place besides the shards and the manifest."""
        kept_rejects = self._kept_rejects(owned)
        staged_files = []
        labels = final.get("label_names")
        if labels:
            staged_files.append((names.LABELS, label_file_text(labels, names.LABELS)))
        all_rejects = sorted(kept_rejects + rejects,
                             key=lambda r: (r.split or "", r.kind, r.source, r.reason, r.detail))
        staged_files.append((names.REJECTS, "".join(r.to_json() + "\n" for r in all_rejects).encode("utf-8")))
        # TFDS's dataset_info.json and the rest: staged too, so that a full disk stops the
        # run before the folder changes, not half-way through the commit.
        staged_files += sorted(tfds.files_for(final).items())
        for name, data in staged_files:
            filesystems.write_bytes(filesystems.join(self._temp_dir, name), data)
        filesystems.write_bytes(filesystems.join(self._temp_dir, names.MANIFEST),
                                (json.dumps(final, indent=2, sort_keys=True) + "\n").encode())
        return [name for name, _data in staged_files]

    def _place(self, results: list[ShardResult], staged: list[str], owned: list[str],
               final: dict) -> None:
        """Change the output folder: remove the manifest, delete our stale files, rename
        the new ones into place, the manifest last."""
        out = self._output_dir
        lock = self._check_lock()
        _temp_folders, recorded_files = folder_lock.owned_names(lock)
        manifest_path = filesystems.join(out, names.MANIFEST)
        new_names = ({r.name for r in results} | {r.name + ".idx" for r in results if r.temp_index_path}
                     | {names.hash_file_name(r.name) for r in results if r.temp_hashes_path})
        files = layout.existing_files(out)
        known = layout.known_files(out, files)
        _record_commit_plan(out, self._temp_dir, files, new_names | set(staged)
                            | {names.MANIFEST} | set(tfds.files_for(final)))
        if names.MANIFEST in files:
            _LOG.info("%s: removing %s until the commit is done", out, names.MANIFEST)
        filesystems.delete([manifest_path])  # from here on the folder does not look finished
        stale = [
            p for p in sorted(known)
            if p not in new_names and (
                ("/" not in p and p in recorded_files)  # failed-run-rejects.jsonl of a failed run
                or ("/" not in p and names.is_shard_file(p)
                    and manifest.split_of_shard_file(p) in owned)
                or (names.is_hash_file(p) and _split_of_hash_file(p) in owned)
                # rewritten by every run that finds groups; gone when there are none
                or (p in (names.DUPLICATES, names.NEAR_DUPLICATES) and p not in staged)
            )
        ]
        _delete_logged(out, stale, "stale files of an earlier run")
        if any(names.is_hash_file(p) for p in stale) and not any(
                r.temp_hashes_path for r in results) and not any(
                names.is_hash_file(p) for p in known if p not in stale):
            filesystems.remove_tree(filesystems.join(out, names.HASHES_FOLDER))  # now empty
        sources, targets = [], []
        for r in results:
            sources.append(r.temp_path)
            targets.append(filesystems.join(out, r.name))
            if r.temp_index_path:
                sources.append(r.temp_index_path)
                targets.append(filesystems.join(out, r.name + ".idx"))
            if r.temp_hashes_path:
                sources.append(r.temp_hashes_path)
                targets.append(filesystems.join(out, names.hash_file_name(r.name)))
        if any(r.temp_hashes_path for r in results):
            filesystems.make_folder(filesystems.join(out, names.HASHES_FOLDER))
        for name in staged:
            sources.append(filesystems.join(self._temp_dir, name))
            targets.append(filesystems.join(out, name))
        _remove_stale_tfds_files(out, final, known)
        _rename_logged(out, sources, targets, f"{len(sources)} new files (shards, indexes, metadata)")
        _rename_logged(out, [filesystems.join(self._temp_dir, names.MANIFEST)], [manifest_path],
                       f"{names.MANIFEST} (last: the folder is finished)")
        _remove_temp_dirs(out, self._temp_dir, lock)


def _record_commit_plan(output_dir: str, temp_dir: str, files: list[str],
                        placed: set[str]) -> None:
    """What a later run needs if this commit is cut short, saved in its temp folder: the
    manifest it replaces (so other splits, or the previous version's files, stay listed)
    and the names it places (so they count as ours)."""
    previous = layout.recorded_manifest(output_dir, files)
    if previous is not None:
        filesystems.write_bytes(filesystems.join(temp_dir, names.PREVIOUS_MANIFEST),
                                json.dumps(previous).encode())
    filesystems.write_bytes(filesystems.join(temp_dir, names.COMMIT_PLAN),
                            json.dumps({"files": sorted(placed)}).encode())


def _delete_logged(output_dir: str, stale: list[str], why: str) -> None:
    """Delete ``stale`` (names in ``output_dir``), leaving their names in the log."""
    if stale:
        _LOG.info("%s: deleting %d %s: %s", output_dir, len(stale), why, ", ".join(stale))
    filesystems.delete([filesystems.join(output_dir, name) for name in stale])


def _rename_logged(output_dir: str, sources: list[str], targets: list[str], what: str) -> None:
    """Rename ``sources`` to ``targets``, saying ``what`` they are at INFO and each name at
    DEBUG (a dataset may have thousands of shards)."""
    _LOG.info("%s: renaming %s into place", output_dir, what)
    for source, target in zip(sources, targets, strict=True):
        _LOG.debug("rename %s -> %s", source, target)
    filesystems.rename(sources, targets)


def _remove_temp_dirs(output_dir: str, temp_dir: str,
                      lock: folder_lock.LockRecord | None) -> None:
    """Remove this run's temp folder and those the lock records (left by killed earlier
    runs), then give the lock up: the folder is finished and holds nothing else of ours
    outside its manifest. Other folders are never touched, whatever their names."""
    temp_folders, _files = folder_lock.owned_names(lock)
    for top in sorted(temp_folders | {temp_dir.rstrip("/").rsplit("/", 1)[-1]}):
        _LOG.info("%s: removing the temp folder %s", output_dir, top)
        filesystems.remove_tree(filesystems.join(output_dir, top))
    if lock is not None:
        folder_lock.give_up(output_dir, lock, (), ())


def _complete_shards(shards: list[ShardResult], totals: Mapping[str, int],
                     options: ShardOptions, temp_dir: str,
                     hashes: bool = False) -> list[ShardResult]:
    """One result per shard name, in name order. A shard no element fell into still
    gets its (empty) file, and its (empty) hash file with ``hashes``: readers expect
    every name from 0 to N-1."""
    by_key: dict[tuple[str, int], ShardResult] = {}
    for shard in sorted(shards, key=lambda s: (s.split, s.index, s.temp_path)):
        by_key.setdefault((shard.split, shard.index), shard)
    results = []
    for split in sorted(totals):
        n = shard_count(totals[split], num_shards=options.num_shards, shard_size=options.shard_size)
        for i in range(n):
            shard = by_key.get((split, i)) or _write_empty_shard(split, i, n, options, temp_dir,
                                                                  hashes)
            results.append(shard)
    return results


def write_index(temp_path: str, index: io.StringIO | None) -> str | None:
    """Write the ``.idx`` file of the shard at ``temp_path`` from the lines its
    ``RecordWriter`` put in ``index``; its path, or None when no index is kept (``index``
    None)."""
    if index is None:
        return None
    temp_index = temp_path + ".idx"
    filesystems.write_bytes(temp_index, index.getvalue().encode("ascii"))
    return temp_index


def _write_empty_shard(split: str, index: int, count: int, options: ShardOptions,
                       temp_dir: str, hashes: bool = False) -> ShardResult:
    name = names.shard_name(split, index, count, options.compression)
    temp_path = filesystems.join(temp_dir, f"{name}.empty")
    empty = io.BytesIO()  # a compressed stream of no records still has a header
    RecordWriter(empty, options.compression).close()
    filesystems.write_bytes(temp_path, empty.getvalue())
    temp_index = write_index(temp_path, io.StringIO() if options.index else None)
    temp_hashes = None
    if hashes:
        temp_hashes = temp_path + ".hashes"
        no_entries = HashFile(split, name, (), options.near_duplicates)
        filesystems.write_bytes(temp_hashes, encode_hash_file(no_entries))
    return ShardResult(split, index, count, temp_path, temp_index, 0, len(empty.getvalue()),
                       FeatureSpec(), {}, temp_hashes_path=temp_hashes)


def _split_of_hash_file(path: str) -> str:
    """``hashes/train-00001-of-00004.hashes`` -> ``train``."""
    return manifest.split_of_shard_file(path.rsplit("/", 1)[-1].removesuffix(".hashes"))


def counts_by_split(counts: Mapping[Any, int], default_split: str) -> dict[str, Counter[str]]:
    """The sources' counts by split: a ``(split, name)`` key is that split's; a plain name
    is the run's, filed with ``default_split``."""
    by_split: dict[str, Counter[str]] = {}
    for key, number in counts.items():
        split, name = key if isinstance(key, tuple) else (default_split, key)
        by_split.setdefault(split, Counter())[name] += number
    return by_split


def _limit_exceeded(entries: Mapping[str, Mapping[str, Any]], rejects: Sequence[Reject],
                    output_dir: str, options: ShardOptions) -> str | None:
    """The failure message when a split lost more images, or more annotations, than the
    limits allow; None when every split is within them."""
    failed = filesystems.join(output_dir, names.FAILED_REJECTS)
    split = max(entries, key=lambda s: entries[s]["rejects"]["image_fraction"])
    summary = entries[split]["rejects"]
    if summary["image_fraction"] > options.max_reject_fraction:
        return (
            f"{summary['images']} of {summary['images'] + entries[split]['examples']} images "
            f"were rejected ({summary['image_fraction']:.1%}), above --max-reject-fraction "
            f"{options.max_reject_fraction:g}. Nothing was committed to {output_dir}; the "
            f"rejects are listed in {failed} ({_reasons(summary, 'image')}). "
            f"{_example(rejects, split, 'image')}Fix the inputs, or raise "
            "--max-reject-fraction if these losses are acceptable."
        )
    split = max(entries, key=lambda s: entries[s]["rejects"]["annotation_fraction"])
    summary = entries[split]["rejects"]
    if summary["annotation_fraction"] > options.annotation_limit:
        return (
            f"{summary['annotations_dropped']} of {summary['annotations_seen']} annotations "
            f"were rejected ({summary['annotation_fraction']:.1%}), above "
            f"--max-annotation-reject-fraction {options.annotation_limit:g}. Nothing was "
            f"committed to {output_dir}; the rejects are listed in {failed} "
            f"({_reasons(summary, 'annotation')}). {_example(rejects, split, 'annotation')}"
            "Fix the annotations, or raise --max-annotation-reject-fraction if these losses "
            "are acceptable."
        )
    return None


def _reasons(summary: Mapping[str, Any], kind: str) -> str:
    """``reason: count`` of one kind of rejects, most frequent first."""
    found = [(key.split(":", 1)[1], n) for key, n in summary["by_reason"].items()
             if key.startswith(f"{kind}:") and key.split(":", 1)[1] not in (
                 LOST_WITH_IMAGE if kind == "annotation" else ())]
    return ", ".join(f"{reason}: {n}" for reason, n in sorted(found, key=lambda rn: -rn[1]))


def _example(rejects: Sequence[Reject], split: str, kind: str) -> str:
    """The first reject of the most frequent reason, quoted: most failures are one
    problem repeated, and its own words say what it is."""
    mine = [r for r in rejects if r.split == split and r.kind == kind
            and not (kind == "annotation" and r.reason in LOST_WITH_IMAGE)]
    if not mine:
        return ""
    common = Counter(r.reason for r in mine).most_common(1)[0][0]
    first = next(r for r in mine if r.reason == common)
    # Many details start with their source already (``file:line: ...``): not said twice.
    said = first.detail if first.detail.startswith(first.source) else (
        f"{first.source}: {first.detail}")
    return f"The most frequent, {common}, e.g. {said.rstrip('.')}. "


def _remove_stale_tfds_files(output_dir: str, manifest: Mapping[str, Any],
                             known: set[str]) -> None:
    """Delete the TFDS files of ours (``known``: the previous manifest's) this manifest has
    no use for (none for compressed shards, which TFDS cannot read); the new ones are
    renamed into place with the shards."""
    files = tfds.files_for(manifest)
    stale = [name for name in sorted(known)
             if "/" not in name and tfds.is_tfds_file(name) and name not in files]
    _delete_logged(output_dir, stale, "stale TFDS files")
