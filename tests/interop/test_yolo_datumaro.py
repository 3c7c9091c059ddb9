"""Our YOLO reading against an independent writer (see ``datumaro_truth``): Datumaro
exports darknet YOLO ("yolo") and Ultralytics YOLO ("yolo_ultralytics") from a COCO sample,
we convert each export, and every box and class must match the COCO truth (boxes within a
pixel)."""

from __future__ import annotations

import os

import datumaro_truth as truth
import pytest
from PIL import Image

from recordbeam.images.transcode import orient_box

KINDS = {**truth.BOX_KINDS, "image/filename": "bytes"}


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return truth.coco_truth(tmp_path_factory.mktemp("datumaro"))


@pytest.mark.parametrize("fmt", ["yolo", "yolo_ultralytics"])
def test_datumaro_yolo_export_converts_to_the_coco_truth(coco, fmt, tmp_path):
    dataset = truth.Dataset.import_from(coco.annotations, "coco_instances")
    # Ultralytics' exporter wants a train and a val subset; darknet's takes any.
    dataset.transform("random_split", splits=[("train", 0.67), ("val", 0.33)], seed=1)
    out = tmp_path / "out"
    manifest = truth.convert("yolo", truth.export(dataset, coco.root / fmt, fmt), out)
    assert {n.split("-")[0] for n in os.listdir(out) if n.endswith(".tfrecord")} == {
        "train", "val"}
    examples = truth.read_examples(out, KINDS, key="image/filename", split=None)
    assert list(manifest["label_map"].values()) == coco.names_in_id_order()
    sizes = {i["id"]: (i["width"], i["height"]) for i in coco.images}
    rotated = _exif_rotated(str(coco.root / "coco" / "images"), coco.truth)

    def corners(a):
        x, y, w, h = a["bbox"]
        if a["image_id"] not in rotated:
            return (x, y, x + w, y + h)
        # Datumaro divides COCO's stored-pixel boxes by the stored size; YOLO (as
        # Ultralytics loads images) means fractions of the EXIF-rotated image, so
        # we read these numbers that way and move them back to the stored pixels
        # written (orientation 6 is undone by 8).
        width, height = sizes[a["image_id"]]
        x0, y0, x1, y1 = orient_box(x / width, y / height, (x + w) / width,
                                    (y + h) / height, 8)
        return (x0 * width, y0 * height, x1 * width, y1 * height)

    by_image = coco.boxes(corners)
    truth.assert_every_box_matches(coco, examples, lambda image: image["file_name"],
                             by_image=by_image, truth_sizes=True)
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
