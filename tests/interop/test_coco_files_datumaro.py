"""COCO files without boxes, as Datumaro (an independent writer) exports them: its
``coco_image_info`` (``image_info_<subset>.json``: images, no annotations, no categories)
and its ``coco_labels`` (``labels_<subset>.json``: annotations with a ``category_id`` and
no ``bbox``, labels of the whole image)."""

from __future__ import annotations

import io
import json
import warnings

import datumaro_truth as truth
import numpy as np
import pytest
from datumaro.components.annotation import Label
from datumaro.components.dataset_base import DatasetItem
from datumaro.components.media import Image as DmImage

from recordbeam.cli import main as cli

KINDS = {**truth.BOX_KINDS, "image/class/label": "int64", "image/class/text": "bytes",
         "image/filename": "bytes"}


def _dataset():
    def item(name, labels):
        return DatasetItem(id=name, subset="train", annotations=[Label(i) for i in labels],
                           media=DmImage.from_numpy(np.full((12, 20, 3), 90, np.uint8)))

    return truth.Dataset.from_iterable(
        [item("a", [1, 0]), item("b", [2]), item("c", [])],
        categories=["cat", "dog", "traffic light"])


def _convert(tmp_path, fmt, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = truth.export(_dataset(), tmp_path / fmt, fmt)
    out = tmp_path / "out"
    code = cli.main(["convert", "coco", "--images", str(folder / "images" / "train"),
                     "--annotations", str(folder / "annotations" / name), "--output", str(out),
                     "--quiet", *truth.IN_MEMORY])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    examples = truth.read_examples(out, KINDS, key="image/filename", split="train")
    return manifest, examples


def test_an_image_info_file_converts_to_examples_without_objects(tmp_path):
    manifest, examples = _convert(tmp_path, "coco_image_info", "image_info_train.json")
    assert sorted(examples) == ["a.jpg", "b.jpg", "c.jpg"]
    assert all(len(e["image/object/class/label"]) == 0 for e in examples.values())
    assert manifest["label_map"] == {}
    assert manifest["splits"]["train"]["counts"]["images_written"] == 3


def test_image_level_labels_are_written_as_image_class_features(tmp_path):
    manifest, examples = _convert(tmp_path, "coco_labels", "labels_train.json")
    assert manifest["label_map"] == {"1": "cat", "2": "dog", "3": "traffic light"}
    # In annotation-id order, as Datumaro wrote them; COCO's category ids are the labels.
    assert examples["a.jpg"]["image/class/text"].tolist() == [b"dog", b"cat"]
    assert examples["a.jpg"]["image/class/label"].tolist() == [2, 1]
    assert examples["b.jpg"]["image/class/text"].tolist() == [b"traffic light"]
    assert "image/class/label" not in examples["c.jpg"]  # no labels: no feature
    assert all(len(e["image/object/class/label"]) == 0 for e in examples.values())
    counts = manifest["splits"]["train"]["counts"]
    assert counts["image_labels_written"] == 3
    assert (tmp_path / "out" / "rejects.jsonl").read_text() == ""


@pytest.mark.parametrize("categories", [[], None])
def test_missing_or_empty_categories_are_no_classes(tmp_path, categories):
    manifest, _examples = _convert(tmp_path, "coco_image_info", "image_info_train.json")
    path = tmp_path / "coco_image_info" / "annotations" / "image_info_train.json"
    data = json.loads(path.read_text())
    if categories is None:
        del data["categories"], data["annotations"]
    path.write_text(json.dumps(data))
    out = tmp_path / "again"
    code = cli.main(["convert", "coco", "--images", str(path.parent.parent / "images" / "train"),
                     "--annotations", str(path), "--output", str(out), "--quiet",
                     *truth.IN_MEMORY])
    assert code == 0
    assert json.loads((out / "manifest.json").read_text())["label_map"] == {}


def test_boxes_exported_with_an_empty_segmentation_keep_a_box_mask(tmp_path):
    # Datumaro's (and CVAT's) COCO export writes a box as "segmentation": [].
    from datumaro.components.annotation import Bbox, Polygon
    from PIL import Image

    item = DatasetItem(id="a", subset="train",
                       media=DmImage.from_numpy(np.full((12, 20, 3), 90, np.uint8)),
                       annotations=[Bbox(2, 3, 8, 4, label=0),
                                    Polygon([10, 1, 18, 1, 18, 9], label=1)])
    dataset = truth.Dataset.from_iterable([item], categories=["cat", "dog"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = truth.export(dataset, tmp_path / "coco", "coco_instances")
    out = tmp_path / "out"
    code = cli.main(["convert", "coco", "--images", str(folder / "images" / "train"),
                     "--annotations", str(folder / "annotations" / "instances_train.json"),
                     "--output", str(out), "--include-masks", "--quiet", *truth.IN_MEMORY])
    assert code == 0
    [example] = truth.read_examples(out, {**KINDS, "image/object/mask": "bytes"},
                                    split="train").values()
    assert example["image/object/class/text"].tolist() == [b"cat", b"dog"]
    box, triangle = (np.array(Image.open(io.BytesIO(png)))
                     for png in example["image/object/mask"])
    expected = np.zeros((12, 20), dtype=np.uint8)
    expected[3:7, 2:10] = 1
    assert box.tolist() == expected.tolist()
    assert triangle[2, 17] and not triangle[8, 11]
    counts = json.loads((out / "manifest.json").read_text())["splits"]["train"]["counts"]
    assert (counts["masks_written"], counts["masks_from_boxes"]) == (2, 1)
