"""Peak memory of a local COCO conversion as the dataset grows: does it stay flat?

Generates COCO-like datasets (``make_coco_benchmark`` of ``tests/samples.py``: ~7 boxes per
image, 80 categories) whose few distinct image files are then replaced by small 640x480
JPEGs (a few KB), so that a 300k-image run writes ~1.5 GB instead of 40 GB: what a local
run holds in memory is the per-image records of its shuffles, not the image bytes. Every
name holds the same picture, so duplicate finding sees one group of all the images: its
worst case (``duplicates_bench.py --memory`` measures distinct images). Runs
``recordbeam convert coco`` on each size, with as many images per shard as the full-size
benchmark's shards hold, and samples the resident memory of every process of the run
(launcher and Beam workers) every 0.1 s.

    python benchmarks/memory_scale.py [--images 20000,100000,300000]
        [--data-dir benchmarks/data] [--scratch DIR]

Prints, per size: wall time, the launcher's and the largest worker's peak RSS, and each
against the smallest size.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time

from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))  # samples.py


def _small_jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (640, 480), (120, 130, 140)).save(out, "JPEG", quality=80)
    return out.getvalue()


def dataset(data_dir: str, images: int) -> str:
    """A tiny-image dataset of ``images`` images, generated once and reused."""
    root = os.path.join(data_dir, f"coco_small_{images}")
    if not os.path.exists(os.path.join(root, "annotations", "instances.json")):
        from samples import make_coco_benchmark

        # Enough distinct files that none needs more hard links than ext4 allows (65,000).
        distinct = max(8, -(-images // LINKS_PER_FILE))
        make_coco_benchmark(root, num_images=images, distinct=distinct)
        small = _small_jpeg()
        images_dir = os.path.join(root, "images")
        for image_id in range(1, distinct + 1):  # every other name links to one of these
            with open(os.path.join(images_dir, f"{image_id:012d}.jpg"), "r+b") as f:
                f.write(small)
                f.truncate()
    return root


#: Names per distinct file of :func:`dataset`: with one hard-linked copy of the dataset
#: beside it (``incremental_bench.py``), still under ext4's limit of 65,000 links.
LINKS_PER_FILE = 30_000


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (children of any of its threads: Beam starts workers
    from a thread)."""
    found = [pid]
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children = f.read().split()
        except OSError:
            continue
        for child in children:
            found += _tree(int(child))
    return found


def _rss_mib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
    except OSError:
        return None


#: Images per shard, as in ``coco_bench.py``'s default-size shards.
RECORDS_PER_SHARD = 920


def measure(root: str, images: int, output: str,
            extra: list[str] | tuple[str, ...] = ()) -> tuple[float, int, int]:
    """Wall seconds, launcher peak MiB, largest worker peak MiB of one conversion
    (``extra``: more options of ``convert coco``)."""
    command = [sys.executable, "-m", "recordbeam", "convert", "coco",
               "--images", os.path.join(root, "images"),
               "--annotations", os.path.join(root, "annotations", "instances.json"),
               "--output", output, "--overwrite", "--quiet",
               # As many records per shard as the full-size benchmark's default shards
               # hold (~920 images of ~140 KB in 128 MB): a shard's records are grouped
               # in one piece, so small images with the default size would mean 30x more.
               "--shards", str(max(1, images // RECORDS_PER_SHARD)), *extra]
    started = time.monotonic()
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    launcher, workers = 0, 0
    while run.poll() is None:
        for pid in _tree(run.pid):
            rss = _rss_mib(pid)
            if rss is None:
                continue
            if pid == run.pid:
                launcher = max(launcher, rss)
            else:
                workers = max(workers, rss)
        time.sleep(0.1)
    if run.returncode:
        raise SystemExit(f"the conversion of {root} failed with exit code {run.returncode}")
    return time.monotonic() - started, launcher, workers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="20000,100000,300000",
                        help="comma-separated dataset sizes")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--scratch", default=None, help="where outputs go (deleted after)")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit("reads /proc to sample memory: Linux only")
    sizes = [int(n) for n in args.images.split(",")]
    scratch = tempfile.mkdtemp(prefix="memory-scale-", dir=args.scratch)
    rows = []
    try:
        for n in sizes:
            root = dataset(args.data_dir, n)
            output = os.path.join(scratch, f"out_{n}")
            rows.append((n, *measure(root, n, output)))
            shutil.rmtree(output, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _, _, base_launcher, base_worker = rows[0]
    print("| images | wall s | launcher peak MiB | vs first | largest worker peak MiB | vs first |")
    print("|---|---|---|---|---|---|")
    for n, wall, launcher, worker in rows:
        print(f"| {n:,} | {wall:.1f} | {launcher} | {launcher / base_launcher:.2f}x "
              f"| {worker} | {worker / base_worker:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
