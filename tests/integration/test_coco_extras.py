"""COCO with masks, --apply-exif and --max-side. Masks are checked against masks drawn
independently here; rotated boxes against the pixels of the rotated image."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from recordbeam import pipeline
from recordbeam.images.transcode import ImageFixes
from recordbeam.sources.coco.reader import CocoOptions
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord
from recordbeam.testing.samples import make_coco_sample
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {
    "image/object/mask": "bytes",
    "image/object/bbox/xmin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/ymax": "float",
    "image/object/is_crowd": "int64",
}


def _convert(output, coco, fixes=None, reject=0.5):
    out = os.fspath(output)
    shards = ShardOptions(num_shards=1, max_reject_fraction=reject)
    pipeline.run(
        lambda p: coco_to_tfrecord(p, out, coco, shards, ImageChecks(), fixes),
        out,
        beam_args=IN_MEMORY,
        show_progress=False,
    )
    path = os.path.join(out, "train-00000-of-00001.tfrecord")
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return [decode_example(r, KINDS) for r in open_records(path)], manifest


def _runs(mask):
    flat, runs, current, length = mask.T.ravel(), [], 0, 0
    for v in flat:
        if v == current:
            length += 1
        else:
            runs.append(length)
            current, length = v, 1
    return runs + [length]


def _rle_string(runs):
    out = []
    for i, value in enumerate(runs):
        x = value - runs[i - 2] if i > 2 else value
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = not ((c & 0x10 == 0 and x == 0) or (c & 0x10 and x == -1))
            out.append(chr((c | 0x20 if more else c) + 48))
    return "".join(out)


def _block(h, w, y0, y1, x0, x1):
    m = np.zeros((h, w), np.uint8)
    m[y0:y1, x0:x1] = 1
    return m


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    """A 40x30 image with a polygon, an uncompressed RLE, a compressed crowd RLE and one
    broken segmentation; returns (dataset folder, {annotation id: expected mask})."""
    root = tmp_path_factory.mktemp("masks")
    os.makedirs(root / "images")
    Image.new("RGB", (40, 30), (9, 9, 9)).save(root / "images" / "a.png")
    rle_mask, crowd_mask = _block(30, 40, 2, 9, 20, 31), _block(30, 40, 15, 29, 1, 12)
    anns = [
        {
            "id": 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": [4, 5, 10, 8],
            "iscrowd": 0,
            "segmentation": [[4, 5, 14, 5, 14, 13, 4, 13]],
        },
        {
            "id": 2,
            "image_id": 1,
            "category_id": 1,
            "bbox": [20, 2, 11, 7],
            "iscrowd": 0,
            "segmentation": {"size": [30, 40], "counts": _runs(rle_mask)},
        },
        {
            "id": 3,
            "image_id": 1,
            "category_id": 1,
            "bbox": [1, 15, 11, 14],
            "iscrowd": 1,
            "segmentation": {"size": [30, 40], "counts": _rle_string(_runs(crowd_mask))},
        },
        {
            "id": 4,
            "image_id": 1,
            "category_id": 1,
            "bbox": [1, 1, 3, 3],
            "iscrowd": 0,
            "segmentation": {"size": [10, 10], "counts": [100]},
        },
    ]
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": 40, "height": 30}],
        "annotations": anns,
        "categories": [{"id": 1, "name": "thing"}],
    }
    (root / "ann.json").write_text(json.dumps(doc))
    polygon = np.zeros((30, 40), np.uint8)
    polygon[5:13, 4:14] = 1  # the pixels whose centres are inside, as pycocotools draws it
    return root, {1: polygon, 2: rle_mask, 3: crowd_mask}


def test_masks_are_0_1_pngs_aligned_with_objects(masked, tmp_path):
    root, expected = masked
    coco = CocoOptions(str(root / "images"), str(root / "ann.json"), include_masks=True)
    (example,), manifest = _convert(tmp_path / "out", coco)
    masks = [np.asarray(Image.open(io.BytesIO(m))) for m in example["image/object/mask"]]
    assert len(masks) == len(example["image/object/bbox/xmin"]) == 3
    for mask, ann_id in zip(masks, (1, 2, 3), strict=True):
        assert mask.shape == (30, 40) and set(np.unique(mask)) <= {0, 1}
        assert np.array_equal(mask, expected[ann_id])
    assert example["image/object/is_crowd"].tolist() == [0, 0, 1]
    reasons = manifest["splits"]["train"]["rejects"]["by_reason"]
    assert reasons == {"annotation:mask_size_mismatch": 1}
    assert manifest["splits"]["train"]["counts"]["masks_written"] == 3


def test_masks_follow_max_side(masked, tmp_path):
    root, expected = masked
    coco = CocoOptions(str(root / "images"), str(root / "ann.json"), include_masks=True)
    (example,), _ = _convert(tmp_path / "out", coco, ImageFixes(max_side=20))
    assert (example["image/width"][0], example["image/height"][0]) == (20, 15)
    mask = np.asarray(Image.open(io.BytesIO(example["image/object/mask"][1])))
    assert mask.shape == (15, 20)
    # nearest neighbour samples pixel centres: output pixel i reads source pixel 2i + 1
    assert np.array_equal(mask, expected[2][1::2, 1::2])


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("coco-x"), num_images=8, seed=3)


def test_apply_exif_moves_boxes_with_the_pixels(sample, tmp_path):
    name = next(n for n, i in sample.expected["images"].items() if i["exif_orientation"] == 6)
    coco = CocoOptions(sample.images_dir, sample.annotations)
    plain = {e["image/filename"][0].decode(): e for e in _convert(tmp_path / "a", coco)[0]}
    fixed = {
        e["image/filename"][0].decode(): e
        for e in _convert(tmp_path / "b", coco, ImageFixes(apply_exif=True))[0]
    }
    before, after = plain[name], fixed[name]
    assert (after["image/width"][0], after["image/height"][0]) == (
        before["image/height"][0],
        before["image/width"][0],
    )
    pixels = np.asarray(Image.open(io.BytesIO(after["image/encoded"][0])).convert("RGB")).astype(
        int
    )
    h, w = pixels.shape[:2]
    stored = np.asarray(Image.open(io.BytesIO(before["image/encoded"][0])).convert("RGB")).astype(
        int
    )
    for i in range(len(after["image/object/bbox/xmin"])):
        # the box centre in the rotated image shows what the stored image shows there
        cx = (after["image/object/bbox/xmin"][i] + after["image/object/bbox/xmax"][i]) / 2
        cy = (after["image/object/bbox/ymin"][i] + after["image/object/bbox/ymax"][i]) / 2
        sx = (before["image/object/bbox/xmin"][i] + before["image/object/bbox/xmax"][i]) / 2
        sy = (before["image/object/bbox/ymin"][i] + before["image/object/bbox/ymax"][i]) / 2
        rotated_colour = pixels[int(cy * h), int(cx * w)]
        stored_colour = stored[int(sy * stored.shape[0]), int(sx * stored.shape[1])]
        assert np.abs(rotated_colour - stored_colour).max() < 40
    others = [n for n in plain if n != name]
    for n in others:  # images without EXIF rotation keep their boxes
        assert (
            fixed[n]["image/object/bbox/xmin"].tolist()
            == plain[n]["image/object/bbox/xmin"].tolist()
        )


def test_max_side_keeps_normalized_boxes(sample, tmp_path):
    coco = CocoOptions(sample.images_dir, sample.annotations)
    plain = {e["image/filename"][0].decode(): e for e in _convert(tmp_path / "a", coco)[0]}
    small, manifest = _convert(tmp_path / "b", coco, ImageFixes(max_side=32))
    for e in small:
        before = plain[e["image/filename"][0].decode()]
        assert max(e["image/width"][0], e["image/height"][0]) <= 32
        assert e["image/object/bbox/ymax"].tolist() == before["image/object/bbox/ymax"].tolist()
    assert manifest["splits"]["train"]["counts"]["fix_resized"] == len(small)
