"""`recordbeam convert box-csv` end to end on a hand-written export of Roboflow's
"TensorFlow Object Detection CSV" shape, with the messy cases real exports have."""

from __future__ import annotations

import json
import os

import pytest
from lanes import exhaustive
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
HEADER = "filename,width,height,class,xmin,ymin,xmax,ymax"


@pytest.fixture(scope="module")
def box_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("boxcsv")
    for split in ("train", "valid"):
        (root / split).mkdir()

    def image(split, name):
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / split / name, format="JPEG")

    image("train", "a.jpg")
    image("train", "b.JPG")
    image("train", "c.jpg")  # no rows: written with no objects
    image("valid", "v.jpg")
    train = [
        HEADER,
        "a.jpg,80,40,dog,8,4,40,20",
        'a.jpg,80,40,"traffic light, red",60,10,100,30',  # quoted name; clipped
        "b.JPG,80,40,cat,4,4,4,9",  # degenerate
        "b.JPG,80,40,dog,0,0,80,40",
        "missing.jpg,80,40,dog,1,1,5,5",  # no such image
        "a.jpg,80,40,dog,one,1,5,5",  # not a number
        "a.jpg,80,40",  # too few fields
    ]
    (root / "train" / "_annotations.csv").write_bytes(
        b"\xef\xbb\xbf" + "\r\n".join(train).encode() + b"\r\n")
    (root / "valid" / "_annotations.csv").write_text(
        HEADER + "\nv.jpg,80,40,bird,0,0,40,40\n")
    return root


def _examples(output, split):
    return split_examples(output, split, "image/filename", {"image/object/class/label": "int64",
                                                              "image/object/bbox/xmin": "float"})


def test_box_csv_converts_with_every_reject_named(box_root, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["convert", "box-csv", "--input", str(box_root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    assert code == 0
    train, valid = _examples(out, "train"), _examples(out, "valid")
    assert set(train) == {"a.jpg", "b.JPG", "c.jpg"} and set(valid) == {"v.jpg"}
    a = train["a.jpg"]
    assert a["image/object/class/text"].tolist() == [b"dog", b"traffic light, red"]
    assert a["image/object/class/label"].tolist() == [2, 3]
    assert a["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.75])
    assert a["image/object/bbox/xmax"].tolist() == pytest.approx([0.5, 1.0])  # clipped
    assert a["image/object/bbox/ymax"].tolist() == pytest.approx([0.5, 0.75])
    assert train["b.JPG"]["image/object/class/text"].tolist() == [b"dog"]
    assert train["c.jpg"]["image/object/class/label"].tolist() == []
    assert valid["v.jpg"]["image/object/class/label"].tolist() == [1]
    rejects = {(r["reason"], os.path.basename(r["source"]))
               for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
    assert rejects == {
        ("degenerate_bbox", "_annotations.csv:4"), ("missing", "_annotations.csv:6"),
        ("invalid_bbox", "_annotations.csv:7"), ("malformed_row", "_annotations.csv:8"),
    }
    manifest = json.loads((out / "manifest.json").read_text())
    # cat's only box was degenerate: the classes are the names of the usable boxes
    assert manifest["label_map"] == {"1": "bird", "2": "dog", "3": "traffic light, red"}
    assert manifest["splits"]["train"]["counts"]["boxes_clipped"] == 1
    assert manifest["splits"]["train"]["counts"]["images_without_objects"] == 1  # c
    assert manifest["splits"]["train"]["counts"]["box_csv_images_without_rows"] == 1


def test_hidden_files_beside_the_images_are_skipped_and_counted(tmp_path):
    # macOS leaves ._a.jpg (AppleDouble: no image) beside a.jpg on other file systems; it
    # was rejected not_an_image and failed the run at the default --max-reject-fraction.
    root = tmp_path / "in"
    (root / "train").mkdir(parents=True)
    Image.new("RGB", (80, 40), (90, 20, 200)).save(root / "train" / "a.jpg", format="JPEG")
    (root / "train" / "._a.jpg").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
    (root / "train" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (root / "train" / "_annotations.csv").write_text(HEADER + "\na.jpg,80,40,dog,8,4,40,20\n")
    out = tmp_path / "out"
    code = cli.main(["convert", "box-csv", "--input", str(root), "--output", str(out),
                     "--quiet", *IN_MEMORY])
    assert code == 0
    assert set(_examples(out, "train")) == {"a.jpg"}
    assert (out / "rejects.jsonl").read_text() == ""
    counts = json.loads((out / "manifest.json").read_text())["splits"]["train"]["counts"]
    assert counts["box_csv_other_files_skipped"] == 2


def test_a_table_without_its_columns_is_a_data_error_no_tables_a_usage_error(tmp_path):
    # No table at all: --input is not a box CSV export (exit 2, as for VOC, KITTI, CVAT);
    # a table that is there but lacks its columns: the data's problem (exit 1).
    (tmp_path / "in" / "train").mkdir(parents=True)
    (tmp_path / "in" / "train" / "a.jpg").write_bytes(b"")
    (tmp_path / "bad" / "train").mkdir(parents=True)
    (tmp_path / "bad" / "train" / "_annotations.csv").write_text("name,size\na.jpg,1\n")
    for root, expected in (("in", 2), ("nowhere", 2), ("bad", 1)):
        code = cli.main(["convert", "box-csv", "--input", str(tmp_path / root), "--output",
                         str(tmp_path / "out"), "--quiet", *IN_MEMORY])
        assert code == expected, root


@exhaustive  # --if-changed over any format: test_voc_pipeline.py, test_incremental.py
def test_if_changed_skips_a_rerun_until_a_table_changes(box_root, tmp_path, capsys):
    args = ["convert", "box-csv", "--input", str(box_root), "--output", str(tmp_path / "out"),
            "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
            "--quiet", "--if-changed", *IN_MEMORY]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "is up to date" in capsys.readouterr().out
    table = box_root / "valid" / "_annotations.csv"
    before = table.read_bytes()
    table.write_bytes(before + b"v.jpg,80,40,bird,1,1,9,9\n")
    try:
        assert cli.main(args) == 0
        assert "is up to date" not in capsys.readouterr().out
    finally:
        table.write_bytes(before)


def test_split_option_is_refused(box_root, tmp_path):
    code = cli.main(["convert", "box-csv", "--input", str(box_root), "--output",
                     str(tmp_path / "out"), "--split", "holdout", "--quiet", *IN_MEMORY])
    assert code == 2
