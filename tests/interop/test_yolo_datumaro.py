"""Our YOLO reading against an independent writer: Datumaro exports darknet YOLO ("yolo")
and Ultralytics YOLO ("yolo_ultralytics") from a COCO sample, we convert each export, and
every box and class must match the COCO truth (boxes within a pixel).

Datumaro comes with the ``formats-test`` extra; without it this test is skipped.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
from PIL import Image

dm = pytest.importorskip(
    "datumaro", reason="datumaro is not installed (pip install -e '.[formats-test]')")

from datumaro.components.dataset import Dataset  # noqa: E402

from recordbeam.cli import main as cli  # noqa: E402
from recordbeam.images.transcode import orient_box  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.example import decode_example  # noqa: E402
from recordbeam.tfrecord.framing import open_records  # noqa: E402

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {"image/object/class/label": "int64", "image/object/bbox/xmin": "float",
         "image/object/bbox/xmax": "float", "image/object/bbox/ymin": "float",
         "image/object/bbox/ymax": "float", "image/object/class/text": "bytes",
         "image/filename": "bytes"}


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp("datumaro")
    sample = make_coco_sample(root / "coco", include_bad=False)
    with open(sample.annotations, encoding="utf-8") as f:
        truth = json.load(f)
    return root, sample.annotations, truth


def _export(root, annotations, fmt: str):
    dataset = Dataset.import_from(annotations, "coco_instances")
    # Ultralytics' exporter wants a train and a val subset; darknet's takes any.
    dataset.transform("random_split", splits=[("train", 0.67), ("val", 0.33)], seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset.export(str(root / fmt), fmt, save_media=True)
    return root / fmt


@pytest.mark.parametrize("fmt", ["yolo", "yolo_ultralytics"])
def test_datumaro_yolo_export_converts_to_the_coco_truth(coco, fmt, tmp_path):
    root, annotations, truth = coco
    exported = _export(root, annotations, fmt)
    out = tmp_path / "out"
    code = cli.main(["convert", "yolo", "--input", str(exported), "--output", str(out),
                     "--quiet", *IN_MEMORY])
    assert code == 0
    names = sorted(n for n in os.listdir(out) if n.endswith(".tfrecord"))
    assert {n.split("-")[0] for n in names} == {"train", "val"}
    examples = {e["image/filename"][0].decode(): e
                for n in names for r in open_records(os.path.join(out, n))
                for e in [decode_example(r, KINDS)]}
    categories = {c["id"]: c["name"] for c in truth["categories"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["label_map"].values()) == [categories[i] for i in sorted(categories)]
    assert set(examples) == {i["file_name"] for i in truth["images"]}
    sizes = {i["id"]: (i["width"], i["height"]) for i in truth["images"]}
    rotated = _exif_rotated(str(root / "coco" / "images"), truth)
    by_image: dict[int, list] = {i["id"]: [] for i in truth["images"]}
    for a in truth["annotations"]:
        x, y, w, h = a["bbox"]
        corners = (x, y, x + w, y + h)
        if a["image_id"] in rotated:
            # Datumaro divides COCO's stored-pixel boxes by the stored size; YOLO (as
            # Ultralytics loads images) means fractions of the EXIF-rotated image, so
            # we read these numbers that way and move them back to the stored pixels
            # written (orientation 6 is undone by 8).
            width, height = sizes[a["image_id"]]
            x0, y0, x1, y1 = orient_box(x / width, y / height, (x + w) / width,
                                        (y + h) / height, 8)
            corners = (x0 * width, y0 * height, x1 * width, y1 * height)
        by_image[a["image_id"]].append((categories[a["category_id"]], *corners))
    checked = 0
    for image in truth["images"]:
        example = examples[image["file_name"]]
        width, height = image["width"], image["height"]
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
    assert checked == len(truth["annotations"]) > 0
    assert rotated and all(by_image[i] for i in rotated)


def _exif_rotated(images: str, truth) -> set[int]:
    """The ids of the sample's images with EXIF orientation 6 (it makes one)."""
    rotated = set()
    for image in truth["images"]:
        with Image.open(os.path.join(images, image["file_name"])) as opened:
            orientation = opened.getexif().get(0x0112, 1)
        assert orientation in (1, 6)
        if orientation == 6:
            rotated.add(image["id"])
    return rotated
