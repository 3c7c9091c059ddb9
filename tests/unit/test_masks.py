"""Masks from COCO segmentations: polygons rasterized, RLEs (both encodings) decoded, PNGs
of 0/1. The RLE strings are made by an encoder written here from COCO's description, so
decoding is checked against an independent implementation."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from lanes import examples
from PIL import Image

from recordbeam.images.masks import (
    InvalidMask,
    decode_rle_string,
    mask_png,
    rle_to_mask,
    segmentation_to_mask,
)


def runs_of(mask: np.ndarray) -> list[int]:
    """COCO run lengths: column-major pixels, alternating runs starting with 0s."""
    flat = mask.T.ravel()
    runs, current, length = [], 0, 0
    for value in flat:
        if value == current:
            length += 1
        else:
            runs.append(length)
            current, length = value, 1
    runs.append(length)
    return runs


def encode_rle_string(runs: list[int]) -> str:
    """COCO's rleToString: deltas from the run two back after index 2, 5-bit groups."""
    out = []
    for i, value in enumerate(runs):
        x = value - runs[i - 2] if i > 2 else value
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = not ((c & 0x10 == 0 and x == 0) or (c & 0x10 and x == -1))
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


masks = arrays(
    np.uint8, st.tuples(st.integers(1, 12), st.integers(1, 12)), elements=st.integers(0, 1)
)


@settings(max_examples=examples(150), deadline=None)
@given(masks)
def test_uncompressed_and_compressed_rle_decode_to_the_mask(mask):
    h, w = mask.shape
    runs = runs_of(mask)
    assert np.array_equal(rle_to_mask({"size": [h, w], "counts": runs}), mask)
    assert decode_rle_string(encode_rle_string(runs)) == runs
    assert np.array_equal(rle_to_mask({"size": [h, w], "counts": encode_rle_string(runs)}), mask)


def _block(height, width, rows, columns):
    mask = np.zeros((height, width), np.uint8)
    mask[rows[0]:rows[1], columns[0]:columns[1]] = 1
    return mask


@pytest.mark.parametrize(
    ("polygon", "rows", "columns"),
    [
        ([2, 3, 12, 3, 12, 9, 2, 9], (3, 9), (2, 12)),
        ([8, 4, 24, 4, 24, 16, 8, 16], (4, 16), (8, 24)),  # 16x12: COCO's area 192
        ([1, 1, 4, 1, 4, 4, 1, 4], (1, 4), (1, 4)),  # 3x3
        ([0.6, 0.6, 3.4, 0.6, 3.4, 3.4, 0.6, 3.4], (1, 3), (1, 3)),  # centres of 2x2 pixels
    ],
)
def test_polygon_covers_the_pixels_whose_centres_are_inside(polygon, rows, columns):
    # Axis-aligned rectangles: pixel (x, y) has its centre at (x + 0.5, y + 0.5), so the
    # expected pixels follow from the corners alone (pycocotools' rule; no outline added).
    mask = segmentation_to_mask([polygon], 32, 24)
    assert mask.dtype == np.uint8
    assert np.array_equal(mask, _block(24, 32, rows, columns))


def test_polygon_vertices_far_outside_the_image_are_refused():
    with pytest.raises(InvalidMask) as error:
        segmentation_to_mask([[0, 0, 10, 0, 1e12, 10]], 12, 12)
    assert error.value.reason == "invalid_mask" and "far outside" in error.value.detail


def test_two_polygons_make_one_mask_and_degenerate_ones_are_skipped():
    mask = segmentation_to_mask([[0, 0, 3, 0, 3, 3], [1, 1], [8, 8, 11, 8, 11, 11]], 12, 12)
    assert mask[1, 2] == 1 and mask[9, 10] == 1
    with pytest.raises(InvalidMask):
        segmentation_to_mask([[1, 1, 2, 2]], 12, 12)


def test_rle_of_another_size_and_broken_rles_are_refused():
    mask = np.zeros((4, 5), np.uint8)
    rle = {"size": [4, 5], "counts": runs_of(mask)}
    with pytest.raises(InvalidMask) as error:
        segmentation_to_mask(rle, 6, 4)
    assert error.value.reason == "mask_size_mismatch"
    for bad in (
        {"size": [4, 5], "counts": [3, 2]},
        {"size": [4], "counts": [20]},
        {"size": [4, 5], "counts": "\x01"},
        None,
    ):
        with pytest.raises(InvalidMask):
            segmentation_to_mask(bad, 5, 4)


@pytest.mark.case("COCO RLE with a negative count (its counts still summing to the mask's "
                  "size)", "`invalid_mask` naming the negative count, not the runs' sum")
def test_a_negative_run_is_named_not_the_sum():
    # The counts sum to 24 x 32 = 768 all the same: only the negative run is wrong.
    counts = [100, -50, 718]
    for rle, said in (
        ({"size": [24, 32], "counts": counts}, "RLE counts[1] is -50, a negative run length"),
        ({"size": [24, 32], "counts": encode_rle_string(counts)},
         "run 1 of the RLE counts decoded from the compressed string is -50, a negative"),
        ({"size": [24, 32], "box": [0, 0, 4, 2], "runs": [9, -1]},
         "box RLE runs[1] is -1, a negative run length"),
    ):
        with pytest.raises(InvalidMask) as error:
            segmentation_to_mask(rle, 32, 24)
        assert error.value.reason == "invalid_mask"
        assert error.value.detail.startswith(said) and "cover" not in error.value.detail


def test_png_holds_zeros_and_ones_moved_and_resized_like_the_image():
    mask = np.zeros((4, 6), np.uint8)
    mask[0, 0:2] = 1  # top-left
    decoded = np.asarray(Image.open(io.BytesIO(mask_png(mask))))
    assert decoded.dtype == np.uint8 and np.array_equal(decoded, mask)
    rotated = np.asarray(Image.open(io.BytesIO(mask_png(mask, orientation=6))))
    assert rotated.shape == (6, 4) and rotated[0:2, 3].tolist() == [1, 1]  # now top-right
    resized = np.asarray(Image.open(io.BytesIO(mask_png(mask, size=(3, 2)))))
    assert resized.shape == (2, 3) and set(np.unique(resized)) <= {0, 1}


def test_a_mask_declared_larger_than_its_image_is_refused_before_decoding():
    # Runs that do not cover the size: decoding first would say so (invalid_mask).
    huge = {"size": [40000, 40000], "counts": [0, 5]}
    with pytest.raises(InvalidMask) as error:
        segmentation_to_mask(huge, 32, 24)
    assert error.value.reason == "mask_size_mismatch"
    assert "40000x40000 but the image is 32x24" in error.value.detail


def test_a_box_rle_and_a_union_are_drawn_in_their_image():
    box = {"size": [4, 6], "box": [2, 1, 3, 2], "runs": [1, 4, 1]}
    pixels = segmentation_to_mask(box, 6, 4)
    assert pixels[1:3, 2:5].tolist() == [[0, 1, 1], [1, 1, 0]] and pixels.sum() == 4
    union = {"size": [4, 6], "union": [[[0, 0, 1, 0, 1, 1, 0, 1]], box]}
    assert segmentation_to_mask(union, 6, 4).sum() == 5
    outside = {"size": [4, 6], "box": [5, 0, 3, 1], "runs": [3]}
    with pytest.raises(InvalidMask, match="outside the 6x4 image"):
        segmentation_to_mask(outside, 6, 4)


def test_too_many_vertices_or_too_long_an_outline_is_refused():
    many = [[float(i % 7) for i in range(2 * 100_001)]]
    with pytest.raises(InvalidMask, match="100,001 vertices"):
        segmentation_to_mask(many, 32, 24)
    zigzag = [v for i in range(8_000) for v in ((0.0, 0.0) if i % 2 else (31.0, 23.0))]
    with pytest.raises(InvalidMask, match=r"outline \(8000 vertices\) is \d+ pixels long"):
        segmentation_to_mask([zigzag], 32, 24)


def test_a_compressed_rle_with_a_foreign_character_is_invalid():
    with pytest.raises(InvalidMask, match="holds 'é', which is not RLE"):
        decode_rle_string("0\u00e9")
