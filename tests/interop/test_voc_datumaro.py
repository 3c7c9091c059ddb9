"""Our VOC reading against an independent writer (see ``datumaro_truth``): Datumaro
exports Pascal VOC from a COCO sample, we convert that export, and every box and class
must match the COCO truth (boxes within a pixel)."""

from __future__ import annotations

import datumaro_truth as truth


def test_datumaro_voc_export_converts_to_the_coco_truth(tmp_path):
    coco, manifest, examples = truth.convert_export(tmp_path, "voc", "voc")
    # One subset, "default" (ImageSets/Main/default.txt); labelmap.txt keeps COCO's order.
    assert list(manifest["label_map"].values()) == coco.names_in_id_order()
    truth.assert_every_box_matches(coco, examples)
