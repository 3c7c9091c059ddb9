"""Our KITTI reading against an independent writer (see ``datumaro_truth``): Datumaro
exports KITTI detection from a COCO sample, we convert that export, and every box and
class must match the COCO truth (boxes within a pixel)."""

from __future__ import annotations

import datumaro_truth as truth

KINDS = {**truth.BOX_KINDS, "image/object/truncated": "float", "image/object/occluded": "int64"}


def test_datumaro_kitti_export_converts_to_the_coco_truth(tmp_path):
    # One subset, "default" (default/image_2, default/label_2); images without
    # annotations get no label file and are written with no objects.
    coco, manifest, examples = truth.convert_export(tmp_path, "kitti", "kitti_detection", KINDS)
    used = {coco.categories[a["category_id"]] for a in coco.truth["annotations"]}
    assert list(manifest["label_map"].values()) == sorted(used)  # the types found, sorted
    truth.assert_every_box_matches(coco, examples,
                                   lambda image: "default/" + truth.image_stem(image))
    for example in examples.values():
        labels = [int(v) for v in example["image/object/class/label"]]
        assert [manifest["label_map"][str(v)] for v in labels] == [
            t.decode() for t in example["image/object/class/text"]]
