"""Our Open Images reading against an independent writer: Datumaro exports Open Images
(``annotations/*.csv``, ``images/<subset>/``) from a COCO sample, we convert that export,
and every box and class must match the COCO truth (boxes within a pixel).

Datumaro comes with the ``formats-test`` extra (it needs numpy>=2.2, which the oldest-Beam
environment cannot install); without it this test is skipped.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

dm = pytest.importorskip(
    "datumaro", reason="datumaro is not installed (pip install -e '.[formats-test]')")

from datumaro.components.dataset import Dataset  # noqa: E402

from recordbeam.cli import main as cli  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.example import decode_example  # noqa: E402
from recordbeam.tfrecord.framing import open_records  # noqa: E402

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {"image/object/class/label": "int64", "image/object/bbox/xmin": "float",
         "image/object/bbox/xmax": "float", "image/object/bbox/ymin": "float",
         "image/object/bbox/ymax": "float", "image/object/class/text": "bytes"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("datumaro")
    sample = make_coco_sample(root / "coco", include_bad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Dataset.import_from(sample.annotations, "coco_instances").export(
            str(root / "oid"), "open_images", save_media=True)
    with open(sample.annotations, encoding="utf-8") as f:
        truth = json.load(f)
    return root / "oid", truth


def test_datumaro_open_images_export_converts_to_the_coco_truth(exported, tmp_path):
    oid_root, truth = exported
    out = tmp_path / "out"
    code = cli.main(["convert", "openimages", "--input", str(oid_root), "--output", str(out),
                     "--quiet", *IN_MEMORY])
    assert code == 0
    # Datumaro names its one subset "default" (default-annotations-bbox.csv).
    names = sorted(n for n in os.listdir(out) if n.startswith("default-"))
    examples = {e["image/source_id"][0].decode(): e
                for n in names for r in open_records(os.path.join(out, n))
                for e in [decode_example(r, KINDS)]}
    categories = {c["id"]: c["name"] for c in truth["categories"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["label_map"].values()) == [
        categories[i] for i in sorted(categories)]  # its class-descriptions.csv keeps COCO's order
    assert set(examples) == {os.path.splitext(i["file_name"])[0] for i in truth["images"]}
    by_image: dict[int, list] = {i["id"]: [] for i in truth["images"]}
    for a in truth["annotations"]:
        x, y, w, h = a["bbox"]
        by_image[a["image_id"]].append((categories[a["category_id"]], x, y, x + w, y + h))
    checked = 0
    for image in truth["images"]:
        example = examples[os.path.splitext(image["file_name"])[0]]
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
    assert checked == len(truth["annotations"]) > 0
