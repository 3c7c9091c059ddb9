"""`recordbeam convert yolo` end to end on small hand-written darknet and Ultralytics
folders with the messy cases real exports have."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from lanes import exhaustive
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {"image/object/class/label": "int64", "image/object/bbox/xmin": "float",
         "image/object/bbox/xmax": "float", "image/object/bbox/ymin": "float",
         "image/object/bbox/ymax": "float", "image/object/class/text": "bytes",
         "image/object/mask": "bytes", "image/filename": "bytes"}
ALLOW_REJECTS = ["--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1"]


def _image(path, fmt="JPEG", size=(80, 40)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (90, 20, 200)).save(path, format=fmt)


def _write(path, text, crlf_bom=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.replace("\n", "\r\n").encode() if crlf_bom else text.encode()
    path.write_bytes((b"\xef\xbb\xbf" + data) if crlf_bom else data)


@pytest.fixture(scope="module")
def darknet_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("darknet")
    data = root / "obj_train_data"
    _write(root / "obj.data", "classes = 3\ntrain = data/train.txt\nvalid = data/valid.txt\n"
           "names = data/obj.names\nbackup = backup/\n", crlf_bom=True)
    _write(root / "obj.names", "dog\ntraffic light\ncat\n", crlf_bom=True)
    _image(data / "a.jpg")
    _write(data / "a.txt", "0 0.25 0.5 0.3 0.4\n1 0.9 0.5 0.4 0.4\n", crlf_bom=True)  # 2nd clipped
    _image(data / "b.JPG", "PNG")
    _write(data / "b.txt", "2 0.1 0.25 0.5 0.25 0.5 0.75 0.1 0.75\n")  # a segment
    _image(data / "c.jpg")  # no label file: written with no objects, warned
    _write(data / "d.txt", "0 0.5 0.5 0.1 0.1\n")  # no image
    _image(data / "e.jpg")
    _write(data / "e.txt", "")  # empty: no objects
    _image(data / "f.jpg")
    _write(data / "f.txt", "0 0.5 abc 0.1 0.1\n7 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.2 0.2\n")
    _write(root / "train.txt", "data/obj_train_data/a.jpg\ndata\\obj_train_data\\b.JPG\n"
           "data/obj_train_data/c.jpg\n\ndata/obj_train_data/e.jpg\n"
           "data/obj_train_data/missing.jpg\n../outside.jpg\n", crlf_bom=True)
    _write(root / "valid.txt", "data/obj_train_data/f.jpg\n")
    return root


def _examples(output, split):
    return split_examples(output, split, "image/filename", KINDS)


def _rejects(output):
    return {(r["kind"], r["reason"], os.path.basename(r["source"]))
            for r in map(json.loads, (output / "rejects.jsonl").read_text().splitlines())}


def test_darknet_folder_converts_with_every_reject_named(darknet_root, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["convert", "yolo", "--input", str(darknet_root), "--output", str(out),
                     "--include-masks", *ALLOW_REJECTS, "--quiet", *IN_MEMORY])
    assert code == 0
    train, val = _examples(out, "train"), _examples(out, "val")
    assert set(train) == {"a.jpg", "b.JPG", "c.jpg", "e.jpg"} and set(val) == {"f.jpg"}
    a = train["a.jpg"]
    assert a["image/object/class/text"].tolist() == [b"dog", b"traffic light"]
    assert a["image/object/class/label"].tolist() == [1, 2]  # class id + 1
    assert a["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.7])
    assert a["image/object/bbox/xmax"].tolist() == pytest.approx([0.4, 1.0])  # clipped
    assert a["image/object/bbox/ymin"].tolist() == pytest.approx([0.3, 0.3])
    b = train["b.JPG"]
    assert b["image/object/class/text"].tolist() == [b"cat"]
    assert [b[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")] \
        == pytest.approx([0.1, 0.25, 0.5, 0.75])
    mask = np.array(Image.open(io.BytesIO(b["image/object/mask"][0])))
    assert mask.shape == (40, 80) and mask.sum() == pytest.approx(32 * 20, abs=80)
    for name in ("c.jpg", "e.jpg"):
        assert train[name]["image/object/class/label"].tolist() == []
    assert val["f.jpg"]["image/object/class/text"].tolist() == [b"traffic light"]
    assert _rejects(out) == {
        ("warning", "no_annotation_file", "c.jpg"), ("image", "missing", "d.txt"),
        ("annotation", "malformed_line", "f.txt:1"), ("annotation", "unknown_category", "f.txt:2"),
        ("image", "missing", "train.txt:6"), ("image", "outside_root", "train.txt:7"),
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "dog", "2": "traffic light", "3": "cat"}
    counts = manifest["splits"]["train"]["counts"]
    assert counts["boxes_clipped"] == 1
    assert counts["images_without_objects"] == 2  # c, e
    assert counts["yolo_empty_label_files"] == 1  # e
    assert counts["masks_written"] == 3 and counts["masks_from_boxes"] == 2


def test_darknet_split_option_beside_split_lists_is_refused(darknet_root, tmp_path):
    code = cli.main(["convert", "yolo", "--input", str(darknet_root), "--output",
                     str(tmp_path / "out"), "--split", "holdout", "--quiet", *IN_MEMORY])
    assert code == 2


def test_without_split_lists_every_image_goes_to_split(darknet_root, tmp_path):
    root = tmp_path / "yolo"
    _write(root / "obj.data", "classes = 3\nnames = data/obj.names\n")
    _write(root / "obj.names", (darknet_root / "obj.names").read_text())
    for name in ("a.jpg", "a.txt", "d.txt", "e.jpg"):
        _write(root / "obj" / name, "")
        (root / "obj" / name).write_bytes((darknet_root / "obj_train_data" / name).read_bytes())
    out = tmp_path / "out"
    code = cli.main(["convert", "yolo", "--input", str(root), "--output", str(out),
                     "--split", "val", *ALLOW_REJECTS, "--quiet", *IN_MEMORY])
    assert code == 0
    assert set(_examples(out, "val")) == {"a.jpg", "e.jpg"}
    assert _rejects(out) == {("image", "missing", "d.txt"),
                             ("warning", "no_annotation_file", "e.jpg")}


@pytest.fixture(scope="module")
def ultralytics_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ultralytics")
    _write(root / "data.yaml", "path: /home/someone/datasets/pets\ntrain: images/train\n"
           "val: images/val\nnc: 2\nnames:\n  0: dog\n  1: traffic light\n")
    _image(root / "images/train/a.jpg")
    _write(root / "labels/train/a.txt", "1 0.5 0.5 0.5 0.5\n", crlf_bom=True)
    _image(root / "images/val/a.jpg")  # the same name in another split: another image
    _write(root / "labels/val/a.txt", "0 0.25 0.25 0.5 0.5\n")
    _image(root / "images/val/n.PNG", "PNG")  # no label
    _write(root / "labels/val/z.txt", "0 0.5 0.5 0.1 0.1\n")  # no image
    _write(root / "labels/train.cache", "not a label")
    return root


def test_ultralytics_folder_converts(ultralytics_root, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["convert", "yolo", "--input", str(ultralytics_root), "--output", str(out),
                     *ALLOW_REJECTS, "--quiet", *IN_MEMORY])
    assert code == 0
    train, val = _examples(out, "train"), _examples(out, "val")
    assert set(train) == {"a.jpg"} and set(val) == {"a.jpg", "n.PNG"}
    assert train["a.jpg"]["image/object/class/text"].tolist() == [b"traffic light"]
    assert train["a.jpg"]["image/object/bbox/xmin"].tolist() == pytest.approx([0.25])
    assert val["a.jpg"]["image/object/class/label"].tolist() == [1]
    assert val["a.jpg"]["image/object/bbox/xmax"].tolist() == pytest.approx([0.5])
    assert val["n.PNG"]["image/object/class/label"].tolist() == []
    assert _rejects(out) == {("warning", "no_annotation_file", "n.PNG"),
                             ("image", "missing", "z.txt")}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "dog", "2": "traffic light"}


@exhaustive  # the same bytes on a rerun, for any format: test_cvat_pipeline.py
def test_ultralytics_output_is_byte_identical_on_rerun(ultralytics_root, tmp_path):
    outputs = []
    for name in ("one", "two"):
        out = tmp_path / name
        assert cli.main(["convert", "yolo", "--input", str(ultralytics_root), "--output",
                         str(out), *ALLOW_REJECTS, "--quiet", *IN_MEMORY]) == 0
        outputs.append({n: (out / n).read_bytes() for n in sorted(os.listdir(out))
                        if n.endswith(".tfrecord")})
    assert outputs[0] == outputs[1] and outputs[0]


@exhaustive  # --if-changed over any format: test_voc_pipeline.py, test_incremental.py
def test_if_changed_skips_a_rerun_until_a_label_changes(ultralytics_root, tmp_path, capsys):
    args = ["convert", "yolo", "--input", str(ultralytics_root), "--output",
            str(tmp_path / "out"), *ALLOW_REJECTS, "--quiet", "--if-changed", *IN_MEMORY]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "is up to date" in capsys.readouterr().out
    label = ultralytics_root / "labels" / "val" / "n.txt"
    label.write_text("0 0.5 0.5 0.2 0.2\n")
    try:
        assert cli.main(args) == 0
        assert "is up to date" not in capsys.readouterr().out
    finally:
        label.unlink()


def test_broken_data_yaml_is_a_data_error(tmp_path, capsys):
    root = tmp_path / "yolo"
    _write(root / "data.yaml", "train: images/train\nnames: {0: dog, 2: cat}\n")
    _image(root / "images/train/a.jpg")
    code = cli.main(["convert", "yolo", "--input", str(root), "--output", str(tmp_path / "o"),
                     "--quiet", *IN_MEMORY])
    assert code == 1
    err = capsys.readouterr().err
    assert "data.yaml" in err and "Traceback" not in err and "YoloError" not in err


@pytest.mark.parametrize("apply_exif, box", [
    (True, [0.0, 0.0, 0.5, 0.5]),  # the shown image is written: the box as labelled
    (False, [0.0, 0.5, 0.5, 1.0]),  # stored pixels written: the box moved onto them
])
def test_boxes_follow_the_exif_rotated_image_ultralytics_labels(tmp_path, apply_exif, box):
    root = tmp_path / "yolo"
    _write(root / "data.yaml", "train: images/train\nnames: [dog]\n")
    exif = Image.Exif()
    exif[0x0112] = 6  # 80x40 stored, shown 40x80 (turned 90 degrees clockwise)
    (root / "images/train").mkdir(parents=True)
    Image.new("RGB", (80, 40)).save(root / "images/train/a.jpg", format="JPEG", exif=exif)
    _write(root / "labels/train/a.txt", "0 0.25 0.25 0.5 0.5\n")  # top-left quarter, as shown
    out = tmp_path / "out"
    code = cli.main(["convert", "yolo", "--input", str(root), "--output", str(out), "--quiet",
                     *(["--apply-exif"] if apply_exif else []), *IN_MEMORY])
    assert code == 0
    example = _examples(out, "train")["a.jpg"]
    assert [example[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")] \
        == pytest.approx(box)


def _convert(root, out, *options):
    return cli.main(["convert", "yolo", "--input", str(root), "--output", str(out), "--quiet",
                     *options, *IN_MEMORY])


def test_darknet_working_folder_with_its_own_data_folder(tmp_path):
    # obj.data at the top of darknet's working folder: data/ is a folder of ROOT, so
    # data/x in obj.data and in the lists is ROOT's data/x, and the lists are no labels.
    root = tmp_path / "darknet"
    _write(root / "obj.data", "classes = 1\ntrain = data/train.txt\nnames = data/obj.names\n")
    _write(root / "data" / "obj.names", "dog\n")
    for name in "ab":
        _image(root / "data" / "obj" / f"{name}.jpg")
        _write(root / "data" / "obj" / f"{name}.txt", "0 0.5 0.5 0.2 0.2\n")
    _write(root / "data" / "train.txt", "data/obj/a.jpg\ndata/obj/b.jpg\n")
    out = tmp_path / "out"
    assert _convert(root, out) == 0
    train = split_examples(out, "train", kinds=KINDS)
    assert set(train) == {"data/obj/a", "data/obj/b"}  # source ids: label paths below ROOT
    assert all(e["image/object/class/text"].tolist() == [b"dog"] for e in train.values())
    assert (out / "rejects.jsonl").read_text() == ""


def test_labelimg_yolo_saves_beside_the_images_with_classes_txt(tmp_path):
    # labelImg's YOLO mode writes <name>.txt beside <name>.jpg and a classes.txt there.
    root = tmp_path / "photos"
    _image(root / "a.jpg")
    _write(root / "a.txt", "1 0.250000 0.500000 0.300000 0.400000\n")
    _image(root / "b.jpg")
    _write(root / "b.txt", "0 0.500000 0.500000 0.200000 0.200000\n")
    _write(root / "classes.txt", "dog\ncat\n")
    out = tmp_path / "out"
    assert _convert(root, out, "--split", "val") == 0
    val = split_examples(out, "val", kinds=KINDS)
    assert set(val) == {"a", "b"}
    assert val["a"]["image/object/class/text"].tolist() == [b"cat"]
    assert val["a"]["image/object/class/label"].tolist() == [2]
    assert val["a"]["image/object/bbox/xmin"].tolist() == pytest.approx([0.1])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "dog", "2": "cat"}
    assert (out / "rejects.jsonl").read_text() == ""


def test_label_studio_yolo_export_images_labels_and_classes_txt(tmp_path):
    # Label Studio's "YOLO" export: classes.txt, notes.json, images/, labels/ (one split).
    root = tmp_path / "project-1-at-2024"
    _image(root / "images" / "0b1c2d-a.jpg")
    _write(root / "labels" / "0b1c2d-a.txt", "0 0.5 0.5 0.2 0.2\n")
    _image(root / "images" / "9f8e7d-b.jpg")
    _write(root / "labels" / "9f8e7d-b.txt", "")
    _write(root / "classes.txt", "Airplane\nCar\n")
    _write(root / "notes.json", json.dumps({"categories": [{"id": 0, "name": "Airplane"},
                                                           {"id": 1, "name": "Car"}]}))
    out = tmp_path / "out"
    assert _convert(root, out) == 0
    train = split_examples(out, "train", kinds=KINDS)
    assert set(train) == {"labels/0b1c2d-a", "labels/9f8e7d-b"}
    assert train["labels/0b1c2d-a"]["image/object/class/text"].tolist() == [b"Airplane"]


def test_roboflow_yolov8_export_without_its_test_split_converts_with_a_warning(tmp_path):
    # Roboflow's data.yaml names test: ../test/images for exports without a test split;
    # Ultralytics trains on it (it needs train and val). The command refused it (exit 1).
    root = tmp_path / "roboflow"
    for split in ("train", "valid"):
        _image(root / split / "images" / "x_jpg.rf.1.jpg")
        _write(root / split / "labels" / "x_jpg.rf.1.txt", "0 0.5 0.5 0.5 0.5\n")
    _write(root / "data.yaml", "train: ../train/images\nval: ../valid/images\n"
           "test: ../test/images\n\nnc: 1\nnames: ['helmet']\n")
    out = tmp_path / "out"
    assert _convert(root, out) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["splits"]) == ["train", "val"]
    [warning] = map(json.loads, (out / "rejects.jsonl").read_text().splitlines())
    assert (warning["kind"], warning["reason"]) == ("warning", "split_not_found")
    assert "test: ../test/images" in warning["source"]
    # train and val must be there, as Ultralytics needs them
    _write(root / "data.yaml", "train: ../train/images\nval: ../val/images\nnames: [helmet]\n")
    assert _convert(root, tmp_path / "o2") == 1


def test_roboflow_yolo_darknet_export_split_folders_with_darknet_labels(tmp_path):
    # Roboflow's "YOLO Darknet": train/, valid/, test/, each with _darknet.labels and
    # <name>.txt beside <name>.jpg.
    root = tmp_path / "roboflow"
    for split in ("train", "valid", "test"):
        _image(root / split / "x_jpg.rf.1.jpg")
        _write(root / split / "x_jpg.rf.1.txt", "1 0.5 0.5 0.5 0.5\n")
        _write(root / split / "_darknet.labels", "helmet\nhead\n")
    _write(root / "README.roboflow.txt", "exported\n")
    out = tmp_path / "out"
    assert _convert(root, out) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["splits"]) == ["test", "train", "valid"]
    assert manifest["label_map"] == {"1": "helmet", "2": "head"}
    [example] = split_examples(out, "valid", kinds=KINDS).values()
    assert example["image/object/class/text"].tolist() == [b"head"]
    assert _convert(root, tmp_path / "o2", "--split", "train") == 2


def test_images_and_labels_split_folders_with_classes_option(tmp_path, capsys):
    # Ultralytics' layout without its data.yaml: the names come from --classes.
    root = tmp_path / "dataset"
    for split in ("train", "val"):
        _image(root / "images" / split / "a.jpg")
        _write(root / "labels" / split / "a.txt", "0 0.5 0.5 0.5 0.5\n")
    out = tmp_path / "out"
    assert _convert(root, out) == 2
    assert "pass --classes FILE" in capsys.readouterr().err
    names = tmp_path / "names.txt"
    names.write_text("person\n")
    assert _convert(root, out, "--classes", str(names)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["splits"]) == ["train", "val"]
    assert set(split_examples(out, "val", kinds=KINDS)) == {"labels/val/a"}
    _write(root / "data.yaml", "names: [person]\ntrain: images/train\nval: images/val\n")
    capsys.readouterr()
    assert _convert(root, tmp_path / "o3", "--classes", str(names)) == 2
    assert "--classes would be ignored" in capsys.readouterr().err
