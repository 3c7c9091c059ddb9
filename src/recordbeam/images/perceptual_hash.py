"""A perceptual hash for finding near-duplicate pictures: re-encoded, resized or slightly
cropped copies of one photo.

The hash is a DCT hash (pHash) of a 32x32 grayscale picture: the 8x8 lowest frequencies of
its two-dimensional DCT, one bit each for "above the median of the others". Re-encoding and
resizing barely move those frequencies; cropping does, since it shifts and scales the
frame. So an image gets five hashes: its whole frame, and four windows of 96% of its width
and height, one in each corner (:data:`WINDOW_SCALE`). A copy cropped by up to 5% on each
side frames nearly what one of the original's windows frames, so the copy's whole-frame
hash lies within a few bits of that window's hash, where it lies 8 to 16 bits from the
original's whole-frame hash.

Two images are near duplicates when :func:`near_distance` (the fewest differing bits
between one image's whole frame and any of the other's five hashes) is at most
:data:`NEAR_THRESHOLD`. ``benchmarks/near_duplicates_bench.py`` measures recall and false
pairs on photo-like pictures; ``benchmarks/README.md`` gives its numbers.

Most of the cost is the decode, so it is made small: a JPEG is decoded by libjpeg at 1/2,
1/4 or 1/8 scale straight to grayscale (Pillow's ``draft``), as small as keeps 32 pixels on
each side; other formats are decoded whole and box-reduced. No Beam, no TensorFlow.
"""

from __future__ import annotations

import io
import struct
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image

__all__ = [
    "BANDS",
    "HASH_BYTES",
    "NEAR_THRESHOLD",
    "WINDOW_SCALE",
    "PerceptualHash",
    "UnhashableImage",
    "hamming",
    "near_distance",
    "perceptual_hash",
]

#: Side of the grayscale picture the DCT is taken of.
HASH_SIDE = 32
#: Side of the block of lowest frequencies kept: 8 x 8 = 64 bits.
LOW_FREQUENCIES = 8
#: Width and height of the four corner windows, as a fraction of the image's.
WINDOW_SCALE = 0.96
#: Most differing bits (of 64) at which two pictures are near duplicates.
NEAR_THRESHOLD = 6
#: Bands of 16 bits the whole-frame hash is cut into for locality-sensitive hashing: two
#: hashes within 3 bits of each other share at least one band whole.
BANDS = 4
BAND_BITS = 64 // BANDS

_HASHES = 5  # the whole frame, then the four corner windows
_PACKED = struct.Struct(">5Q")
#: Bytes of a packed :class:`PerceptualHash`.
HASH_BYTES = _PACKED.size


def _dct_rows() -> np.ndarray:
    """The first :data:`LOW_FREQUENCIES` rows of the orthonormal DCT-II matrix of size
    :data:`HASH_SIDE`."""
    k = np.arange(LOW_FREQUENCIES)[:, None]
    i = np.arange(HASH_SIDE)[None, :]
    rows = np.cos(np.pi * (2 * i + 1) * k / (2 * HASH_SIDE)) * np.sqrt(2 / HASH_SIDE)
    rows[0] /= np.sqrt(2)
    return rows.astype(np.float32)


_DCT = _dct_rows()
_DCT_T = np.ascontiguousarray(_DCT.T)


class UnhashableImage(ValueError):
    """The bytes do not decode to a picture (corrupt data, an unknown format)."""


@dataclass(frozen=True, slots=True)
class PerceptualHash:
    """Five 64-bit DCT hashes of one image: ``frame`` (the whole image) and ``windows``
    (its four corner windows of :data:`WINDOW_SCALE`)."""

    frame: int
    windows: tuple[int, int, int, int]

    def to_bytes(self) -> bytes:
        return _PACKED.pack(self.frame, *self.windows)

    @classmethod
    def from_bytes(cls, data: bytes) -> PerceptualHash:
        frame, *windows = _PACKED.unpack(data)
        return cls(frame, tuple(windows))

    def all(self) -> tuple[int, ...]:
        """The frame's hash, then the windows'."""
        return (self.frame, *self.windows)

    def bands(self) -> tuple[int, ...]:
        """The frame hash's :data:`BANDS` bands, as the values an index keys it by."""
        return band_values(self.frame)


def band_values(value: int) -> tuple[int, ...]:
    """A 64-bit hash cut into :data:`BANDS` bands of :data:`BAND_BITS` bits, most
    significant first."""
    mask = (1 << BAND_BITS) - 1
    return tuple((value >> (BAND_BITS * (BANDS - 1 - b))) & mask for b in range(BANDS))


def hamming(a: int, b: int) -> int:
    """Differing bits of two 64-bit hashes."""
    return (a ^ b).bit_count()


def near_distance(a: PerceptualHash, b: PerceptualHash) -> int:
    """The fewest differing bits between one image's whole-frame hash and any of the
    other's five: 0 to 2 for re-encoded or resized copies, a few more for cropped ones,
    about 32 for unrelated pictures. Symmetric."""
    return min(
        min((h ^ b.frame).bit_count() for h in a.all()),
        min((h ^ a.frame).bit_count() for h in b.windows),
    )


def perceptual_hash(data: bytes) -> PerceptualHash:
    """The :class:`PerceptualHash` of an encoded image (JPEG, PNG, or any format Pillow
    reads).

    Raises:
        UnhashableImage: the bytes do not decode.
    """
    picture = _small_grayscale(data)
    width, height = picture.size
    window_w, window_h = width * WINDOW_SCALE, height * WINDOW_SCALE
    right, bottom = width - window_w, height - window_h
    boxes = [
        (0.0, 0.0, float(width), float(height)),
        (0.0, 0.0, window_w, window_h),
        (right, 0.0, float(width), window_h),
        (0.0, bottom, window_w, float(height)),
        (right, bottom, float(width), float(height)),
    ]
    frame, *windows = (_dct_hash(picture, box) for box in boxes)
    return PerceptualHash(frame, tuple(windows))


def _small_grayscale(data: bytes) -> Image.Image:
    """The picture in 8-bit grayscale, decoded as small as keeps :data:`HASH_SIDE` pixels
    on each side (JPEG: libjpeg's DCT scaling; others: a box reduction after the decode)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. Pillow's notes on odd metadata
            picture = Image.open(io.BytesIO(data))
            if picture.format == "JPEG":
                picture.draft("L", (HASH_SIDE, HASH_SIDE))
            picture.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise UnhashableImage(f"the image does not decode ({error})") from None
    if picture.mode != "L":
        picture = _to_grayscale(picture)
    factor = min(picture.size) // (2 * HASH_SIDE)
    if factor >= 2:
        picture = picture.reduce(factor)
    return picture


def _to_grayscale(picture: Image.Image) -> Image.Image:
    if picture.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit PNGs: keep the top byte
        array = np.asarray(picture.convert("I"), dtype=np.int64)
        top = 65535 if array.max(initial=0) > 255 else 255
        return Image.fromarray((array * 255 // top).clip(0, 255).astype(np.uint8), "L")
    if picture.mode in ("RGBA", "LA", "PA") or (picture.mode == "P" and "transparency" in picture.info):
        # Transparent pixels over white, as viewers show them, not their hidden colour.
        rgba = picture.convert("RGBA")
        backdrop = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        picture = Image.alpha_composite(backdrop, rgba)
    return picture.convert("L")


def _dct_hash(picture: Image.Image, box: tuple[float, float, float, float]) -> int:
    small = picture.resize((HASH_SIDE, HASH_SIDE), Image.BILINEAR, box=box, reducing_gap=None)
    pixels = np.asarray(small, dtype=np.float32)
    block = (_DCT @ pixels @ _DCT_T).ravel()
    bits = block > np.median(block[1:])  # the DC term aside: it is the brightness
    return int.from_bytes(np.packbits(bits).tobytes(), "big")
