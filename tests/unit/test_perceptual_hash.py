"""The perceptual hash: copies that look the same stay within the threshold, different
pictures stay far; the decode is the cheap one (libjpeg's DCT scaling, grayscale); any
format Pillow reads hashes, and bytes that do not decode raise ``UnhashableImage``."""

from __future__ import annotations

import io

import numpy as np
import pytest
from photos import photo_like_pixels
from PIL import Image

from recordbeam.images.perceptual_hash import (
    HASH_BYTES,
    NEAR_THRESHOLD,
    PerceptualHash,
    UnhashableImage,
    band_values,
    hamming,
    near_distance,
    perceptual_hash,
)


def _encode(picture: np.ndarray | Image.Image, fmt: str = "JPEG", **options) -> bytes:
    image = picture if isinstance(picture, Image.Image) else Image.fromarray(picture)
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


@pytest.fixture(scope="module")
def photos() -> list[np.ndarray]:
    return [photo_like_pixels(480, 360, seed=100 + i) for i in range(6)]


def test_reencoded_resized_and_cropped_copies_are_near(photos):
    for pixels in photos:
        original = perceptual_hash(_encode(pixels, quality=90))
        picture = Image.fromarray(pixels)
        copies = {
            "quality 50": _encode(pixels, quality=50),
            "half size": _encode(picture.resize((240, 180), Image.LANCZOS), quality=85),
            "png": _encode(pixels, "PNG"),
            "cropped 5% at the top left": _encode(pixels[18:, 24:], quality=85),
            "cropped 5% at the bottom right": _encode(pixels[:-18, :-24], quality=85),
            "cropped 4% around": _encode(pixels[7:-7, 10:-9], quality=85),
        }
        for name, data in copies.items():
            distance = near_distance(original, perceptual_hash(data))
            assert distance <= NEAR_THRESHOLD, name


def test_cropping_needs_the_windows(photos):
    """The windows are what make a crop near: its whole-frame hash alone is far more
    often than not."""
    far = 0
    for pixels in photos:
        original = perceptual_hash(_encode(pixels, quality=90))
        cropped = perceptual_hash(_encode(pixels[:-18, :-24], quality=90))
        far += hamming(original.frame, cropped.frame) > NEAR_THRESHOLD
        assert near_distance(original, cropped) <= NEAR_THRESHOLD
    assert far >= len(photos) // 2


def test_different_pictures_are_far(photos):
    hashes = [perceptual_hash(_encode(p, quality=90)) for p in photos]
    for i, a in enumerate(hashes):
        for b in hashes[i + 1:]:
            assert near_distance(a, b) > 3 * NEAR_THRESHOLD


def test_distance_is_symmetric_and_zero_for_the_same_bytes(photos):
    a = perceptual_hash(_encode(photos[0]))
    b = perceptual_hash(_encode(photos[0][:-18, :-24]))
    assert near_distance(a, b) == near_distance(b, a)
    assert near_distance(a, perceptual_hash(_encode(photos[0]))) == 0


def test_packs_into_40_bytes_and_back(photos):
    value = perceptual_hash(_encode(photos[1]))
    packed = value.to_bytes()
    assert len(packed) == HASH_BYTES == 40
    assert PerceptualHash.from_bytes(packed) == value


def test_bands_cut_the_frame_hash_most_significant_first():
    value = PerceptualHash(0x0123_4567_89AB_CDEF, (0, 0, 0, 0))
    assert value.bands() == (0x0123, 0x4567, 0x89AB, 0xCDEF)
    assert band_values(0xFFFF_0000_0000_0001) == (0xFFFF, 0, 0, 1)


def test_a_jpeg_is_decoded_at_an_eighth(photos, decoded_sizes):
    big = np.asarray(Image.fromarray(photos[0]).resize((1600, 1200)))
    perceptual_hash(_encode(big, quality=85))
    assert decoded_sizes == [("JPEG", (200, 150))]


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P", "I;16", "1", "CMYK"])
def test_other_modes_hash_like_the_picture(photos, mode):
    pixels = photos[2]
    reference = perceptual_hash(_encode(pixels, "PNG"))
    picture = Image.fromarray(pixels)
    if mode == "I;16":
        gray = np.asarray(picture.convert("L"), dtype="<u2") * 257
        # frombytes: Pillow releases differ on fromarray's mode for 16-bit pictures
        converted = Image.frombytes("I;16", picture.size, gray.tobytes())
    elif mode == "CMYK":
        data = _encode(picture.convert("CMYK"), "JPEG", quality=95)
        assert near_distance(reference, perceptual_hash(data)) <= NEAR_THRESHOLD
        return
    else:
        converted = picture.convert(mode)
    distance = near_distance(reference, perceptual_hash(_encode(converted, "PNG")))
    limit = 4 * NEAR_THRESHOLD if mode == "1" else NEAR_THRESHOLD  # dithered to black and white
    assert distance <= limit


def test_transparent_pixels_count_as_white():
    opaque = Image.new("RGB", (64, 64), "white")
    opaque.paste((0, 0, 0), (0, 0, 32, 64))
    see_through = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    see_through.paste((0, 0, 0, 255), (0, 0, 32, 64))
    assert perceptual_hash(_encode(see_through, "PNG")) == perceptual_hash(_encode(opaque, "PNG"))


@pytest.mark.parametrize("data", [b"", b"not an image", b"\xff\xd8\xff\xe0" + b"\0" * 40])
def test_bytes_that_do_not_decode_are_unhashable(data):
    with pytest.raises(UnhashableImage, match="does not decode"):
        perceptual_hash(data)


def test_a_tiny_image_hashes():
    value = perceptual_hash(_encode(Image.new("L", (3, 2), 128), "PNG"))
    assert isinstance(value.frame, int)
