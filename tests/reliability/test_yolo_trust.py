"""Untrusted YOLO folders: label lines that are not numbers, class ids beyond the names,
labels and images that do not pair, list lines leaving ROOT, hostile or broken YAML."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("yolo")
    data = root / "obj"
    data.mkdir()
    (root / "obj.names").write_text("dog\n")
    (root / "obj.data").write_text("classes = 1\ntrain = data/train.txt\nnames = data/obj.names\n")
    labels = {
        "good": "0 0.5 0.5 0.5 0.5\n",
        "words": "0 0.5 0.5 0.5 0.5\n0 left top wide tall\n",
        "odd": "0 0.1 0.1 0.5 0.1 0.5\n",
        "class": "5 0.5 0.5 0.5 0.5\n",
        "binary": "",
        "outside": "0 1.4 -0.2 1.0 1.0\n",
        "no_image": "0 0.5 0.5 0.5 0.5\n",
    }
    for stem, text in labels.items():
        (data / f"{stem}.txt").write_text(text)
    (data / "binary.txt").write_bytes(bytes(range(256)) * 4)
    for stem in ("good", "words", "odd", "class", "binary", "outside", "no_label"):
        Image.new("RGB", (32, 32)).save(data / f"{stem}.jpg", format="JPEG")
    listed = [f"data/obj/{stem}.jpg" for stem in
              ("good", "words", "odd", "class", "binary", "outside", "no_label")]
    (root / "train.txt").write_text("\n".join([*listed, "/etc/hostname", "data/obj/gone.jpg"]))
    out = root.parent / f"{root.name}-out"
    code = cli.main(["convert", "yolo", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    shards = b"".join((out / name).read_bytes() for name in os.listdir(out)
                      if name.endswith(".tfrecord"))
    return code, rejects, manifest, shards


def _by_source(rejects):
    return {os.path.basename(r["source"]): r for r in rejects}


@CASE("YOLO label line with words for numbers, or a segment with an odd count",
      "annotation reject `malformed_line` naming file:line; the image is written with its "
      "other objects")
def test_malformed_lines_are_rejected_with_file_and_line(converted):
    code, rejects, _manifest, shards = converted
    assert code == 0
    by_source = _by_source(rejects)
    assert by_source["words.txt:2"]["reason"] == "malformed_line"
    assert "'left' is not a number" in by_source["words.txt:2"]["detail"]
    assert by_source["odd.txt:1"]["reason"] == "malformed_line"
    assert b"words.jpg" in shards and b"odd.jpg" in shards


@CASE("YOLO label file of binary garbage (not UTF-8)",
      "annotation rejects `malformed_line` naming its lines; no crash; the image is written")
def test_binary_label_file_is_rejected_line_by_line(converted):
    _code, rejects, _manifest, shards = converted
    binary = [r for r in rejects if os.path.basename(r["source"]).startswith("binary.txt:")]
    assert binary and {r["reason"] for r in binary} == {"malformed_line"}
    assert b"binary.jpg" in shards


@CASE("YOLO class id beyond the class names",
      "annotation reject `unknown_category` naming file:line and the valid ids")
def test_class_id_beyond_names_is_unknown_category(converted):
    _code, rejects, _manifest, _shards = converted
    reject = _by_source(rejects)["class.txt:1"]
    assert reject["reason"] == "unknown_category"
    assert "class id 5" in reject["detail"] and "ids 0 to 0" in reject["detail"]


@CASE("YOLO box beyond the image (centre at 1.4)", "clipped to the image and counted "
      "(`boxes_clipped`)")
def test_boxes_outside_are_clipped_and_counted(converted):
    _code, _rejects, manifest, _shards = converted
    assert manifest["splits"]["train"]["counts"]["boxes_clipped"] == 1


@CASE("YOLO label file without its image; image without its label file",
      "image reject `missing` naming the label file; the image is written with no objects "
      "and a `no_annotation_file` warning")
def test_unpaired_label_and_image(converted):
    _code, rejects, _manifest, shards = converted
    by_source = _by_source(rejects)
    assert (by_source["no_image.txt"]["kind"], by_source["no_image.txt"]["reason"]) == (
        "image", "missing")
    assert (by_source["no_label.jpg"]["kind"], by_source["no_label.jpg"]["reason"]) == (
        "warning", "no_annotation_file")
    assert b"no_label.jpg" in shards


@CASE("YOLO list line naming a file outside ROOT (/etc/hostname) or no file",
      "image reject `outside_root` / `missing` naming list:line; the file is never read")
def test_list_lines_outside_root_or_naming_nothing(converted):
    _code, rejects, _manifest, shards = converted
    by_source = _by_source(rejects)
    assert by_source["train.txt:8"]["reason"] == "outside_root"
    assert by_source["train.txt:9"]["reason"] == "missing"
    with open("/etc/hostname", "rb") as f:
        hostname = f.read().strip()
    assert not hostname or hostname not in shards


@CASE("data.yaml with a Python object tag (!!python/object/apply:os.system)",
      "refused as invalid YAML (exit 1, naming data.yaml); never executed")
def test_yaml_python_tags_are_never_executed(tmp_path, capsys):
    marker = tmp_path / "executed"
    root = tmp_path / "yolo"
    (root / "images" / "train").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "images" / "train" / "a.jpg", format="JPEG")
    (root / "data.yaml").write_text(
        f"train: images/train\nnames: !!python/object/apply:os.system ['touch {marker}']\n")
    code = cli.main(["convert", "yolo", "--input", str(root), "--output",
                     str(tmp_path / "out"), "--quiet", *IN_MEMORY])
    assert code == 1
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "data.yaml" in err and "Traceback" not in err
