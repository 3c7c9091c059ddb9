"""Our CVAT reading against an independent writer (see ``datumaro_truth``): Datumaro
exports "CVAT for images 1.1" from a COCO sample (each COCO object as a <polygon> and a
<box> sharing a group_id), we convert that export, and every box, class and mask must match
the COCO truth (boxes within a pixel, one object per COCO annotation)."""

from __future__ import annotations

import io

import datumaro_truth as truth
import numpy as np
import pytest
from PIL import Image

KINDS = {**truth.BOX_KINDS, "image/object/mask": "bytes", "image/object/occluded": "int64"}


def test_datumaro_cvat_export_converts_to_the_coco_truth(tmp_path):
    coco, manifest, examples = truth.convert_export(tmp_path, "cvat", "cvat", KINDS,
                                                    "--include-masks")
    # One subset, "default" (default.xml); <meta> keeps COCO's order.
    assert list(manifest["label_map"].values()) == coco.names_in_id_order()
    counts = manifest["splits"]["default"]["counts"]
    assert counts.get("masks_from_boxes", 0) == 0  # every mask from its polygon
    assert counts["masks_written"] == len(coco.truth["annotations"])
    truth.assert_every_box_matches(coco, examples, lambda image: image["file_name"])
    for example in examples.values():
        width, height = int(example["image/width"][0]), int(example["image/height"][0])
        assert len(example["image/object/mask"]) == len(example["image/object/bbox/xmin"])
        for png, x0, y0, x1, y1 in zip(
                example["image/object/mask"], example["image/object/bbox/xmin"],
                example["image/object/bbox/ymin"], example["image/object/bbox/xmax"],
                example["image/object/bbox/ymax"], strict=True):
            # COCO's polygons are the boxes' outlines: each mask fills its own box.
            rows, columns = np.nonzero(np.array(Image.open(io.BytesIO(png))))
            assert (columns.min(), rows.min(), columns.max() + 1, rows.max() + 1) == (
                pytest.approx((x0 * width, y0 * height, x1 * width, y1 * height), abs=1.5))
        assert list(example["image/object/occluded"]) == [0] * len(example["image/object/mask"])


def test_datumaro_cvat_mask_decodes_to_its_pixels(tmp_path):
    from datumaro.components.annotation import AnnotationType, LabelCategories, Mask
    from datumaro.components.dataset_base import DatasetItem
    from datumaro.components.media import Image as DmImage

    pixels = np.zeros((12, 20), dtype=np.uint8)
    pixels[2:5, 3:9] = 1
    pixels[7, 15:18] = 1  # a second part: the runs cross rows
    item = DatasetItem(id="m", media=DmImage.from_numpy(np.full((12, 20, 3), 90, np.uint8)),
                       annotations=[Mask(image=pixels, label=0)])
    dataset = truth.Dataset.from_iterable(
        [item], categories={AnnotationType.label: LabelCategories.from_iterable(["blob"])})
    out = tmp_path / "out"
    truth.convert("cvat", truth.export(dataset, tmp_path / "cvat", "cvat"), out,
                  "--include-masks")
    [example] = truth.read_examples(out, KINDS, split=None).values()
    [png] = example["image/object/mask"]
    assert np.array(Image.open(io.BytesIO(png))).tolist() == pixels.tolist()
    assert list(example["image/object/bbox/xmin"]) == pytest.approx([3 / 20])
    assert list(example["image/object/bbox/ymax"]) == pytest.approx([8 / 12])
