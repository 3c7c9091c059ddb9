"""One small dataset of each input format, for the cases every format must pass alike
(links leading out of the input, glob characters in folder names...).

Each dataset holds two labelled JPEGs, ``a.jpg`` and ``b.jpg``, in one folder
(``image_folder``: the split or class folder where the format has one), and converts
with exit 0 as built.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from reliability_data import IN_MEMORY, jpeg

from recordbeam.sources.format import formats

#: Every ``convert`` kind, as declared (a format without a builder here fails its tests),
#: COCO first: the case ``make test`` runs of a matrix over them (``lanes.one_in_make_test``).
FORMATS = tuple(sorted(formats(), key=lambda kind: kind != "coco"))
IMAGES = ("a.jpg", "b.jpg")
WIDTH, HEIGHT = 32, 24


@dataclass(frozen=True)
class FormatDataset:
    """A dataset of one format: the options naming it, and where its images are."""

    kind: str
    args: tuple[str, ...]
    image_folder: Path
    #: The annotation file of ``a.jpg`` alone, for formats with one per image.
    annotation: Path | None = None
    #: A file of the input folder the command needs whole (a CVAT XML, a table...).
    whole_file: Path | None = None

    def argv(self, output: str | os.PathLike[str], *extra: str) -> list[str]:
        return ["convert", self.kind, *self.args, "--output", os.fspath(output), "--quiet",
                *extra, *IN_MEMORY]

    def image(self, name: str = "a.jpg") -> Path:
        return self.image_folder / name


def build(kind: str, root: Path) -> FormatDataset:
    """Write the dataset of ``kind`` into ``root`` (created)."""
    if kind not in BUILDERS:
        raise LookupError(f"format_datasets has no dataset of the format {kind!r}: add a "
                          "builder to its BUILDERS")
    root.mkdir(parents=True, exist_ok=True)
    return BUILDERS[kind](root)


def _images(folder: Path, blue: int = 160) -> Path:
    """The two images, in colours of their own (``blue`` tells folders apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    for number, name in enumerate(IMAGES):
        (folder / name).write_bytes(jpeg(WIDTH, HEIGHT, (40 * number, 90, blue)))
    return folder


def _coco(root: Path) -> FormatDataset:
    images = _images(root / "images")
    document = {
        "images": [{"id": i + 1, "file_name": name, "width": WIDTH, "height": HEIGHT}
                   for i, name in enumerate(IMAGES)],
        "annotations": [{"id": i + 1, "image_id": i + 1, "category_id": 1,
                         "bbox": [2, 2, 10, 10], "area": 100, "iscrowd": 0}
                        for i in range(len(IMAGES))],
        "categories": [{"id": 1, "name": "dog"}],
    }
    (root / "instances.json").write_text(json.dumps(document))
    return FormatDataset("coco", ("--images", str(images), "--annotations",
                                  str(root / "instances.json")), images)


def _imagefolder(root: Path) -> FormatDataset:
    images = _images(root / "dog")
    _images(root / "cat", blue=30)
    return FormatDataset("imagefolder", ("--root", str(root)), images)


def _manifest(root: Path) -> FormatDataset:
    images = _images(root / "images")
    rows = "".join(f"images/{name},{i}\n" for i, name in enumerate(IMAGES))
    (root / "data.csv").write_text("image,label\n" + rows)
    return FormatDataset("manifest", ("--manifest", str(root / "data.csv")), images)


def _yolo(root: Path) -> FormatDataset:
    images = _images(root / "images" / "train")
    labels = root / "labels" / "train"
    labels.mkdir(parents=True)
    for name in IMAGES:
        (labels / name.replace(".jpg", ".txt")).write_text("0 0.5 0.5 0.5 0.5\n")
    (root / "data.yaml").write_text("names: [dog]\ntrain: images/train\n")
    return FormatDataset("yolo", ("--input", str(root)), images, labels / "a.txt",
                         root / "data.yaml")


def _voc(root: Path) -> FormatDataset:
    images = _images(root / "JPEGImages")
    annotations = root / "Annotations"
    annotations.mkdir()
    for name in IMAGES:
        (annotations / name.replace(".jpg", ".xml")).write_text(
            f"<annotation><filename>{name}</filename><size><width>{WIDTH}</width><height>"
            f"{HEIGHT}</height><depth>3</depth></size><object><name>dog</name><bndbox>"
            "<xmin>2</xmin><ymin>2</ymin><xmax>12</xmax><ymax>12</ymax></bndbox></object>"
            "</annotation>")
    return FormatDataset("voc", ("--input", str(root)), images, annotations / "a.xml")


def _kitti(root: Path) -> FormatDataset:
    images = _images(root / "training" / "image_2")
    labels = root / "training" / "label_2"
    labels.mkdir()
    for name in IMAGES:
        (labels / name.replace(".jpg", ".txt")).write_text(
            "Car 0.0 0 -0.5 2 2 12 12 1.5 1.6 3.9 1.0 1.7 10.0 0.75\n")
    return FormatDataset("kitti", ("--input", str(root)), images, labels / "a.txt")


def _cvat(root: Path) -> FormatDataset:
    images = _images(root / "images")
    elements = "".join(
        f'<image id="{i}" name="{name}" width="{WIDTH}" height="{HEIGHT}">'
        '<box label="dog" xtl="2" ytl="2" xbr="12" ybr="12"/></image>'
        for i, name in enumerate(IMAGES))
    (root / "annotations.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><annotations><version>1.1</version><meta><task>'
        "<name>t</name><labels><label><name>dog</name><type>any</type></label></labels>"
        f"</task></meta>{elements}</annotations>")
    return FormatDataset("cvat", ("--input", str(root)), images,
                         whole_file=root / "annotations.xml")


def _box_csv(root: Path) -> FormatDataset:
    images = _images(root / "train")
    rows = "".join(f"{name},{WIDTH},{HEIGHT},dog,2,2,12,12\n" for name in IMAGES)
    (images / "_annotations.csv").write_text(
        "filename,width,height,class,xmin,ymin,xmax,ymax\n" + rows)
    return FormatDataset("box-csv", ("--input", str(root)), images,
                         whole_file=images / "_annotations.csv")


def _labelme(root: Path) -> FormatDataset:
    images = _images(root / "images")
    for name in IMAGES:
        shape = {"label": "dog", "points": [[2, 2], [12, 12]], "group_id": None,
                 "shape_type": "rectangle", "flags": {}}
        (root / name.replace(".jpg", ".json")).write_text(json.dumps({
            "version": "5.4.1", "flags": {}, "shapes": [shape], "imagePath": f"images/{name}",
            "imageData": None, "imageHeight": HEIGHT, "imageWidth": WIDTH}))
    return FormatDataset("labelme", ("--input", str(root)), images, root / "a.json")


def _openimages(root: Path) -> FormatDataset:
    images = _images(root / "images" / "train")
    tables = root / "annotations"
    tables.mkdir()
    (tables / "class-descriptions-boxable.csv").write_text("/m/dog,Dog\n")
    rows = "".join(f"{name[:-4]},xclick,/m/dog,1,0.1,0.5,0.1,0.5,0,0,0,0,0\n" for name in IMAGES)
    (tables / "train-annotations-bbox.csv").write_text(
        "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,"
        "IsGroupOf,IsDepiction,IsInside\n" + rows)
    return FormatDataset("openimages", ("--input", str(root)), images,
                         whole_file=tables / "train-annotations-bbox.csv")


def _labelstudio(root: Path) -> FormatDataset:
    """Local files: ``root`` is Label Studio's document root (--images), each task names
    its image as ``/data/local-files/?d=images/<name>``; the export lies there too."""
    images = _images(root / "images")
    tasks = [{"id": i + 1, "data": {"image": f"/data/local-files/?d=images/{name}"},
              "annotations": [{
                  "id": i + 1, "completed_by": 1, "was_cancelled": False, "ground_truth": False,
                  "created_at": "2026-11-02T10:00:00.000000Z",
                  "updated_at": "2026-11-02T10:00:00.000000Z", "lead_time": 4.2,
                  "result": [{
                      "id": f"r{i + 1}", "type": "rectanglelabels", "from_name": "label",
                      "to_name": "image", "origin": "manual", "original_width": WIDTH,
                      "original_height": HEIGHT, "image_rotation": 0,
                      "value": {"x": 2 / WIDTH * 100, "y": 2 / HEIGHT * 100,
                                "width": 10 / WIDTH * 100, "height": 10 / HEIGHT * 100,
                                "rotation": 0, "rectanglelabels": ["dog"]}}]}],
              "predictions": []}
             for i, name in enumerate(IMAGES)]
    (root / "export.json").write_text(json.dumps(tasks))
    return FormatDataset("labelstudio", ("--input", str(root / "export.json"), "--images",
                                         str(root)), images)


BUILDERS = {"coco": _coco, "imagefolder": _imagefolder, "manifest": _manifest, "yolo": _yolo,
             "voc": _voc, "kitti": _kitti, "cvat": _cvat, "box-csv": _box_csv,
             "labelme": _labelme, "openimages": _openimages, "labelstudio": _labelstudio}
