"""Polygon masks, pixel for pixel against pycocotools, which the Object Detection API's and
Model Garden's COCO converters use to draw ``image/object/mask``. recordbeam draws them
without it; this suite holds the two together."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

coco_mask = pytest.importorskip("pycocotools.mask")

from recordbeam.images.masks import segmentation_to_mask  # noqa: E402

pytestmark = pytest.mark.interop


def reference(polygons: list[list[float]], width: int, height: int) -> np.ndarray:
    """What the converters do: one RLE per polygon, merged, decoded."""
    rles = coco_mask.frPyObjects(polygons, height, width)
    return coco_mask.decode(coco_mask.merge(rles))


SHAPES = {
    "rectangle 16x12": [[8, 4, 24, 4, 24, 16, 8, 16]],
    "3x3 square": [[1, 1, 4, 1, 4, 4, 1, 4]],
    "3x3 square at half pixels": [[1.5, 1.5, 4.5, 1.5, 4.5, 4.5, 1.5, 4.5]],
    "3x3 square clockwise from another corner": [[4, 4, 4, 1, 1, 1, 1, 4]],
    "3x3 triangle": [[0, 0, 3, 0, 0, 3]],
    "3x3 diamond": [[1.5, 0, 3, 1.5, 1.5, 3, 0, 1.5]],
    "thin sliver": [[2, 2, 30, 3, 2, 3.4]],
    "concave L": [[2, 2, 10, 2, 10, 5, 5, 5, 5, 14, 2, 14]],
    "star (self-intersecting)": [[16, 1, 20, 22, 4, 8, 28, 8, 12, 22]],
    "partly outside the image": [[-5, -3, 12, 2, 40, 30, 3, 20]],
    "two overlapping polygons": [[2, 2, 12, 2, 12, 12, 2, 12], [8, 8, 20, 8, 20, 20, 8, 20]],
    "sub-pixel": [[5.2, 5.2, 5.7, 5.3, 5.4, 5.8]],
    "steep edges": [[10.3, 0.2, 11.1, 23.7, 9.6, 12.4]],
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_polygon_mask_equals_pycocotools(name):
    polygons = SHAPES[name]
    expected = reference(polygons, 32, 24)
    assert expected.any() or name == "sub-pixel"
    assert np.array_equal(segmentation_to_mask(polygons, 32, 24), expected)


def test_rectangle_area_equals_coco_area():
    mask = segmentation_to_mask(SHAPES["rectangle 16x12"], 32, 24)
    assert int(mask.sum()) == 16 * 12 == int(coco_mask.area(
        coco_mask.merge(coco_mask.frPyObjects(SHAPES["rectangle 16x12"], 24, 32))))


coordinate = st.one_of(
    st.floats(-4, 44, allow_nan=False, width=32).map(float),
    st.integers(-2, 42).map(float),
    st.integers(-4, 88).map(lambda v: v / 2),  # half pixels: where rounding ties sit
)
polygon = st.lists(st.tuples(coordinate, coordinate), min_size=3, max_size=9).map(
    lambda points: [v for point in points for v in point])


@settings(max_examples=examples(400), deadline=None)
@given(polygons=st.lists(polygon, min_size=1, max_size=3), width=st.integers(1, 40),
       height=st.integers(1, 40))
@pytest.mark.case(
    'Polygon masks (random polygons, 3x3 shapes)',
    'pixel for pixel what pycocotools draws (the COCO `area`)',
)
def test_random_polygons_equal_pycocotools(polygons, width, height):
    assert np.array_equal(segmentation_to_mask(polygons, width, height),
                          reference(polygons, width, height))


def test_an_outline_traced_in_several_batches_equals_pycocotools():
    """A star of 400 spikes (4,000 vertices) on a 2000x1500 image: more fine steps than
    one batch of the trace holds, so the crossings come from several batches."""
    angles = np.linspace(0, 2 * np.pi, 4000, endpoint=False)
    radius = np.where(np.arange(4000) % 10 < 5, 320.0, 690.0) + np.arange(4000) % 3 * 0.37
    xs, ys = 1000 + radius * np.cos(angles), 750 + radius * np.sin(angles)
    polygon = [float(v) for pair in zip(xs, ys, strict=True) for v in pair]
    steps = np.abs(np.diff(np.asarray(polygon).reshape(-1, 2) * 5, axis=0)).max(axis=1).sum()
    assert steps > 1 << 20
    assert np.array_equal(segmentation_to_mask([polygon], 2000, 1500),
                          reference([polygon], 2000, 1500))
