"""Cheap checks that image bytes are a whole JPEG or PNG, without decoding pixels.

`inspect_image` runs on every image of datasets with millions of them, so it does the cheapest
tests first and never decodes pixels unless asked (``verify_decode=True``):

1. empty bytes;
2. the format, from magic bytes only (a PNG named ``.jpg`` is a PNG);
3. truncation, from the format's end marker (JPEG ``FF D9``, PNG ``IEND``);
4. the header, without decoding: size, mode, EXIF orientation; plain JPEG headers are read by
   `recordbeam.images.jpeg_header` (a fraction of Pillow's cost), everything else by Pillow;
5. a pixel budget, checked here rather than through Pillow's process-global
   ``Image.MAX_IMAGE_PIXELS`` (which only warns below twice its value). A GIF, BMP, WebP or
   TIFF is checked against it from its header too, before it is refused as a format that
   is not stored as it is: a pixel bomb is ``too_large`` whatever its format.

A rejected image raises `ImageRejected` with a short ``reason`` code from `REASONS` and a
``detail`` sentence saying what is wrong and what to do. This module imports neither Beam nor
TensorFlow; it works on bytes so it serves a notebook or a data loader as well as a pipeline.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

from PIL import Image, JpegImagePlugin, PngImagePlugin

from recordbeam.images.jpeg_header import read_jpeg_header

REASONS = (
    "missing",
    "empty",
    "not_an_image",
    "truncated",
    "unsupported_format",
    "too_large",
    "corrupt",
    "unreadable",
)
"""Every reason code an `ImageRejected` can carry."""

SUPPORTED_FORMATS = ("jpeg", "png")
"""Formats accepted as they are; others need converting first."""

DEFAULT_MAX_PIXELS = 178_956_970
"""Largest width*height accepted by default: the same number as Pillow's own decompression-bomb
limit (``PIL.Image.MAX_IMAGE_PIXELS``), about 13,000 x 13,000 pixels or 0.5 GiB as RGB."""

DEFAULT_MAX_IMAGE_BYTES = 256 * 1024 * 1024
"""Files larger than this are rejected before they are read, so one stray video or
archive cannot exhaust a worker's memory. Real photos are far smaller."""

# How far from the end an end marker may sit, so that padding or junk some tools append after a
# complete image does not get the image rejected.
TRAILER_SEARCH_BYTES = 4096

_JPEG_EOI = b"\xff\xd9"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # zero length, type, and the CRC of "IEND"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_EXIF_ORIENTATION = 0x0112
# Sizes of the known BMP info headers; "BM" alone is too weak a magic (text can start with it).
_BMP_INFO_HEADER_SIZES = {12, 16, 40, 52, 56, 64, 108, 124}
_HEIF_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"}
_AVIF_BRANDS = {b"avif", b"avis"}


class ImageRejected(Exception):
    """An image that cannot be used as it is.

    Attributes:
      reason: one of `REASONS`, stable enough to count and filter on.
      detail: a sentence for a person: what is wrong and what to do about it.
      source: the file or record the bytes came from, when the caller knows it.
    """

    def __init__(self, reason: str, detail: str, source: str | None = None) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown image reject reason {reason!r}; expected one of {REASONS}")
        self.reason = reason
        self.detail = detail
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{reason}: {detail}")


@dataclass(frozen=True)
class ImageInfo:
    """What `inspect_image` learned from an image's header.

    Attributes:
      format: "jpeg" or "png", from the bytes (never from a file name).
      width, height: pixel size as stored, before any EXIF rotation.
      mode: Pillow's mode name, e.g. "RGB", "L", "CMYK", "P", "RGBA", "I;16".
      exif_orientation: the EXIF Orientation tag (1-8), or None when absent or out of range.
      trailing_bytes: bytes found after the end marker; 0 for a normal file.
    """

    format: str
    width: int
    height: int
    mode: str
    exif_orientation: int | None
    trailing_bytes: int


def sniff_format(data: bytes) -> str | None:
    """Names the image format of ``data`` from its magic bytes alone.

    Returns one of "jpeg", "png", "gif", "bmp", "webp", "tiff", "heif", "avif", or None when the
    bytes start like none of them. Only the first 18 bytes are looked at.
    """
    head = bytes(data[:18])
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(_PNG_SIGNATURE):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # classic and BigTIFF
        return "tiff"
    if head[:2] == b"BM" and len(head) >= 18:
        if int.from_bytes(head[14:18], "little") in _BMP_INFO_HEADER_SIZES:
            return "bmp"
    if head[4:8] == b"ftyp":
        if head[8:12] in _AVIF_BRANDS:
            return "avif"
        if head[8:12] in _HEIF_BRANDS:
            return "heif"
    return None


def inspect_image(
    data: bytes,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    verify_decode: bool = False,
) -> ImageInfo:
    """Checks that ``data`` is a complete JPEG or PNG and reads its header.

    Args:
      data: the encoded image. ``bytes`` is read without copying; a ``bytearray`` or
        ``memoryview`` is copied once.
      max_pixels: reject images whose width*height exceeds this (reason "too_large");
        None accepts any size. The check uses the header only, so a huge image costs nothing.
      verify_decode: also decode every pixel, turning decoder errors into "truncated" or
        "corrupt". Costs a full decode (milliseconds per photo); off by default.

    Returns:
      An `ImageInfo`.

    Raises:
      ImageRejected: with reason "empty", "not_an_image", "unsupported_format", "truncated",
        "too_large" or "corrupt". Bytes whose magic says JPEG or PNG but whose header Pillow
        cannot parse are "corrupt", not "not_an_image": they claim to be an image and are damaged.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    if not data:
        raise ImageRejected("empty", "the file is empty (0 bytes); re-copy it from the source.")
    fmt = sniff_format(data)
    if fmt is None:
        raise ImageRejected(
            "not_an_image",
            f"the bytes start with {data[:8].hex(' ')}, which is not the start of any known "
            "image format; check that the file really holds an image.",
        )
    if fmt not in SUPPORTED_FORMATS:
        declared = declared_size(data, fmt) if max_pixels is not None else None
        if declared is not None:
            _check_pixels(fmt, *declared, max_pixels)
        raise ImageRejected(
            "unsupported_format",
            f"the bytes are {fmt.upper()}, but only JPEG and PNG are stored as they are; "
            "pass --transcode jpeg (or --transcode png) to have it converted, or convert it first.",
        )
    trailing = _trailing_bytes(data, fmt)
    # Our own JPEG header reader answers for plain headers at a fraction of Pillow's cost; it
    # returns None for anything else, and Pillow then decides (and words any rejection).
    header = read_jpeg_header(data) if fmt == "jpeg" and not verify_decode else None
    if header is not None:
        _check_size(fmt, header.width, header.height, max_pixels)
        return ImageInfo(
            format=fmt,
            width=header.width,
            height=header.height,
            mode=header.mode,
            exif_orientation=header.exif_orientation,
            trailing_bytes=trailing,
        )
    with _open_header(data, fmt) as image:
        width, height = image.size
        mode = image.mode
        _check_size(fmt, width, height, max_pixels)
        orientation = _exif_orientation(image)
        if verify_decode:
            _decode_all(image, fmt)
    return ImageInfo(
        format=fmt,
        width=width,
        height=height,
        mode=mode,
        exif_orientation=orientation,
        trailing_bytes=trailing,
    )


def rejection_for_os_error(path: str, error: OSError) -> ImageRejected:
    """Turns an error reading an image file into an `ImageRejected` naming the file.

    A missing file gives reason "missing"; any other OS error (a directory, no permission, an
    I/O error) gives "unreadable".
    """
    if isinstance(error, FileNotFoundError):
        return ImageRejected(
            "missing",
            "no file at this path; the annotations list it, so check the image directory "
            "and the file name.",
            source=path,
        )
    return ImageRejected(
        "unreadable",
        f"the file could not be read ({error.strerror or error}); check its permissions and "
        "that it is a regular file.",
        source=path,
    )


def inspect_file(
    path: str | os.PathLike[str],
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    verify_decode: bool = False,
) -> ImageInfo:
    """Reads a local file and runs `inspect_image` on it; rejections name the file.

    Adds the reasons "missing" (no such file) and "unreadable" (any other OS error).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as e:
        raise rejection_for_os_error(name, e) from e
    try:
        return inspect_image(data, max_pixels=max_pixels, verify_decode=verify_decode)
    except ImageRejected as e:
        raise ImageRejected(e.reason, e.detail, source=name) from None


def describe_bytes(data: bytes) -> str:
    """A short label for bytes, for a CLI listing; never raises.

    "<jpeg 640x480, 96.2 KiB>" for a good image, "<jpeg, truncated, 1.2 KiB>" for a rejected
    one whose format is known, "<1.2 KiB of bytes>" for anything else.
    """
    try:
        size = human_bytes(len(data))
        try:
            info = inspect_image(data, max_pixels=None)
        except ImageRejected as e:
            fmt = sniff_format(data)
            if fmt is None:
                return f"<{size} of bytes>"
            return f"<{fmt}, {e.reason}, {size}>"
        return f"<{info.format} {info.width}x{info.height}, {size}>"
    except Exception:  # a label must never break the listing it is part of
        return "<unknown bytes>"


def human_bytes(n: int) -> str:
    """Formats a byte count with binary units: "12 B", "96.2 KiB", "1.0 MiB"."""
    if n < 0:
        raise ValueError(f"a byte count cannot be negative, got {n}")
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        # Move up a unit rather than print "1024.0 KiB".
        if round(value, 1) < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def _trailing_bytes(data: bytes, fmt: str) -> int:
    """Counts bytes after the end marker, or raises "truncated" when there is no end marker."""
    if fmt == "jpeg":
        marker = _JPEG_EOI
        # An EXIF thumbnail carries its own FF D9 before the first scan; only look after it.
        floor = _jpeg_scan_start(data)
    else:
        marker = _PNG_IEND
        floor = len(_PNG_SIGNATURE)
    if data.endswith(marker):
        return 0
    start = max(floor, len(data) - TRAILER_SEARCH_BYTES - len(marker))
    found = data.rfind(marker, start)
    if found < 0:
        what = "the JPEG end marker (FF D9)" if fmt == "jpeg" else "the PNG IEND chunk"
        raise ImageRejected(
            "truncated",
            f"{what} is neither at the end nor within the last {TRAILER_SEARCH_BYTES} bytes, so "
            "the file was cut short (an interrupted download or copy); fetch it again.",
        )
    return len(data) - found - len(marker)


def _jpeg_scan_start(data: bytes) -> int:
    """Offset of the first start-of-scan marker, found by skipping the header segments.

    Falls back to 2 (just after SOI) when the segments cannot be walked; Pillow then judges the
    header. A header that runs past the end of the data is reported as truncated.
    """
    pos = 2
    size = len(data)
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return 2
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
        elif marker == 0xDA or marker == 0xD9:  # start of scan, or an image with no scan
            return pos
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
        else:
            pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    raise ImageRejected(
        "truncated",
        f"the JPEG header runs past the end of the data ({size} bytes) before any image data; "
        "the file was cut short, fetch it again.",
    )


def _check_size(fmt: str, width: int, height: int, max_pixels: int | None) -> None:
    """Rejects a header size of zero pixels, or one above ``max_pixels``."""
    if width <= 0 or height <= 0:
        raise ImageRejected(
            "corrupt",
            f"the {fmt.upper()} header says the image is {width}x{height} pixels; "
            "the file is damaged, re-export it.",
        )
    if max_pixels is not None:
        _check_pixels(fmt, width, height, max_pixels)


def _check_pixels(fmt: str, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise ImageRejected(
            "too_large",
            f"the image is {width}x{height} = {width * height:,} pixels, above the limit of "
            f"{max_pixels:,}; raise --max-pixels (0: no limit) if images this big are "
            "expected, or downscale the image.",
        )


def open_header(data: bytes, fmt: str) -> Image.Image:
    """The image parsed by the Pillow plugin of ``fmt`` (a name `sniff_format` gives), its
    pixels not decoded; raises what the plugin raises.

    The plugin class is built directly rather than through ``Image.open``: the format is already
    known, and ``Image.open`` would apply the process-global decompression-bomb limit (a warning,
    or an error at twice the limit) that `inspect_image` replaces with its own ``max_pixels``.
    Only a format no plugin is registered under (HEIF, unless a plugin added it) goes
    through ``Image.open``, which tries every plugin.
    """
    if fmt == "jpeg":
        return JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    if fmt == "png":
        return PngImagePlugin.PngImageFile(io.BytesIO(data))
    Image.init()  # every plugin registered (Image.open does the same)
    if fmt.upper() not in Image.OPEN:
        return Image.open(io.BytesIO(data))
    factory, _accept = Image.OPEN[fmt.upper()]
    return factory(io.BytesIO(data))


def declared_size(data: bytes, fmt: str) -> tuple[int, int] | None:
    """The ``(width, height)`` the header of a GIF, BMP, TIFF or WebP (``fmt``) declares,
    read without decoding or allocating pixels; None when it cannot be read (the converter
    then says why)."""
    if fmt == "webp":
        # Pillow's WebP plugin opens a decoder that allocates the whole canvas: the
        # header's few bytes are read here instead.
        return _webp_size(data)
    try:
        with open_header(data, fmt) as image:
            return image.size
    except Exception:  # Pillow signals bad headers with many exception types
        return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    """The canvas of an extended WebP (``VP8X``), else the size of its one lossless
    (``VP8L``) or lossy (``VP8 ``) bitstream."""
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return (1 + int.from_bytes(data[24:27], "little"),
                1 + int.from_bytes(data[27:30], "little"))
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return (int.from_bytes(data[26:28], "little") & 0x3FFF,
                int.from_bytes(data[28:30], "little") & 0x3FFF)
    return None


def _open_header(data: bytes, fmt: str) -> Image.Image:
    """Parses a JPEG or PNG header with Pillow (`open_header`), leaving pixels undecoded;
    a header Pillow cannot parse is ``corrupt``."""
    try:
        return open_header(data, fmt)
    except Exception as e:  # Pillow signals bad headers with many exception types
        raise ImageRejected(
            "corrupt",
            f"the {fmt.upper()} header cannot be parsed ({e}); "
            "the file is damaged, re-export or re-download it.",
        ) from e


def _exif_orientation(image: Image.Image) -> int | None:
    """The EXIF Orientation (1-8) from the already parsed header, or None.

    For PNG, only an eXIf chunk before the pixel data is seen: Pillow's PNG ``getexif`` would
    otherwise decode the whole image to look for one after it.
    """
    if isinstance(image, PngImagePlugin.PngImageFile) and "exif" not in image.info:
        return None
    try:
        value = image.getexif().get(_EXIF_ORIENTATION)
    except Exception:  # a damaged EXIF block should not cost us an image that decodes fine
        return None
    if isinstance(value, int) and 1 <= value <= 8:
        return value
    return None


def _decode_all(image: Image.Image, fmt: str) -> None:
    """Decodes every pixel, turning decoder errors into rejections."""
    try:
        image.load()
    except Exception as e:
        reason = "truncated" if "truncated" in str(e) else "corrupt"
        raise ImageRejected(
            reason,
            f"the {fmt.upper()} pixel data does not decode ({e}); "
            "re-export or re-download the image.",
        ) from e
