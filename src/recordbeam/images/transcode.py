"""Fixing images before they are written: re-encoding, downsizing, EXIF rotation.

Real datasets hold images that training code decodes badly or not at all: ImageNet has
CMYK JPEGs, a PNG named ``.JPEG``, grayscale and palette images; other sets have RGBA,
16-bit PNGs or huge photos. :func:`fix_image` turns one image into what the options ask
for and says which fixes it applied, so a run can report how many images each touched.

Rules:

* ``transcode="jpeg"``: the output is an 8-bit RGB JPEG. An image that already is one is
  kept byte for byte (no second lossy generation) unless it must be resized or rotated.
* ``transcode="png"``: the output is an 8-bit RGB PNG, kept as is when it already is one.
* ``transcode="keep"``: bytes are kept unless ``max_side`` or ``apply_exif`` changes the
  pixels; then the image is re-encoded in its own format (as 8-bit L or RGB, or RGBA
  for PNG).
* Alpha is dropped, as ``tf.io.decode_png(channels=3)`` drops it, so a model sees the
  same pixels whether it reads the original or our copy. 16-bit samples keep their high
  byte. Re-encoded images carry no metadata (no EXIF, no ICC profile).
* ``max_side``: the longer side is scaled down to at most this many pixels keeping the
  aspect ratio; smaller images are untouched. Normalized boxes stay valid. A JPEG is
  decoded at the smallest of libjpeg's DCT scales (1/2, 1/4, 1/8) that keeps it at least
  ``DRAFT_MARGIN`` times the written size, then LANCZOS finishes; other formats are
  decoded whole. The written size is :func:`scaled_size` either way.
* ``apply_exif``: pixels are rotated/mirrored by the EXIF Orientation tag, so width and
  height swap for orientations 5-8; :func:`orient_box` moves normalized boxes the same way.

Pure Pillow and numpy; no Beam, no TensorFlow.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, JpegImagePlugin, PngImagePlugin

from recordbeam.images.checks import (
    DEFAULT_MAX_PIXELS,
    ImageInfo,
    ImageRejected,
    open_header,
    sniff_format,
)

TRANSCODE_CHOICES = ("keep", "jpeg", "png")
DEFAULT_JPEG_QUALITY = 95
#: A JPEG being downsized is decoded (by libjpeg's DCT scaling) to no less than this many
#: times the written size on each side, so the final LANCZOS still shrinks it by at least
#: as much: below 1.5 its pictures drift under 38 dB PSNR from a full-size decode's; at 2,
#: 4000x3000 -> 640 and 1600x1200 -> 512 decode at twice the scale and cost 1.5x and 2x
#: the CPU (measured in benchmarks/resize_bench.py).
DRAFT_MARGIN = 1.5

#: Names of the fixes :func:`fix_image` reports; each becomes a ``fix_<name>`` count.
FIXES = (
    "reencoded",  # any image whose bytes were rewritten
    "format",  # JPEG written as PNG or the other way round
    "png_named_jpeg",  # a PNG behind a .jpg/.jpeg name, now a real JPEG
    "cmyk",  # CMYK or YCCK JPEG to RGB
    "palette",  # palette (P) image to RGB
    "alpha",  # alpha channel dropped
    "16bit",  # 16-bit samples to 8-bit
    "grayscale",  # grayscale to RGB
    "foreign",  # GIF/BMP/WebP/TIFF converted to the target format
    "resized",  # downsized by max_side
    "exif_applied",  # pixels rotated by the EXIF orientation
)

_JPEG_NAMES = (".jpg", ".jpeg", ".jpe")
_PNG_IHDR_DEPTH = 24  # signature(8) + length(4) + "IHDR"(4) + width(4) + height(4)
# Pillow transposes that undo each EXIF orientation (what ImageOps.exif_transpose does).
_ORIENT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


@dataclass(frozen=True)
class ImageFixes:
    """What to do to every image before it is written.

    Attributes:
        transcode: ``keep``, ``jpeg`` (8-bit RGB JPEG) or ``png`` (8-bit RGB PNG).
        quality: JPEG quality (1-95) for re-encoded JPEGs.
        max_side: downsize so that neither side exceeds this; None keeps the size.
        apply_exif: rotate pixels by the EXIF orientation (and drop the tag).
    """

    transcode: str = "keep"
    quality: int = DEFAULT_JPEG_QUALITY
    max_side: int | None = None
    apply_exif: bool = False

    def __post_init__(self) -> None:
        if self.transcode not in TRANSCODE_CHOICES:
            raise ValueError(
                f"--transcode must be one of {', '.join(TRANSCODE_CHOICES)}, got {self.transcode!r}"
            )
        if not 1 <= self.quality <= 100:
            raise ValueError(f"--jpeg-quality must be between 1 and 100, got {self.quality}")
        if self.max_side is not None and self.max_side < 1:
            raise ValueError(f"--max-side must be a positive number of pixels, got {self.max_side}")

    @property
    def active(self) -> bool:
        """False when no image can be changed (the encoder then skips all work here)."""
        return self.transcode != "keep" or self.max_side is not None or self.apply_exif

    def applied_orientation(self, info: ImageInfo) -> int:
        """The EXIF orientation :func:`fix_image` applies to this image (1: none)."""
        if self.apply_exif and info.exif_orientation in _ORIENT:
            return info.exif_orientation
        return 1


@dataclass(frozen=True)
class FixedImage:
    """An image after :func:`fix_image`: the bytes to write and what was done."""

    data: bytes
    format: str
    width: int
    height: int
    fixes: tuple[str, ...]
    source_info: ImageInfo | None = None  # set by convert_foreign: the original's header


def png_bit_depth(data: bytes) -> int | None:
    """Bits per sample from a PNG's IHDR chunk, or None when ``data`` is not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) <= _PNG_IHDR_DEPTH:
        return None
    return data[_PNG_IHDR_DEPTH]


def scaled_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """``(width, height)`` shrunk so the longer side is at most ``max_side``, keeping aspect."""
    longest = max(width, height)
    if max_side is None or longest <= max_side:
        return width, height
    scale = max_side / longest
    return max(1, round(width * scale)), max(1, round(height * scale))


def orient_box(
    xmin: float, ymin: float, xmax: float, ymax: float, orientation: int
) -> tuple[float, float, float, float]:
    """A normalized box in stored-pixel coordinates, moved as ``apply_exif`` moves pixels.

    ``orientation`` is the EXIF tag (1-8); the result is the box in the displayed image.
    """
    if orientation in (2, 3):
        xmin, xmax = 1.0 - xmax, 1.0 - xmin
    if orientation in (3, 4):
        ymin, ymax = 1.0 - ymax, 1.0 - ymin
    if orientation == 5:  # transpose: x <-> y
        return ymin, xmin, ymax, xmax
    if orientation == 6:  # 90 degrees clockwise: x' = 1 - y, y' = x
        return 1.0 - ymax, xmin, 1.0 - ymin, xmax
    if orientation == 7:  # transverse: x' = 1 - y, y' = 1 - x
        return 1.0 - ymax, 1.0 - xmax, 1.0 - ymin, 1.0 - xmin
    if orientation == 8:  # 90 degrees counter-clockwise: x' = y, y' = 1 - x
        return ymin, 1.0 - xmax, ymax, 1.0 - xmin
    return xmin, ymin, xmax, ymax


def orient_point(x: float, y: float, orientation: int) -> tuple[float, float]:
    """A normalized point in stored-pixel coordinates, moved as ``apply_exif`` moves pixels
    (the point version of :func:`orient_box`: the same moves, on a box of no size)."""
    moved_x, moved_y, _, _ = orient_box(x, y, x, y, orientation)
    return moved_x, moved_y


def orient_image(image: Image.Image, orientation: int) -> Image.Image:
    """Pixels moved as the EXIF ``orientation`` says (used for images and masks alike)."""
    method = _ORIENT.get(orientation)
    return image.transpose(method) if method is not None else image


def _needs_target(data: bytes, info: ImageInfo, target: str) -> list[str]:
    """Why an image is not yet an 8-bit RGB image of ``target`` format (empty: it is)."""
    reasons = []
    if info.format != target:
        reasons.append("format")
    if info.mode in ("CMYK", "YCbCr"):
        reasons.append("cmyk")
    elif info.mode in ("P", "PA"):
        reasons.append("palette")
    elif info.mode in ("L", "LA", "1", "I", "I;16", "I;16B", "I;16L", "F"):
        reasons.append("grayscale")
    if info.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        reasons.append("alpha")
    if info.mode.startswith(("I", "F")) or png_bit_depth(data) == 16:
        reasons.append("16bit")
    return reasons


def _to_8bit(image: Image.Image) -> Image.Image:
    """16-bit and 32-bit grayscale to 8-bit L by keeping the high byte (not clipping)."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        values = np.asarray(image).astype(np.int64)
        top = 65535 if image.mode != "I" or values.max(initial=0) <= 65535 else values.max()
        scaled = np.clip(values, 0, top) * 255 // max(int(top), 1)
        return Image.fromarray(scaled.astype(np.uint8), "L")
    if image.mode == "F":
        values = np.nan_to_num(np.asarray(image, dtype=np.float64))
        return Image.fromarray(np.clip(values, 0, 255).astype(np.uint8), "L")
    return image


def _to_rgb(image: Image.Image) -> Image.Image:
    image = _to_8bit(image)
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        # Drop alpha without compositing, as TensorFlow's decoders do with channels=3.
        image = image.convert("RGBA").convert("RGB") if image.mode != "RGBA" else image
        return Image.fromarray(np.asarray(image)[:, :, :3], "RGB")
    return image.convert("RGB") if image.mode != "RGB" else image


def _own_format_mode(image: Image.Image, fmt: str) -> Image.Image:
    """A mode ``fmt`` can store, for ``keep``: L and RGB (and RGBA for PNG) stay."""
    image = _to_8bit(image)
    keep = ("L", "RGB", "RGBA") if fmt == "png" else ("L", "RGB")
    return image if image.mode in keep else _to_rgb(image)


def _encode(image: Image.Image, fmt: str, quality: int) -> bytes:
    out = io.BytesIO()
    if fmt == "jpeg":
        image.save(out, "JPEG", quality=quality)
    else:
        image.save(out, "PNG")
    return out.getvalue()


def fix_image(data: bytes, info: ImageInfo, fixes: ImageFixes, name: str = "") -> FixedImage | None:
    """Apply ``fixes`` to one checked image; None when the bytes are kept as they are.

    Args:
        data: the encoded JPEG or PNG, already accepted by ``inspect_image``.
        info: what ``inspect_image`` said about it.
        fixes: the options.
        name: the file name, to report PNGs named ``.jpg``/``.jpeg``.

    Raises:
        ImageRejected: reason ``corrupt`` when the pixels do not decode.
    """
    target = info.format if fixes.transcode == "keep" else fixes.transcode
    reasons = [] if fixes.transcode == "keep" else _needs_target(data, info, target)
    orientation = fixes.applied_orientation(info)
    size = scaled_size(*_displayed(info.width, info.height, orientation), fixes.max_side)
    if orientation != 1:
        reasons.append("exif_applied")
    if size != _displayed(info.width, info.height, orientation):
        reasons.append("resized")
    if not reasons:
        return None
    draft = _draft_size(size, orientation) if "resized" in reasons else None
    image, region = _decode(data, info.format, draft)
    decoded_size = image.size
    image = orient_image(image, orientation)
    if region is not None:
        region = _oriented_region(region, decoded_size, orientation)
    image = _own_format_mode(image, target) if fixes.transcode == "keep" else _to_rgb(image)
    if image.size != size:
        image = image.resize(size, Image.Resampling.LANCZOS, box=region, reducing_gap=3.0)
    if "format" in reasons and info.format == "png" and name.lower().endswith(_JPEG_NAMES):
        reasons.append("png_named_jpeg")
    return FixedImage(
        _encode(image, target, fixes.quality),
        target,
        size[0],
        size[1],
        ("reencoded", *sorted(set(reasons))),
    )


def convert_foreign(
    data: bytes, fixes: ImageFixes, *, max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> FixedImage:
    """A GIF, BMP, WebP or TIFF converted to the ``transcode`` target (first frame).

    Raises:
        ImageRejected: ``unsupported_format`` when ``transcode`` is ``keep`` or Pillow cannot
            read the format; ``too_large`` above ``max_pixels``; ``corrupt`` when the pixels
            do not decode.
    """
    if fixes.transcode == "keep":
        raise ImageRejected(
            "unsupported_format",
            "only JPEG and PNG are stored as they are; pass --transcode jpeg or png to convert it.",
        )
    try:
        # Its plugin directly: Image.open's global bomb limit would refuse what max_pixels
        # allows, and say so as a format it cannot read.
        image = open_header(data, sniff_format(data) or "")
    except Exception as error:  # Pillow reports unknown formats with several types
        raise ImageRejected(
            "unsupported_format", f"Pillow cannot read this format ({error}); convert it first."
        ) from None
    width, height = image.size
    if max_pixels is not None and width * height > max_pixels:
        raise ImageRejected(
            "too_large", f"the image is {width}x{height} pixels, above the limit of {max_pixels:,}."
        )
    try:
        image.load()
    except Exception as error:
        raise ImageRejected("corrupt", f"the pixels do not decode ({error}).") from None
    stored = _orientation_of(image)
    source = ImageInfo(
        (image.format or "unknown").lower(),
        width,
        height,
        image.mode,
        stored if stored != 1 else None,
        0,
    )
    orientation = fixes.applied_orientation(source)
    image = _to_rgb(orient_image(image, orientation))
    size = scaled_size(*image.size, fixes.max_side)
    applied = ["reencoded", "foreign"]
    if orientation != 1:
        applied.append("exif_applied")
    if size != image.size:
        image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
        applied.append("resized")
    target = fixes.transcode
    return FixedImage(
        _encode(image, target, fixes.quality), target, size[0], size[1], tuple(applied), source
    )


def _orientation_of(image: Image.Image) -> int:
    try:
        value = image.getexif().get(0x0112)
    except Exception:  # damaged EXIF: treat as unrotated
        return 1
    return value if value in _ORIENT else 1


def _displayed(width: int, height: int, orientation: int) -> tuple[int, int]:
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def _draft_size(written: tuple[int, int], orientation: int) -> tuple[int, int]:
    """The least size, in stored orientation, a JPEG written at ``written`` (displayed
    orientation) is decoded at: ``DRAFT_MARGIN`` times it on each side."""
    width, height = _displayed(*written, orientation)  # the same swap turns it back
    return math.ceil(width * DRAFT_MARGIN), math.ceil(height * DRAFT_MARGIN)


def _decode(
    data: bytes, fmt: str, draft: tuple[int, int] | None = None
) -> tuple[Image.Image, tuple[float, float, float, float] | None]:
    """The decoded image and, when a JPEG was decoded at a DCT scale (``draft``: the least
    size wanted), the region of it that holds the picture; None: all of it.

    libjpeg rounds a scaled size up, so a 4001-pixel row at 1/4 decodes to 1001 pixels of
    which the last stands for one source pixel instead of four: the region is 1000.25
    wide, and resizing exactly it keeps every pixel where a full-size decode puts it.
    """
    # The plugin class directly, as in images.py: Image.open would apply Pillow's global
    # decompression-bomb limit, which inspect_image's max_pixels already replaced.
    plugin = JpegImagePlugin.JpegImageFile if fmt == "jpeg" else PngImagePlugin.PngImageFile
    region = None
    try:
        image = plugin(io.BytesIO(data))
        full_size = image.size
        if draft is not None and fmt == "jpeg":
            scaled = image.draft(None, draft)
            if scaled is not None and image.size != full_size:
                region = scaled[1]
        image.load()
    except Exception as error:
        raise ImageRejected(
            "corrupt",
            f"the {fmt.upper()} pixels do not decode ({error}), so the "
            "image cannot be fixed; re-export or re-download it.",
        ) from None
    return image, region


#: libjpeg scales by 1/2, 1/4 or 1/8, so a scaled picture's edges lie on eighths of a pixel.
_DRAFT_GRID = 8


def _oriented_region(
    region: tuple[float, float, float, float], size: tuple[int, int], orientation: int
) -> tuple[float, float, float, float]:
    """``region`` of an image of ``size``, moved as ``orientation`` moves the image's pixels
    (the partial last column of a scaled decode is the first one after a mirror)."""
    width, height = size
    xmin, ymin, xmax, ymax = orient_box(region[0] / width, region[1] / height,
                                        region[2] / width, region[3] / height, orientation)
    shown_width, shown_height = _displayed(width, height, orientation)
    return (_on_draft_grid(xmin * shown_width), _on_draft_grid(ymin * shown_height),
            _on_draft_grid(xmax * shown_width), _on_draft_grid(ymax * shown_height))


def _on_draft_grid(edge: float) -> float:
    """``edge`` rounded to the eighth of a pixel it stands for (undoing float error)."""
    return round(edge * _DRAFT_GRID) / _DRAFT_GRID


__all__ = [
    "DRAFT_MARGIN",
    "FIXES",
    "TRANSCODE_CHOICES",
    "FixedImage",
    "ImageFixes",
    "convert_foreign",
    "fix_image",
    "orient_box",
    "orient_image",
    "png_bit_depth",
    "scaled_size",
]
