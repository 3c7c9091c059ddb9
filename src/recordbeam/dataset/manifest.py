"""``manifest.json``: what a finished output folder holds.

One folder may hold several splits (``train``, ``val``...), written by one run or by
several. A run replaces only the splits it writes; the entries of other splits are
carried over from the previous manifest. Per split: shards with example counts and
bytes, the feature spec, rejects by reason, counts, and the inputs fingerprint and
settings that ``--if-changed`` compares. At the top: totals and the feature spec over
all splits, the label map, and the recordbeam version.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from recordbeam.dataset.names import is_shard_file
from recordbeam.errors import DataError, counted
from recordbeam.records import ANNOTATIONS_WRITTEN, LOST_WITH_IMAGE, Reject
from recordbeam.tfrecord.feature_spec import FeatureSpec, merge_spec_json
from recordbeam.tfrecord.framing import compression_for_path

FORMAT = "recordbeam.dataset.manifest/1"

#: Metadata keys that describe one split's inputs rather than the whole dataset.
SPLIT_KEYS = ("inputs_fingerprint", "input_files", "settings")


class DamagedManifest(DataError):
    """A folder's ``manifest.json`` is there but cannot be read as a recordbeam manifest."""


def parse_manifest(data: bytes, path: str, *, check_format: bool = True) -> dict[str, Any]:
    """The manifest in ``data``, the bytes of the file ``path``, for the commands and
    readers of a finished folder.

    Raises:
        DamagedManifest: ``data`` is not valid JSON, not a JSON object, (``check_format``)
            not a recordbeam manifest (its ``format``), or it lists a shard that is not a
            file of its folder (:func:`shape_problem`). The writer asks instead whether
            a folder is finished (:func:`recordbeam.dataset.layout.read_manifest`: None for
            all of these).
    """
    redo = "re-run the conversion that wrote the folder"
    try:
        value = json.loads(data)
    except UnicodeDecodeError:
        raise DamagedManifest(f"{path} is there but is not valid JSON (it is not UTF-8 text); "
                              f"the manifest is damaged: {redo}") from None
    except ValueError as error:
        raise DamagedManifest(f"{path} is there but is not valid JSON ({error}); the manifest "
                              f"is damaged: {redo}") from None
    if not isinstance(value, dict):
        raise DamagedManifest(f"{path} is there but holds a JSON {type(value).__name__}, not the "
                              f"object a manifest is; the manifest is damaged: {redo}")
    if check_format and value.get("format") != FORMAT:
        found = f"its format is {value['format']!r}" if "format" in value else "it names no format"
        raise DamagedManifest(f"{path} is not a recordbeam manifest ({found}; expected "
                              f"{FORMAT!r}); point at a folder recordbeam wrote, or {redo}")
    problem = shape_problem(value, complete=check_format)
    if problem:
        raise DamagedManifest(f"{path} cannot be read: {problem} (was it edited by hand?); the "
                              f"manifest is damaged: {redo}")
    return value


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _mapping_problem(value: Any, where: str, values: tuple[type, ...]) -> str | None:
    if not isinstance(value, dict):
        return f"{where} is {_kind(value)}, not an object"
    for key, item in value.items():
        if not isinstance(item, values) or isinstance(item, bool):
            return f"{where}[{key!r}] is {_kind(item)}"
    return None


def _kind(value: Any) -> str:
    return "null" if value is None else f"a JSON {type(value).__name__}"


def _split_problem(name: str, entry: Any, complete: bool) -> str | None:
    where = f"splits[{name!r}]"
    if not isinstance(entry, dict):
        return f"{where} is {_kind(entry)}, not an object"
    if "examples" in entry and not _is_count(entry["examples"]):
        return f"{where}['examples'] is {entry['examples']!r}, not a count"
    shards = entry.get("shards", [])
    if not isinstance(shards, list):
        return f"{where}['shards'] is {_kind(shards)}, not a list"
    for index, shard in enumerate(shards):
        at = f"{where}['shards'][{index}]"
        if not isinstance(shard, dict):
            return f"{at} is {_kind(shard)}, not an object"
        file = shard.get("file")
        if not isinstance(file, str) or not is_shard_file(file):
            return f"{at} has no 'file' naming a shard of the folder (got {str(file)[:400]!r})"
        for key in ("examples", "bytes"):
            if complete and key not in shard:
                return f"{at} has no {key!r}"
            if key in shard and not _is_count(shard[key]):
                return f"{at}[{key!r}] is {shard[key]!r}, not a count"
    for key in ("features", "counts", "rejects", "warnings", "image_hashes"):
        if key in entry and not isinstance(entry[key], dict):
            return f"{where}[{key!r}] is {_kind(entry[key])}, not an object"
    return None


def shape_problem(manifest: Mapping[str, Any], complete: bool = True) -> str | None:
    """What in a manifest's structure the commands and readers cannot use (a key of the
    wrong type, a shard without its file name or naming a file outside the folder), or
    None. Keys are checked when present: older manifests may lack some. ``complete``: a
    manifest a commit wrote, which lists at least one split and one shard, each shard with
    its examples and bytes."""
    splits = manifest.get("splits", {})
    if not isinstance(splits, dict):
        return f"'splits' is {_kind(splits)}, not an object"
    if complete and not splits:
        return "it lists no splits"
    for name, entry in splits.items():
        problem = _split_problem(name, entry, complete)
        if problem:
            return problem
    if complete and not any(entry.get("shards") for entry in splits.values()):
        return "it lists no shards"  # a split may have none (all rejected), not every one
    checks = (("features", (dict,)), ("label_map", (str,)), ("category_ids", (int,)))
    for key, values in checks:
        if key in manifest:
            problem = _mapping_problem(manifest[key], f"'{key}'", values)
            if problem:
                return problem
    label_map = manifest.get("label_map", {})
    if not all(key.lstrip("-").isdigit() for key in label_map):
        return "'label_map' has a key that is not a label value (a whole number)"
    names = manifest.get("label_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "'label_names' is not a list of names"
    for key in ("totals", "rejects", "options", "keypoints", "duplicates"):
        if key in manifest and not isinstance(manifest[key], dict):
            return f"'{key}' is {_kind(manifest[key])}, not an object"
    return None


def reject_summary(rejects: Iterable[Reject], examples: int,
                   objects_written: int = 0) -> dict[str, Any]:
    """Counts by ``kind:reason``; ``image_fraction`` is image rejects over images seen;
    ``annotation_fraction`` is annotations rejected on their own account (not with their
    image, see :data:`~recordbeam.records.LOST_WITH_IMAGE`) over annotations seen
    (``objects_written``: objects, captions and image-level labels written; plus every
    annotation reject)."""
    real = [r for r in rejects if r.kind != "warning"]
    images = sum(1 for r in real if r.kind == "image")
    seen = examples + images
    annotations = [r for r in real if r.kind == "annotation"]
    dropped = sum(1 for r in annotations if r.reason not in LOST_WITH_IMAGE)
    objects_seen = objects_written + len(annotations)
    return {
        "total": len(real),
        "images": images,
        "annotations": len(real) - images,
        "image_fraction": images / seen if seen else 0.0,
        "annotations_dropped": dropped,
        "annotations_seen": objects_seen,
        "annotation_fraction": dropped / objects_seen if objects_seen else 0.0,
        "by_reason": dict(sorted(Counter(f"{r.kind}:{r.reason}" for r in real).items())),
    }


def split_entry(shards: list[tuple[str, int, int]], spec: FeatureSpec, rejects: list[Reject],
                counts: Mapping[str, int], split_meta: Mapping[str, Any]) -> dict[str, Any]:
    """One split's entry from its shards ``(file, examples, bytes)`` and what was found."""
    examples = sum(n for _, n, _ in shards)
    entry = {
        "examples": examples,
        "bytes": sum(b for _, _, b in shards),
        "shards": [{"file": f, "examples": n, "bytes": b} for f, n, b in shards],
        "features": spec.to_json(),
        "rejects": reject_summary(rejects, examples,
                                  sum(counts.get(key, 0) for key in ANNOTATIONS_WRITTEN)),
        "warnings": dict(sorted(Counter(r.reason for r in rejects if r.kind == "warning").items())),
        "counts": {k: v for k, v in sorted(counts.items()) if v},
    }
    entry.update({k: split_meta[k] for k in SPLIT_KEYS if k in split_meta})
    return entry


def dataset_manifest(splits: Mapping[str, dict[str, Any]], dataset_meta: Mapping[str, Any],
                     options: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The whole manifest from every split's entry."""
    features: dict[str, dict[str, Any]] = {}
    examples = 0
    by_reason: Counter[str] = Counter()
    images = total = 0
    for name in sorted(splits):
        entry = splits[name]
        features = merge_spec_json(features, entry["features"], examples, entry["examples"]) \
            if examples else dict(entry["features"])
        examples += entry["examples"]
        by_reason.update(entry["rejects"]["by_reason"])
        images += entry["rejects"]["images"]
        total += entry["rejects"]["total"]
    manifest = {
        "format": FORMAT,
        "recordbeam_version": version,
        "splits": {name: splits[name] for name in sorted(splits)},
        "totals": {
            "examples": examples,
            "bytes": sum(e["bytes"] for e in splits.values()),
            "shards": sum(len(e["shards"]) for e in splits.values()),
        },
        "features": features,
        "options": dict(options),
        "rejects": {"total": total, "images": images, "annotations": total - images,
                    "by_reason": dict(sorted(by_reason.items()))},
    }
    manifest.update({k: v for k, v in dataset_meta.items() if k not in SPLIT_KEYS})
    return manifest


#: Runs a manifest's ``history`` keeps; older ones are dropped (``history_dropped``
#: counts them), so the manifest does not grow with every nightly run.
HISTORY_RUNS = 1000


def with_version(final: dict[str, Any], previous: Mapping[str, Any],
                 run: Mapping[str, Any]) -> dict[str, Any]:
    """``final`` as the next version of ``previous``: ``version`` one higher (1 for a
    folder without one), and ``run`` (what it added, changed, removed...) appended to the
    ``history`` of runs."""
    version = int(previous.get("version", 0)) + 1
    history = [*previous.get("history", []), {"version": version, **run}]
    dropped = int(previous.get("history_dropped", 0)) + max(0, len(history) - HISTORY_RUNS)
    versioned = {**final, "version": version, "history": history[-HISTORY_RUNS:]}
    if dropped:
        versioned["history_dropped"] = dropped
    return versioned


def split_of_shard_file(name: str) -> str:
    """``train-00001-of-00004.tfrecord.gz`` -> ``train``; ``train-00012.tfrecord`` (a shard
    incremental runs keep) -> ``train``."""
    return name.rsplit("-of-", 1)[0].rsplit("-", 1)[0]


def empty_shards_warning(split: str, entry: Mapping[str, Any]) -> str | None:
    """What to say when a split's entry lists empty shards (more shards than examples
    asked with ``--shards``, or a split nothing reached), else None."""
    shards = entry.get("shards", [])
    empty = sum(1 for s in shards if not s["examples"])
    if not empty:
        return None
    examples = entry.get("examples", 0)
    if not examples:
        files = "its shard file is" if len(shards) == 1 else f"its {len(shards)} shard files are"
        return f"split {split}: no examples, so {files} empty; check the inputs of this split"
    # Examples fall into shards by hash, so even N shards for N examples leaves some
    # empty: the advice is "far fewer", not a number.
    are = "is" if empty == 1 else "are"
    return (f"split {split}: {empty} of {len(shards)} shards {are} empty "
            f"({counted(examples, 'example')}), so readers get empty files; write fewer shards "
            "(a much smaller --shards, or a larger --shard-size)")


def mixed_compression_warning(manifest: Mapping[str, Any]) -> str | None:
    """What to say when the splits of one folder are written with different compressions
    (a split rewritten with another ``--compression``), else None."""
    by_kind: dict[str, set[str]] = {}
    for split, entry in manifest.get("splits", {}).items():
        for shard in entry.get("shards", []):
            kind = compression_for_path(shard["file"]).name.lower()  # --compression's words
            by_kind.setdefault(kind, set()).add(split)
    if len(by_kind) < 2:
        return None
    described = "; ".join(f"{', '.join(sorted(splits))}: {kind}"
                          for kind, splits in sorted(by_kind.items()))
    return (f"the splits of this folder differ in compression ({described}): a reader given "
            "the folder needs one compression, and no TFDS files (dataset_info.json...) are "
            "written for it; write every split with the same --compression")


class LabelMapMismatch(DataError):
    """A run would give labels other meanings than the splits already in its folder."""


def _label_order(key: str) -> tuple[int, Any]:
    try:
        return 0, int(key)
    except ValueError:
        return 1, key


def _label_differences(previous: Mapping[str, Any], metadata: Mapping[str, Any]) -> list[str]:
    differences = []
    old, new = previous.get("label_map") or {}, metadata.get("label_map") or {}
    for label in sorted(set(old) | set(new), key=_label_order):
        if old.get(label) != new.get(label):
            there = repr(old[label]) if label in old else "unnamed"
            here = repr(new[label]) if label in new else "unnamed"
            differences.append(f"label {label} is {there} there but {here} in this run")
    old, new = previous.get("category_ids") or {}, metadata.get("category_ids") or {}
    for category in sorted(set(old) | set(new), key=_label_order):
        if old.get(category) != new.get(category):
            there = f"label {old[category]}" if category in old else "absent"
            here = f"label {new[category]}" if category in new else "absent"
            differences.append(f"category {category} is {there} there but {here} in this run")
    return differences


def label_map_conflict(previous: Mapping[str, Any] | None, metadata: Mapping[str, Any],
                       owned: Iterable[str], output_dir: str) -> str | None:
    """Why a run writing the splits ``owned`` with ``metadata``'s label map must not
    commit into a folder whose manifest is ``previous``, or None when it may: it may when
    the folder holds no other split, or when their label maps agree (names of every
    label value, and the label of every category id)."""
    owned = set(owned)
    kept = sorted(set((previous or {}).get("splits", {})) - owned)
    if not kept:
        return None
    differences = _label_differences(previous, metadata)
    if not differences:
        return None
    shown = "; ".join(differences[:5])
    if len(differences) > 5:
        shown += f"; and {len(differences) - 5} more"
    return (
        f"{output_dir} already holds the {'split' if len(kept) == 1 else 'splits'} {', '.join(kept)}, whose labels disagree "
        f"with this run's ({', '.join(sorted(owned))}): {shown}. Writing would give their "
        "examples other class names. Convert with the same categories (for class folders, "
        "the same --classes file; the same --contiguous-labels and --label-offset), write "
        "into another folder, or rewrite every split. Nothing was written."
    )


def check_label_maps_agree(previous: Mapping[str, Any] | None, metadata: Mapping[str, Any],
                           owned: Iterable[str], output_dir: str) -> None:
    """Raise :class:`LabelMapMismatch` when :func:`label_map_conflict` finds one."""
    problem = label_map_conflict(previous, metadata, owned, output_dir)
    if problem:
        raise LabelMapMismatch(problem)
