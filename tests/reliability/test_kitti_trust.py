"""Untrusted KITTI folders: broken label lines and files, labels and images that do not pair,
split folders that cannot be splits."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
GOOD = "Car 0 0 0 1 1 9 9 1.5 1.6 3.9 1 1.7 10 0.5"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("kitti")
    labels, images = root / "training" / "label_2", root / "training" / "image_2"
    labels.mkdir(parents=True)
    images.mkdir(parents=True)
    files = {
        "fields": f"{GOOD}\nCar 0 0 0 1 1 9\n",
        "numbers": f"{GOOD}\nCar 0 0 0 1 1 inf 9 1 1 1 1 1 1 1\nCar 0 0 0 a b c d 1 1 1 1 1 1 1\n",
        "binary": b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage",
        "dontcare": "DontCare -1 -1 -10 1 1 9 9 -1 -1 -1 -1000 -1000 -1000 -10\n",
        "good": GOOD,
        "no_image": GOOD,
    }
    for stem, content in files.items():
        data = content if isinstance(content, bytes) else content.encode()
        (labels / f"{stem}.txt").write_bytes(data)
    for stem in ("fields", "numbers", "binary", "dontcare", "good", "no_label"):
        Image.new("RGB", (32, 32)).save(images / f"{stem}.png", format="PNG")
    out = root.parent / f"{root.name}-out"
    code = cli.main(["convert", "kitti", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    shards = b"".join((out / name).read_bytes() for name in os.listdir(out)
                      if name.endswith(".tfrecord"))
    manifest = json.loads((out / "manifest.json").read_text())
    return code, {os.path.basename(r["source"]): r for r in rejects}, shards, manifest


@CASE("KITTI label line with the wrong number of fields, or fields that are not finite "
      "numbers (`inf`, words)",
      "annotation reject `malformed_line` naming `file:line`; the file's other lines are "
      "written")
def test_malformed_lines_are_rejected_by_line(converted):
    code, rejects, shards, _manifest = converted
    assert code == 0
    assert rejects["fields.txt:2"]["reason"] == "malformed_line"
    assert "found 7 fields" in rejects["fields.txt:2"]["detail"]
    assert rejects["numbers.txt:2"]["reason"] == rejects["numbers.txt:3"]["reason"] == (
        "malformed_line")
    assert "'inf' is not a finite number" in rejects["numbers.txt:2"]["detail"]
    assert "'a', 'b', 'c', 'd' are not finite numbers" in rejects["numbers.txt:3"]["detail"]
    assert b"fields.png" in shards and b"numbers.png" in shards


@CASE("KITTI label file that is binary, not text",
      "image reject `malformed_label_file` naming the file; the image is not written")
def test_binary_label_file_rejects_its_image(converted):
    _code, rejects, shards, _manifest = converted
    reject = rejects["binary.txt"]
    assert (reject["kind"], reject["reason"]) == ("image", "malformed_label_file")
    assert "not UTF-8 text" in reject["detail"]
    assert b"binary.png" not in shards


@CASE("KITTI label file without its image; image without its label file",
      "image reject `missing` naming the label file; the image is written with no objects "
      "and a `no_annotation_file` warning")
def test_unpaired_label_and_image(converted):
    _code, rejects, shards, _manifest = converted
    assert (rejects["no_image.txt"]["kind"], rejects["no_image.txt"]["reason"]) == (
        "image", "missing")
    assert (rejects["no_label.png"]["kind"], rejects["no_label.png"]["reason"]) == (
        "warning", "no_annotation_file")
    assert "no training/label_2/no_label.txt" in rejects["no_label.png"]["detail"]
    assert b"no_label.png" in shards and b"good.png" in shards


@CASE("KITTI label file holding only DontCare regions",
      "the image is written with no objects; the regions are counted "
      "(`kitti_dontcare_skipped`), never a class")
def test_dontcare_regions_are_no_class(converted):
    _code, rejects, shards, manifest = converted
    assert b"dontcare.png" in shards
    assert not any(name.startswith("dontcare") for name in rejects)
    assert "DontCare" not in manifest["label_map"].values()
    assert list(manifest["label_map"].values()) == ["Car"]


@CASE("KITTI split folder whose name cannot be a split name (`my-split/image_2`)",
      "exit 1 before any work, naming the folder and asking to rename it")
def test_split_folder_that_cannot_be_a_split(tmp_path, capsys):
    folder = tmp_path / "in" / "my-split" / "image_2"
    folder.mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(folder / "a.png", format="PNG")
    code = cli.main(["convert", "kitti", "--input", str(tmp_path / "in"), "--output",
                     str(tmp_path / "out"), "--quiet", *IN_MEMORY])
    err = capsys.readouterr().err
    assert code == 1
    assert "'my-split' becomes the split's name" in err and "rename the folder" in err
    assert "Traceback" not in err and "KittiError" not in err
    assert not (tmp_path / "out").exists()


@CASE("KITTI, VOC or labelme folder copied from a Mac (`._000001.png`, `._000001.txt` beside "
      "each file) or holding `.ipynb_checkpoints/` copies",
      "hidden files named like images or annotations are skipped and counted "
      "(`skipped_hidden_files`), never paired, read or rejected")
@pytest.mark.parametrize("fmt", ["kitti", "voc", "labelme"])
def test_hidden_files_named_like_images_or_annotations_are_skipped(tmp_path, fmt):
    root = tmp_path / "in"
    image_dir, label_dir, label, suffix = {
        "kitti": (root / "training" / "image_2", root / "training" / "label_2", GOOD, ".txt"),
        "voc": (root / "JPEGImages", root / "Annotations",
                "<annotation><object><name>Car</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
                "<xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>", ".xml"),
        "labelme": (root, root, json.dumps({"shapes": [{
            "label": "Car", "points": [[1, 1], [9, 9]], "shape_type": "rectangle"}],
            "imagePath": "a.png", "imageData": None}), ".json"),
    }[fmt]
    for folder in (image_dir, label_dir, root / ".ipynb_checkpoints"):
        folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32)).save(image_dir / "a.png", format="PNG")
    (label_dir / f"a{suffix}").write_text(label)
    apple_double = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        "
    (image_dir / "._a.png").write_bytes(apple_double)
    (label_dir / f"._a{suffix}").write_bytes(apple_double)
    (root / ".ipynb_checkpoints" / f"a-checkpoint{suffix}").write_text(label)
    out = tmp_path / "out"
    code = cli.main(["convert", fmt, "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY])
    assert code == 0
    assert (out / "rejects.jsonl").read_text() == ""
    manifest = json.loads((out / "manifest.json").read_text())
    split = "training" if fmt == "kitti" else "train"
    entry = manifest["splits"][split]
    assert entry["examples"] == 1
    assert entry["counts"]["skipped_hidden_files"] == (3 if fmt == "labelme" else 2)  # labelme lists ROOT
    assert list(manifest["label_map"].values()) == ["Car"]
