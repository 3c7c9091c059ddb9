"""COCO boxes to the normalized corners detection decoders read.

COCO stores ``[x, y, width, height]`` in pixels from the top-left corner. Decoders
(Model Garden, the Object Detection API) read ``xmin, xmax, ymin, ymax`` in [0, 1].
"""

from __future__ import annotations

from math import isfinite
from typing import NamedTuple


class InvalidBox(ValueError):
    """The box cannot be used. ``reason`` is a reject code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class NormalizedBox(NamedTuple):
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    clipped: bool


def normalize_box(bbox: object, width: int, height: int) -> NormalizedBox:
    """Clip a COCO ``[x, y, w, h]`` box to the image and normalize it.

    A box partly outside the image is clipped (``clipped`` is True). A malformed box, a
    non-finite or negative size, or one with no area left after clipping raises
    :class:`InvalidBox`. Every corner ends in [0, 1] without clamping: after clipping
    ``0 <= x0 < x1 <= width``, and a correctly rounded division of such values by
    ``width`` cannot leave [0, 1] (``x1 == width`` gives exactly 1.0).
    """
    if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
        raise InvalidBox("invalid_bbox", f"bbox must be 4 numbers [x, y, w, h], got {bbox!r}")
    # Written out long-hand: this runs for every object of every image.
    try:
        x, y, w, h = float(bbox[0]), float(bbox[1]), float(bbox[2]), float(bbox[3])
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond doubles
        raise InvalidBox("invalid_bbox", f"bbox must be 4 numbers [x, y, w, h], got {bbox!r}") from None
    if not (isfinite(x) and isfinite(y) and isfinite(w) and isfinite(h)):
        raise InvalidBox("invalid_bbox", f"bbox {bbox!r} has a NaN or infinite value")
    if w < 0 or h < 0:
        raise InvalidBox("invalid_bbox", f"bbox {bbox!r} has a negative width or height")
    right, bottom = x + w, y + h
    x0 = x if x > 0.0 else 0.0
    y0 = y if y > 0.0 else 0.0
    x1 = right if right < width else float(width)
    y1 = bottom if bottom < height else float(height)
    if x1 <= x0 or y1 <= y0:
        raise InvalidBox(
            "empty_bbox", f"bbox {bbox!r} has no area inside the {width}x{height} image"
        )
    clipped = x0 != x or y0 != y or x1 != right or y1 != bottom
    return NormalizedBox(x0 / width, y0 / height, x1 / width, y1 / height, clipped)
