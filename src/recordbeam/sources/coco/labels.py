"""What COCO's categories are written as: labels (COCO's category ids, or 1..K in id
order with ``--contiguous-labels``), their names, keypoint names and skeletons, as the
join writes them and the manifest records them."""

from __future__ import annotations

from typing import Any, NamedTuple

from recordbeam.dataset.class_names import (
    DUPLICATE_CLASS_NAME,
    check_class_list,
    repeated_name_warnings,
)
from recordbeam.records import Reject
from recordbeam.sources.coco.checks import id_order
from recordbeam.sources.coco.json_stream import CocoFormatError
from recordbeam.sources.coco.records import Category
from recordbeam.sources.fingerprint import inputs_entry


class CategoryLabel(NamedTuple):
    """What a category is written as."""

    label: int
    name: str


def label_map(categories: list[tuple[Any, str]], contiguous: bool) -> dict[Any, CategoryLabel]:
    """Category id -> (label written, name), from ``(id, name)`` pairs such as
    :class:`Category`. Duplicate ids are a broken file."""
    pairs = [Category(*pair) for pair in categories]
    ids = [c.id for c in pairs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}, key=id_order)
    if duplicates:
        raise CocoFormatError(f"category ids {duplicates} appear more than once; fix the annotation file")
    ordered = sorted(pairs, key=lambda c: id_order(c.id))
    if not contiguous and not all(isinstance(c.id, int) for c in ordered):
        raise CocoFormatError("category ids must be integers (or use --contiguous-labels)")
    if not contiguous and not all(-(2**63) <= c.id < 2**63 for c in ordered):
        raise CocoFormatError(
            "category ids must fit in a 64-bit integer, the label's type (or use "
            "--contiguous-labels)")
    return {
        category.id: CategoryLabel((rank + 1) if contiguous else category.id, category.name)
        for rank, category in enumerate(ordered)
    }


def category_name_warnings(categories: list[Category], path: str) -> list[Reject]:
    """``duplicate_class_name`` warnings for categories sharing a name (or names that
    differ only in Unicode normalisation): legal COCO, their ids keep them apart, but a
    class text then stands for two labels."""
    ordered = sorted(categories, key=lambda c: id_order(c.id))
    names = [c.name for c in ordered]
    places = [f"category {c.id!r}" for c in ordered]
    repeats = check_class_list(names, places, path, repeats_allowed=True)
    return [Reject("warning", f"{path}: categories", DUPLICATE_CLASS_NAME, detail)
            for detail in repeated_name_warnings(names, places, repeats)]


def metadata_of(categories: list[Category], contiguous: bool, terms: tuple[int, int],
                include_keypoints: bool = False, task: str = "detection") -> dict:
    """What the read hands the sink for the manifest: the task, the label map, the
    category ids' labels, the label names (with keypoint names and skeletons when
    keypoints are written) and the inputs' fingerprint terms."""
    labels = label_map(categories, contiguous)
    ordered = sorted(labels.items(), key=lambda kv: id_order(kv[0]))
    metadata = {
        "task": task,
        "label_map": {str(written.label): written.name for _cid, written in ordered},
        "category_ids": {str(cid): written.label for cid, written in ordered},
        "label_names": [written.name for _cid, written in ordered],
        "inputs": inputs_entry(terms),
    }
    if include_keypoints:
        metadata["keypoints"] = keypoints_metadata(categories, labels)
    return metadata


def keypoints_metadata(categories: list[Category],
                       labels: dict[Any, CategoryLabel]) -> dict[str, dict[str, list]]:
    """The manifest's ``keypoints``: per written label (as text) of a category with
    keypoint names, its ``names`` and its 1-based ``skeleton`` pairs, as COCO gives them."""
    with_names = sorted((c for c in categories if c.keypoints), key=lambda c: id_order(c.id))
    return {str(labels[c.id].label): {"names": list(c.keypoints),
                                      "skeleton": [list(pair) for pair in c.skeleton]}
            for c in with_names}
