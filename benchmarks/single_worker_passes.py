"""How fast the passes that one worker must make alone go: annotations per second.

Some inputs are one file that one worker streams from start to end: a COCO JSON (its
``annotations`` list), a CVAT XML, a box CSV table. That pass cannot spread over a cluster,
so its rate bounds a job's start whatever the worker count. This script times each pass
in this process, calling the same functions the pipeline's worker calls (no Beam runner),
on generated inputs with ~7 boxes per image, and prints per pass: annotations (boxes) and
images per second, and this process's peak RSS growth (what the pass holds).

    python benchmarks/single_worker_passes.py [--images 100000] [--passes coco,cvat,boxcsv]
        [--scratch DIR] [--repeat 3]

Best of ``--repeat`` runs; the inputs are written once into a temp folder (deleted after).
The COCO file is ``make_coco_benchmark``'s (``tests/samples.py``; ``memory_scale.py``'s data when
``--data-dir`` holds it).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))  # samples.py

BOXES_PER_IMAGE = 7


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _drain(items: Iterable[object]) -> int:
    count = 0
    for _ in items:
        count += 1
    return count


def _count_in_file(path: str, token: bytes) -> int:
    """Occurrences of ``token`` in a file, read in pieces (reading it whole would raise the
    peak RSS this script reports)."""
    count, tail = 0, b""
    with open(path, "rb") as f:
        while piece := f.read(1 << 22):
            data = tail + piece
            count += data.count(token)
            tail = data[-(len(token) - 1):]  # too short to hold a whole token: none counted twice
    return count


def coco_pass(folder: str, images: int, data_dir: str | None) -> tuple[Callable[[], int], int]:
    """The worker's read of a COCO file's ``annotations`` section (checks included)."""
    from samples import make_coco_benchmark

    from recordbeam.sources.coco.input_tasks import ReadInputs
    from recordbeam.sources.coco.reader import CocoOptions

    root = os.path.join(data_dir, f"coco_small_{images}") if data_dir else None
    if root is None or not os.path.exists(os.path.join(root, "annotations", "instances.json")):
        root = os.path.join(folder, "coco")
        make_coco_benchmark(root, num_images=images, distinct=1)
    options = CocoOptions(images_dir=os.path.join(root, "images"),
                          annotations=os.path.join(root, "annotations", "instances.json"))
    annotations = _count_in_file(options.annotations, b'"image_id"')  # only annotations have it
    reader = ReadInputs(options)
    return lambda: _drain(reader.process("annotations")), annotations


def cvat_pass(folder: str, images: int, data_dir: str | None) -> tuple[Callable[[], int], int]:
    """The worker's stream of one CVAT XML (every ``<image>`` with its boxes)."""
    from recordbeam import filesystems
    from recordbeam.sources.cvat.reader import stream_images

    path = os.path.join(folder, "annotations.xml")
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n<version>1.1</version>\n'
                "<meta><task><name>t</name><labels>"
                + "".join(f"<label><name>c{k}</name><type>any</type></label>" for k in range(80))
                + "</labels></task></meta>\n")
        for image_id in range(images):
            f.write(f'<image id="{image_id}" name="{image_id:012d}.jpg" width="640" '
                    'height="480">\n')
            for _ in range(BOXES_PER_IMAGE):
                x, y = rng.uniform(0, 500), rng.uniform(0, 380)
                f.write(f'<box label="c{rng.randrange(80)}" occluded="0" xtl="{x:.2f}" '
                        f'ytl="{y:.2f}" xbr="{x + 90:.2f}" ybr="{y + 60:.2f}" z_order="0"/>\n')
            f.write("</image>\n")
        f.write("</annotations>\n")

    def run() -> int:
        with filesystems.open_read(path) as data:
            return _drain(stream_images(path, data, None, (), "train", False))
    return run, images * BOXES_PER_IMAGE


def boxcsv_pass(folder: str, images: int, data_dir: str | None) -> tuple[Callable[[], int], int]:
    """The worker's read of one box CSV table (one row per box)."""
    from recordbeam import filesystems
    from recordbeam.sources.box_csv.reader import COLUMNS, parse_table

    path = os.path.join(folder, "_annotations.csv")
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(COLUMNS) + "\n")
        for image_id in range(images):
            for _ in range(BOXES_PER_IMAGE):
                x, y = rng.randrange(0, 500), rng.randrange(0, 380)
                f.write(f"{image_id:012d}.jpg,640,480,c{rng.randrange(80)},{x},{y},"
                        f"{x + 90},{y + 60}\n")
    def run() -> int:
        with filesystems.open_read(path) as data:  # streamed, as the worker reads it
            return _drain(parse_table(data, path, "train"))
    return run, images * BOXES_PER_IMAGE


PASSES = {"coco": coco_pass, "cvat": cvat_pass, "boxcsv": boxcsv_pass}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100000)
    parser.add_argument("--passes", default=",".join(PASSES))
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"),
                        help="reuse memory_scale.py's coco_small_<N> when there")
    parser.add_argument("--scratch", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    names = args.passes.split(",")
    unknown = sorted(set(names) - set(PASSES))
    if unknown:
        parser.error(f"unknown pass(es) {', '.join(unknown)}; choose from {', '.join(PASSES)}")
    scratch = tempfile.mkdtemp(prefix="single-passes-", dir=args.scratch)
    print(f"{args.images:,} images, ~{BOXES_PER_IMAGE} annotations each; CPU s, best of "
          f"{args.repeat}")
    print("| pass | annotations | CPU s | annotations/s | images/s | peak RSS growth MiB |")
    print("|---|---|---|---|---|---|")
    try:
        for name in names:
            folder = os.path.join(scratch, name)
            os.makedirs(folder)
            run, annotations = PASSES[name](folder, args.images, args.data_dir)
            gc.collect()
            before = _peak_mib()
            best = float("inf")
            for _ in range(args.repeat):
                started = time.process_time()
                run()
                best = min(best, time.process_time() - started)
            print(f"| {name} | {annotations:,} | {best:.2f} | {annotations / best:,.0f} | {args.images / best:,.0f} "
                  f"| {max(0.0, _peak_mib() - before):.0f} |", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
