"""One tiny dataset per input format, built around the class names (or annotation text) a
test hands in, so one hostile input can be tried on every format that reads it.

Each builder writes under ``root`` and returns the ``convert`` arguments (without
``--output``); :func:`run` adds the output folder and the in-memory runner and collects what
the run left.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from PIL import Image

from recordbeam.cli import main as cli

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
LENIENT = ("--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1")


def jpeg(width: int = 32, height: int = 24) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 140, 200)).save(buffer, "JPEG")
    return buffer.getvalue()


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


# --- builders: (root, class names) -> convert arguments ------------------------------------


def coco(root: Path, names: Sequence[str], *, segmentation: object = None) -> list[str]:
    """One image, one category per name (ids 1..n), one box of each category."""
    categories = [{"id": i, "name": name} for i, name in enumerate(names, 1)]
    annotations = []
    for i, _name in enumerate(names, 1):
        annotation = {"id": i, "image_id": 1, "category_id": i, "bbox": [2, 2, 8, 8],
                      "area": 64, "iscrowd": 0}
        if segmentation is not None:
            annotation["segmentation"] = segmentation
        annotations.append(annotation)
    _write(root / "images" / "a.jpg", jpeg())
    document = {"images": [{"id": 1, "file_name": "a.jpg", "width": 32, "height": 24}],
                "annotations": annotations, "categories": categories}
    path = _write(root / "instances.json", json.dumps(document))
    return ["coco", "--images", str(root / "images"), "--annotations", str(path)]


def voc(root: Path, names: Sequence[str]) -> list[str]:
    """One image per name (``a0.jpg``...), each with one object of that class: found names
    meet in the class list, not in one file."""
    for i, name in enumerate(names):
        _write(root / "JPEGImages" / f"a{i}.jpg", jpeg())
        _write(root / "Annotations" / f"a{i}.xml", (
            f"<annotation><filename>a{i}.jpg</filename><size><width>32</width><height>24"
            f"</height></size><object><name>{escape(name)}</name><bndbox><xmin>2</xmin>"
            "<ymin>2</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>"))
    return ["voc", "--input", str(root)]


def yolo(root: Path, names: Sequence[str] | str) -> list[str]:
    """Ultralytics layout; ``names`` is the class list, or the whole ``names:`` YAML value
    as text. One box of class 0."""
    value = names if isinstance(names, str) else json.dumps(list(names))
    _write(root / "data.yaml", f"train: images/train\nnames: {value}\n")
    _write(root / "images" / "train" / "a.jpg", jpeg())
    _write(root / "labels" / "train" / "a.txt", "0 0.5 0.5 0.25 0.25\n")
    return ["yolo", "--input", str(root)]


def labelme(root: Path, names: Sequence[str]) -> list[str]:
    """One JSON and image per name, one rectangle labelled with it."""
    for i, name in enumerate(names):
        _write(root / f"a{i}.jpg", jpeg())
        shape = {"label": name, "points": [[2, 2], [9, 9]], "group_id": None,
                 "shape_type": "rectangle", "flags": {}}
        _write(root / f"a{i}.json", json.dumps({
            "version": "5.4.1", "flags": {}, "shapes": [shape], "imagePath": f"a{i}.jpg",
            "imageData": None, "imageHeight": 24, "imageWidth": 32}))
    return ["labelme", "--input", str(root)]


def cvat(root: Path, names: Sequence[str], *, declared: bool = True,
         shapes: str | None = None, width: int = 32, height: int = 24) -> list[str]:
    """One ``<image>``; ``declared``: the names are ``<meta>``'s labels (else found on the
    shapes). ``shapes``: the ``<image>``'s children (default: a box per name)."""
    labels = "".join(f"<label><name>{escape(name)}</name></label>" for name in names)
    meta = f"<meta><task><labels>{labels}</labels></task></meta>" if declared else ""
    if shapes is None:
        shapes = "".join(f'<box label={quoteattr(name)} xtl="2" ytl="2" xbr="9" ybr="9"/>'
                         for name in names)
    _write(root / "annotations.xml", (
        f"<annotations><version>1.1</version>{meta}<image id=\"0\" name=\"a.jpg\" "
        f"width=\"{width}\" height=\"{height}\">{shapes}</image></annotations>"))
    _write(root / "images" / "a.jpg", jpeg())
    return ["cvat", "--input", str(root)]


def labelstudio(root: Path, names: Sequence[str], *, choices: bool = False) -> list[str]:
    """A Label Studio JSON export of one task per name, its image uploaded (stored in the
    media folder as ``upload/1/<8 hex>-a<i>.jpg``), annotated with one rectangle labelled
    with the name; ``choices``: a choice of the whole image instead. Found names meet in
    the class list, not in one task."""
    tasks = []
    for i, name in enumerate(names):
        stored = f"upload/1/{0x3f2a9c00 + i:08x}-a{i}.jpg"
        _write(root / "media" / stored, jpeg())
        if choices:
            result = {"id": f"c{i}", "type": "choices", "from_name": "scene",
                      "to_name": "image", "origin": "manual", "value": {"choices": [name]}}
        else:
            result = {"id": f"r{i}", "type": "rectanglelabels", "from_name": "label",
                      "to_name": "image", "origin": "manual", "original_width": 32,
                      "original_height": 24, "image_rotation": 0,
                      "value": {"x": 2 / 32 * 100, "y": 2 / 24 * 100, "width": 7 / 32 * 100,
                                "height": 7 / 24 * 100, "rotation": 0,
                                "rectanglelabels": [name]}}
        tasks.append({"id": i + 1, "data": {"image": f"/data/{stored}"}, "predictions": [],
                      "annotations": [{"id": i + 1, "completed_by": 1, "was_cancelled": False,
                                       "ground_truth": False, "result": [result]}]})
    export = _write(root / "project-1-at-2026-11-02-10-00-3f2a9c00.json", json.dumps(tasks))
    return ["labelstudio", "--input", str(export), "--images", str(root / "media")]


def kitti(root: Path, names: Sequence[str]) -> list[str]:
    """One image per name, each label file one object of that type."""
    for i, name in enumerate(names):
        _write(root / "training" / "image_2" / f"{i:06d}.png", _png())
        _write(root / "training" / "label_2" / f"{i:06d}.txt",
               f"{name} 0 0 0 2 2 9 9 1.5 1.6 3.9 1 1.7 10 0.5\n")
    return ["kitti", "--input", str(root)]


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 24)).save(buffer, "PNG")
    return buffer.getvalue()


def _csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def openimages(root: Path, names: Sequence[str]) -> list[str]:
    """Class descriptions naming ``/m/c<i>`` with each name; one box of each class."""
    rows = "".join(f"/m/c{i},{_csv_field(name)}\n" for i, name in enumerate(names))
    _write(root / "class-descriptions-boxable.csv", rows)
    boxes = ["ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,"
             "IsTruncated,IsGroupOf,IsDepiction,IsInside"]
    boxes += [f"a,xclick,/m/c{i},1,0.1,0.5,0.1,0.5,0,0,0,0,0" for i in range(len(names))]
    _write(root / "train-annotations-bbox.csv", "\n".join(boxes) + "\n")
    _write(root / "images" / "train" / "a.jpg", jpeg())
    return ["openimages", "--input", str(root)]


def box_csv(root: Path, names: Sequence[str]) -> list[str]:
    """One image, one row (box) per name."""
    rows = ["filename,width,height,class,xmin,ymin,xmax,ymax"]
    rows += [f"a.jpg,32,24,{_csv_field(name)},2,2,9,9" for name in names]
    _write(root / "train" / "_annotations.csv", "\n".join(rows) + "\n")
    _write(root / "train" / "a.jpg", jpeg())
    return ["box-csv", "--input", str(root)]


def class_folders(root: Path, names: Sequence[str]) -> list[str]:
    """One folder per name, one image in each."""
    for i, name in enumerate(names):
        _write(root / "classes" / name / f"a{i}.jpg", jpeg())
    return ["imagefolder", "--root", str(root / "classes")]


def edit_json(path: Path, change: Callable[[Any], object]) -> Any:
    """Apply ``change`` to the JSON document at ``path`` (an object or an array) and write
    it back."""
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")
    return document


# --- running ----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a run left: its exit code, its stderr, and the output folder's files."""

    code: int
    out: str
    err: str
    output: Path

    def text(self, name: str) -> str | None:
        path = self.output / name
        return path.read_text(encoding="utf-8") if path.exists() else None

    def manifest(self) -> dict | None:
        text = self.text("manifest.json")
        return json.loads(text) if text is not None else None

    def rejects(self) -> list[dict]:
        text = self.text("rejects.jsonl")
        return [json.loads(line) for line in (text or "").splitlines() if line.strip()]

    def shards(self) -> bytes:
        if not self.output.exists():
            return b""
        return b"".join((self.output / n).read_bytes() for n in sorted(os.listdir(self.output))
                        if n.endswith(".tfrecord"))


def run(capsys, argv: Sequence[str], output: Path, *extra: str) -> Outcome:
    code = cli.main(["convert", *argv, "--output", str(output), "--quiet", *extra, *IN_MEMORY])
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err, output)


#: Every format whose class names a run writes, by its ``convert`` subcommand
#: (``tests/reliability/test_format_tables.py`` holds it to the declared formats).
CLASS_NAME_FORMATS: dict[str, Callable[[Path, Sequence[str]], list[str]]] = {
    "coco": coco, "voc": voc, "yolo": yolo, "labelme": labelme, "cvat": cvat,
    "kitti": kitti, "openimages": openimages, "box-csv": box_csv,
    "imagefolder": class_folders, "labelstudio": labelstudio,
}
#: The formats whose runs write no class names: a manifest's labels are its numbers.
NO_CLASS_NAMES = ("manifest",)
