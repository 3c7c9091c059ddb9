"""Each declared format's smallest input: two 40x30 pictures with one box (or class)
each, and that input converted once per test run on Beam's in-memory runner
(:func:`converted`), for the tests that every format still converts
(``tests/integration/test_each_format.py``) and that TensorFlow reads each format's
output (``tests/interop/test_each_format_tf.py``)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from once import once_per_run
from PIL import Image

import recordbeam

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
WIDTH, HEIGHT = 40, 30
#: The box every picture holds, in pixels: (xmin, ymin, xmax, ymax).
BOX = (4, 3, 20, 15)
NAMES = ("a", "b")


def _jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    Image.new("RGB", (WIDTH, HEIGHT), (200, 80, 40)).save(buffer, "JPEG")
    path.write_bytes(buffer.getvalue())


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _coco(root: Path) -> dict:
    images, annotations = [], []
    for i, name in enumerate(NAMES, 1):
        _jpeg(root / "images" / f"{name}.jpg")
        images.append({"id": i, "file_name": f"{name}.jpg", "width": WIDTH, "height": HEIGHT})
        x0, y0, x1, y1 = BOX
        annotations.append({"id": i, "image_id": i, "category_id": 1, "iscrowd": 0,
                            "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0)})
    _write(root / "instances.json", json.dumps({
        "images": images, "annotations": annotations,
        "categories": [{"id": 1, "name": "dog"}]}))
    return {"images": str(root / "images"), "annotations": str(root / "instances.json")}


def _voc(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    for name in NAMES:
        _jpeg(root / "JPEGImages" / f"{name}.jpg")
        _write(root / "Annotations" / f"{name}.xml",
               f"<annotation><filename>{name}.jpg</filename><size><width>{WIDTH}</width>"
               f"<height>{HEIGHT}</height><depth>3</depth></size><object><name>dog</name>"
               f"<bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax>"
               "</bndbox></object></annotation>")
    return {"input": str(root)}


def _yolo(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    line = (f"0 {(x0 + x1) / 2 / WIDTH} {(y0 + y1) / 2 / HEIGHT} {(x1 - x0) / WIDTH} "
            f"{(y1 - y0) / HEIGHT}\n")
    for name in NAMES:
        _jpeg(root / "images" / "train" / f"{name}.jpg")
        _write(root / "labels" / "train" / f"{name}.txt", line)
    _write(root / "data.yaml", "train: images/train\nnames: [dog]\n")
    return {"input": str(root)}


def _labelme(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    for name in NAMES:
        _jpeg(root / f"{name}.jpg")
        _write(root / f"{name}.json", json.dumps({
            "version": "5.2.1", "flags": {}, "imagePath": f"{name}.jpg", "imageData": None,
            "imageHeight": HEIGHT, "imageWidth": WIDTH,
            "shapes": [{"label": "dog", "points": [[x0, y0], [x1, y1]], "group_id": None,
                        "shape_type": "rectangle", "flags": {}}]}))
    return {"input": str(root)}


def _cvat(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    images = "".join(
        f'<image id="{i}" name="{name}.jpg" width="{WIDTH}" height="{HEIGHT}">'
        f'<box label="dog" occluded="0" xtl="{x0}" ytl="{y0}" xbr="{x1}" ybr="{y1}"/></image>'
        for i, name in enumerate(NAMES))
    for name in NAMES:
        _jpeg(root / "images" / f"{name}.jpg")
    _write(root / "annotations.xml",
           "<annotations><version>1.1</version><meta><task><name>t</name><labels><label>"
           f"<name>dog</name></label></labels></task></meta>{images}</annotations>")
    return {"input": str(root)}


def _labelstudio(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    tasks = []
    for i, name in enumerate(NAMES, 1):
        stored = f"upload/1/0c5e1d7{i}-{name}.jpg"  # as Label Studio stores an upload
        _jpeg(root / "media" / stored)
        tasks.append({"id": i, "data": {"image": f"/data/{stored}"}, "annotations": [{
            "id": i, "was_cancelled": False, "ground_truth": False, "result": [{
                "id": f"box{i}", "type": "rectanglelabels", "from_name": "label",
                "to_name": "image", "original_width": WIDTH, "original_height": HEIGHT,
                "value": {"x": x0 / WIDTH * 100, "y": y0 / HEIGHT * 100,
                          "width": (x1 - x0) / WIDTH * 100, "height": (y1 - y0) / HEIGHT * 100,
                          "rotation": 0, "rectanglelabels": ["dog"]}}]}]})
    _write(root / "export.json", json.dumps(tasks))
    return {"input": str(root / "export.json"), "images": str(root / "media")}


def _kitti(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    for name in NAMES:
        _jpeg(root / "training" / "image_2" / f"{name}.jpg")
        _write(root / "training" / "label_2" / f"{name}.txt",
               f"Car 0.00 0 -1.57 {x0}.00 {y0}.00 {x1}.00 {y1}.00 1.5 1.6 3.9 1.0 1.7 20.0 -1.5\n")
    return {"input": str(root)}


def _openimages(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    rows = "".join(f"{name},xclick,/m/dog,1,{x0 / WIDTH},{x1 / WIDTH},{y0 / HEIGHT},"
                   f"{y1 / HEIGHT},0,0,0,0,0\n" for name in NAMES)
    for name in NAMES:
        _jpeg(root / "images" / "train" / f"{name}.jpg")
    _write(root / "train-annotations-bbox.csv",
           "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,"
           "IsGroupOf,IsDepiction,IsInside\n" + rows)
    _write(root / "class-descriptions-boxable.csv", "/m/dog,Dog\n")
    return {"input": str(root)}


def _box_csv(root: Path) -> dict:
    x0, y0, x1, y1 = BOX
    for name in NAMES:
        _jpeg(root / "train" / f"{name}.jpg")
    _write(root / "train" / "_annotations.csv",
           "filename,width,height,class,xmin,ymin,xmax,ymax\n"
           + "".join(f"{name}.jpg,{WIDTH},{HEIGHT},dog,{x0},{y0},{x1},{y1}\n" for name in NAMES))
    return {"input": str(root)}


def _imagefolder(root: Path) -> dict:
    for name in NAMES:
        _jpeg(root / "dog" / f"{name}.jpg")
    return {"input": str(root)}


def _manifest(root: Path) -> dict:
    for name in NAMES:
        _jpeg(root / f"{name}.jpg")
    _write(root / "rows.csv", "image,label\n" + "".join(f"{name}.jpg,1\n" for name in NAMES))
    return {"input": str(root / "rows.csv")}


#: Each format's small input, and whether its examples carry boxes.
INPUTS: dict[str, tuple[Callable[[Path], dict], bool]] = {
    "coco": (_coco, True), "voc": (_voc, True), "yolo": (_yolo, True),
    "labelme": (_labelme, True), "cvat": (_cvat, True), "labelstudio": (_labelstudio, True),
    "kitti": (_kitti, True),
    "openimages": (_openimages, True), "box-csv": (_box_csv, True),
    "imagefolder": (_imagefolder, False), "manifest": (_manifest, False),
}




@dataclass(frozen=True)
class Converted:
    """A format's input converted: the output folder, its one split, and its manifest."""

    output: Path
    split: str
    manifest: dict


def converted(kind: str, tmp_path_factory) -> Converted:
    """``kind``'s small input converted, once per test run (read only)."""

    def convert(root: Path) -> Converted:
        options = INPUTS[kind][0](root / "in")
        result = recordbeam.convert(kind, output=str(root / "out"), beam_args=IN_MEMORY,
                                    quiet=True, **options)
        (split,) = result.manifest["splits"]
        return Converted(root / "out", split, dict(result.manifest))

    return once_per_run(tmp_path_factory, f"each-format-{kind}", convert)
