"""Our CVAT reading against an independent writer: Datumaro exports "CVAT for images 1.1"
from a COCO sample (each COCO object as a <polygon> and a <box> sharing a group_id), we
convert that export, and every box, class and mask must match the COCO truth (boxes within
a pixel, one object per COCO annotation).

Datumaro comes with the ``formats-test`` extra (it needs numpy>=2.2, which the oldest-Beam
environment cannot install); without it this test is skipped.
"""

from __future__ import annotations

import io
import json
import os
import warnings

import numpy as np
import pytest
from PIL import Image

dm = pytest.importorskip(
    "datumaro", reason="datumaro is not installed (pip install -e '.[formats-test]')")

from datumaro.components.dataset import Dataset  # noqa: E402

from recordbeam.cli import main as cli  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.example import decode_example  # noqa: E402
from recordbeam.tfrecord.framing import open_records  # noqa: E402

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {"image/object/mask": "bytes", "image/object/occluded": "int64",
         "image/object/class/label": "int64", "image/object/bbox/xmin": "float",
         "image/object/bbox/xmax": "float", "image/object/bbox/ymin": "float",
         "image/object/bbox/ymax": "float", "image/object/class/text": "bytes"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("datumaro")
    sample = make_coco_sample(root / "coco", include_bad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Dataset.import_from(sample.annotations, "coco_instances").export(
            str(root / "cvat"), "cvat", save_media=True)
    with open(sample.annotations, encoding="utf-8") as f:
        truth = json.load(f)
    return root / "cvat", truth


def test_datumaro_cvat_export_converts_to_the_coco_truth(exported, tmp_path):
    cvat_root, truth = exported
    out = tmp_path / "out"
    code = cli.main(["convert", "cvat", "--input", str(cvat_root), "--output", str(out),
                     "--include-masks", "--quiet", *IN_MEMORY])
    assert code == 0
    # Datumaro names its one subset "default" (default.xml).
    names = sorted(n for n in os.listdir(out) if n.startswith("default-"))
    examples = {e["image/source_id"][0].decode(): e
                for n in names for r in open_records(os.path.join(out, n))
                for e in [decode_example(r, KINDS)]}
    categories = {c["id"]: c["name"] for c in truth["categories"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["label_map"].values()) == [
        categories[i] for i in sorted(categories)]  # Datumaro's <meta> keeps COCO's order
    assert set(examples) == {i["file_name"] for i in truth["images"]}
    counts = manifest["splits"]["default"]["counts"]
    assert counts.get("masks_from_boxes", 0) == 0  # every mask from its polygon
    assert counts["masks_written"] == len(truth["annotations"])
    by_image: dict[int, list] = {i["id"]: [] for i in truth["images"]}
    for a in truth["annotations"]:
        x, y, w, h = a["bbox"]
        by_image[a["image_id"]].append((categories[a["category_id"]], x, y, x + w, y + h))
    checked = 0
    for image in truth["images"]:
        example = examples[image["file_name"]]
        width, height = int(example["image/width"][0]), int(example["image/height"][0])
        written = sorted(
            (text.decode(), x0 * width, y0 * height, x1 * width, y1 * height)
            for text, x0, y0, x1, y1 in zip(
                example["image/object/class/text"], example["image/object/bbox/xmin"],
                example["image/object/bbox/ymin"], example["image/object/bbox/xmax"],
                example["image/object/bbox/ymax"], strict=True))
        expected = sorted(by_image[image["id"]])
        assert [w[0] for w in written] == [e[0] for e in expected], image["file_name"]
        for got, want in zip(written, expected, strict=True):
            assert got[1:] == pytest.approx(want[1:], abs=1.0), image["file_name"]
            checked += 1
        assert len(example["image/object/mask"]) == len(expected)
        for png, x0, y0, x1, y1 in zip(
                example["image/object/mask"], example["image/object/bbox/xmin"],
                example["image/object/bbox/ymin"], example["image/object/bbox/xmax"],
                example["image/object/bbox/ymax"], strict=True):
            # COCO's polygons are the boxes' outlines: each mask fills its own box.
            rows, columns = np.nonzero(np.array(Image.open(io.BytesIO(png))))
            assert (columns.min(), rows.min(), columns.max() + 1, rows.max() + 1) == (
                pytest.approx((x0 * width, y0 * height, x1 * width, y1 * height), abs=1.5))
        assert list(example["image/object/occluded"]) == [0] * len(expected)
    assert checked == len(truth["annotations"]) > 0


def test_datumaro_cvat_mask_decodes_to_its_pixels(tmp_path):
    from datumaro.components.annotation import AnnotationType, LabelCategories, Mask
    from datumaro.components.dataset_base import DatasetItem
    from datumaro.components.media import Image as DmImage

    pixels = np.zeros((12, 20), dtype=np.uint8)
    pixels[2:5, 3:9] = 1
    pixels[7, 15:18] = 1  # a second part: the runs cross rows
    item = DatasetItem(id="m", media=DmImage.from_numpy(np.full((12, 20, 3), 90, np.uint8)),
                       annotations=[Mask(image=pixels, label=0)])
    dataset = Dataset.from_iterable(
        [item], categories={AnnotationType.label: LabelCategories.from_iterable(["blob"])})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset.export(str(tmp_path / "cvat"), "cvat", save_media=True)
    out = tmp_path / "out"
    code = cli.main(["convert", "cvat", "--input", str(tmp_path / "cvat"), "--output",
                     str(out), "--include-masks", "--quiet", *IN_MEMORY])
    assert code == 0
    [name] = [n for n in os.listdir(out) if n.endswith(".tfrecord")]
    [example] = [decode_example(r, KINDS) for r in open_records(str(out / name))]
    [png] = example["image/object/mask"]
    assert np.array(Image.open(io.BytesIO(png))).tolist() == pixels.tolist()
    assert list(example["image/object/bbox/xmin"]) == pytest.approx([3 / 20])
    assert list(example["image/object/bbox/ymax"]) == pytest.approx([8 / 12])
