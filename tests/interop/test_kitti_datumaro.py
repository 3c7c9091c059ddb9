"""Our KITTI reading against an independent writer: Datumaro exports KITTI detection from a
COCO sample, we convert that export, and every box and class must match the COCO truth
(boxes within a pixel).

Datumaro comes with the ``formats-test`` extra (it needs numpy>=2.2, which the oldest-Beam
environment cannot install); without it this test is skipped.
"""

from __future__ import annotations

import pytest

dm = pytest.importorskip(
    "datumaro", reason="datumaro is not installed (pip install -e '.[formats-test]')")

from datumaro_truth import (  # noqa: E402
    BOX_KINDS,
    assert_every_box_matches,
    coco_truth,
    convert,
    export_coco,
    image_stem,
    read_examples,
)

KINDS = {**BOX_KINDS, "image/object/truncated": "float", "image/object/occluded": "int64"}


def test_datumaro_kitti_export_converts_to_the_coco_truth(tmp_path):
    coco = coco_truth(tmp_path)
    manifest = convert("kitti", export_coco(coco, "kitti_detection"), tmp_path / "out")
    # Datumaro names its one subset "default" (default/image_2, default/label_2); images
    # without annotations get no label file and are written with no objects.
    examples = read_examples(tmp_path / "out", KINDS)
    used = {coco.categories[a["category_id"]] for a in coco.truth["annotations"]}
    assert list(manifest["label_map"].values()) == sorted(used)  # the types found, sorted
    assert_every_box_matches(coco, examples, lambda image: "default/" + image_stem(image))
    for example in examples.values():
        labels = [int(v) for v in example["image/object/class/label"]]
        assert [manifest["label_map"][str(v)] for v in labels] == [
            t.decode() for t in example["image/object/class/text"]]
