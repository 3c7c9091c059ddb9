"""``manifest.json``: what a finished output folder holds.

One folder may hold several splits (``train``, ``val``...), written by one run or by
several. A run replaces only the splits it writes; the entries of other splits are
carried over from the previous manifest. Per split: shards with example counts and
bytes, the feature spec, rejects by reason, counts, and the inputs fingerprint and
settings that ``--if-changed`` compares. At the top: totals and the feature spec over
all splits, the label map, and the recordbeam version.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from recordbeam.feature_spec import FeatureSpec, merge_spec_json
from recordbeam.records import LOST_WITH_IMAGE, OBJECTS_WRITTEN, Reject

FORMAT = "recordbeam.manifest/1"

#: Metadata keys that describe one split's inputs rather than the whole dataset.
SPLIT_KEYS = ("inputs_fingerprint", "input_files", "settings")


def reject_summary(rejects: Iterable[Reject], examples: int,
                   objects_written: int = 0) -> dict[str, Any]:
    """Counts by ``kind:reason``; ``image_fraction`` is image rejects over images seen;
    ``annotation_fraction`` is annotations rejected on their own account (not with their
    image, see :data:`~recordbeam.records.LOST_WITH_IMAGE`) over annotations seen
    (``objects_written`` plus every annotation reject)."""
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
        "rejects": reject_summary(rejects, examples, counts.get(OBJECTS_WRITTEN, 0)),
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


def split_of_shard_file(name: str) -> str:
    """``train-00001-of-00004.tfrecord.gz`` -> ``train``."""
    return name.rsplit("-of-", 1)[0].rsplit("-", 1)[0]
