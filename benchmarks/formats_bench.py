"""Per-image annotation formats against COCO on the same images: what one small annotation
read per image costs.

Generates ``make_coco_benchmark``'s dataset once (into --data-dir), writes the same boxes as
Pascal VOC (one XML per image), YOLO (Ultralytics layout, one label file per image) and
labelme (one JSON per image), then runs ``recordbeam convert coco`` and each format's
convert side by side, as its own command, alternating, best of ``--repeats``. Prints
images/s and each format's ratio to COCO's (the issue's bar: at least 0.8 at 20k images).

    python benchmarks/formats_bench.py [--images 20000] [--repeats 2] [--formats voc,yolo,labelme]
        [--data-dir benchmarks/data]

The per-format folders hold hard links to the COCO images (no copies); the YOLO and labelme
folders hold them beside their annotations, as those tools export them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from coco_bench import ensure_dataset  # noqa: E402 - one dataset and marker for both

FORMATS = ("voc", "yolo", "labelme")


def _coco(annotations: str) -> tuple[dict, dict, dict]:
    """(categories by id, objects by image id, the COCO file)."""
    with open(annotations, encoding="utf-8") as f:
        coco = json.load(f)
    names = {c["id"]: c["name"] for c in coco["categories"]}
    objects = defaultdict(list)
    for a in coco["annotations"]:
        objects[a["image_id"]].append((names[a["category_id"]], *a["bbox"]))
    return names, objects, coco


def write_voc(annotations: str, images_dir: str, root: str) -> list[str]:
    """One VOC XML per image (boxes as pixel corners, as Datumaro writes); the images stay
    where they are (``--images``)."""
    names, objects, coco = _coco(annotations)
    folder = os.path.join(root, "Annotations")
    os.makedirs(folder)
    for image in coco["images"]:
        boxes = "".join(
            f"<object><name>{escape(name)}</name><truncated>0</truncated><difficult>0"
            f"</difficult><bndbox><xmin>{x}</xmin><ymin>{y}</ymin><xmax>{x + w}</xmax>"
            f"<ymax>{y + h}</ymax></bndbox></object>" for name, x, y, w, h in objects[image["id"]])
        stem = os.path.splitext(image["file_name"])[0]
        with open(os.path.join(folder, f"{stem}.xml"), "w", encoding="utf-8") as f:
            f.write(f"<annotation><filename>{escape(image['file_name'])}</filename><size>"
                    f"<width>{image['width']}</width><height>{image['height']}</height>"
                    f"<depth>3</depth></size>{boxes}</annotation>")
    with open(os.path.join(root, "labelmap.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{names[i]}\n" for i in sorted(names)))
    return ["--input", root, "--images", images_dir]


def _link_images(coco: dict, images_dir: str, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for image in coco["images"]:
        os.link(os.path.join(images_dir, image["file_name"]),
                os.path.join(folder, image["file_name"]))


def write_yolo(annotations: str, images_dir: str, root: str) -> list[str]:
    """Ultralytics layout: ``data.yaml``, ``images/train/``, ``labels/train/`` with
    normalized ``cls cx cy w h`` lines."""
    names, objects, coco = _coco(annotations)
    order = sorted(names)
    index = {names[i]: n for n, i in enumerate(order)}
    _link_images(coco, images_dir, os.path.join(root, "images", "train"))
    labels = os.path.join(root, "labels", "train")
    os.makedirs(labels)
    for image in coco["images"]:
        width, height = image["width"], image["height"]
        lines = "".join(
            f"{index[name]} {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} "
            f"{w / width:.6f} {h / height:.6f}\n" for name, x, y, w, h in objects[image["id"]])
        stem = os.path.splitext(image["file_name"])[0]
        with open(os.path.join(labels, f"{stem}.txt"), "w", encoding="utf-8") as f:
            f.write(lines)
    with open(os.path.join(root, "data.yaml"), "w", encoding="utf-8") as f:
        f.write("path: .\ntrain: images/train\nnames:\n")
        f.write("".join(f"  {n}: {json.dumps(names[i])}\n" for n, i in enumerate(order)))
    return ["--input", root]


def write_labelme(annotations: str, images_dir: str, root: str) -> list[str]:
    """One labelme JSON beside each image, rectangles only, no embedded image data."""
    _names, objects, coco = _coco(annotations)
    _link_images(coco, images_dir, root)
    for image in coco["images"]:
        shapes = [{"label": name, "points": [[x, y], [x + w, y + h]], "group_id": None,
                   "shape_type": "rectangle", "flags": {}}
                  for name, x, y, w, h in objects[image["id"]]]
        stem = os.path.splitext(image["file_name"])[0]
        with open(os.path.join(root, f"{stem}.json"), "w", encoding="utf-8") as f:
            json.dump({"version": "5.4.1", "flags": {}, "shapes": shapes,
                       "imagePath": image["file_name"], "imageData": None,
                       "imageHeight": image["height"], "imageWidth": image["width"]}, f)
    return ["--input", root]


WRITERS = {"voc": write_voc, "yolo": write_yolo, "labelme": write_labelme}


def ensure_data(data_dir: str, num_images: int, formats: list[str]) -> dict[str, list[str]]:
    """Each case's input options, generating what is absent."""
    coco = ensure_dataset(data_dir, num_images)  # coco_bench.py's data and marker
    info = {"images": coco.images_dir, "annotations": coco.annotations}
    cases = {"coco": ["--images", info["images"], "--annotations", info["annotations"]]}
    for kind in formats:
        root = os.path.join(data_dir, f"{kind}_{num_images}")
        done = f"{root}.options.json"  # beside the folder: inside, a format would read it
        if not os.path.exists(done):
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            print(f"writing {kind} annotations into {root} ...", flush=True)
            options = WRITERS[kind](info["annotations"], info["images"], root)
            with open(done, "w", encoding="utf-8") as f:
                json.dump(options, f)
        with open(done, encoding="utf-8") as f:
            cases[kind] = json.load(f)
    return cases


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"comma-separated, of {', '.join(FORMATS)}")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    args = parser.parse_args()
    formats = [kind for kind in args.formats.split(",") if kind]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    cases = ensure_data(args.data_dir, args.images, formats)
    recordbeam = [sys.executable, "-m", "recordbeam", "convert"]
    best = {kind: float("inf") for kind in cases}
    with tempfile.TemporaryDirectory(prefix="formats-bench-") as scratch:
        for repeat in range(args.repeats):
            for kind, options in cases.items():
                out = os.path.join(scratch, f"{kind}-{repeat}")
                seconds = timed([*recordbeam, kind, *options, "--output", out, "--quiet"])
                best[kind] = min(best[kind], seconds)
                with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
                    written = sum(split["examples"] for split in json.load(f)["splits"].values())
                if written != args.images:
                    sys.exit(f"{kind} wrote {written} examples of {args.images}")
                shutil.rmtree(out)
    print(f"{'command':<32}{'best wall s':>12}{'images/s':>10}{'vs coco':>9}")
    for kind in cases:
        rate = args.images / best[kind]
        print(f"{'recordbeam convert ' + kind:<32}{best[kind]:>12.1f}{rate:>10.0f}"
              f"{best['coco'] / best[kind]:>9.2f}")


if __name__ == "__main__":
    main()
