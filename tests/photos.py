"""Generated pictures with the make-up of camera photos, for resize tests and benchmarks.

Flat noise is a poor stand-in for a photo: it compresses to several bytes per pixel and
has no structure a downscale can keep or lose. These pictures have texture at every scale
with the 1/f amplitude spectrum of natural images, colour smoother than brightness (as
in photos and in JPEG's own subsampling), hard-edged shapes, and a little sensor grain.
At JPEG quality 90 they take 0.35-0.5 bytes per pixel, as 12-megapixel camera JPEGs do.

Deterministic from ``seed`` (with the same numpy and Pillow). Needs Pillow and numpy only.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

_EXIF_ORIENTATION = 0x0112
_TEXTURE_SLOPE = 1.15  # amplitude ~ 1/f**slope; 1 is the classic natural-image figure
_COLOUR_SLOPE = 1.3  # smoother than brightness
_SHAPES = 40


def photo_like_pixels(width: int, height: int, seed: int = 0) -> np.ndarray:
    """``height x width x 3`` uint8 RGB pixels of a photo-like picture."""
    rng = np.random.default_rng(seed)
    brightness = _fractal_field(rng, height, width, _TEXTURE_SLOPE)
    small = (max(width // 4, 1), max(height // 4, 1))
    colour = [_upscaled(_fractal_field(rng, small[1], small[0], _COLOUR_SLOPE), (width, height))
              for _ in range(2)]
    ycbcr = np.stack([120 + 45 * brightness, 128 + 20 * colour[0], 128 + 20 * colour[1]], -1)
    picture = Image.fromarray(np.clip(ycbcr, 0, 255).astype(np.uint8), "YCbCr").convert("RGB")
    _draw_shapes(picture, rng)
    pixels = np.asarray(picture, dtype=np.float32)
    pixels += (12 * brightness[..., None]).astype(np.float32)  # the shapes are textured too
    pixels += 1.5 * rng.standard_normal(pixels.shape, dtype=np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def photo_like_jpeg(width: int, height: int, seed: int = 0, *, quality: int = 90,
                    orientation: int | None = None) -> bytes:
    """A photo-like baseline JPEG (4:2:0, as cameras write), with an EXIF orientation tag
    when ``orientation`` is given."""
    out = io.BytesIO()
    options: dict = {"quality": quality}
    if orientation is not None:
        exif = Image.Exif()
        exif[_EXIF_ORIENTATION] = orientation
        options["exif"] = exif
    Image.fromarray(photo_like_pixels(width, height, seed), "RGB").save(out, "JPEG", **options)
    return out.getvalue()


def _fractal_field(rng: np.random.Generator, height: int, width: int, slope: float) -> np.ndarray:
    """Zero-mean, unit-variance noise whose amplitude falls as 1/f**slope."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    frequency = np.hypot(fx, fy)
    frequency[0, 0] = 1.0
    spectrum = rng.standard_normal(frequency.shape) + 1j * rng.standard_normal(frequency.shape)
    spectrum /= frequency**slope
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(height, width))
    spread = field.std()
    return field / spread if spread > 0 else field


def _upscaled(field: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.fromarray(field.astype(np.float32), "F").resize(size, Image.BILINEAR))


def _draw_shapes(picture: Image.Image, rng: np.random.Generator) -> None:
    width, height = picture.size
    draw = ImageDraw.Draw(picture)
    short = min(width, height)
    for _ in range(_SHAPES):
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        reach = int(rng.integers(max(short // 30, 1), max(short // 4, 2)))
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x, y, x + reach, y + int(reach * rng.uniform(0.3, 1.5))], fill=fill)
        else:
            corners = [(x + int(rng.integers(-reach, reach)), y + int(rng.integers(-reach, reach)))
                       for _ in range(5)]
            draw.polygon(corners, fill=fill)


__all__ = ["photo_like_jpeg", "photo_like_pixels"]
