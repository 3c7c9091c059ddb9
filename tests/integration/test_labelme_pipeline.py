"""`recordbeam convert labelme` end to end on a small hand-written labelme folder with the
messy cases real folders have (JSONs written from labelme's published shape)."""

from __future__ import annotations

import base64
import io
import json
import os

import numpy as np
import pytest
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _shape(label, points, shape_type="rectangle", group_id=None):
    return {"label": label, "points": points, "group_id": group_id, "description": "",
            "shape_type": shape_type, "flags": {}}


def _json(shapes, image_path, width=80, height=40, image_data=None) -> dict:
    return {"version": "5.4.1", "flags": {}, "shapes": shapes, "imagePath": image_path,
            "imageData": image_data, "imageHeight": height, "imageWidth": width}


def _image_bytes(fmt="JPEG", size=(80, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (90, 20, 200)).save(buffer, format=fmt)
    return buffer.getvalue()


EMBEDDED_PNG = _image_bytes("PNG")


@pytest.fixture(scope="module")
def labelme_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("labelme")
    (root / "ann").mkdir()
    (root / "images").mkdir()

    def write(relative, document, crlf_bom=False):
        text = json.dumps(document, indent=2)
        data = (b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()) if crlf_bom else text.encode()
        (root / relative).write_bytes(data)

    (root / "a.jpg").write_bytes(_image_bytes())
    write("a.json", _json([
        _shape("dog", [[40, 20], [8, 4]]),
        _shape("traffic light", [[60, 10], [100, 10], [100, 30], [60, 30]], "polygon"),
        _shape("person", [[0, 0], [10, 0], [10, 10]], "polygon", group_id=1),
        _shape("person", [[20, 20], [30, 30]], group_id=1),
    ], "a.jpg"))
    (root / "images" / "b.JPG").write_bytes(_image_bytes())
    write("ann/b.json", _json([_shape("dog", [[0, 0], [80, 40]])], "..\\images\\b.JPG"),
          crlf_bom=True)
    (root / "images" / "c.jpg").write_bytes(_image_bytes())  # no JSON: no objects, warned
    write("d.json", _json([_shape("dog", [[1, 1], [5, 5]])], "d.jpg"))  # no image, no data
    write("e.json", _json([_shape("dog", [[8, 4], [40, 20]])], "e.png",
                          image_data=base64.b64encode(EMBEDDED_PNG).decode()))
    (root / "f.jpg").write_bytes(_image_bytes())
    (root / "f.json").write_text('{"shapes": [')  # malformed
    (root / "g.jpg").write_bytes(_image_bytes())
    write("g.json", _json([_shape("eye", [[1, 1]], "point"), _shape("eye", [[2, 2]], "point"),
                           _shape("dog", [[5, 1], [5, 9]])], "g.jpg", width=100))
    (root / "h.jpg").write_bytes(_image_bytes())
    write("h.json", _json([_shape("dog", [[1, 1], [5, 5]], group_id=3),
                           _shape("cat", [[6, 6], [9, 9]], group_id=3)], "h.jpg"))
    (root / "notes.txt").write_text("not a dataset file")
    return root


def _examples(output, split="train"):
    return split_examples(output, split, kinds={"image/object/class/label": "int64",
                                                    "image/object/bbox/xmin": "float"})


def _convert(root, out, *extra):
    return cli.main(["convert", "labelme", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *extra, *IN_MEMORY])


def test_labelme_folder_converts_with_every_reject_named(labelme_root, tmp_path):
    out = tmp_path / "out"
    assert _convert(labelme_root, out) == 0
    examples = _examples(out)
    assert set(examples) == {"a", "images/b", "images/c", "e", "g", "h"}
    a = examples["a"]
    assert a["image/object/class/text"].tolist() == [b"dog", b"traffic light", b"person"]
    assert a["image/object/class/label"].tolist() == [2, 4, 3]  # sorted names found
    assert a["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.75, 0.0])
    assert a["image/object/bbox/xmax"].tolist() == pytest.approx([0.5, 1.0, 0.375])  # clipped
    assert a["image/object/bbox/ymin"].tolist() == pytest.approx([0.1, 0.25, 0.0])
    assert a["image/object/bbox/ymax"].tolist() == pytest.approx([0.5, 0.75, 0.75])
    b = examples["images/b"]
    assert b["image/filename"].tolist() == [b"b.JPG"]
    assert b["image/object/bbox/xmax"].tolist() == pytest.approx([1.0])
    assert examples["images/c"]["image/object/class/label"].tolist() == []
    e = examples["e"]
    assert e["image/encoded"][0] == EMBEDDED_PNG
    assert (e["image/filename"][0], e["image/format"][0]) == (b"e.png", b"png")
    assert e["image/object/bbox/xmin"].tolist() == pytest.approx([0.1])
    # One group_id, two labels: two objects, as labelme keys instances by (label, group_id).
    assert examples["h"]["image/object/class/label"].tolist() == [2, 1]
    rejects = {(r["kind"], r["reason"], os.path.basename(r["source"]))
               for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
    assert rejects == {
        ("warning", "no_annotation_file", "c.jpg"),
        ("image", "missing", "d.json"),
        ("image", "malformed_json", "f.json"),
        ("annotation", "degenerate_bbox", "g.json: shapes[2]"),
        ("warning", "size_mismatch", "g.jpg"),
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "cat", "2": "dog", "3": "person", "4": "traffic light"}
    counts = manifest["splits"]["train"]["counts"]
    assert counts["labelme_embedded_images_used"] == 1
    assert counts["labelme_point_shapes_skipped"] == 2
    assert counts["labelme_other_files_skipped"] == 1  # notes.txt
    assert counts["images_without_objects"] == 2  # c, g


def test_classes_file_and_masks(labelme_root, tmp_path):
    classes = tmp_path / "labels.txt"
    classes.write_text("__ignore__\n_background_\nperson\ndog\ntraffic light\n")
    out = tmp_path / "out"
    assert _convert(labelme_root, out, "--classes", str(classes), "--include-masks") == 0
    a = _examples(out)["a"]
    assert a["image/object/class/label"].tolist() == [2, 3, 1]
    masks = [np.array(Image.open(io.BytesIO(m))) for m in a["image/object/mask"]]
    dog, light, person = masks
    assert dog[10, 20] and not dog[30, 60]
    assert light[20, 70] and not light[20, 50]
    assert person[2, 8] and person[25, 25] and not person[15, 15]  # union of the group
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "person", "2": "dog", "3": "traffic light"}
    assert manifest["splits"]["train"]["counts"]["masks_from_boxes"] >= 1


def test_images_option_and_if_changed(labelme_root, tmp_path, capsys):
    root, pictures = tmp_path / "json", tmp_path / "pictures"
    root.mkdir()
    pictures.mkdir()
    (root / "a.json").write_bytes((labelme_root / "a.json").read_bytes())
    (pictures / "a.jpg").write_bytes((labelme_root / "a.jpg").read_bytes())
    args = ["--images", str(pictures), "--split", "val", "--if-changed"]
    assert _convert(root, tmp_path / "out", *args) == 0
    assert _examples(tmp_path / "out", "val")["a"]["image/object/class/label"].tolist() == [
        1, 3, 2]
    capsys.readouterr()
    assert _convert(root, tmp_path / "out", *args) == 0
    assert "is up to date" in capsys.readouterr().out


def test_folder_without_files_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    assert _convert(tmp_path / "empty", tmp_path / "out") == 2


#: labelme's own labels.txt (examples/instance_segmentation): its reserved names first.
LABELME_LABELS_TXT = (
    "__ignore__\n_background_\naeroplane\nbicycle\nbird\nboat\nbottle\nbus\ncar\ncat\nchair\n"
    "cow\ndiningtable\ndog\nhorse\nmotorbike\nperson\npotted plant\nsheep\nsofa\ntrain\n"
    "tv/monitor\n")


def _polygon(x, y, size, sides=4):
    return [[x + size * (1 + np.cos(2 * np.pi * i / sides)) / 2,
             y + size * (1 + np.sin(2 * np.pi * i / sides)) / 2] for i in range(sides)]


def test_labelmes_own_example_layout_with_its_labels_txt_converts(tmp_path):
    # The shape of labelme's examples/instance_segmentation/data_annotated (its files are
    # GPL, so recreated): labelme 4 JSONs beside their JPEGs, imageData "", polygons with
    # group_id 0 for the parts of one person or sofa, and __ignore__ regions.
    root = tmp_path / "data_annotated"
    root.mkdir()
    images = {
        "2011_000003": (500, 338, [("person", None), ("person", 0), ("person", 0),
                                   ("bottle", None), ("__ignore__", None)]),
        "2011_000006": (500, 375, [("person", None), ("person", None), ("chair", None),
                                   ("__ignore__", None), ("sofa", 0), ("sofa", 0)]),
        "2011_000025": (500, 375, [("bus", None), ("car", None)]),
    }
    for stem, (width, height, shapes) in images.items():
        (root / f"{stem}.jpg").write_bytes(_image_bytes(size=(width, height)))
        document = {"version": "4.0.0", "flags": {}, "shapes": [
            {"label": label, "points": _polygon(20 + 40 * i, 30, 35), "group_id": group,
             "shape_type": "polygon", "flags": {}}
            for i, (label, group) in enumerate(shapes)],
            "imagePath": f"{stem}.jpg", "imageData": "", "imageHeight": height,
            "imageWidth": width}
        (root / f"{stem}.json").write_text(json.dumps(document))
    labels = tmp_path / "labels.txt"
    labels.write_text(LABELME_LABELS_TXT)
    out = tmp_path / "out"
    code = cli.main(["convert", "labelme", "--input", str(root), "--output", str(out),
                     "--classes", str(labels), "--include-masks", "--quiet", *IN_MEMORY])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    classes = LABELME_LABELS_TXT.splitlines()[2:]
    assert manifest["label_map"] == {str(label): name for label, name in enumerate(classes, 1)}
    counts = manifest["splits"]["train"]["counts"]
    assert counts["labelme_ignore_shapes_skipped"] == 2
    examples = split_examples(out, "train", kinds={"image/object/class/text": "bytes",
                                                   "image/object/class/label": "int64"})
    texts = {key: e["image/object/class/text"].tolist() for key, e in examples.items()}
    assert texts == {"2011_000003": [b"person", b"person", b"bottle"],
                     "2011_000006": [b"person", b"person", b"chair", b"sofa"],
                     "2011_000025": [b"bus", b"car"]}
    assert examples["2011_000025"]["image/object/class/label"].tolist() == [
        classes.index("bus") + 1, classes.index("car") + 1]
    assert (out / "rejects.jsonl").read_text() == ""


def test_labelme_5_primitives_with_a_mask_shape_convert_with_masks(tmp_path):
    # The shapes of labelme's examples/primitives/primitives.json (GPL, so recreated):
    # labelme 5.7 writes every shape kind, a "mask" shape holding a base64 PNG of its region
    # from its first point (here, as there, not on whole pixels), and labelme 7's
    # oriented_rectangle.
    root = tmp_path / "primitives"
    root.mkdir()
    (root / "primitives.jpg").write_bytes(_image_bytes(size=(560, 450)))
    octagon = np.zeros((100, 100), dtype=np.uint8)
    octagon[20:80, 10:90] = 1
    buffer = io.BytesIO()
    Image.fromarray(octagon, "L").save(buffer, format="PNG")

    def primitive(label, kind, points, **extra):
        return {"label": label, "points": points, "group_id": None, "description": None,
                "shape_type": kind, "flags": {}, "mask": None, **extra}

    shapes = [
        primitive("rectangle", "rectangle", [[32.0, 35.0], [132.0, 135.0]]),
        primitive("circle", "circle", [[195.0, 84.0], [225.0, 125.0]]),
        primitive("polygon", "polygon", [[69.0, 318.0], [45.0, 403.0], [173.0, 406.0],
                                         [198.0, 321.0]]),
        primitive("line", "line", [[188.0, 178.0], [160.0, 224.0]]),
        primitive("point", "point", [[345.0, 174.0]]),
        primitive("line_strip", "linestrip", [[440.5, 181.4], [402.5, 274.4], [544.5, 275.4]]),
        primitive("octagon", "mask", [[417.39759036144574, 305.0], [516.3975903614457, 404.0]],
                  mask=base64.b64encode(buffer.getvalue()).decode()),
        primitive("tilted", "oriented_rectangle", [[300, 40], [360, 70], [340, 110], [280, 80]]),
    ]
    (root / "primitives.json").write_text(json.dumps({
        "version": "5.7.0", "flags": {}, "shapes": shapes, "imagePath": "primitives.jpg",
        "imageData": None, "imageHeight": 450, "imageWidth": 560}))
    out = tmp_path / "out"
    code = cli.main(["convert", "labelme", "--input", str(root), "--output", str(out),
                     "--include-masks", "--quiet", *IN_MEMORY])
    assert code == 0
    counts = json.loads((out / "manifest.json").read_text())["splits"]["train"]["counts"]
    assert counts["masks_written"] == 5 and counts["masks_from_boxes"] == 1
    assert (counts["labelme_line_shapes_skipped"], counts["labelme_point_shapes_skipped"],
            counts["labelme_linestrip_shapes_skipped"]) == (1, 1, 1)
    [example] = split_examples(out, "train", kinds={
        "image/object/class/text": "bytes", "image/object/mask": "bytes",
        "image/object/bbox/xmin": "float", "image/object/bbox/ymax": "float"}).values()
    texts = example["image/object/class/text"].tolist()
    assert texts == [b"rectangle", b"circle", b"polygon", b"octagon", b"tilted"]
    octagon_index = texts.index(b"octagon")
    written = np.array(Image.open(io.BytesIO(example["image/object/mask"][octagon_index])))
    placed = np.zeros((450, 560), dtype=np.uint8)
    placed[305:405, 417:517] = octagon  # its first point, rounded, as labelme places it
    assert written.tolist() == placed.tolist()
    assert example["image/object/bbox/xmin"][octagon_index] == pytest.approx(427 / 560)
    assert example["image/object/bbox/ymax"][octagon_index] == pytest.approx(385 / 450)
    assert (out / "rejects.jsonl").read_text() == ""
