"""`recordbeam convert openimages` end to end on a small hand-written Open Images folder
(the real tables' columns, a v5 headerless class list) with the messy cases real copies
have."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
BOX_HEADER = ("ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,"
              "IsTruncated,IsGroupOf,IsDepiction,IsInside")


def _box(image_id, label, xmin, xmax, ymin, ymax, occluded=0, truncated=0, group_of=0,
         depiction=0):
    return (f"{image_id},xclick,{label},1,{xmin},{xmax},{ymin},{ymax},{occluded},{truncated},"
            f"{group_of},{depiction},0")


@pytest.fixture(scope="module")
def oid_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("oid")
    for folder in ("annotations", "images/train", "images/validation"):
        (root / folder).mkdir(parents=True)

    def image(split, name):
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / "images" / split / name,
                                                       format="JPEG")

    image("train", "000a.jpg")
    image("train", "000b.JPG")
    image("train", "000c.jpg")  # no rows: written with no objects
    image("validation", "000v.jpg")
    # v5: no header; a display name holding a comma, quoted
    (root / "annotations" / "class-descriptions-boxable.csv").write_bytes(
        b'/m/dog,Dog\r\n/m/tl,"Traffic light, red"\r\n/m/cat,Cat\r\n')
    train = [
        BOX_HEADER,
        _box("000a", "/m/dog", 0.1, 0.5, 0.1, 0.5, occluded=1, group_of=1),
        _box("000a", "/m/tl", 0.75, 1.2, 0.25, 0.75, truncated=1, depiction=-1),  # clipped
        _box("000b", "/m/cat", 0.2, 0.2, 0.1, 0.4),  # degenerate
        _box("000b", "/m/yak", 0.1, 0.4, 0.1, 0.4),  # not in the class descriptions
        _box("000b", "/m/dog", 0.0, 1.0, 0.0, 1.0),
        _box("000z", "/m/dog", 0.1, 0.4, 0.1, 0.4),  # no such image
        "000a,xclick,/m/dog,1,0.1",  # too few fields
    ]
    (root / "annotations" / "oidv6-train-annotations-bbox.csv").write_bytes(
        b"\xef\xbb\xbf" + "\r\n".join(train).encode() + b"\r\n")
    (root / "annotations" / "validation-annotations-bbox.csv").write_text(
        BOX_HEADER + "\n" + _box("000v", "/m/cat", 0, 0.5, 0, 0.5) + "\n")
    (root / "annotations" / "train-annotations-human-imagelabels-boxable.csv").write_text(
        "ImageID,Source,LabelName,Confidence\n000a,verification,/m/dog,1\n"
        "000a,verification,/m/cat,0\n000c,verification,/m/tl,1\n000c,verification,/m/owl,1\n")
    (root / "annotations" / "train-images-with-rotation.csv").write_text("ImageID,Rotation\n")
    return root


def _examples(output, split):
    return split_examples(output, split, kinds={"image/object/class/label": "int64",
                                                    "image/object/bbox/xmin": "float",
                                                    "image/class/label": "int64"})


def test_open_images_converts_with_every_reject_named(oid_root, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["convert", "openimages", "--input", str(oid_root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    assert code == 0
    train, validation = _examples(out, "train"), _examples(out, "validation")
    assert set(train) == {"000a", "000b", "000c"} and set(validation) == {"000v"}
    a = train["000a"]
    assert a["image/object/class/text"].tolist() == [b"Dog", b"Traffic light, red"]
    assert a["image/object/class/label"].tolist() == [1, 2]
    assert a["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.75])
    assert a["image/object/bbox/xmax"].tolist() == pytest.approx([0.5, 1.0])  # clipped
    assert a["image/object/bbox/ymin"].tolist() == pytest.approx([0.1, 0.25])
    assert a["image/object/occluded"].tolist() == [1, 0]
    assert a["image/object/truncated"].tolist() == [0, 1]
    assert a["image/object/group_of"].tolist() == [1, 0]
    assert a["image/object/depiction"].tolist() == [0, -1]
    assert a["image/class/label"].tolist() == [1]  # the negative /m/cat label is not written
    assert a["image/class/text"].tolist() == [b"Dog"]
    assert a["image/filename"].tolist() == [b"000a.jpg"]
    assert train["000b"]["image/object/class/text"].tolist() == [b"Dog"]
    c = train["000c"]
    assert c["image/object/class/label"].tolist() == []
    assert c["image/class/text"].tolist() == [b"Traffic light, red"]
    assert validation["000v"]["image/object/class/label"].tolist() == [3]
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    found = {(r["reason"], os.path.basename(r["source"].split(": row ")[0]),
              r["source"].split(": row ")[1].strip("'").split(",")[0]) for r in rejects}
    table = "oidv6-train-annotations-bbox.csv"
    assert found == {("degenerate_bbox", table, "000b"), ("unknown_category", table, "000b"),
                     ("missing", table, "000z"), ("malformed_row", table, "000a")}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "Dog", "2": "Traffic light, red", "3": "Cat"}
    counts = manifest["splits"]["train"]["counts"]
    assert counts["boxes_clipped"] == 1
    assert counts["openimages_negative_image_labels_skipped"] == 1
    assert counts["openimages_image_labels_not_in_classes"] == 1  # /m/owl
    assert counts["openimages_tables_not_read"] == 1  # the rotation table


def test_without_class_descriptions_is_a_data_error(oid_root, tmp_path):
    root = tmp_path / "oid"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "train-annotations-bbox.csv").write_text(BOX_HEADER + "\n")
    code = cli.main(["convert", "openimages", "--input", str(root), "--output",
                     str(tmp_path / "out"), "--quiet", *IN_MEMORY])
    assert code == 1


def test_images_in_no_tables_split_are_counted_and_listed_counts_by_split(tmp_path):
    # A partial copy: test images downloaded without the test tables, one image left at
    # the top of images/. Each split's counts go to that split's manifest entry.
    root = tmp_path / "oid"
    for folder in ("images/train", "images/validation", "images/test"):
        (root / folder).mkdir(parents=True)
    for split, name in [("train", "t1"), ("train", "t2"), ("validation", "v1"),
                        ("test", "x1"), ("test", "x2")]:
        Image.new("RGB", (80, 40)).save(root / "images" / split / f"{name}.jpg")
    Image.new("RGB", (80, 40)).save(root / "images" / "loose.jpg")
    (root / "images" / "validation" / "notes.txt").write_text("not an image\n")
    (root / "class-descriptions-boxable.csv").write_text("/m/dog,Dog\n")
    (root / "train-annotations-bbox.csv").write_text(
        BOX_HEADER + "\n" + _box("t1", "/m/dog", 0.1, 0.5, 0.1, 0.5) + "\n")
    (root / "validation-annotations-bbox.csv").write_text(
        BOX_HEADER + "\n" + _box("v9", "/m/dog", 0.1, 0.5, 0.1, 0.5) + "\n")
    (root / "validation-annotations-human-imagelabels.csv").write_text(
        "ImageID,Source,LabelName,Confidence\nv1,verification,/m/dog,0\n")
    out = tmp_path / "out"
    code = cli.main(["convert", "openimages", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--quiet", *IN_MEMORY])
    assert code == 0
    splits = json.loads((out / "manifest.json").read_text())["splits"]
    train, validation = splits["train"]["counts"], splits["validation"]["counts"]
    assert train["openimages_images_without_rows"] == 1  # t2
    assert validation["openimages_images_without_rows"] == 1  # v1: its one label negative
    assert validation["openimages_negative_image_labels_skipped"] == 1
    assert validation["openimages_non_image_files_skipped"] == 1
    assert "openimages_non_image_files_skipped" not in train
    assert train["openimages_images_in_no_split"] == 3  # run-level: the first split's
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    details = {r["source"]: r["detail"] for r in rejects if r["reason"] == "image_in_no_split"}
    assert "2 image files" in details[str(root / "images" / "test")]
    assert "no test-annotations-bbox.csv names it" in details[str(root / "images" / "test")]
    assert "1 image file in" in details[str(root / "images")]
