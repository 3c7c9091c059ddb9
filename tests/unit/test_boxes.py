"""Unit tests for recordbeam.images.boxes: COCO [x, y, w, h] pixels to normalized, clipped corners."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

from recordbeam.images.boxes import InvalidBox, normalize_box


def test_box_inside_the_image_is_divided_by_the_image_size():
    box = normalize_box([10.0, 12.0, 20.0, 6.0], 64, 48)
    assert box.xmin == pytest.approx(10 / 64)
    assert box.ymin == pytest.approx(12 / 48)
    assert box.xmax == pytest.approx(30 / 64)
    assert box.ymax == pytest.approx(18 / 48)
    assert box.clipped is False


def test_box_covering_the_whole_image_is_exactly_zero_to_one_and_not_clipped():
    box = normalize_box([0, 0, 640, 480], 640, 480)
    assert (box.xmin, box.ymin, box.xmax, box.ymax) == (0.0, 0.0, 1.0, 1.0)
    assert box.clipped is False


def test_integer_and_tuple_boxes_are_accepted():
    assert normalize_box((1, 2, 3, 4), 10, 10) == normalize_box([1.0, 2.0, 3.0, 4.0], 10, 10)


@pytest.mark.parametrize(
    ("bbox", "expected"),
    [
        # runs 15 px past the right edge of a 64x48 image
        ([54.0, 5.0, 25.0, 12.0], (54 / 64, 5 / 48, 1.0, 17 / 48)),
        # starts left of and above the image
        ([-8.0, -4.0, 16.0, 10.0], (0.0, 0.0, 8 / 64, 6 / 48)),
        # larger than the image on every side
        ([-1.0, -1.0, 100.0, 100.0], (0.0, 0.0, 1.0, 1.0)),
    ],
)
def test_box_reaching_outside_is_clipped_to_the_image(bbox, expected):
    box = normalize_box(bbox, 64, 48)
    assert (box.xmin, box.ymin, box.xmax, box.ymax) == pytest.approx(expected)
    assert box.clipped is True


def test_box_ending_exactly_on_the_edge_is_not_clipped():
    box = normalize_box([32.0, 24.0, 32.0, 24.0], 64, 48)
    assert (box.xmax, box.ymax) == (1.0, 1.0)
    assert box.clipped is False


# Widths where x / width + w / width style float arithmetic could overshoot 1.0.
AWKWARD_SIZES = [3, 7, 11, 49, 97, 333, 641, 999, 1023, 4097]


@pytest.mark.parametrize("width", AWKWARD_SIZES)
def test_box_ending_on_the_right_edge_never_exceeds_one(width):
    # x + w == width only up to rounding: 0.1 * width + 0.9 * width may exceed width.
    x = width * 0.1
    w = width - x
    box = normalize_box([x, 0.0, w, 1.0], width, 2)
    assert box.xmax <= 1.0
    assert box.xmin >= 0.0
    assert box.xmax == pytest.approx(1.0)


@settings(max_examples=examples(200), deadline=None)
@given(
    width=st.integers(1, 5000),
    height=st.integers(1, 5000),
    fx=st.floats(-0.5, 1.5),
    fy=st.floats(-0.5, 1.5),
    fw=st.floats(0.0, 2.0),
    fh=st.floats(0.0, 2.0),
)
def test_normalized_corners_are_ordered_and_within_unit_square(width, height, fx, fy, fw, fh):
    bbox = [fx * width, fy * height, fw * width, fh * height]
    try:
        box = normalize_box(bbox, width, height)
    except InvalidBox as bad:
        # Only a box with nothing left inside the image may be refused here.
        assert bad.reason == "empty_bbox"
        x, y, w, h = bbox
        assert min(width, x + w) <= max(0.0, x) or min(height, y + h) <= max(0.0, y)
        return
    for value in (box.xmin, box.ymin, box.xmax, box.ymax):
        assert 0.0 <= value <= 1.0
    assert box.xmin < box.xmax or math.isclose(box.xmin, box.xmax)
    assert box.ymin < box.ymax or math.isclose(box.ymin, box.ymax)
    inside = bbox[0] >= 0 and bbox[1] >= 0
    inside = inside and bbox[0] + bbox[2] <= width and bbox[1] + bbox[3] <= height
    assert box.clipped is (not inside)


@pytest.mark.parametrize(
    "bbox",
    [
        [float("nan"), 0.0, 1.0, 1.0],
        [0.0, float("nan"), 1.0, 1.0],
        [0.0, 0.0, float("inf"), 1.0],
        [0.0, 0.0, 1.0, float("-inf")],
        [float("-inf"), 0.0, 1.0, 1.0],
    ],
)
def test_non_finite_values_are_invalid(bbox):
    with pytest.raises(InvalidBox) as caught:
        normalize_box(bbox, 64, 48)
    assert caught.value.reason == "invalid_bbox"
    assert "NaN or infinite" in caught.value.detail


@pytest.mark.parametrize("bbox", [[20.0, 6.0, -5.0, 10.0], [1.0, 1.0, 4.0, -0.5]])
def test_negative_size_is_invalid(bbox):
    with pytest.raises(InvalidBox) as caught:
        normalize_box(bbox, 64, 48)
    assert caught.value.reason == "invalid_bbox"
    assert "negative" in caught.value.detail


@pytest.mark.parametrize(
    "bbox",
    [
        None,
        "1,2,3,4",
        [1.0, 2.0, 3.0],
        [1.0, 2.0, 3.0, 4.0, 5.0],
        [1.0, "a", 3.0, 4.0],
        [1, None, 2, 3],
        {},
    ],
)
def test_malformed_boxes_are_invalid_and_named_in_the_detail(bbox):
    with pytest.raises(InvalidBox) as caught:
        normalize_box(bbox, 64, 48)
    assert caught.value.reason == "invalid_bbox"
    assert repr(bbox) in caught.value.detail


@pytest.mark.parametrize(
    "bbox",
    [
        [8.0, 8.0, 0.0, 12.0],  # zero width
        [8.0, 8.0, 12.0, 0.0],  # zero height
        [64.0, 0.0, 10.0, 10.0],  # starts on the right edge
        [100.0, 10.0, 5.0, 5.0],  # entirely to the right
        [-20.0, 10.0, 10.0, 5.0],  # entirely to the left
        [10.0, -30.0, 5.0, 30.0],  # ends exactly on the top edge
    ],
)
def test_box_without_area_inside_the_image_is_empty(bbox):
    with pytest.raises(InvalidBox) as caught:
        normalize_box(bbox, 64, 48)
    assert caught.value.reason == "empty_bbox"
    assert "64x48" in caught.value.detail


def test_invalid_box_is_a_value_error_with_its_detail_as_message():
    with pytest.raises(ValueError, match="negative"):
        normalize_box([0, 0, -1, 1], 10, 10)
