"""Unit tests for recordbeam.images.checks: every reject reason, from bytes made here."""

from __future__ import annotations

import io
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples
from PIL import Image, ImageFile

from recordbeam.images.checks import (
    DEFAULT_MAX_PIXELS,
    REASONS,
    TRAILER_SEARCH_BYTES,
    ImageInfo,
    ImageRejected,
    describe_bytes,
    human_bytes,
    inspect_file,
    inspect_image,
    sniff_format,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def encode(fmt: str, size=(64, 48), mode="RGB", **options) -> bytes:
    """A small noisy image in ``fmt``, so JPEG data is not trivially short."""
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    if mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(4, "big")
        + kind
        + payload
        + zlib.crc32(kind + payload).to_bytes(4, "big")
    )


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose IHDR says width x height (8-bit grayscale) with only a few bytes of pixels."""
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    return (
        PNG_SIGNATURE
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\x00" * 32))
        + png_chunk(b"IEND", b"")
    )


def reason_of(data: bytes, **kwargs) -> str:
    with pytest.raises(ImageRejected) as caught:
        inspect_image(data, **kwargs)
    assert caught.value.reason in REASONS
    assert caught.value.detail  # every rejection explains itself
    return caught.value.reason


# --- formats -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pillow_format", "expected"),
    [
        ("JPEG", "jpeg"),
        ("PNG", "png"),
        ("GIF", "gif"),
        ("BMP", "bmp"),
        ("WEBP", "webp"),
        ("TIFF", "tiff"),
    ],
)
def test_sniff_format_names_what_pillow_wrote(pillow_format, expected):
    assert sniff_format(encode(pillow_format)) == expected


def test_sniff_format_reads_heif_and_avif_brands():
    assert sniff_format(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00") == "heif"
    assert sniff_format(b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00") == "avif"
    assert sniff_format(b"\x00\x00\x00\x18ftypisom\x00\x00\x00\x00") is None  # an MP4


def test_sniff_format_does_not_take_text_starting_with_bm_for_a_bitmap():
    assert sniff_format(b"BMW and other cars, a list\n") is None
    assert sniff_format(b"") is None
    assert sniff_format(b"plain text") is None


def test_png_behind_a_jpg_name_is_a_png(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(encode("PNG"))
    info = inspect_file(path)
    assert info.format == "png"
    assert (info.width, info.height) == (64, 48)


@pytest.mark.parametrize(
    ("pillow_format", "mode"),
    [
        ("JPEG", "RGB"),
        ("JPEG", "L"),
        ("JPEG", "CMYK"),
        ("PNG", "RGBA"),
        ("PNG", "P"),
        ("PNG", "I;16"),
    ],
)
def test_good_images_report_size_and_mode(pillow_format, mode):
    info = inspect_image(encode(pillow_format, size=(40, 30), mode=mode))
    assert info == ImageInfo(
        format=pillow_format.lower(),
        width=40,
        height=30,
        mode=mode,
        exif_orientation=None,
        trailing_bytes=0,
    )


def test_bytearray_and_memoryview_are_accepted():
    data = encode("JPEG")
    assert inspect_image(bytearray(data)).width == 64
    assert inspect_image(memoryview(data)).height == 48


# --- every reason code -----------------------------------------------------------------------


def test_empty():
    assert reason_of(b"") == "empty"


def test_not_an_image():
    assert reason_of(b"name,width\ncat.jpg,640\n") == "not_an_image"


@pytest.mark.parametrize("pillow_format", ["GIF", "BMP", "WEBP", "TIFF"])
def test_unsupported_format_names_the_format_and_the_way_out(pillow_format):
    with pytest.raises(ImageRejected) as caught:
        inspect_image(encode(pillow_format))
    assert caught.value.reason == "unsupported_format"
    assert pillow_format in caught.value.detail
    assert "--transcode" in caught.value.detail


@pytest.mark.parametrize("pillow_format", ["JPEG", "PNG"])
def test_truncated_when_the_end_marker_is_cut_off(pillow_format):
    data = encode(pillow_format)
    assert reason_of(data[: len(data) // 2]) == "truncated"
    assert reason_of(data[:-1]) == "truncated"


def test_truncated_when_a_jpeg_header_runs_past_the_end():
    data = encode("JPEG")
    assert reason_of(data[:30]) == "truncated"


def test_an_exif_thumbnail_end_marker_does_not_hide_truncation():
    # An APP1 segment whose payload holds FF D9, as an embedded thumbnail does.
    payload = b"Exif\x00\x00" + b"\xff\xd8" + b"\x10" * 40 + b"\xff\xd9"
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    data = encode("JPEG")
    with_thumbnail = data[:2] + app1 + data[2:]
    assert inspect_image(with_thumbnail).trailing_bytes == 0
    assert reason_of(with_thumbnail[: len(with_thumbnail) - 200]) == "truncated"


def test_too_large_reads_only_the_header_of_a_20000_square_png():
    data = png_claiming(20000, 20000)
    assert len(data) < 200
    with pytest.raises(ImageRejected) as caught:
        inspect_image(data)
    assert caught.value.reason == "too_large"
    assert "400,000,000" in caught.value.detail
    assert f"{DEFAULT_MAX_PIXELS:,}" in caught.value.detail
    assert "--max-pixels" in caught.value.detail  # the flag, as typed
    # With no limit the header is accepted: decoding 400 MB from 32 bytes would have failed.
    info = inspect_image(data, max_pixels=None)
    assert (info.width, info.height, info.mode) == (20000, 20000, "L")


def claiming(kind: str, width: int, height: int) -> bytes:
    """A small GIF, BMP, TIFF or WebP (``WEBP VP8X``, ``WEBP VP8L``, ``WEBP VP8``: its
    extended, lossless or lossy header) whose header says ``width`` x ``height``."""
    if kind == "WEBP VP8X":  # the header alone: the canvas is all a decoder needs to allocate
        chunk = b"VP8X" + (10).to_bytes(4, "little") + bytes(4) + (
            (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little"))
        return b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + chunk
    pillow_format, _, webp_kind = kind.partition(" ")
    out = io.BytesIO()
    Image.new("RGB", (16, 16)).save(out, pillow_format, lossless=webp_kind == "VP8L")
    data = bytearray(out.getvalue())
    if kind == "GIF":  # the logical screen
        data[6:10] = width.to_bytes(2, "little") + height.to_bytes(2, "little")
    elif kind == "BMP":
        data[18:26] = width.to_bytes(4, "little") + height.to_bytes(4, "little")
    elif kind == "TIFF":  # ImageWidth and ImageLength of the first IFD, as LONGs
        ifd = int.from_bytes(data[4:8], "little")
        for entry in range(ifd + 2, ifd + 2 + 12 * int.from_bytes(data[ifd:ifd + 2], "little"), 12):
            tag = int.from_bytes(data[entry:entry + 2], "little")
            if tag in (256, 257):
                data[entry + 2:entry + 4] = (4).to_bytes(2, "little")
                data[entry + 8:entry + 12] = (width if tag == 256 else height).to_bytes(4, "little")
    elif kind == "WEBP VP8L":
        bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1)
        data[21:25] = (bits | (width - 1) | (height - 1) << 14).to_bytes(4, "little")
    elif kind == "WEBP VP8":
        data[26:30] = width.to_bytes(2, "little") + height.to_bytes(2, "little")
    return bytes(data)


@pytest.mark.case("GIF, BMP, TIFF or WebP header claiming more pixels than the limit "
                  "(65535 x 65535; WebP's 16383 x 16383)",
                  "reject `too_large` from the header, as PNG and JPEG, not `unsupported_format`")
@pytest.mark.parametrize("kind", ["GIF", "BMP", "TIFF", "WEBP VP8X", "WEBP VP8L", "WEBP VP8"])
def test_a_foreign_format_claiming_too_many_pixels_is_too_large(kind):
    side = 16383 if kind in ("WEBP VP8L", "WEBP VP8") else 65535  # their largest
    data = claiming(kind, side, side)
    with pytest.raises(ImageRejected) as caught:
        inspect_image(data)
    assert caught.value.reason == "too_large"
    assert f"{side}x{side} = {side * side:,} pixels" in caught.value.detail
    assert "--max-pixels" in caught.value.detail
    # Within the limit the format is what is refused (--transcode converts it).
    assert reason_of(claiming(kind, 16, 16)) == "unsupported_format"


def test_max_pixels_is_compared_to_width_times_height():
    data = encode("JPEG", size=(40, 30))
    assert inspect_image(data, max_pixels=1200).width == 40
    assert reason_of(data, max_pixels=1199) == "too_large"


def test_no_pillow_decompression_bomb_warning_or_error(recwarn):
    # Between Pillow's limit and twice it Image.open warns; above twice it raises.
    warnings.simplefilter("always")
    for side in (15000, 30000):
        info = inspect_image(png_claiming(side, side), max_pixels=None)
        assert info.width == side
    assert [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)] == []


def test_pillow_globals_are_left_alone():
    before = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)
    inspect_image(png_claiming(20000, 20000), max_pixels=None)
    reason_of(png_claiming(64, 64), verify_decode=True)
    assert (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES) == before


def test_corrupt_jpeg_header_with_zero_width():
    data = encode("JPEG")
    sof = data.find(b"\xff\xc0")
    broken = data[: sof + 7] + b"\x00\x00" + data[sof + 9 :]
    assert reason_of(broken) == "corrupt"


def test_corrupt_png_header_with_zero_width():
    assert reason_of(png_claiming(0, 10)) == "corrupt"


def test_corrupt_when_magic_matches_but_the_header_is_junk():
    junk = b"\xff\xd8\xff" + bytes(range(1, 200)) + b"\xff\xd9"
    assert reason_of(junk) == "corrupt"
    bad_ihdr_crc = bytearray(encode("PNG"))
    bad_ihdr_crc[29] ^= 0xFF  # last byte of the IHDR CRC
    assert reason_of(bytes(bad_ihdr_crc)) == "corrupt"


def test_verify_decode_finds_short_pixel_data_as_truncated():
    data = png_claiming(64, 64)
    assert inspect_image(data).width == 64  # the header alone looks fine
    assert reason_of(data, verify_decode=True) == "truncated"


def test_verify_decode_finds_broken_compressed_data_as_corrupt():
    data = bytearray(encode("PNG"))
    idat = data.find(b"IDAT")
    data[idat + 10 : idat + 40] = b"\xff" * 30
    assert inspect_image(bytes(data)).format == "png"
    assert reason_of(bytes(data), verify_decode=True) == "corrupt"


def test_verify_decode_accepts_good_images():
    assert inspect_image(encode("JPEG"), verify_decode=True).width == 64
    assert inspect_image(encode("PNG", mode="P"), verify_decode=True).mode == "P"


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "gone.jpg"
    with pytest.raises(ImageRejected) as caught:
        inspect_file(path)
    assert caught.value.reason == "missing"
    assert str(path) in str(caught.value)


def test_unreadable_when_the_path_is_a_directory(tmp_path):
    with pytest.raises(ImageRejected) as caught:
        inspect_file(tmp_path)
    assert caught.value.reason == "unreadable"
    assert caught.value.source == str(tmp_path)


def test_inspect_file_names_the_file_in_byte_rejections(tmp_path):
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    with pytest.raises(ImageRejected) as caught:
        inspect_file(path)
    assert caught.value.reason == "empty"
    assert str(caught.value).startswith(f"{path}: empty: ")


def test_every_reason_code_is_covered_by_these_tests():
    produced = {
        "missing",  # test_missing_file_names_the_path
        "unreadable",  # test_unreadable_when_the_path_is_a_directory
        reason_of(b""),
        reason_of(b"text"),
        reason_of(encode("JPEG")[:-2]),
        reason_of(encode("GIF")),
        reason_of(png_claiming(20000, 20000)),
        reason_of(png_claiming(0, 1)),
    }
    assert produced == set(REASONS)


def test_unknown_reason_is_refused():
    with pytest.raises(ValueError, match="unknown image reject reason"):
        ImageRejected("blurry", "too blurry")


# --- EXIF and trailing bytes -----------------------------------------------------------------


def test_exif_orientation_is_read_from_a_jpeg():
    exif = Image.Exif()
    exif[0x0112] = 6
    assert inspect_image(encode("JPEG", exif=exif)).exif_orientation == 6
    assert inspect_image(encode("JPEG")).exif_orientation is None


def test_exif_orientation_out_of_range_counts_as_absent():
    exif = Image.Exif()
    exif[0x0112] = 42
    assert inspect_image(encode("JPEG", exif=exif)).exif_orientation is None


def test_exif_orientation_is_read_from_a_png_exif_chunk():
    exif = Image.Exif()
    exif[0x0112] = 3
    assert inspect_image(encode("PNG", exif=exif)).exif_orientation == 3


@pytest.mark.parametrize("pillow_format", ["JPEG", "PNG"])
def test_trailing_junk_is_accepted_and_counted(pillow_format):
    data = encode(pillow_format)
    assert inspect_image(data + b"\x00" * 100).trailing_bytes == 100
    assert inspect_image(data + b"junk").trailing_bytes == 4


@pytest.mark.parametrize("pillow_format", ["JPEG", "PNG"])
def test_trailing_junk_beyond_the_search_window_reads_as_truncated(pillow_format):
    data = encode(pillow_format) + b"\x00" * (TRAILER_SEARCH_BYTES + 1)
    assert reason_of(data) == "truncated"


# --- robustness ------------------------------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(
    prefix=st.sampled_from([b"", b"\xff\xd8\xff", PNG_SIGNATURE, b"GIF89a"]),
    body=st.binary(max_size=300),
)
def test_arbitrary_bytes_either_pass_or_are_rejected_never_crash(prefix, body):
    data = prefix + body
    try:
        info = inspect_image(data, verify_decode=True)
    except ImageRejected as e:
        assert e.reason in REASONS
    else:
        assert info.width > 0 and info.height > 0
    assert describe_bytes(data).startswith("<")


@settings(max_examples=examples(100), deadline=None)
@given(cut=st.integers(min_value=0, max_value=1000))
def test_any_cut_of_a_jpeg_is_rejected(cut):
    data = encode("JPEG", size=(32, 32))
    cut = min(cut, len(data) - 1)
    with pytest.raises(ImageRejected):
        inspect_image(data[:cut])


# --- describe_bytes and human_bytes ----------------------------------------------------------


def test_describe_bytes_for_images_and_other_bytes():
    jpeg = encode("JPEG", size=(40, 30))
    assert describe_bytes(jpeg) == f"<jpeg 40x30, {len(jpeg) / 1024:.1f} KiB>"
    assert describe_bytes(b"x" * 12) == "<12 B of bytes>"
    assert describe_bytes(b"x" * 1229) == "<1.2 KiB of bytes>"
    truncated = jpeg[:100]
    assert describe_bytes(truncated) == "<jpeg, truncated, 100 B>"
    assert describe_bytes(png_claiming(20000, 20000)).startswith("<png 20000x20000, ")


def test_describe_bytes_never_raises_on_odd_input():
    assert describe_bytes(None) == "<unknown bytes>"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (12, "12 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (98_509, "96.2 KiB"),
        (1024 * 1024 - 1, "1.0 MiB"),
        (1024**2, "1.0 MiB"),
        (5 * 1024**3, "5.0 GiB"),
        (3 * 1024**5, "3072.0 TiB"),
    ],
)
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_human_bytes_refuses_negative_counts():
    with pytest.raises(ValueError):
        human_bytes(-1)
