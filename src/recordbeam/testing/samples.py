"""Small generated datasets, good and deliberately broken, for the demo and the docs' examples.

`make_coco_sample` writes a few dozen tiny images and an ``instances.json`` that exercises every
case a converter must handle (odd formats, broken files, bad annotations) and records, in
`SampleDataset.expected`, what a correct converter produces from it: `recordbeam demo` converts
it. `make_image_folder_sample` and `make_manifest_sample` write class folders and a manifest
over the odd image kinds real datasets hold (`odd_image`), for the docs' examples of those
formats. `prepare_dirs`, `draw_boxes` and `encode_image` are the pieces a COCO generator
builds on.

Everything is deterministic from ``seed``: the same seed gives the same bytes (with the same Pillow
and zlib). Needs Pillow and numpy only.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from dataclasses import dataclass
from itertools import count, islice
from typing import Any

import numpy as np
from PIL import Image

ANNOTATION_REASONS = ("unknown_image", "unknown_category", "invalid_bbox", "empty_bbox")
"""Reason codes `expected["rejected_annotations"]` uses: an image_id or category_id not in the
file, a box with a negative size, and a box with zero width or height."""

MIN_SAMPLE_IMAGES = 8
"""`make_coco_sample` needs this many good images to place each special case on its own image."""

_CATEGORY_NAMES = (
    ("person", "person"),
    ("bicycle", "vehicle"),
    ("car", "vehicle"),
    ("dog", "animal"),
    ("cat", "animal"),
    ("bottle", "kitchen"),
    ("chair", "furniture"),
    ("kite", "sports"),
)
SAMPLE_INFO = {
    "description": "recordbeam generated sample",
    "version": "1.0",
    "year": 2024,
    "contributor": "recordbeam.testing.samples",
    "date_created": "2024-01-01",  # fixed, so the same seed writes the same bytes
}
"""The ``info`` of a generated COCO file (with its ``seed`` added)."""
JPEG_QUALITY = 90
"""The quality every generated JPEG is saved at."""
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class SampleDataset:
    """A generated dataset on disk and what a correct converter must make of it.

    Attributes:
      images_dir: the folder holding the image files.
      annotations: path of the COCO ``instances.json``.
      num_images: entries in the JSON "images" list (good and bad alike).
      expected: plain dicts and lists:
        "good_images": sorted file names a converter writes out;
        "rejected_images": {file_name: reason from `recordbeam.images.checks.REASONS`};
        "rejected_annotations": {annotation id: reason from `ANNOTATION_REASONS`};
        "unlisted_files": file names on disk that the JSON does not list;
        "clipped_boxes": how many kept boxes reach outside their image and must be clipped;
        "clipped": {annotation id: [x, y, w, h] after clipping to the image};
        "size_mismatch": {file_name: {"json": [w, h], "header": [w, h]}}: trust the header;
        "images": {file_name: {"format", "width", "height", "mode", "exif_orientation"}}
          for good images, as their headers say;
        "annotations_per_image": {file_name: kept annotations} for good images;
        "num_annotations": kept annotations in all;
        "categories": {category id: name}.
    """

    images_dir: str
    annotations: str
    num_images: int
    expected: dict[str, Any]


def make_coco_sample(
    root: str | os.PathLike[str],
    *,
    num_images: int = 24,
    seed: int = 0,
    include_bad: bool = True,
    image_size: tuple[int, int] = (64, 48),
    num_categories: int = 5,
) -> SampleDataset:
    """Writes a small COCO instances dataset under ``root`` and says what a converter should make.

    Writes ``root/images/*`` and ``root/annotations/instances.json``. The good images are JPEGs
    and PNGs in RGB, grayscale, RGBA and palette modes, one JPEG with EXIF orientation 6, and
    every fifth image has no annotations. Category ids have gaps, like COCO's (1, 2, 3, 5, 7...).

    With ``include_bad``, also: a truncated JPEG, an empty file, a text file, a GIF and a JPEG
    with a broken header (all named ``.jpg``), a PNG whose header claims 20000x20000 pixels, an
    image listed but missing, a file on disk not listed, a PNG named ``.jpg`` (good: the format
    comes from the bytes), annotations with an unknown image_id, an unknown category_id, a
    negative width and a zero width, a box reaching outside its image, and an image whose JSON
    width/height disagree with its header.

    A NaN in a bbox would be the natural "bad number", but ijson (both its C and Python
    backends) refuses NaN, which would make the whole file unreadable; the negative width stands
    in for it.

    Args:
      root: folder to write into; its ``images`` subfolder must be empty or absent.
      num_images: good images listed in the JSON (at least `MIN_SAMPLE_IMAGES`).
      seed: seeds every random choice; the same seed writes the same bytes.
      include_bad: add the broken cases listed above.
      image_size: (width, height) of every good image.
      num_categories: how many categories the JSON declares.
    """
    if num_images < MIN_SAMPLE_IMAGES:
        raise ValueError(f"num_images must be at least {MIN_SAMPLE_IMAGES}, got {num_images}")
    if num_categories < 1:
        raise ValueError(f"num_categories must be at least 1, got {num_categories}")
    width, height = image_size
    if width < 32 or height < 32:
        raise ValueError(f"image_size must be at least 32x32 to hold the boxes, got {image_size}")
    images_dir, annotations_path = prepare_dirs(root)
    rng = np.random.default_rng(seed)
    categories = _sample_categories(num_categories)
    category_ids = [c["id"] for c in categories]
    builder = _SampleBuilder(images_dir, rng, category_ids, width, height)

    for index in range(num_images):
        builder.add_good_image(index, include_bad)
    if include_bad:
        builder.add_bad_images()
        builder.add_bad_annotations()

    document = {
        "info": {**SAMPLE_INFO, "seed": seed},
        "licenses": [],
        "images": builder.images,
        "annotations": builder.annotations,
        "categories": categories,
    }
    with open(annotations_path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1, allow_nan=False)
    builder.expected["categories"] = {c["id"]: c["name"] for c in categories}
    return SampleDataset(
        images_dir=images_dir,
        annotations=annotations_path,
        num_images=len(builder.images),
        expected=builder.finish(),
    )


class _SampleBuilder:
    """Collects the images, annotations and expectations of one `make_coco_sample` call."""

    def __init__(
        self,
        images_dir: str,
        rng: np.random.Generator,
        category_ids: list[int],
        width: int,
        height: int,
    ) -> None:
        self.images_dir = images_dir
        self.rng = rng
        self.category_ids = category_ids
        self.width = width
        self.height = height
        self.images: list[dict[str, Any]] = []
        self.annotations: list[dict[str, Any]] = []
        self.expected: dict[str, Any] = {
            "good_images": [],
            "rejected_images": {},
            "rejected_annotations": {},
            "unlisted_files": [],
            "clipped_boxes": 0,
            "clipped": {},
            "size_mismatch": {},
            "images": {},
            "annotations_per_image": {},
        }
        self._image_ids = count(start=9, step=13)  # COCO image ids are not 0..n-1 either
        self._annotation_ids = count(start=1)
        self._good: list[dict[str, Any]] = []  # JSON entries of good images, by index

    # Positions of the special good images; chosen so none has index % 5 == 4 (no annotations).
    _EXIF_INDEX, _PNG_AS_JPG_INDEX, _SIZE_MISMATCH_INDEX, _CLIPPED_INDEX = 0, 1, 2, 3
    _UNKNOWN_CATEGORY_INDEX, _NEGATIVE_WIDTH_INDEX, _ZERO_WIDTH_INDEX = 5, 6, 7
    # Cycled through for the plain good images: (format, Pillow mode).
    _KINDS = (
        ("jpeg", "RGB"),
        ("png", "RGB"),
        ("jpeg", "L"),
        ("jpeg", "RGB"),
        ("png", "L"),
        ("png", "RGBA"),
        ("jpeg", "RGB"),
        ("png", "P"),
    )

    def add_good_image(self, index: int, include_bad: bool) -> None:
        fmt, mode = self._KINDS[index % len(self._KINDS)]
        orientation = None
        if index == self._EXIF_INDEX:
            fmt, mode, orientation = "jpeg", "RGB", 6
        png_as_jpg = include_bad and index == self._PNG_AS_JPG_INDEX
        if png_as_jpg:
            fmt, mode = "png", "RGB"
        image_id = next(self._image_ids)
        extension = ".jpg" if fmt == "jpeg" or png_as_jpg else ".png"
        file_name = f"{image_id:012d}{extension}"

        # Boxes on the EXIF image stay inside both its stored and its rotated shape.
        side = min(self.width, self.height)
        box_w, box_h = (side, side) if orientation else (self.width, self.height)
        num_boxes = 0 if index % 5 == 4 else int(self.rng.integers(1, 5))
        boxes = [self._random_box(box_w, box_h) for _ in range(num_boxes)]
        cats = [int(self.rng.choice(self.category_ids)) for _ in boxes]
        pixels = draw_boxes(self.rng, self.width, self.height, boxes, cats)
        self._write(file_name, encode_image(pixels, fmt, mode, orientation))

        entry = {"id": image_id, "file_name": file_name, "width": self.width, "height": self.height}
        if include_bad and index == self._SIZE_MISMATCH_INDEX:
            entry["width"], entry["height"] = self.width + 16, self.height + 16
            self.expected["size_mismatch"][file_name] = {
                "json": [entry["width"], entry["height"]],
                "header": [self.width, self.height],
            }
        self.images.append(entry)
        self._good.append(entry)
        for box, category_id in zip(boxes, cats, strict=True):
            self._annotate(image_id, category_id, box)
        self.expected["good_images"].append(file_name)
        self.expected["annotations_per_image"][file_name] = num_boxes
        self.expected["images"][file_name] = {
            "format": fmt,
            "width": self.width,
            "height": self.height,
            "mode": mode,
            "exif_orientation": orientation,
        }

    def add_bad_images(self) -> None:
        w, h = self.width, self.height
        plain = encode_image(draw_boxes(self.rng, w, h, [], []), "jpeg", "RGB", None)
        gif = io.BytesIO()
        Image.new("P", (w, h), color=3).save(gif, "GIF")
        listed = {
            "bad_truncated.jpg": ("truncated", plain[: len(plain) // 2]),
            "bad_empty.jpg": ("empty", b""),
            "bad_text.jpg": ("not_an_image", b"this is a note, not a picture\n" * 4),
            "bad_gif.jpg": ("unsupported_format", gif.getvalue()),
            "bad_corrupt.jpg": ("corrupt", _jpeg_with_zero_width(plain)),
            "bad_huge.png": ("too_large", _png_header_only(20000, 20000)),
            "bad_missing.jpg": ("missing", None),
        }
        for file_name, (reason, data) in listed.items():
            if data is not None:
                self._write(file_name, data)
            image_id = next(self._image_ids)
            self.images.append({"id": image_id, "file_name": file_name, "width": w, "height": h})
            self.expected["rejected_images"][file_name] = reason
        self._write("unlisted.jpg", plain)
        self.expected["unlisted_files"].append("unlisted.jpg")

    def add_bad_annotations(self) -> None:
        first_category = self.category_ids[0]
        # The first gap in the ids, so the unknown id looks like a real one.
        unknown_category = next(k for k in count(1) if k not in self.category_ids)
        cases = (
            (
                self._UNKNOWN_CATEGORY_INDEX,
                unknown_category,
                [4.0, 4.0, 10.0, 10.0],
                "unknown_category",
            ),
            (self._NEGATIVE_WIDTH_INDEX, first_category, [20.0, 6.0, -5.0, 10.0], "invalid_bbox"),
            (self._ZERO_WIDTH_INDEX, first_category, [8.0, 8.0, 0.0, 12.0], "empty_bbox"),
        )
        for index, category_id, box, reason in cases:
            ann_id = self._annotate(self._good[index]["id"], category_id, box)
            self.expected["rejected_annotations"][ann_id] = reason

        missing_image_id = max(image["id"] for image in self.images) + 1000
        ann_id = self._annotate(missing_image_id, first_category, [1.0, 1.0, 5.0, 5.0])
        self.expected["rejected_annotations"][ann_id] = "unknown_image"

        # A box starting inside the image and running 15 px past its right edge.
        clipped_image = self._good[self._CLIPPED_INDEX]
        w = float(self.width)
        x, y, bw, bh = w - 10.0, 5.0, 25.0, 12.0
        ann_id = self._annotate(clipped_image["id"], self.category_ids[-1], [x, y, bw, bh])
        self.expected["clipped"][ann_id] = [x, y, w - x, bh]
        self.expected["clipped_boxes"] += 1
        self.expected["annotations_per_image"][clipped_image["file_name"]] += 1

    def finish(self) -> dict[str, Any]:
        self.expected["good_images"].sort()
        self.expected["num_annotations"] = sum(self.expected["annotations_per_image"].values())
        return self.expected

    def _annotate(self, image_id: int, category_id: int, box: list[float]) -> int:
        ann_id = next(self._annotation_ids)
        x, y, w, h = box
        self.annotations.append(
            {
                "id": ann_id,
                "image_id": image_id,
                "category_id": category_id,
                "bbox": [x, y, w, h],
                "area": round(max(w, 0.0) * max(h, 0.0), 2),
                "iscrowd": 0,
                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
            }
        )
        return ann_id

    def _random_box(self, max_w: int, max_h: int) -> list[float]:
        bw = round(float(self.rng.uniform(4, max_w / 2)), 2)
        bh = round(float(self.rng.uniform(4, max_h / 2)), 2)
        x = round(float(self.rng.uniform(0, max_w - bw - 1)), 2)
        y = round(float(self.rng.uniform(0, max_h - bh - 1)), 2)
        return [x, y, bw, bh]

    def _write(self, file_name: str, data: bytes) -> None:
        with open(os.path.join(self.images_dir, file_name), "wb") as f:
            f.write(data)


def prepare_dirs(root: str | os.PathLike[str]) -> tuple[str, str]:
    """Creates ``root/images`` and ``root/annotations``; refuses an images folder with files."""
    images_dir = os.path.join(os.fspath(root), "images")
    annotations_dir = os.path.join(os.fspath(root), "annotations")
    os.makedirs(images_dir, exist_ok=True)
    os.makedirs(annotations_dir, exist_ok=True)
    if os.listdir(images_dir):
        raise FileExistsError(
            f"{images_dir} already holds files; a sample must be written into an empty folder "
            "so that its expectations (such as unlisted files) hold. Remove it or pick another root."
        )
    return images_dir, os.path.join(annotations_dir, "instances.json")


def _sample_categories(num_categories: int) -> list[dict[str, Any]]:
    """Categories with gaps in their ids, as in COCO: 1, 2, 3, 5, 7, 9, 10, 11, 13..."""
    ids = (k for k in count(1) if k % 4 and k % 6)
    categories = []
    for position, category_id in enumerate(islice(ids, num_categories)):
        name, supercategory = _CATEGORY_NAMES[position % len(_CATEGORY_NAMES)]
        if position >= len(_CATEGORY_NAMES):
            name = f"{name}_{position // len(_CATEGORY_NAMES)}"
        categories.append({"id": category_id, "name": name, "supercategory": supercategory})
    return categories


def draw_boxes(
    rng: np.random.Generator,
    width: int,
    height: int,
    boxes: list[list[float]],
    category_ids: list[int],
) -> np.ndarray:
    """An RGB picture: a noisy background with a solid rectangle per box, coloured by category."""
    background = rng.integers(0, 256, size=3)
    noise = rng.integers(-20, 21, size=(height, width, 3))
    pixels = np.clip(background + noise, 0, 255).astype(np.uint8)
    for (x, y, w, h), category_id in zip(boxes, category_ids, strict=True):
        colour = [(category_id * 53) % 256, (category_id * 97) % 256, (category_id * 151) % 256]
        pixels[int(y) : int(y + h), int(x) : int(x + w)] = colour
    return pixels


def encode_image(pixels: np.ndarray, fmt: str, mode: str, orientation: int | None) -> bytes:
    """RGB ``pixels`` as a ``fmt`` ("jpeg" or "png") file in Pillow ``mode``; a JPEG carries
    the EXIF ``orientation`` when one is given."""
    image = Image.fromarray(pixels, "RGB")
    if mode == "P":
        image = image.quantize(colors=16, method=Image.Quantize.FASTOCTREE)
    elif mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    if fmt == "jpeg":
        options: dict[str, Any] = {"quality": JPEG_QUALITY}
        if orientation is not None:
            exif = Image.Exif()
            exif[_EXIF_ORIENTATION] = orientation
            options["exif"] = exif
        image.save(out, "JPEG", **options)
    else:
        image.save(out, "PNG")
    return out.getvalue()


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload)
    return len(payload).to_bytes(4, "big") + kind + payload + crc.to_bytes(4, "big")


def _png_header_only(width: int, height: int) -> bytes:
    """A well-formed PNG whose header claims width x height but holds almost no pixel data.

    Tests a size limit without allocating the pixels: only decoding would notice the data is short.
    """
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])  # 8-bit L
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _png_chunk(b"IEND", b"")
    )


def _jpeg_with_zero_width(jpeg: bytes) -> bytes:
    """The same JPEG with its frame header (SOF0) saying the image is 0 pixels wide."""
    sof = jpeg.find(b"\xff\xc0")
    if sof < 0:
        raise ValueError("expected a baseline JPEG with an SOF0 marker")
    # SOF0: marker(2) length(2) precision(1) height(2) width(2)
    width_at = sof + 7
    return jpeg[:width_at] + b"\x00\x00" + jpeg[width_at + 2 :]


# --- class folders and CSV/JSONL manifests ----------------------------------------------

ODD_IMAGE_KINDS = (
    "rgb_jpeg",
    "gray_jpeg",
    "cmyk_jpeg",
    "exif6_jpeg",
    "rgb_png",
    "gray_png",
    "palette_png",
    "rgba_png",
    "png16",
)
"""Kinds `odd_image` writes: the image variants real datasets (ImageNet...) hold."""


def odd_image(kind: str, width: int = 40, height: int = 30, seed: int = 0) -> bytes:
    """One small image of ``kind`` (see `ODD_IMAGE_KINDS`): a gradient with a bright block in
    the top-left quarter, so orientation and colour survive checks after re-encoding."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    pixels = np.stack([xx * 255 // max(width - 1, 1), yy * 255 // max(height - 1, 1),
                       np.full_like(xx, int(rng.integers(0, 256)))], axis=-1).astype(np.uint8)
    pixels[: height // 4, : width // 4] = (250, 20, 20)
    rgb = Image.fromarray(pixels, "RGB")
    out = io.BytesIO()
    if kind == "rgb_jpeg":
        rgb.save(out, "JPEG", quality=JPEG_QUALITY)
    elif kind == "gray_jpeg":
        rgb.convert("L").save(out, "JPEG", quality=JPEG_QUALITY)
    elif kind == "cmyk_jpeg":
        rgb.convert("CMYK").save(out, "JPEG", quality=JPEG_QUALITY)
    elif kind == "exif6_jpeg":
        exif = Image.Exif()
        exif[_EXIF_ORIENTATION] = 6
        rgb.save(out, "JPEG", quality=JPEG_QUALITY, exif=exif)
    elif kind == "rgb_png":
        rgb.save(out, "PNG")
    elif kind == "gray_png":
        rgb.convert("L").save(out, "PNG")
    elif kind == "palette_png":
        rgb.quantize(colors=16, method=Image.Quantize.FASTOCTREE).save(out, "PNG")
    elif kind == "rgba_png":
        rgba = rgb.convert("RGBA")
        rgba.putalpha(Image.fromarray((xx * 255 // max(width - 1, 1)).astype(np.uint8), "L"))
        rgba.save(out, "PNG")
    elif kind == "png16":
        gray = np.asarray(rgb.convert("L"), dtype=np.uint16) * 257
        Image.fromarray(gray).save(out, "PNG")  # uint16: mode I;16 (Pillow 13 refuses naming it)
    else:
        raise ValueError(f"unknown kind {kind!r}; expected one of {ODD_IMAGE_KINDS}")
    return out.getvalue()


@dataclass(frozen=True)
class FolderSample:
    """Generated class folders and what a converter must make of them.

    Attributes:
      root: the folder to convert.
      classes: class names, sorted.
      expected: "good": {relative path: class}; "rejected": {relative path: reason};
        "hidden": count of hidden files; "non_image": count of note files (``.txt``...)
        to be skipped; "kinds": {relative path: `odd_image` kind};
        "splits": {relative path: split} for the split-folders layout.
    """

    root: str
    classes: tuple[str, ...]
    expected: dict[str, Any]


def make_image_folder_sample(
    root: str | os.PathLike[str], *, split_folders: bool = False, include_bad: bool = True,
    per_class: int = 4, seed: int = 0,
) -> FolderSample:
    """Writes ImageNet-style class folders: ``root/<synset>/<name>.JPEG`` (or under
    ``root/train`` and ``root/val`` with ``split_folders``).

    Each class cycles through `ODD_IMAGE_KINDS`, all named ``.JPEG`` as in ImageNet (so the
    PNGs are "PNGs behind a .JPEG name"). With ``include_bad``: a truncated JPEG, a text
    file named ``.JPEG`` and a ``notes.txt`` in the first class, a stray ``.JPEG`` and a
    ``README.txt`` in the root, and a hidden ``.DS_Store``.
    """
    base = os.fspath(root)
    classes = ("n01440764", "n02102040", "n02979186")
    expected: dict[str, Any] = {"good": {}, "rejected": {}, "hidden": 0, "non_image": 0,
                                "kinds": {}, "splits": {}}
    counter = count()
    for split in ("train", "val") if split_folders else ("",):
        for class_name in classes:
            folder = os.path.join(base, split, class_name)
            os.makedirs(folder, exist_ok=True)
            for i in range(per_class if split != "val" else 2):
                number = next(counter)
                kind = ODD_IMAGE_KINDS[number % len(ODD_IMAGE_KINDS)]
                name = f"{class_name}_{number:05d}.JPEG"
                relative = "/".join(p for p in (split, class_name, name) if p)
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(odd_image(kind, 40 + i, 30, seed + number))
                expected["good"][relative] = class_name
                expected["kinds"][relative] = kind
                expected["splits"][relative] = split or "train"
    if include_bad:
        first = os.path.join(base, "train" if split_folders else "", classes[0])
        prefix = "train/" if split_folders else ""
        whole = odd_image("rgb_jpeg", 40, 30, seed)
        bad = {"truncated.JPEG": ("truncated", whole[: len(whole) // 2]),
               "notes.JPEG": ("not_an_image", b"not a picture\n")}
        for name, (reason, data) in bad.items():
            with open(os.path.join(first, name), "wb") as f:
                f.write(data)
            expected["rejected"][f"{prefix}{classes[0]}/{name}"] = reason
        with open(os.path.join(base, "stray.JPEG"), "wb") as f:
            f.write(whole)
        expected["rejected"]["stray.JPEG"] = "not_in_class_folder"
        for folder, name in ((first, "notes.txt"), (base, "README.txt")):
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write("notes beside the images, not an example\n")
            expected["non_image"] += 1
        with open(os.path.join(first, ".DS_Store"), "wb") as f:
            f.write(b"\0\0\0\1Bud1")
        expected["hidden"] = 1
    return FolderSample(base, classes, expected)


@dataclass(frozen=True)
class ManifestSample:
    """A generated manifest, its images, and what a converter must make of it.

    Attributes:
      manifest: path of the ``.csv`` or ``.jsonl`` file.
      rows: the good rows as written (image paths relative to the manifest).
      expected: "bad_lines": {line: reason}; "missing": [image paths named but absent].
    """

    manifest: str
    rows: list[dict[str, Any]]
    expected: dict[str, Any]


def make_manifest_sample(
    root: str | os.PathLike[str], *, fmt: str = "csv", num_rows: int = 12, include_bad: bool = True,
    frames_per_video: int = 3, seed: int = 0,
) -> ManifestSample:
    """Writes ``root/images/*`` and ``root/manifest.<fmt>`` (``csv`` or ``jsonl``).

    Columns: ``image`` (relative path), ``label`` (int), ``score`` (float), ``caption``
    (text), ``tags`` (list of text), ``box`` (list of floats), ``split`` (train/val),
    ``video`` (a group of ``frames_per_video`` rows) and ``frame`` (int). The images
    cycle through `ODD_IMAGE_KINDS`. With ``include_bad``: a row naming a missing image and
    a row that does not parse (a wrong field count in CSV, broken JSON in JSONL).
    """
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"fmt must be csv or jsonl, got {fmt!r}")
    base = os.fspath(root)
    images = os.path.join(base, "images")
    os.makedirs(images, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(num_rows):
        kind = ODD_IMAGE_KINDS[i % len(ODD_IMAGE_KINDS)]
        name = f"img_{i:04d}.{'png' if kind.endswith('png') or kind == 'png16' else 'jpg'}"
        with open(os.path.join(images, name), "wb") as f:
            f.write(odd_image(kind, 32, 24, seed + i))
        rows.append({
            "image": f"images/{name}",
            "label": int(rng.integers(0, 5)),
            "score": round(float(rng.uniform(0, 1)), 3) + 0.0005,
            "caption": f"picture {i}, with a comma",
            "tags": [f"t{i % 3}", "x"],
            "box": [0.1, 0.2, round(0.5 + i / 100, 3), 0.9],
            "split": "val" if i % 4 == 3 else "train",
            "video": f"v{i // frames_per_video}",
            "frame": i % frames_per_video,
        })
    lines: list[str] = []
    expected: dict[str, Any] = {"bad_lines": {}, "missing": []}
    columns = list(rows[0])
    for row in rows:
        lines.append(_manifest_line(row, columns, fmt))
    if include_bad:
        missing = dict(rows[0], image="images/not_there.jpg", video="v_missing", split="train")
        lines.insert(2, _manifest_line(missing, columns, fmt))
        expected["missing"].append("images/not_there.jpg")
        broken = "images/img_0000.jpg,1,0.5\n" if fmt == "csv" else '{"image": "images/img_0000.jpg",\n'
        lines.insert(4, broken)
    first = 2 if fmt == "csv" else 1
    for offset, line in enumerate(lines):
        if line.startswith(("images/img_0000.jpg,1,0.5", '{"image": "images/img_0000.jpg",\n')):
            expected["bad_lines"][first + offset] = "bad_row"
    path = os.path.join(base, f"manifest.{fmt}")
    with open(path, "w", encoding="utf-8", newline="") as f:
        if fmt == "csv":
            f.write(",".join(columns) + "\n")
        f.writelines(lines)
    return ManifestSample(path, rows, expected)


def _manifest_line(row: dict[str, Any], columns: list[str], fmt: str) -> str:
    if fmt == "jsonl":
        return json.dumps(row) + "\n"
    import csv

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(
        [json.dumps(row[c]) if isinstance(row[c], list) else row[c] for c in columns])
    return out.getvalue()
