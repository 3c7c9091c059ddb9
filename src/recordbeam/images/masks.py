"""COCO segmentations to instance masks: one PNG per object, pixel values 0 and 1.

Model Garden's detection decoder reads ``image/object/mask`` as PNGs and does not
binarize them, so the pixels must be 0/1 (not 0/255). Segmentations come as

* polygons: ``[[x1, y1, x2, y2, ...], ...]`` in pixel coordinates, rasterized here by
  pycocotools' rules (a pixel is inside when its centre is; see :func:`polygons_to_mask`);
* uncompressed RLE: ``{"size": [h, w], "counts": [n0, n1, ...]}``, runs of 0s and 1s
  alternating, starting with 0s, over the pixels in column-major order;
* compressed RLE: the same runs as COCO's ASCII string encoding (5 bits per character,
  a continuation bit, a sign bit, runs after the second stored as differences);
* a box RLE (CVAT's ``<mask>``): ``{"size": [h, w], "box": [left, top, bw, bh], "runs":
  [...]}``, runs of 0s and 1s row by row inside the box;
* a union of parts of one image: ``{"size": [h, w], "union": [part, ...]}``, each part
  polygons or a box RLE.

Every kind with a ``size`` is checked against the image before a pixel is allocated, so a
mask declared larger than its image costs nothing; a polygon's outline is traced in
batches and refused past :data:`MAX_OUTLINE_STEPS`.

Crowd annotations (``iscrowd: 1``) are RLEs and are written as they are. Pure numpy and
Pillow: no pycocotools at runtime (it is the reference in the interop tests), no Beam.
"""

from __future__ import annotations

import io
from typing import Any, NamedTuple

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

#: The most vertices an object's polygons may hold together. Annotation tools write some
#: hundreds (SAM's outlines some thousands); each vertex costs about 100 bytes on its way
#: through a pipeline, so a million of them from one line of a file would cost 100 MB.
MAX_POLYGON_VERTICES = 100_000


def too_many_vertices(vertices: int) -> str | None:
    """What to say of an object whose polygons hold ``vertices`` vertices, or None when
    that is within :data:`MAX_POLYGON_VERTICES`."""
    if vertices <= MAX_POLYGON_VERTICES:
        return None
    return (f"its polygons hold {vertices:,} vertices, more than the {MAX_POLYGON_VERTICES:,} "
            "an outline may have")


def polygons_to_mask(polygons: list, width: int, height: int) -> np.ndarray:
    """A ``(height, width)`` uint8 array, 1 inside any of the polygons.

    Pixel for pixel what pycocotools gives (``frPyObjects`` then ``merge``), which the
    Object Detection API's and Model Garden's converters use: a pixel is inside when its
    centre is, so a 16x12 rectangle covers 192 pixels, its COCO ``area``. Degenerate
    polygons (fewer than 3 points, an odd number of values) are skipped.
    """
    too_many = too_many_vertices(sum(len(p) // 2 for p in polygons if isinstance(p, (list, tuple))))
    if too_many:
        raise InvalidMask("invalid_mask", too_many)
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


#: The longest outline traced, in fine steps (a fifth of a pixel) per polygon: 64 times
#: the image's width plus height, plus 100,000 pixels. A real outline, however ragged,
#: stays well within; a polygon of a million vertices zigzagging across the image would
#: take minutes and gigabytes.
def max_outline_steps(width: int, height: int) -> int:
    return _POLYGON_UPSAMPLING * (64 * (width + height) + 100_000)


#: Fine steps traced at once: the trace's arrays stay some tens of MB whatever the outline.
_TRACE_BATCH = 1 << 20


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
    edges = _Edges(start_x, start_y, steps, slope, along_x, swap)

    ends = np.cumsum(steps + 1)
    if ends[-1] > max_outline_steps(width, height):
        raise InvalidMask(
            "invalid_mask",
            f"a polygon's outline ({len(points)} vertices) is {ends[-1] // scale} pixels long, "
            f"more than {max_outline_steps(width, height) // scale} in a {width}x{height} image",
        )
    # Consecutive edges meet at a vertex, where the trace does not move: edges can be
    # traced in batches without losing a crossing.
    parts = []
    first = 0
    while first < len(points):
        last = max(first + 1, int(np.searchsorted(ends, ends[first] + _TRACE_BATCH, "right")))
        parts.append(_edge_crossings(edges, first, min(last, len(points)), width, height))
        first = last
    # Sorted, the crossings pair up into the runs inside: [1st, 2nd), [3rd, 4th)... (equal
    # ones make empty runs). An unpaired last crossing runs to the end, as in pycocotools.
    crossings = np.sort(np.concatenate(parts))
    if len(crossings) % 2:
        crossings = np.append(crossings, width * height)
    for start, end in crossings.reshape(-1, 2).tolist():
        mask[start:end] = True


class _Edges(NamedTuple):
    """A polygon's edges in fine coordinates, each traced from ``start`` along its longer
    axis for ``steps`` steps."""

    start_x: np.ndarray
    start_y: np.ndarray
    steps: np.ndarray
    slope: np.ndarray
    along_x: np.ndarray
    swap: np.ndarray


def _edge_crossings(edges: _Edges, first: int, last: int, width: int,
                    height: int) -> np.ndarray:
    """Where edges ``first`` to ``last - 1`` cross a pixel column's centre line, as flat
    column-major pixel indices (see :func:`_fill_column_major`)."""
    scale = _POLYGON_UPSAMPLING
    steps = edges.steps[first:last]
    edge = np.repeat(np.arange(first, last), steps + 1)
    start = np.cumsum(steps + 1) - (steps + 1)
    step = np.arange(len(edge)) - start[edge - first]
    t = np.where(edges.swap[edge], edges.steps[edge] - step, step)
    major_x = edges.along_x[edge]
    start_x, start_y, slope = edges.start_x[edge], edges.start_y[edge], edges.slope[edge]
    trace_x = np.where(major_x, start_x + t, np.trunc(start_x + slope * t + 0.5).astype(np.int64))
    trace_y = np.where(major_x, np.trunc(start_y + slope * t + 0.5).astype(np.int64),
                       start_y + t)

    moved = np.flatnonzero(trace_x[1:] != trace_x[:-1]) + 1
    before, after = moved - 1, moved
    column_fine = np.where(trace_x[after] < trace_x[before], trace_x[after], trace_x[after] - 1)
    column = (column_fine + 0.5) / scale - 0.5
    keep = (np.floor(column) == column) & (column >= 0) & (column <= width - 1)
    row = (np.minimum(trace_y[after], trace_y[before])[keep] + 0.5) / scale - 0.5
    row = np.ceil(np.clip(row, 0, height))
    return column[keep].astype(np.int64) * height + row.astype(np.int64)


def decode_rle_string(counts: str) -> list[int]:
    """COCO's compressed RLE string to its run lengths."""
    runs: list[int] = []
    position = 0
    try:
        data = counts.encode("ascii") if isinstance(counts, str) else bytes(counts)
    except UnicodeEncodeError as error:
        raise InvalidMask("invalid_mask", f"the compressed RLE string holds "
                          f"{counts[error.start]!r}, which is not RLE (ASCII 48 to 111)") from None
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


def _declared_size(segmentation: dict) -> tuple[int, int]:
    """``(height, width)`` of a mask's ``size``; raises ``invalid_mask`` when it is none."""
    size = segmentation.get("size")
    if (
        not isinstance(size, (list, tuple))
        or len(size) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                   for v in size)
        or not all(np.isfinite(v) for v in size)
    ):
        raise InvalidMask("invalid_mask", f"the mask has no valid size [height, width] "
                          f"({str(size)[:60]})")
    return int(size[0]), int(size[1])


def _runs(rle: dict) -> list[int]:
    counts = rle.get("counts")
    if isinstance(counts, str):
        return decode_rle_string(counts)
    if isinstance(counts, (list, tuple)) and all(isinstance(v, (int, float)) for v in counts):
        try:
            return [int(v) for v in counts]
        except (ValueError, OverflowError):  # NaN, infinity
            raise InvalidMask("invalid_mask", "RLE counts hold a number that is not "
                              "finite") from None
    raise InvalidMask("invalid_mask", "RLE counts must be a string or a list of numbers")


def _expand_runs(runs: list[int], pixels: int, what: str, run_name: str) -> np.ndarray:
    """Runs of 0s and 1s (0s first) as a flat 0/1 array of ``pixels`` values; ``run_name``
    names run ``{i}`` in a message."""
    negative = next((i for i, r in enumerate(runs) if r < 0), None)
    if negative is not None:
        # Checked first: a negative run makes the sum below say nothing true.
        raise InvalidMask("invalid_mask", f"{run_name.format(i=negative)} is "
                          f"{runs[negative]}, a negative run length (a run counts pixels); "
                          "fix or re-export the mask")
    if sum(runs) != pixels:
        raise InvalidMask("invalid_mask", f"the RLE runs cover {sum(runs)} pixels but {what}")
    values = np.zeros(len(runs), dtype=np.uint8)
    values[1::2] = 1  # runs alternate 0s and 1s, starting with 0s
    return np.repeat(values, runs)


def rle_to_mask(rle: dict) -> np.ndarray:
    """A ``(height, width)`` uint8 array from a compressed or uncompressed COCO RLE."""
    height, width = _declared_size(rle)
    run_name = ("run {i} of the RLE counts decoded from the compressed string"
                if isinstance(rle.get("counts"), str) else "RLE counts[{i}]")
    flat = _expand_runs(_runs(rle), height * width,
                        f"its size says {height}x{width} = {height * width}", run_name)
    return flat.reshape((width, height)).T.copy()  # column-major, as COCO stores it


def box_rle_to_mask(rle: dict) -> np.ndarray:
    """A ``(height, width)`` uint8 array from a box RLE (runs row by row inside ``box``)."""
    height, width = _declared_size(rle)
    box, runs = rle.get("box"), rle.get("runs")
    if (not isinstance(box, (list, tuple)) or len(box) != 4
            or not all(type(v) is int for v in box) or not isinstance(runs, (list, tuple))):
        raise InvalidMask("invalid_mask", "a box RLE needs a box [left, top, width, height] "
                          "and runs")
    left, top, box_width, box_height = box
    if left < 0 or top < 0 or left + box_width > width or top + box_height > height:
        raise InvalidMask("invalid_mask", f"the mask box ({left}, {top}) {box_width}x"
                          f"{box_height} lies outside the {width}x{height} image")
    flat = _expand_runs(list(runs), box_width * box_height,
                        f"its box is {box_width}x{box_height} = {box_width * box_height}",
                        "box RLE runs[{i}]")
    mask = np.zeros((height, width), dtype=np.uint8)
    mask[top:top + box_height, left:left + box_width] = flat.reshape(box_height, box_width)
    return mask


def segmentation_to_mask(segmentation: Any, width: int, height: int) -> np.ndarray:
    """The 0/1 mask of a segmentation in an image of ``width`` x ``height`` (any kind in
    this module's docstring). A mask that declares its size is checked against the
    image's before any pixel is allocated.

    Raises:
        InvalidMask: reason ``invalid_mask`` (unreadable, or a polygon beyond
            :func:`max_outline_steps`) or ``mask_size_mismatch`` (a mask of another size
            than the image).
    """
    if isinstance(segmentation, (list, tuple)):
        return polygons_to_mask(list(segmentation), width, height)
    if isinstance(segmentation, dict):
        declared_height, declared_width = _declared_size(segmentation)
        if (declared_height, declared_width) != (height, width):
            kind = "RLE" if "counts" in segmentation else "mask"
            raise InvalidMask(
                "mask_size_mismatch",
                f"the {kind} is {declared_width}x{declared_height} but the image is "
                f"{width}x{height}",
            )
        if "union" in segmentation:
            mask = np.zeros((height, width), dtype=np.uint8)
            for part in segmentation["union"]:
                mask |= segmentation_to_mask(part, width, height)
            return mask
        if "box" in segmentation:
            return box_rle_to_mask(segmentation)
        return rle_to_mask(segmentation)
    raise InvalidMask("invalid_mask", "the annotation has no segmentation (polygons or RLE), "
                      "which --include-masks needs for every object")


def _runs_of(flat: np.ndarray) -> list[int]:
    """The runs of a flat 0/1 array, starting with 0s."""
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate(([0], changes, [flat.size]))
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0] == 1:
        counts = [0, *counts]
    return counts


def patch_to_box_rle(patch: np.ndarray, left: int, top: int, width: int,
                     height: int) -> dict[str, Any]:
    """A box RLE of the 0/1 ``patch`` with its top-left pixel at ``(left, top)`` in a
    ``width`` x ``height`` image, the parts outside cut off; the image's pixels are made
    only when it is drawn."""
    x_start, x_stop = max(left, 0), min(left + patch.shape[1], width)
    y_start, y_stop = max(top, 0), min(top + patch.shape[0], height)
    if x_start >= x_stop or y_start >= y_stop:
        return {"size": [height, width], "box": [0, 0, 0, 0], "runs": []}
    cut = patch[y_start - top:y_stop - top, x_start - left:x_stop - left]
    return {"size": [height, width],
            "box": [x_start, y_start, x_stop - x_start, y_stop - y_start],
            "runs": _runs_of(np.ascontiguousarray(cut).reshape(-1))}


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
    except Image.UnidentifiedImageError:  # its text names the stream's address: no repeat
        raise InvalidMask("invalid_mask", "the mask is not a readable PNG (no image format "
                          "Pillow knows)") from None
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
