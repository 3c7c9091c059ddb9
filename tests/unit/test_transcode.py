"""Image fixes: every odd kind becomes an 8-bit RGB JPEG or PNG, sizes and orientation are
right, and untouched images keep their bytes. Expectations come from Pillow decoding the
results and from Pillow's own EXIF transpose, not from the code under test."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples
from PIL import Image, ImageOps

from recordbeam.images.checks import ImageRejected, inspect_image
from recordbeam.images.transcode import (
    ImageFixes,
    convert_foreign,
    fix_image,
    orient_box,
    png_bit_depth,
    scaled_size,
)
from recordbeam.testing.samples import ODD_IMAGE_KINDS, odd_image

EXPECTED_FIX = {
    "gray_jpeg": "grayscale",
    "cmyk_jpeg": "cmyk",
    "gray_png": "grayscale",
    "palette_png": "palette",
    "rgba_png": "alpha",
    "png16": "16bit",
}


def _decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize("kind", ODD_IMAGE_KINDS)
@pytest.mark.parametrize("target", ["jpeg", "png"])
def test_every_kind_becomes_8bit_rgb_of_the_target(kind, target):
    data = odd_image(kind, 40, 30)
    info = inspect_image(data)
    fixed = fix_image(data, info, ImageFixes(target), name="x.JPEG")
    if info.format == target and info.mode == "RGB":
        assert fixed is None  # already right: bytes kept, no second lossy generation
        return
    image = _decode(fixed.data)
    assert image.format == target.upper()
    assert image.mode == "RGB"
    assert image.size == (40, 30) == (fixed.width, fixed.height)
    assert "reencoded" in fixed.fixes
    if kind in EXPECTED_FIX:
        assert EXPECTED_FIX[kind] in fixed.fixes
    if kind.endswith("png") and target == "jpeg":
        assert "png_named_jpeg" in fixed.fixes


def test_colours_survive_cmyk_and_the_red_block_stays_top_left():
    fixed = fix_image(
        odd_image("cmyk_jpeg"), inspect_image(odd_image("cmyk_jpeg")), ImageFixes("jpeg")
    )
    pixels = np.asarray(_decode(fixed.data)).astype(int)
    r, g, b = pixels[2, 2]
    assert r > 180 and g < 80 and b < 80  # (250, 20, 20) drawn before the CMYK round trip


def test_16bit_keeps_the_high_byte_instead_of_clipping():
    data = odd_image("png16")
    assert png_bit_depth(data) == 16
    source = np.asarray(_decode(data)).astype(np.int64)
    fixed = fix_image(data, inspect_image(data), ImageFixes("png"))
    out = np.asarray(_decode(fixed.data))
    assert png_bit_depth(fixed.data) == 8
    assert np.array_equal(out[:, :, 0], (source * 255 // 65535).astype(np.uint8))


def test_alpha_is_dropped_not_composited():
    data = odd_image("rgba_png")
    rgba = np.asarray(_decode(data))
    out = np.asarray(_decode(fix_image(data, inspect_image(data), ImageFixes("png")).data))
    assert np.array_equal(out, rgba[:, :, :3])


def test_keep_rewrites_nothing_without_resize_or_rotation():
    for kind in ODD_IMAGE_KINDS:
        data = odd_image(kind)
        assert fix_image(data, inspect_image(data), ImageFixes()) is None


def test_max_side_keeps_format_and_aspect():
    data = odd_image("palette_png", 80, 40)
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=20))
    image = _decode(fixed.data)
    assert image.format == "PNG" and image.size == (20, 10)
    assert {"resized"} <= set(fixed.fixes)
    small = odd_image("rgb_jpeg", 16, 12)
    assert fix_image(small, inspect_image(small), ImageFixes(max_side=20)) is None


def test_apply_exif_rotates_like_pillow_and_swaps_the_size():
    data = odd_image("exif6_jpeg", 40, 30)
    info = inspect_image(data)
    assert info.exif_orientation == 6
    fixed = fix_image(data, info, ImageFixes(apply_exif=True))
    assert (fixed.width, fixed.height) == (30, 40) and "exif_applied" in fixed.fixes
    ours = np.asarray(_decode(fixed.data)).astype(int)
    reference = np.asarray(ImageOps.exif_transpose(_decode(data))).astype(int)
    assert ours.shape == reference.shape
    assert np.abs(ours - reference).mean() < 4  # one more JPEG generation, same picture
    assert _decode(fixed.data).getexif().get(0x0112) is None


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_box_moves_boxes_as_exif_transpose_moves_pixels(orientation):
    width, height = 20, 10
    pixels = np.zeros((height, width), np.uint8)
    pixels[2:5, 3:9] = 255  # x 3..9, y 2..5
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(pixels, "L").save(buffer, "PNG", exif=exif)
    moved = np.asarray(ImageOps.exif_transpose(Image.open(buffer)))
    ys, xs = np.nonzero(moved)
    h, w = moved.shape
    expected = (xs.min() / w, ys.min() / h, (xs.max() + 1) / w, (ys.max() + 1) / h)
    got = orient_box(3 / width, 2 / height, 9 / width, 5 / height, orientation)
    assert got == pytest.approx(expected)


def test_foreign_formats_convert_only_when_asked():
    gif = io.BytesIO()
    Image.new("P", (12, 8), 3).save(gif, "GIF")
    fixed = convert_foreign(gif.getvalue(), ImageFixes("jpeg"))
    assert _decode(fixed.data).format == "JPEG" and "foreign" in fixed.fixes
    assert fixed.source_info.format == "gif" and (fixed.width, fixed.height) == (12, 8)
    with pytest.raises(ImageRejected) as rejected:
        convert_foreign(gif.getvalue(), ImageFixes())
    assert rejected.value.reason == "unsupported_format"


def test_a_foreign_image_is_held_to_max_pixels_not_to_pillows_own_limit(monkeypatch):
    # Pillow's Image.open refuses images of more than twice its global limit; here 2 M.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)
    gif = io.BytesIO()
    Image.new("P", (2000, 1500), 3).save(gif, "GIF")  # 3 M pixels
    fixed = convert_foreign(gif.getvalue(), ImageFixes("jpeg"), max_pixels=None)
    assert (fixed.width, fixed.height) == (2000, 1500)
    with pytest.raises(ImageRejected) as rejected:
        convert_foreign(gif.getvalue(), ImageFixes("jpeg"), max_pixels=2_999_999)
    assert rejected.value.reason == "too_large"


def test_bad_options_are_refused():
    for bad in ({"transcode": "webp"}, {"quality": 0}, {"max_side": 0}):
        with pytest.raises(ValueError):
            ImageFixes(**bad)


@settings(max_examples=examples(150), deadline=None)
@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 4000))
def test_scaled_size_fits_and_keeps_aspect(width, height, max_side):
    w, h = scaled_size(width, height, max_side)
    assert max(w, h) <= max(max_side, 1) or (w, h) == (width, height)
    if max(width, height) <= max_side:
        assert (w, h) == (width, height)
    else:
        assert max(w, h) == max_side
        scale = max_side / max(width, height)  # each side within rounding of the exact scale
        assert abs(w - width * scale) <= 0.5 or w == 1
        assert abs(h - height * scale) <= 0.5 or h == 1
