"""COCO segmentations to instance masks: one PNG per object, pixel values 0 and 1.

Model Garden's detection decoder reads ``image/object/mask`` as PNGs and does not
binarize them, so the pixels must be 0/1 (not 0/255). Segmentations come as

* polygons: ``[[x1, y1, x2, y2, ...], ...]`` in pixel coordinates, rasterized here by
  pycocotools' rules (a pixel is inside when its centre is; see :func:`polygons_to_mask`);
* uncompressed RLE: ``{"size": [h, w], "counts": [n0, n1, ...]}``, runs of 0s and 1s
  alternating, starting with 0s, over the pixels in column-major order;
* compressed RLE: the same runs as COCO's ASCII string encoding (5 bits per character,
  a continuation bit, a sign bit, runs after the second stored as differences).

Crowd annotations (``iscrowd: 1``) are RLEs and are written as they are. Pure numpy and
Pillow: no pycocotools at runtime (it is the reference in the interop tests), no Beam.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from recordbeam.images.transcode import orient_image


class InvalidMask(ValueError):
    """A segmentation that cannot be turned into a mask; ``reason`` is a short code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


#: Polygon vertices are snapped to a grid this many times finer than the pixels before
#: their outline is traced, as pycocotools does.
_POLYGON_UPSAMPLING = 5


def polygons_to_mask(polygons: list, width: int, height: int) -> np.ndarray:
    """A ``(height, width)`` uint8 array, 1 inside any of the polygons.

    Pixel for pixel what pycocotools gives (``frPyObjects`` then ``merge``), which the
    Object Detection API's and Model Garden's converters use: a pixel is inside when its
    centre is, so a 16x12 rectangle covers 192 pixels, its COCO ``area``. Degenerate
    polygons (fewer than 3 points, an odd number of values) are skipped.
    """
    mask = np.zeros(height * width, dtype=bool)
    drawn = 0
    for polygon in polygons:
        if not isinstance(polygon, (list, tuple)) or len(polygon) < 6 or len(polygon) % 2:
            continue  # COCO has a few degenerate polygons (fewer than 3 points); skip them
        points = _polygon_points(polygon, width, height)
        if points is None:
            continue
        _fill_column_major(mask, points, width, height)
        drawn += 1
    if not drawn:
        raise InvalidMask("invalid_mask", "the segmentation has no polygon with 3 or more points")
    return mask.reshape(width, height).T.astype(np.uint8)


def _polygon_points(polygon: list | tuple, width: int, height: int) -> np.ndarray | None:
    """The polygon's vertices as an ``(n, 2)`` float array, or None when a value is not a
    number. Vertices far outside the image are refused: tracing them would cost memory in
    proportion to their distance."""
    try:
        points = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError, OverflowError):
        return None
    reach = 2 * max(width, height) + 1024
    if not np.isfinite(points).all() or (np.abs(points) > reach).any():
        raise InvalidMask(
            "invalid_mask",
            f"a polygon has a vertex far outside the {width}x{height} image (beyond {reach} "
            "pixels) or one that is not a finite number",
        )
    return points


def _fill_column_major(mask: np.ndarray, points: np.ndarray, width: int, height: int) -> None:
    """Set the pixels inside one polygon in ``mask``, flattened column by column (COCO's
    RLE order).

    The rules are pycocotools': the vertices are scaled by 5 and rounded half up (then
    truncated toward zero, as C's ``(int)`` does); each edge is traced one fine step at a
    time along its longer axis, rounding the other coordinate from the edge's end with the
    smaller coordinate on that axis; wherever the trace crosses the fine line through a pixel column's centre,
    that column's inside starts or ends at the first pixel whose centre lies below the
    crossing. Pixels are inside between an odd and the next even crossing of their column.
    """
    scale = _POLYGON_UPSAMPLING
    fine = np.trunc(scale * points + 0.5).astype(np.int64)
    x0, y0 = fine[:, 0], fine[:, 1]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)  # each vertex to the next; the last closes it
    dx, dy = np.abs(x1 - x0), np.abs(y1 - y0)
    along_x = dx >= dy
    # Each edge is traced from its left end (x-major) or its lower end (y-major), then
    # read back in the polygon's own direction; the rounding depends on that start.
    swap = np.where(along_x, x0 > x1, y0 > y1)
    start_x, start_y = np.where(swap, x1, x0), np.where(swap, y1, y0)
    end_x, end_y = np.where(swap, x0, x1), np.where(swap, y0, y1)
    steps = np.maximum(dx, dy)
    slope = np.where(along_x, end_y - start_y, end_x - start_x) / np.maximum(steps, 1)

    edge = np.repeat(np.arange(len(points)), steps + 1)
    first = np.cumsum(steps + 1) - (steps + 1)
    step = np.arange(len(edge)) - first[edge]
    t = np.where(swap[edge], steps[edge] - step, step)
    major_x = along_x[edge]
    trace_x = np.where(major_x, start_x[edge] + t,
                       np.trunc(start_x[edge] + slope[edge] * t + 0.5).astype(np.int64))
    trace_y = np.where(major_x, np.trunc(start_y[edge] + slope[edge] * t + 0.5).astype(np.int64),
                       start_y[edge] + t)

    moved = np.flatnonzero(trace_x[1:] != trace_x[:-1]) + 1
    before, after = moved - 1, moved
    column_fine = np.where(trace_x[after] < trace_x[before], trace_x[after], trace_x[after] - 1)
    column = (column_fine + 0.5) / scale - 0.5
    keep = (np.floor(column) == column) & (column >= 0) & (column <= width - 1)
    row = (np.minimum(trace_y[after], trace_y[before])[keep] + 0.5) / scale - 0.5
    row = np.ceil(np.clip(row, 0, height))
    toggles = column[keep].astype(np.int64) * height + row.astype(np.int64)
    # Sorted, the crossings pair up into the runs inside: [1st, 2nd), [3rd, 4th)... (equal
    # ones make empty runs). An unpaired last crossing runs to the end, as in pycocotools.
    crossings = np.sort(toggles)
    if len(crossings) % 2:
        crossings = np.append(crossings, width * height)
    for start, end in crossings.reshape(-1, 2).tolist():
        mask[start:end] = True


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
    raise InvalidMask("invalid_mask", "the annotation has no segmentation (polygons or RLE), "
                      "which --include-masks needs for every object")


def mask_to_coco_rle(mask: np.ndarray) -> dict[str, Any]:
    """A 0/1 mask as COCO's uncompressed RLE: column-major runs starting with 0s."""
    flat = mask.T.reshape(-1)
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate(([0], changes, [flat.size]))
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0] == 1:
        counts = [0, *counts]
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": counts}


def decode_mask_png(data: bytes, max_pixels: int) -> np.ndarray:
    """The 0/1 ``(height, width)`` mask a PNG holds (a pixel is set when it is not 0), as
    labelme stores a ``mask`` shape. Its header's size is checked against ``max_pixels``
    before any pixel is decoded.

    Raises:
        InvalidMask: reason ``invalid_mask`` (not a one-channel image, unreadable, or larger
            than ``max_pixels``).
    """
    unreadable = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)
    try:
        image = Image.open(io.BytesIO(data))
    except unreadable as error:
        raise InvalidMask("invalid_mask", f"the mask is not a readable PNG ({error})") from None
    width, height = image.size
    if width * height > max_pixels:
        raise InvalidMask("invalid_mask", (
            f"the mask PNG is {width}x{height}, more than the {max_pixels} pixels allowed"))
    if image.mode not in ("1", "L", "P", "I", "I;16"):
        raise InvalidMask("invalid_mask", (
            f"the mask PNG has {image.mode} pixels; a mask has one channel (0 outside)"))
    try:
        pixels = np.asarray(image)
    except unreadable as error:
        raise InvalidMask("invalid_mask", f"the mask PNG cannot be decoded ({error})") from None
    return (pixels != 0).astype(np.uint8)


def mask_png(mask: np.ndarray, orientation: int = 1, size: tuple[int, int] | None = None) -> bytes:
    """An 8-bit grayscale PNG of a 0/1 mask, moved like the image by ``orientation``
    (EXIF, see :func:`recordbeam.images.transcode.orient_image`) and resized (nearest neighbour)
    to ``size`` = (width, height) when given."""
    image = orient_image(Image.fromarray(mask.astype(np.uint8), "L"), orientation)
    if size is not None and image.size != tuple(size):
        image = image.resize(tuple(size), Image.Resampling.NEAREST)
    out = io.BytesIO()
    image.save(out, "PNG", optimize=False)
    return out.getvalue()
