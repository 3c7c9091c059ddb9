"""A corpus that grows and changes between runs, written in one input format, and what a
folder's split holds, for the tests of ``convert --incremental``.

A :class:`Corpus` keeps its images (a seed for their pixels, their labels, whether the
file is broken) and writes them as class folders, a CSV manifest, COCO or YOLO. Only what
changed is rewritten: an untouched image keeps its file and its modification time, as on
a real disk. Mutations: add, delete, relabel (its own annotation: a COCO box, a YOLO label
file, a manifest row, or another class folder), repaint (new pixels), touch (a newer
modification time only), break (a truncated JPEG, rejected) and mend.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from PIL import Image

from recordbeam.cli.main import main
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records

KINDS = ("imagefolder", "manifest", "coco", "yolo")
CLASSES = ("cat", "dog", "fox")
IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
MUTATIONS = ("add", "delete", "relabel", "repaint", "touch", "break", "mend")
#: Small shards, so that a change touches a few of several.
SMALL_SHARDS = ("--shard-size", "2KiB")


@dataclass(frozen=True)
class Item:
    """One image of the corpus: its pixels' seed, its class and box, whether broken."""

    seed: int
    label: int
    box: tuple[float, float, float, float]
    broken: bool = False
    touched: int = 0  # how many times its modification time moved on


def _jpeg(seed: int, broken: bool) -> bytes:
    rng = random.Random(seed)
    image = Image.new("RGB", (24 + seed % 5, 16 + seed % 3),
                      tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(4):
        image.putpixel((rng.randrange(image.width), rng.randrange(image.height)),
                       tuple(rng.randrange(256) for _ in range(3)))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    data = buffer.getvalue()
    return data[: len(data) // 2] if broken else data


@dataclass
class Corpus:
    """A dataset of ``kind`` below ``root`` that the tests mutate between runs."""

    kind: str
    root: Path
    items: dict[str, Item] = field(default_factory=dict)
    _next: int = 0
    _written: dict[str, Item] = field(default_factory=dict)

    @classmethod
    def make(cls, kind: str, root: Path, size: int, seed: int = 0) -> Corpus:
        corpus = cls(kind, root)
        rng = random.Random(seed)
        for _ in range(size):
            corpus.add(rng)
        corpus.write()
        return corpus

    # --- mutations -------------------------------------------------------------------------

    def add(self, rng: random.Random) -> str:
        name = f"img{self._next:04d}"
        self._next += 1
        x, y = rng.uniform(0, 0.5), rng.uniform(0, 0.5)
        self.items[name] = Item(rng.randrange(10**6), rng.randrange(len(CLASSES)),
                                (x, y, x + 0.3, y + 0.4))
        return name

    def _pick(self, rng: random.Random, broken: bool | None = None) -> str | None:
        names = sorted(n for n, i in self.items.items() if broken is None or i.broken == broken)
        return rng.choice(names) if names else None

    def mutate(self, what: str, rng: random.Random) -> str | None:
        """Apply one mutation; returns the name of the image it touched (None: none fit)."""
        if what == "add":
            return self.add(rng)
        name = self._pick(rng, {"break": False, "mend": True}.get(what))
        if name is None:
            return None
        item = self.items[name]
        if what == "delete":
            del self.items[name]
        elif what == "relabel":
            self.items[name] = replace(item, label=(item.label + 1) % len(CLASSES),
                                       box=(item.box[0] + 0.05, *item.box[1:]))
        elif what == "repaint":
            self.items[name] = replace(item, seed=item.seed + 1)
        elif what == "touch":
            self.items[name] = replace(item, touched=item.touched + 1)
        elif what == "break":
            self.items[name] = replace(item, broken=True)
        elif what == "mend":
            self.items[name] = replace(item, broken=False, seed=item.seed + 7)
        return name

    # --- files -----------------------------------------------------------------------------

    def image_path(self, name: str, item: Item | None = None) -> Path:
        item = item or self.items[name]
        if self.kind == "imagefolder":
            return self.root / CLASSES[item.label] / f"{name}.jpg"
        if self.kind == "yolo":
            return self.root / "images" / "train" / f"{name}.jpg"
        return self.root / "images" / f"{name}.jpg"

    def write(self) -> None:
        """Bring the files up to date, rewriting only what changed."""
        for name, old in list(self._written.items()):
            new = self.items.get(name)
            if new is None or self.image_path(name, old) != self.image_path(name, new):
                self.image_path(name, old).unlink()
                self._label_path(name).unlink(missing_ok=True)
        for name, item in sorted(self.items.items()):
            old = self._written.get(name)
            path = self.image_path(name, item)
            if old is None or not path.exists() or (old.seed, old.broken) != (item.seed, item.broken):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_jpeg(item.seed, item.broken))
            if old is not None and old.touched != item.touched:
                stat = path.stat()
                os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
            if self.kind == "yolo" and (old is None or (old.label, old.box) != (item.label, item.box)):
                self._write_yolo_label(name, item)
        self._written = dict(self.items)
        {"coco": self._write_coco, "manifest": self._write_manifest,
         "yolo": self._write_yolo_yaml}.get(self.kind, lambda: None)()

    def _label_path(self, name: str) -> Path:
        return self.root / "labels" / "train" / f"{name}.txt"

    def _write_yolo_label(self, name: str, item: Item) -> None:
        x0, y0, x1, y1 = item.box
        path = self._label_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{item.label} {(x0 + x1) / 2:.4f} {(y0 + y1) / 2:.4f} "
                        f"{x1 - x0:.4f} {y1 - y0:.4f}\n")

    def _write_yolo_yaml(self) -> None:
        path = self.root / "data.yaml"
        if not path.exists():
            path.write_text(f"names: [{', '.join(CLASSES)}]\ntrain: images/train\n")

    def _write_manifest(self) -> None:
        rows = "".join(f"images/{name}.jpg,{item.label}\n" for name, item in sorted(self.items.items()))
        (self.root / "data.csv").write_text("image,label\n" + rows)

    def _write_coco(self) -> None:
        images, annotations = [], []
        for name, item in sorted(self.items.items()):
            number = int(name[3:]) + 1
            width, height = 24 + item.seed % 5, 16 + item.seed % 3
            images.append({"id": number, "file_name": f"{name}.jpg", "width": width,
                           "height": height})
            x0, y0, x1, y1 = item.box
            annotations.append({"id": number, "image_id": number, "category_id": item.label + 1,
                                "bbox": [x0 * width, y0 * height, (x1 - x0) * width,
                                         (y1 - y0) * height],
                                "area": 1.0, "iscrowd": 0})
        categories = [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)]
        (self.root / "instances.json").write_text(json.dumps(
            {"images": images, "annotations": annotations, "categories": categories}))

    def argv(self, output: Path, *extra: str) -> list[str]:
        inputs = {
            "imagefolder": ["--root", str(self.root)],
            "manifest": ["--manifest", str(self.root / "data.csv")],
            "coco": ["--images", str(self.root / "images"),
                     "--annotations", str(self.root / "instances.json")],
            "yolo": ["--input", str(self.root)],
        }[self.kind]
        return ["convert", self.kind, *inputs, "--output", str(output), "--quiet",
                "--max-reject-fraction", "1", *extra, *IN_MEMORY]


def examples(folder: Path, split: str = "train") -> Counter[tuple[str, str]]:
    """``(image/source_id, sha256 of the serialized Example)`` of every record the folder's
    manifest lists for ``split``, counted (a multiset: an example twice counts twice)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    found: Counter[tuple[str, str]] = Counter()
    for shard in manifest["splits"][split]["shards"]:
        for record in open_records(str(folder / shard["file"])):
            found[(_source_id(record), hashlib.sha256(record).hexdigest())] += 1
    return found


def globbed_examples(folder: Path, split: str = "train") -> Counter[tuple[str, str]]:
    """The same, from every file ``<split>-*.tfrecord`` (a reader that globs)."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(folder.glob(f"{split}-*.tfrecord")):
        for record in open_records(str(path)):
            found[(_source_id(record), hashlib.sha256(record).hexdigest())] += 1
    return found


def _source_id(record: bytes) -> str:
    """``image/source_id``; a manifest's examples have none: their ``image/filename``."""
    example = decode_example(record)
    return example.get("image/source_id", example.get("image/filename"))[0].decode()


#: What a split's manifest entry says that an incremental run and a full rebuild of the
#: same inputs must agree on: not which files hold the examples, nor the fingerprint
#: (it covers the settings, which name --incremental).
SAME_IN_BOTH = ("examples", "bytes", "features", "rejects", "warnings", "counts",
                "input_files")


def split_facts(folder: Path, split: str = "train") -> dict:
    entry = json.loads((folder / "manifest.json").read_text())["splits"][split]
    return {key: entry.get(key) for key in SAME_IN_BOTH}


def rejects(folder: Path) -> list[str]:
    return (folder / "rejects.jsonl").read_text().splitlines()


def last_run(folder: Path, split: str = "train") -> dict:
    manifest = json.loads((folder / "manifest.json").read_text())
    return manifest["history"][-1]["splits"][split]


def sync(root: Path, uploaded: dict[str, str], put, delete) -> dict[str, str]:
    """Bring an object store's copy of ``root`` up to date as a sync tool would: ``put``
    (relative name, local path) every file that is new or whose bytes changed, ``delete``
    (relative name) every file gone; unchanged files keep their objects (and times).
    ``uploaded`` maps relative names to content digests of the last sync; returns the new
    map."""
    now = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        now[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        if uploaded.get(name) != now[name]:
            put(name, str(path))
    for name in sorted(set(uploaded) - set(now)):
        delete(name)
    return now


def store_argv(kind: str, store_root: str, output: str, *extra: str) -> list[str]:
    """``convert`` of a corpus synced below ``store_root`` (``s3://...``, ``gs://...``)."""
    inputs = {"coco": ["--images", f"{store_root}/images",
                       "--annotations", f"{store_root}/instances.json"],
              "imagefolder": ["--root", store_root]}[kind]
    return ["convert", kind, *inputs, "--output", output, "--quiet", "--max-reject-fraction",
            "1", *extra]


#: What an incremental run through an object store is tested on: an image gone, one
#: relabelled, one repainted, two new.
STORE_CHANGES = ("delete", "relabel", "repaint", "add", "add")


def incremental_through_store(corpus: Corpus, rng: random.Random, argv: list[str], put,
                              delete, download, full: Path) -> Path:
    """Sync ``corpus`` to an object store (:func:`sync` with ``put`` and ``delete``) and
    convert it with ``argv``, an incremental run into the store; change it
    (:data:`STORE_CHANGES`), sync and convert again. ``download()`` copies the output
    folder here and returns it. The second run must count the changes and keep shards,
    and the output, read through its manifest and through a glob, must hold what a full
    local rebuild into ``full`` holds. Returns the local copy of the output."""
    synced = sync(corpus.root, {}, put, delete)
    assert main(argv) == 0
    for what in STORE_CHANGES:
        corpus.mutate(what, rng)
    corpus.write()
    sync(corpus.root, synced, put, delete)
    assert main(argv) == 0
    local = download()
    run = last_run(local)
    assert (run["added"], run["removed"]) == (2, 1) and run["changed"] in (1, 2)
    assert run["shards_kept"] > 0
    assert main(corpus.argv(full, "--shard-size", "4KiB")) == 0
    assert examples(local) == examples(full)
    assert globbed_examples(local) == examples(full)  # no dead shard left in the bucket
    return local

