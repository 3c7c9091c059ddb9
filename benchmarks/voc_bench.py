"""Pascal VOC against COCO on the same images: what one XML read per image costs.

Generates ``make_coco_benchmark``'s dataset (once, into --data-dir), writes one VOC XML per
image from its annotations (``voc_<N>/Annotations``; the images stay where they are and
are given with ``--images``), then runs ``recordbeam convert coco`` and ``recordbeam
convert voc`` side by side, each as its own command, alternating, and prints images/s
with VOC's ratio to COCO's (the issue's bar: at least 0.8 at 20k images).

    python benchmarks/voc_bench.py [--images 20000] [--repeats 2] [--data-dir benchmarks/data]
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


def write_voc(annotations: str, root: str) -> None:
    """One VOC XML per image of the COCO file (boxes as pixel corners, as Datumaro writes)."""
    with open(annotations, encoding="utf-8") as f:
        coco = json.load(f)
    names = {c["id"]: c["name"] for c in coco["categories"]}
    objects = defaultdict(list)
    for a in coco["annotations"]:
        x, y, w, h = a["bbox"]
        objects[a["image_id"]].append(
            f"<object><name>{escape(names[a['category_id']])}</name><truncated>0</truncated>"
            f"<difficult>0</difficult><bndbox><xmin>{x}</xmin><ymin>{y}</ymin>"
            f"<xmax>{x + w}</xmax><ymax>{y + h}</ymax></bndbox></object>")
    folder = os.path.join(root, "Annotations")
    os.makedirs(folder)
    for image in coco["images"]:
        stem = os.path.splitext(image["file_name"])[0]
        with open(os.path.join(folder, f"{stem}.xml"), "w", encoding="utf-8") as f:
            f.write(f"<annotation><filename>{escape(image['file_name'])}</filename><size>"
                    f"<width>{image['width']}</width><height>{image['height']}</height>"
                    f"<depth>3</depth></size>{''.join(objects[image['id']])}</annotation>")
    with open(os.path.join(root, "labelmap.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{names[i]}\n" for i in sorted(names)))


def ensure_data(data_dir: str, num_images: int) -> tuple[str, str, str]:
    """(images folder, COCO annotations, VOC root), generated when absent."""
    from recordbeam.testing.samples import make_coco_benchmark

    coco_root = os.path.join(data_dir, f"coco_{num_images}")
    voc_root = os.path.join(data_dir, f"voc_{num_images}")
    marker = os.path.join(voc_root, "benchmark.json")
    if not os.path.exists(marker):
        for folder in (coco_root, voc_root):
            shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {num_images} images into {coco_root} and {voc_root} ...", flush=True)
        sample = make_coco_benchmark(coco_root, num_images=num_images)
        write_voc(sample.annotations, voc_root)
        with open(marker, "w", encoding="utf-8") as f:
            json.dump({"images": sample.images_dir, "annotations": sample.annotations}, f)
    with open(marker, encoding="utf-8") as f:
        info = json.load(f)
    return info["images"], info["annotations"], voc_root


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    args = parser.parse_args()
    images, annotations, voc_root = ensure_data(args.data_dir, args.images)
    recordbeam = [sys.executable, "-m", "recordbeam", "convert"]
    best = {"coco": float("inf"), "voc": float("inf")}
    with tempfile.TemporaryDirectory(prefix="voc-bench-") as scratch:
        for repeat in range(args.repeats):
            for kind, extra in (("coco", ["--annotations", annotations]),
                                ("voc", ["--input", voc_root])):
                out = os.path.join(scratch, f"{kind}-{repeat}")
                seconds = timed([*recordbeam, kind, "--images", images, *extra,
                                 "--output", out, "--quiet"])
                best[kind] = min(best[kind], seconds)
                shutil.rmtree(out)
    print(f"{'command':<28}{'best wall s':>12}{'images/s':>10}{'vs coco':>9}")
    for kind in ("coco", "voc"):
        rate = args.images / best[kind]
        print(f"{'recordbeam convert ' + kind:<28}{best[kind]:>12.1f}{rate:>10.0f}"
              f"{best['coco'] / best[kind]:>9.2f}")


if __name__ == "__main__":
    main()
