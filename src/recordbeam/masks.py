"""COCO segmentations to instance masks: one PNG per object, pixel values 0 and 1.

Model Garden's detection decoder reads ``image/object/mask`` as PNGs and does not
binarize them, so the pixels must be 0/1 (not 0/255). Segmentations come as

* polygons: ``[[x1, y1, x2, y2, ...], ...]`` in pixel coordinates, rasterized here with
  Pillow (filled, outline included);
* uncompressed RLE: ``{"size": [h, w], "counts": [n0, n1, ...]}``, runs of 0s and 1s
  alternating, starting with 0s, over the pixels in column-major order;
* compressed RLE: the same runs as COCO's ASCII string encoding (5 bits per character,
  a continuation bit, a sign bit, runs after the second stored as differences).

Crowd annotations (``iscrowd: 1``) are RLEs and are written as they are. Pure numpy and
Pillow: no pycocotools, no Beam.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from recordbeam.transcode import orient_image


class InvalidMask(ValueError):
    """A segmentation that cannot be turned into a mask; ``reason`` is a short code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def polygons_to_mask(polygons: list, width: int, height: int) -> np.ndarray:
    """A ``(height, width)`` uint8 array, 1 inside any of the polygons."""
    image = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(image)
    drawn = 0
    for polygon in polygons:
        if not isinstance(polygon, (list, tuple)) or len(polygon) < 6 or len(polygon) % 2:
            continue  # COCO has a few degenerate polygons (fewer than 3 points); skip them
        try:
            points = [(float(polygon[i]), float(polygon[i + 1])) for i in range(0, len(polygon), 2)]
        except (TypeError, ValueError):
            continue
        draw.polygon(points, fill=1, outline=1)
        drawn += 1
    if not drawn:
        raise InvalidMask("invalid_mask", "the segmentation has no polygon with 3 or more points")
    return np.asarray(image, dtype=np.uint8)


def decode_rle_string(counts: str) -> list[int]:
    """COCO's compressed RLE string to its run lengths."""
    runs: list[int] = []
    position = 0
    data = counts.encode("ascii") if isinstance(counts, str) else bytes(counts)
    while position < len(data):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(data):
                raise InvalidMask("invalid_mask", "the compressed RLE string ends mid-number")
            c = data[position] - 48
            if not 0 <= c < 64:
                raise InvalidMask("invalid_mask", f"character {chr(data[position])!r} is not RLE")
            value |= (c & 0x1F) << (5 * shift)
            more = bool(c & 0x20)
            position += 1
            shift += 1
            if not more and c & 0x10:
                value |= -1 << (5 * shift)  # sign-extend
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def rle_to_mask(rle: dict) -> np.ndarray:
    """A ``(height, width)`` uint8 array from a compressed or uncompressed COCO RLE."""
    size, counts = rle.get("size"), rle.get("counts")
    if (
        not isinstance(size, (list, tuple))
        or len(size) != 2
        or not all(isinstance(v, (int, float)) and v > 0 for v in size)
    ):
        raise InvalidMask("invalid_mask", f"the RLE has no valid size [height, width] ({size!r})")
    height, width = int(size[0]), int(size[1])
    if isinstance(counts, str):
        runs = decode_rle_string(counts)
    elif isinstance(counts, (list, tuple)) and all(isinstance(v, (int, float)) for v in counts):
        runs = [int(v) for v in counts]
    else:
        raise InvalidMask("invalid_mask", "RLE counts must be a string or a list of numbers")
    if any(r < 0 for r in runs) or sum(runs) != height * width:
        raise InvalidMask(
            "invalid_mask",
            f"the RLE runs cover {sum(runs)} pixels but its size says {height}x{width} = "
            f"{height * width}",
        )
    values = np.zeros(len(runs), dtype=np.uint8)
    values[1::2] = 1  # runs alternate 0s and 1s, starting with 0s
    flat = np.repeat(values, runs)
    return flat.reshape((width, height)).T.copy()  # column-major, as COCO stores it


def segmentation_to_mask(segmentation: Any, width: int, height: int) -> np.ndarray:
    """The 0/1 mask of a COCO segmentation in an image of ``width`` x ``height``.

    Raises:
        InvalidMask: reason ``invalid_mask`` (unreadable) or ``mask_size_mismatch`` (an RLE
            of another size than the image).
    """
    if isinstance(segmentation, (list, tuple)):
        return polygons_to_mask(list(segmentation), width, height)
    if isinstance(segmentation, dict):
        mask = rle_to_mask(segmentation)
        if mask.shape != (height, width):
            raise InvalidMask(
                "mask_size_mismatch",
                f"the RLE is {mask.shape[1]}x{mask.shape[0]} but the image is {width}x{height}",
            )
        return mask
    raise InvalidMask("invalid_mask", "the annotation has no segmentation (polygons or RLE)")


def mask_png(mask: np.ndarray, orientation: int = 1, size: tuple[int, int] | None = None) -> bytes:
    """An 8-bit grayscale PNG of a 0/1 mask, moved like the image by ``orientation``
    (EXIF, see :func:`recordbeam.transcode.orient_image`) and resized (nearest neighbour)
    to ``size`` = (width, height) when given."""
    image = orient_image(Image.fromarray(mask.astype(np.uint8), "L"), orientation)
    if size is not None and image.size != tuple(size):
        image = image.resize(tuple(size), Image.Resampling.NEAREST)
    out = io.BytesIO()
    image.save(out, "PNG", optimize=False)
    return out.getvalue()
