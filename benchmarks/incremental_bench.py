"""What an incremental run costs against a full rebuild, on a COCO corpus that grows.

The corpus is ``memory_scale.py``'s (COCO-like annotations, ~7 boxes per image, small
640x480 JPEGs hard-linked under every name), converted once with ``--incremental`` into
shards of ~920 images (as many as the default 128 MiB shards hold of ~140 KB photos).
Then, for each change, the inputs are changed on a copy and converted twice: into a copy
of that folder with ``--incremental``, and from scratch (a full rebuild, a plain run into
an empty folder):

- ``add 1%``: N/100 new images (files, image entries, their boxes);
- ``annotations 0.1% + delete 0.1%``: the boxes of N/1000 images moved, N/1000 images
  deleted (files and entries), scattered over the corpus.

Each change is converted ``--repeats`` times each way, alternating (incremental, full,
full, incremental, ...). For each run: wall seconds (the whole command), output bytes
written (the sizes of the files the run created or replaced in the output folder: shards,
key files, metadata),
bytes written by the run's processes to storage (``/proc/<pid>/io``, shuffle spills
included), the peak RSS of its launcher and of its largest worker, and what the history
says it did (shards kept, rewritten, written). Then the ratios incremental / full rebuild,
and the targets: at most 3% of the bytes and 10% of the wall time for ``add 1%``.

    python benchmarks/incremental_bench.py [--images 100000] [--data-dir DIR] [--scratch DIR]
        [--workers 2] [--repeats 3] [--image-kb KB] [--cold] [--changes add,edit]

``--image-kb`` makes every image file about KB kilobytes, each with bytes of its own (the
small JPEG with a comment segment naming the file, padded): photo-sized files to read,
hash and write, while the rest of the corpus (names, boxes) stays the same. Without it,
the images are ~5.5 KB and share their bytes (hard links).

``--cold`` empties the page cache (dentries and inodes too) before every run, so each run
lists and reads its inputs from the disk, as a run over a corpus larger than memory does
(a 1.4 TB corpus never sits in the page cache; 100k photos do, on a machine with 24 GB).
Linux, as root. ``--changes add`` measures one change only.

The wall-time ratio is best against best, with the best and worst of the alternating
pairs beside it. Times on a shared machine are noisy; bytes are not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from memory_scale import RECORDS_PER_SHARD, _rss_mib, _small_jpeg, _tree, dataset  # noqa: E402


@dataclass
class Measured:
    """One conversion."""

    wall: float
    output_bytes: int
    io_bytes: int
    launcher_mib: int
    worker_mib: int
    done: dict


def _written(before: dict[str, tuple[int, int]], folder: str) -> int:
    """Bytes of the files in ``folder`` that are new or replaced since ``before``."""
    total = 0
    for name, (inode, size) in _files(folder).items():
        if before.get(name, (None, None))[0] != inode:
            total += size
    return total


def _files(folder: str) -> dict[str, tuple[int, int]]:
    found = {}
    for entry in os.scandir(folder) if os.path.isdir(folder) else ():
        if entry.is_file():
            stat = entry.stat()
            found[entry.name] = (stat.st_ino, stat.st_size)
    return found


def _io_written(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["write_bytes"])
    except (OSError, KeyError, ValueError):
        return 0


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache() -> None:
    """Write dirty pages out and empty the page cache, dentries and inodes (Linux, root):
    the next run reads its inputs, listing included, from the disk, as a run over a
    corpus larger than memory does."""
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


def convert(root: str, output: str, shard_size: int, workers: int, *extra: str,
            cold: bool = False) -> Measured:
    command = [sys.executable, "-m", "recordbeam", "convert", "coco",
               "--images", os.path.join(root, "images"),
               "--annotations", os.path.join(root, "annotations", "instances.json"),
               "--output", output, "--quiet", "--shard-size", str(shard_size),
               f"--direct_num_workers={workers}", *extra]
    before = _files(output)
    if cold:
        drop_page_cache()
    started = time.monotonic()
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    launcher = worker = 0
    written: dict[int, int] = {}
    while run.poll() is None:
        for pid in _tree(run.pid):
            rss = _rss_mib(pid)
            if rss is not None:
                if pid == run.pid:
                    launcher = max(launcher, rss)
                else:
                    worker = max(worker, rss)
            written[pid] = max(written.get(pid, 0), _io_written(pid))
        time.sleep(0.1)
    wall = time.monotonic() - started
    if run.returncode:
        raise SystemExit(f"{' '.join(command)} failed with exit code {run.returncode}")
    with open(os.path.join(output, "manifest.json")) as f:
        manifest = json.load(f)
    history = manifest.get("history") or [{}]
    return Measured(wall, _written(before, output), sum(written.values()), launcher, worker,
                    history[-1].get("splits", {}).get("train", {}))


def sized_dataset(data_dir: str, images: int, kb: int) -> str:
    """:func:`memory_scale.dataset`'s corpus with image files of ~``kb`` KB, each with
    bytes of its own (:func:`unique_jpeg`), generated once and reused."""
    root = os.path.join(data_dir, f"coco_{kb}kb_{images}")
    if not os.path.exists(os.path.join(root, "annotations", "instances.json")):
        small = dataset(data_dir, images)
        partial = root + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(os.path.join(partial, "images"))
        shutil.copytree(os.path.join(small, "annotations"), os.path.join(partial, "annotations"))
        template = _small_jpeg()
        for image_id in range(1, images + 1):
            name = f"{image_id:012d}.jpg"
            with open(os.path.join(partial, "images", name), "wb") as f:
                f.write(unique_jpeg(template, name, kb))
        os.rename(partial, root)
    return root


def unique_jpeg(template: bytes, name: str, kb: int) -> bytes:
    """``template`` (a JPEG) with comment segments after its start marker that name the
    file and pad it to ~``kb`` KB: a file of its own for duplicate finding, still a JPEG
    whose header every reader parses as the template's."""
    payload = (f"recordbeam benchmark image {name} ".encode()
               + b"." * max(0, kb * 1024 - len(template) - 64))
    segments = []
    for start in range(0, len(payload), 65_533):  # a segment's length field is 16 bits
        piece = payload[start:start + 65_533]
        segments.append(b"\xff\xfe" + struct.pack(">H", len(piece) + 2) + piece)
    return template[:2] + b"".join(segments) + template[2:]


def changed_copy(base: str, into: str, change: str, images: int, seed: int = 0,
                 image_kb: int | None = None) -> str:
    """A copy of the corpus ``base`` (images hard-linked) with ``change`` (``add``,
    ``edit`` or ``none``) applied; with ``image_kb``, added images are files of their own
    (:func:`unique_jpeg`), else links to existing ones."""
    shutil.copytree(os.path.join(base, "images"), os.path.join(into, "images"),
                    copy_function=os.link)
    os.makedirs(os.path.join(into, "annotations"))
    with open(os.path.join(base, "annotations", "instances.json")) as f:
        document = json.load(f)
    rng = random.Random(seed)
    if change == "add":
        _add(document, into, images // 100, rng, image_kb)
    elif change == "edit":
        _move_boxes_and_delete(document, into, images // 1000, rng)
    with open(os.path.join(into, "annotations", "instances.json"), "w") as f:
        json.dump(document, f)
    return into


def _add(document: dict, root: str, count: int, rng: random.Random,
         image_kb: int | None) -> None:
    images, annotations = document["images"], document["annotations"]
    next_image = max(image["id"] for image in images) + 1
    next_annotation = max(a["id"] for a in annotations) + 1
    templates = {}
    for a in annotations[:50_000]:
        templates.setdefault(a["image_id"], []).append(a)
    sources = list(templates)
    for image_id in range(next_image, next_image + count):
        source = rng.choice(sources)
        name = f"{image_id:012d}.jpg"
        if image_kb is None:
            os.link(os.path.join(root, "images", f"{source:012d}.jpg"),
                    os.path.join(root, "images", name))
        else:
            with open(os.path.join(root, "images", name), "wb") as f:
                f.write(unique_jpeg(_small_jpeg(), name, image_kb))
        images.append({"id": image_id, "file_name": name, "width": 640, "height": 480})
        for template in templates[source]:
            annotations.append({**template, "id": next_annotation, "image_id": image_id})
            next_annotation += 1


def _move_boxes_and_delete(document: dict, root: str, count: int, rng: random.Random) -> None:
    ids = sorted(image["id"] for image in document["images"])
    picked = rng.sample(ids, 2 * count)
    moved, deleted = set(picked[:count]), set(picked[count:])
    for a in document["annotations"]:
        if a["image_id"] in moved:
            x, y, w, h = a["bbox"]
            a["bbox"] = [x + 1.0, y, w, h]
    document["annotations"] = [a for a in document["annotations"] if a["image_id"] not in deleted]
    kept = []
    for image in document["images"]:
        if image["id"] in deleted:
            os.unlink(os.path.join(root, "images", image["file_name"]))
        else:
            kept.append(image)
    document["images"] = kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--scratch", default=None, help="where copies and outputs go (deleted)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3,
                        help="incremental runs and full rebuilds of each change, alternating")
    parser.add_argument("--image-kb", type=int, default=None,
                        help="image files of about this many KB, each with bytes of its own "
                        "(default: ~5.5 KB files sharing their bytes)")
    parser.add_argument("--cold", action="store_true",
                        help="empty the page cache before every run (Linux, as root): "
                        "inputs read from the disk, as for a corpus larger than memory")
    parser.add_argument("--changes", default="add,edit",
                        help="which changes to measure, of add and edit (default: both)")
    args = parser.parse_args(argv)
    changes = [c for c in args.changes.split(",") if c]
    if not changes or set(changes) - {"add", "edit"}:
        parser.error(f"--changes takes add and/or edit, comma-separated, got {args.changes!r}")
    if args.cold:
        try:
            with open(DROP_CACHES, "w"):
                pass
        except OSError as e:
            parser.error(f"--cold empties the page cache through {DROP_CACHES}, "
                         f"which this user cannot write ({e.strerror}): run as root or "
                         "without --cold")
    if args.image_kb is not None and args.image_kb < 6:
        parser.error(f"--image-kb must be at least 6 (the JPEG itself), got {args.image_kb}")
    if not sys.platform.startswith("linux"):
        raise SystemExit("reads /proc: Linux only")
    n = args.images
    base = (dataset(args.data_dir, n) if args.image_kb is None
            else sized_dataset(args.data_dir, n, args.image_kb))
    if args.scratch:
        os.makedirs(args.scratch, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="incremental-bench-", dir=args.scratch)
    try:
        # One input folder for every run: its path is one of the options, and other
        # options rebuild the whole split.
        inputs = os.path.join(scratch, "in")
        changed_copy(base, inputs, "none", n, image_kb=args.image_kb)
        first = os.path.join(scratch, "first")
        # ~920 images per shard: the image and ~600 bytes of other features per record.
        record = os.path.getsize(os.path.join(base, "images", f"{1:012d}.jpg")) + 600
        shard_size = record * RECORDS_PER_SHARD
        initial = convert(inputs, first, shard_size, args.workers, "--incremental")
        print(f"initial incremental build of {n:,} images: {initial.wall:.1f} s, "
              f"{_mb(initial.output_bytes)} in {initial.done.get('shards_written')} shards")
        rows = []
        labels = {"add": "add 1%", "edit": "annotations 0.1% + delete 0.1%"}
        for change, label in ((c, labels[c]) for c in changes):
            shutil.rmtree(inputs)
            changed_copy(base, inputs, change, n, image_kb=args.image_kb)
            incremental, full = [], []
            for repeat in range(args.repeats):
                # Alternating, and in turn first: a machine that slows down or speeds up
                # over the run weighs on both kinds alike.
                for kind in ("incremental", "full")[::1 if repeat % 2 == 0 else -1]:
                    out = os.path.join(scratch, kind)
                    shutil.rmtree(out, ignore_errors=True)
                    if kind == "incremental":
                        # Hard links: a run renames its files into place and removes old
                        # ones, it never writes into a file it did not create, so `first`
                        # stays as it is (and photo-sized corpora fit on the disk).
                        shutil.copytree(first, out, copy_function=os.link)
                        incremental.append(convert(inputs, out, shard_size, args.workers,
                                                   "--incremental", cold=args.cold))
                    else:
                        full.append(convert(inputs, out, shard_size, args.workers,
                                            cold=args.cold))
                    shutil.rmtree(out)
            rows.append((label, incremental, full))
        _print(n, rows, record, args.cold)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _print(n: int, rows, record: int, cold: bool) -> None:
    print(f"\n{n:,} images of ~{record / 1000:,.1f} KB (with their labels), "
          f"~{RECORDS_PER_SHARD} per shard"
          f"{', page cache emptied before every run' if cold else ''}\n")
    print("| change | run | wall s | output written | storage writes | launcher MiB | "
          "worker MiB | shards kept / rewritten / written | records copied |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, incremental, full in rows:
        for name, runs in (("incremental", incremental), ("full rebuild", full)):
            m, done = runs[0], runs[0].done
            shards = (f"{done.get('shards_kept', 0)} / {done.get('shards_rewritten', 0)} / "
                      f"{done.get('shards_written', 0)}" if done else "-")
            walls = " / ".join(f"{run.wall:.1f}" for run in runs)
            print(f"| {label} | {name} | {walls} | {_mb(m.output_bytes)} | "
                  f"{_mb(m.io_bytes)} | {max(r.launcher_mib for r in runs)} | "
                  f"{max(r.worker_mib for r in runs)} | {shards} | "
                  f"{done.get('records_copied', '-') if done else '-'} |")
    print("\n| change | bytes incremental / full | wall incremental / full (best / worst pair) |")
    print("|---|---|---|")
    for label, incremental, full in rows:
        pairs = [i.wall / f.wall for i, f in zip(incremental, full, strict=True)]
        print(f"| {label} | {_bytes_ratio(incremental, full):.2%} | "
              f"{_wall_ratio(incremental, full):.1%} ({min(pairs):.1%} / {max(pairs):.1%}) |")
    label, incremental, full = rows[0]
    for what, ratio, limit in (("bytes", _bytes_ratio(incremental, full), 0.03),
                               ("wall time", _wall_ratio(incremental, full), 0.10)):
        print(f"target: {label} writes {what} at most {limit:.0%} of a full rebuild's: "
              f"{ratio:.1%} {'met' if ratio <= limit else 'MISSED'}")


def _bytes_ratio(incremental: list[Measured], full: list[Measured]) -> float:
    return incremental[0].output_bytes / full[0].output_bytes


def _wall_ratio(incremental: list[Measured], full: list[Measured]) -> float:
    """Best against best: the noise of a shared machine only ever adds time."""
    return min(run.wall for run in incremental) / min(run.wall for run in full)


if __name__ == "__main__":
    sys.exit(main())
