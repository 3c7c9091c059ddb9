"""Generated COCO datasets for the tests and benchmarks, beside the demo's sample
(`recordbeam.testing.samples`, whose folders, drawing and encoding they share).

`make_boxes_sample` writes images holding exactly the given numbers of boxes;
`make_coco_benchmark` writes a COCO-sized dataset cheaply: a few distinct photo-like JPEGs
hard-linked under many names, and an annotation file written piece by piece;
`make_coco_extras_sample` writes COCO's keypoints, captions and LVIS files over four images,
each with its broken cases.

Everything is deterministic from ``seed``: the same seed gives the same bytes (with the same
Pillow and zlib). Needs Pillow and numpy only, so the benchmarks' environments import it too
(they put this folder on ``sys.path``, as pytest does).
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
from PIL import Image

from recordbeam.testing.samples import (
    JPEG_QUALITY,
    SAMPLE_INFO,
    SampleDataset,
    draw_boxes,
    encode_image,
    prepare_dirs,
)

# COCO 2017 numbers its 80 categories from 1 to 90 with these gaps.
_COCO_MISSING_CATEGORY_IDS = frozenset({12, 26, 29, 30, 45, 66, 68, 69, 71, 83})
# One encoder for the streamed entries: json.dumps with any option builds a new one per call.
_JSON = json.JSONEncoder(allow_nan=False)


def make_boxes_sample(
    root: str | os.PathLike[str],
    boxes_per_image: Sequence[int],
    *,
    seed: int = 0,
    image_size: tuple[int, int] = (40, 32),
) -> SampleDataset:
    """Writes a clean COCO dataset whose images hold exactly the given numbers of boxes.

    For the shapes readers give per-object features: ``[1, 1, 1]`` (one object per image,
    as in classification-like detection sets), ``[0, 0]`` (no objects at all), ``[0, 1, 3]``
    (mixed). Image ``i`` is ``image_i.png``, every box is valid and inside its image, and
    categories 1 and 2 alternate.

    Args:
      root: folder to write into; its ``images`` subfolder must be empty or absent.
      boxes_per_image: boxes of each image, in image order (at most 8 per image).
      seed: seeds the pixels.
      image_size: (width, height) of every image.

    Returns:
      ``expected["annotations_per_image"]``: {file_name: boxes}; ``expected["categories"]``.
    """
    width, height = image_size
    if any(not 0 <= n <= 8 for n in boxes_per_image):
        raise ValueError(f"boxes per image must be between 0 and 8, got {list(boxes_per_image)}")
    images_dir, annotations_path = prepare_dirs(root)
    rng = np.random.default_rng(seed)
    categories = [{"id": 1, "name": "cat", "supercategory": "animal"},
                  {"id": 2, "name": "dog", "supercategory": "animal"}]
    images, annotations, per_image = [], [], {}
    for index, count_here in enumerate(boxes_per_image):
        file_name = f"image_{index}.png"
        # Boxes side by side along the top rows: each 4 px wide, all inside the image.
        boxes = [[1.0 + 4 * k, 1.0 + k, 3.0, 5.0] for k in range(count_here)]
        category_ids = [1 + (k % 2) for k in range(count_here)]
        pixels = draw_boxes(rng, width, height, boxes, category_ids)
        with open(os.path.join(images_dir, file_name), "wb") as f:
            f.write(encode_image(pixels, "png", "RGB", None))
        images.append({"id": index + 1, "file_name": file_name, "width": width, "height": height})
        for box, category_id in zip(boxes, category_ids, strict=True):
            annotations.append({"id": len(annotations) + 1, "image_id": index + 1,
                                "category_id": category_id, "bbox": box,
                                "area": box[2] * box[3], "iscrowd": 0})
        per_image[file_name] = count_here
    document = {"info": {**SAMPLE_INFO, "seed": seed}, "licenses": [], "images": images,
                "annotations": annotations, "categories": categories}
    with open(annotations_path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1, allow_nan=False)
    expected = {"annotations_per_image": per_image,
                "categories": {c["id"]: c["name"] for c in categories}}
    return SampleDataset(images_dir, annotations_path, len(images), expected)


def make_coco_benchmark(
    root: str | os.PathLike[str],
    *,
    num_images: int = 20000,
    distinct: int = 64,
    seed: int = 0,
) -> SampleDataset:
    """Writes a COCO-sized dataset quickly: few distinct files, many names, streamed JSON.

    ``distinct`` 640x480 JPEGs of roughly 100-200 KB each (noise keeps them from compressing to
    nothing, like photos) are written; the other names are hard links to them (copies where the
    file system has no hard links). The annotation file lists ``num_images`` images with about 7
    boxes each over COCO's 80 category ids, and is written piece by piece so that a
    100,000-image file never sits in memory.

    Args:
      root: folder to write into; its ``images`` subfolder must be empty or absent.
      num_images: images listed and present on disk.
      distinct: how many of them are real files; the rest share their bytes.
      seed: seeds the pixels and boxes.
    """
    if num_images < 1 or distinct < 1:
        raise ValueError(f"num_images and distinct must be positive, got {num_images}, {distinct}")
    distinct = min(distinct, num_images)
    images_dir, annotations_path = prepare_dirs(root)
    rng = np.random.default_rng(seed)
    width, height = 640, 480
    names = [f"{image_id:012d}.jpg" for image_id in range(1, num_images + 1)]

    link_to: dict[int, str] = {}  # distinct file -> the name new names are linked to
    for index, name in enumerate(names):
        path = os.path.join(images_dir, name)
        if index < distinct:
            with open(path, "wb") as f:
                f.write(_photo_like_jpeg(rng, width, height))
            link_to[index] = path
        else:
            link_to[index % distinct] = _link_or_copy(link_to[index % distinct], path)

    category_ids = [k for k in range(1, 91) if k not in _COCO_MISSING_CATEGORY_IDS]
    categories = [
        {"id": k, "name": f"category_{k}", "supercategory": "object"} for k in category_ids
    ]
    with open(annotations_path, "w", encoding="utf-8") as f:
        num_annotations = _write_streaming_coco(
            f,
            images=(
                {"id": i, "file_name": name, "width": width, "height": height}
                for i, name in enumerate(names, start=1)
            ),
            annotations=_benchmark_annotations(rng, num_images, category_ids, width, height),
            categories=categories,
            info={**SAMPLE_INFO, "seed": seed},
        )
    return SampleDataset(
        images_dir=images_dir,
        annotations=annotations_path,
        num_images=num_images,
        expected={
            "good_images": sorted(names),
            "rejected_images": {},
            "rejected_annotations": {},
            "unlisted_files": [],
            "clipped_boxes": 0,
            "num_annotations": num_annotations,
            "distinct_files": distinct,
        },
    )


def _photo_like_jpeg(rng: np.random.Generator, width: int, height: int) -> bytes:
    """A 640x480-ish JPEG of about 100-200 KB: smooth gradients plus noise, as photos compress."""
    yy, xx = np.mgrid[0:height, 0:width]
    phase = rng.integers(0, 256, size=3)
    base = np.stack(
        [
            (xx * 255 // width + phase[0]) % 256,
            (yy * 255 // height + phase[1]) % 256,
            ((xx + yy) * 255 // (width + height) + phase[2]) % 256,
        ],
        axis=-1,
    )
    amplitude = int(rng.integers(22, 40))
    noise = rng.integers(-amplitude, amplitude + 1, size=(height, width, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def _link_or_copy(source: str, target: str) -> str:
    """Hard-links ``target`` to ``source``, or copies it where that fails (file systems
    without hard links: some FUSE and network mounts). Returns the file the next name of
    the same bytes should link to: ``target`` when ``source`` had reached its file
    system's link limit (65,000 on ext4), so a million names cost a few copies, not one
    per name."""
    try:
        os.link(source, target)
    except OSError as error:
        shutil.copyfile(source, target)
        return target if error.errno == errno.EMLINK else source
    return source


def _benchmark_annotations(
    rng: np.random.Generator,
    num_images: int,
    category_ids: list[int],
    width: int,
    height: int,
    block: int = 1024,
) -> Iterator[dict[str, Any]]:
    """About 7 boxes per image (Poisson), each inside its image; drawn ``block`` images at a time
    so numpy, not a Python loop per number, does the sampling."""
    ann_id = 1
    for first in range(1, num_images + 1, block):
        image_ids = np.arange(first, min(first + block, num_images + 1))
        counts = rng.poisson(7, size=len(image_ids))
        n = int(counts.sum())
        sizes = rng.uniform(8, 200, size=(n, 2))
        corners = rng.uniform(0, 1, size=(n, 2)) * (np.array([width, height]) - sizes)
        x, y = np.round(corners, 2).T
        w, h = np.round(sizes, 2).T
        columns = (
            np.repeat(image_ids, counts),
            rng.choice(category_ids, size=n),
            x,
            y,
            w,
            h,
            np.round(x + w, 2),
            np.round(y + h, 2),
            np.round(w * h, 2),
        )
        for image_id, category_id, x0, y0, bw, bh, x1, y1, area in zip(
            *(c.tolist() for c in columns), strict=True
        ):
            yield {
                "id": ann_id,
                "image_id": image_id,
                "category_id": category_id,
                "bbox": [x0, y0, bw, bh],
                "area": area,
                "iscrowd": 0,
                "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]],
            }
            ann_id += 1


def _write_streaming_coco(
    f: TextIO,
    *,
    images: Iterator[dict[str, Any]],
    annotations: Iterator[dict[str, Any]],
    categories: list[dict[str, Any]],
    info: dict[str, Any],
) -> int:
    """Writes a COCO instances document one entry at a time; returns how many annotations."""
    f.write('{"info": ' + json.dumps(info) + ', "licenses": [],\n"images": [\n')
    _write_array_items(f, images)
    f.write('],\n"annotations": [\n')
    num_annotations = _write_array_items(f, annotations)
    f.write('],\n"categories": ' + json.dumps(categories) + "}\n")
    return num_annotations


def _write_array_items(f: TextIO, items: Iterator[dict[str, Any]]) -> int:
    written = 0
    for item in items:
        if written:
            f.write(",\n")
        f.write(_JSON.encode(item))
        written += 1
    f.write("\n")
    return written




@dataclass(frozen=True)
class CocoExtrasSample:
    """COCO's other annotation files over one small image folder (:func:`make_coco_extras_sample`).

    Attributes:
      images_dir: the folder holding the images.
      keypoints: a person keypoints file (``person_keypoints_*.json`` shape).
      captions: a captions file (``captions_*.json`` shape).
      lvis: an LVIS file (images named by ``coco_url`` only, no ``iscrowd``).
    """

    images_dir: str
    keypoints: str
    captions: str
    lvis: str


#: Keypoint names and 1-based skeleton of the sample's person category.
EXTRAS_KEYPOINT_NAMES = ("nose", "left_eye", "right_eye")
EXTRAS_SKELETON = ((1, 2), (1, 3))


def make_coco_extras_sample(root: str | os.PathLike[str]) -> CocoExtrasSample:
    """Writes four 64x48 PNGs (``a.png``..``d.png``, ids 1-4) under ``root/images`` and,
    in ``root/annotations``, a person keypoints file, a captions file and an LVIS file
    about them, each with its broken cases:

    - keypoints: category 1 ``person`` (keypoints :data:`EXTRAS_KEYPOINT_NAMES`) and 3
      ``dog`` (none). Annotation 10 (image 1) has a point not labeled, 11 is a dog, 12
      (image 2) has all three visible, 13 has 5 values (not triples), 14 has two points
      for three names, 15 has a value that is not a number, 16 (image 4) has no
      ``keypoints``, 17 (image 2) has DensePose keys beside valid keypoints.
    - captions: two captions of image 1 (ids 101, 100), one of image 2, one of image 99
      (unknown), one without a ``caption``.
    - LVIS: no ``file_name`` (the ``coco_url``'s last part), no ``iscrowd``, categories with
      ``frequency`` and ``synset``; image 1 lists negative category 3 and not-exhaustive 1,
      image 2 a negative category 42 that does not exist.
    """
    images_dir, _ = prepare_dirs(root)
    annotations_dir = os.path.join(os.fspath(root), "annotations")
    names = ["a.png", "b.png", "c.png", "d.png"]
    images = []
    for image_id, name in enumerate(names, start=1):
        pixels = np.full((48, 64, 3), image_id * 40, np.uint8)
        Image.fromarray(pixels).save(os.path.join(images_dir, name))
        images.append({"id": image_id, "file_name": name, "width": 64, "height": 48})
    person = {"id": 1, "name": "person", "supercategory": "person",
              "keypoints": list(EXTRAS_KEYPOINT_NAMES),
              "skeleton": [list(pair) for pair in EXTRAS_SKELETON]}
    dog = {"id": 3, "name": "dog", "supercategory": "animal"}

    def annotation(ann_id: int, image_id: int, category_id: int, **more: Any) -> dict:
        return {"id": ann_id, "image_id": image_id, "category_id": category_id,
                "bbox": [8.0, 6.0, 20.0, 30.0], "area": 600.0, "iscrowd": 0, **more}

    keypoint_annotations = [
        annotation(10, 1, 1, keypoints=[10, 12, 2, 0, 0, 0, 20, 15, 1], num_keypoints=2),
        annotation(11, 1, 3),
        annotation(12, 2, 1, keypoints=[5, 6, 2, 7, 8, 2, 9, 10, 2], num_keypoints=3),
        annotation(13, 2, 1, keypoints=[1, 2, 2, 3, 4], num_keypoints=2),
        annotation(14, 3, 1, keypoints=[1, 2, 2, 3, 4, 2], num_keypoints=2),
        annotation(15, 3, 1, keypoints=[1, "x", 2, 3, 4, 2, 5, 6, 2], num_keypoints=3),
        annotation(16, 4, 1),
        annotation(17, 2, 1, keypoints=[30, 20, 2, 31, 21, 1, 0, 0, 0], num_keypoints=2,
                   dp_I=[1.0], dp_U=[0.5], dp_V=[0.5], dp_x=[1.0], dp_y=[1.0]),
    ]
    captions = [
        {"id": 101, "image_id": 1, "caption": "A person walks a dog."},
        {"id": 100, "image_id": 1, "caption": "Two friends outside."},
        {"id": 102, "image_id": 2, "caption": "Someone stands still."},
        {"id": 103, "image_id": 99, "caption": "An image nobody listed."},
        {"id": 104, "image_id": 2},
    ]
    lvis_images = [
        {"id": image["id"], "width": 64, "height": 48,
         "coco_url": f"http://images.cocodataset.org/val2017/{image['file_name']}",
         "neg_category_ids": [], "not_exhaustive_category_ids": []}
        for image in images
    ]
    lvis_images[0].update(neg_category_ids=[3], not_exhaustive_category_ids=[1])
    lvis_images[1].update(neg_category_ids=[42])
    lvis_annotations = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [8.0, 6.0, 20.0, 30.0],
         "area": 600.0, "segmentation": [[8, 6, 28, 6, 28, 36]]},
        {"id": 2, "image_id": 3, "category_id": 3, "bbox": [1.0, 2.0, 10.0, 12.0],
         "area": 120.0, "segmentation": [[1, 2, 11, 2, 11, 14]]},
    ]
    lvis_categories = [
        {"id": 1, "name": "person", "synset": "person.n.01", "frequency": "f",
         "image_count": 1, "instance_count": 1},
        {"id": 3, "name": "dog", "synset": "dog.n.01", "frequency": "c",
         "image_count": 1, "instance_count": 1},
    ]
    files = {
        "person_keypoints.json": {"images": images, "annotations": keypoint_annotations,
                                  "categories": [person, dog]},
        "captions.json": {"images": images, "annotations": captions},
        "lvis.json": {"images": lvis_images, "annotations": lvis_annotations,
                      "categories": lvis_categories},
    }
    for name, document in files.items():
        with open(os.path.join(annotations_dir, name), "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1)
    return CocoExtrasSample(images_dir, *(os.path.join(annotations_dir, name) for name in files))
