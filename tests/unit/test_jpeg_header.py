"""Our JPEG header reader against Pillow's: same answers, and never accepting what Pillow refuses."""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from PIL import Image

from recordbeam.images import checks
from recordbeam.images.checks import ImageInfo, ImageRejected, inspect_image
from recordbeam.images.jpeg_header import read_jpeg_header
from recordbeam.testing.samples import make_coco_sample, odd_image

_ORIENTATION = 0x0112


@contextmanager
def _pillow_only() -> Iterator[None]:
    """Runs `inspect_image` as it was before our reader: every JPEG header through Pillow."""
    original = checks.read_jpeg_header
    checks.read_jpeg_header = lambda data: None
    try:
        yield
    finally:
        checks.read_jpeg_header = original


def _outcome(data: bytes) -> ImageInfo | tuple[str, str]:
    try:
        return inspect_image(data)
    except ImageRejected as e:
        return (e.reason, e.detail)


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def _after_soi(jpeg: bytes, *segments: bytes) -> bytes:
    return jpeg[:2] + b"".join(segments) + jpeg[2:]


def _tiff(byte_order: str, ifd0: list[tuple[int, int, int, bytes]], ifd1=None, tail=b""):
    """A TIFF block: IFD0 entries (tag, type, count, 4 value bytes), an optional IFD1 after it."""
    prefix = b"II*\x00" if byte_order == "<" else b"MM\x00*"
    ifd1_at = 8 + 2 + 12 * len(ifd0) + 4
    out = prefix + struct.pack(byte_order + "L", 8) + struct.pack(byte_order + "H", len(ifd0))
    for tag, field_type, count, value in ifd0:
        out += struct.pack(byte_order + "HHL", tag, field_type, count) + value
    out += struct.pack(byte_order + "L", ifd1_at if ifd1 else 0)
    if ifd1:
        out += struct.pack(byte_order + "H", len(ifd1))
        for tag, field_type, count, value in ifd1:
            out += struct.pack(byte_order + "HHL", tag, field_type, count) + value
        out += struct.pack(byte_order + "L", 0)
    return out + tail


def _short(byte_order: str, value: int) -> bytes:
    return struct.pack(byte_order + "HH", value, 0)


def _jpeg(mode: str = "RGB", size: tuple[int, int] = (40, 30), **options) -> bytes:
    image = Image.new("RGB", size, (200, 40, 90)).convert(mode)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, **options)
    return out.getvalue()


def _with_thumbnail(byte_order: str, orientation: int) -> bytes:
    """An EXIF block whose IFD1 points at an embedded thumbnail JPEG (with its own FF D9)."""
    thumbnail = _jpeg(size=(8, 6))
    ifd0 = [(_ORIENTATION, 3, 1, _short(byte_order, orientation))]
    ifd1_size = 2 + 12 * 2 + 4
    thumb_at = 8 + 2 + 12 + 4 + ifd1_size
    ifd1 = [
        (0x0201, 4, 1, struct.pack(byte_order + "L", thumb_at)),
        (0x0202, 4, 1, struct.pack(byte_order + "L", len(thumbnail))),
    ]
    return _tiff(byte_order, ifd0, ifd1, tail=thumbnail)


def _dpi_tags(byte_order: str, orientation: int) -> bytes:
    """IFD0 with XResolution (a rational stored after the IFD), ResolutionUnit, Orientation."""
    rational_at = 8 + 2 + 12 * 3 + 4
    ifd0 = [
        (_ORIENTATION, 3, 1, _short(byte_order, orientation)),
        (0x011A, 5, 1, struct.pack(byte_order + "L", rational_at)),
        (0x0128, 3, 1, _short(byte_order, 2)),
    ]
    return _tiff(byte_order, ifd0, tail=struct.pack(byte_order + "LL", 300, 1))


def _make_before_orientation(byte_order: str) -> bytes:
    """IFD0 with a camera make stored out of line before the orientation, as cameras sort it."""
    make_at = 8 + 2 + 12 * 2 + 4
    ifd0 = [
        (0x010F, 2, 8, struct.pack(byte_order + "L", make_at)),
        (_ORIENTATION, 3, 1, _short(byte_order, 3)),
    ]
    return _tiff(byte_order, ifd0, tail=b"Camera\0\0")


def _hand_made_jpegs() -> dict[str, bytes]:
    base = _jpeg()
    xmp = b'http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta><rdf:Description tiff:Orientation="3"/>'
    icc = b"ICC_PROFILE\x00\x01\x01" + bytes(64)
    return {
        "progressive": _jpeg(progressive=True),
        "progressive_gray": _jpeg("L", progressive=True),
        "subsampling_444_optimized": _jpeg(subsampling=0, optimize=True),
        "restart_interval": _jpeg(restart_marker_blocks=1),
        "comment": _jpeg(comment=b"made by a test"),
        "jfif_dpi": _jpeg(dpi=(300, 300)),
        "cmyk": _jpeg("CMYK"),
        "exif_big_endian": _after_soi(base, _segment(0xE1, b"Exif\0\0" + _dpi_tags(">", 8))),
        "exif_little_endian": _after_soi(base, _segment(0xE1, b"Exif\0\0" + _dpi_tags("<", 5))),
        "exif_make_before_orientation": _after_soi(
            base, _segment(0xE1, b"Exif\0\0" + _make_before_orientation("<"))
        ),
        "exif_thumbnail_be": _after_soi(
            base, _segment(0xE1, b"Exif\0\0" + _with_thumbnail(">", 6))
        ),
        "exif_thumbnail_le": _after_soi(
            base, _segment(0xE1, b"Exif\0\0" + _with_thumbnail("<", 7))
        ),
        "exif_orientation_out_of_range": _after_soi(
            base, _segment(0xE1, b"Exif\0\0" + _tiff("<", [(_ORIENTATION, 3, 1, _short("<", 9))]))
        ),
        "xmp_orientation": _after_soi(base, _segment(0xE1, xmp)),
        "exif_without_orientation_and_xmp": _after_soi(
            base,
            _segment(0xE1, b"Exif\0\0" + _tiff("<", [(0x0131, 2, 4, b"abc\0")])),
            _segment(0xE1, xmp),
        ),
        "icc_profile": _after_soi(base, _segment(0xE2, icc)),
        "damaged_exif_header": _after_soi(base, _segment(0xE1, b"Exif\0\0XX*\0\0\0\0\x08")),
        "photoshop_block": _after_soi(base, _segment(0xED, b"Photoshop 3.0\x008BIM\x04\x04\x00")),
        "fill_bytes_before_marker": base[:2] + b"\xff\xff" + base[2:],
    }


def _sample_jpegs(tmp_path: Path) -> dict[str, bytes]:
    jpegs = {kind: odd_image(kind) for kind in ("rgb_jpeg", "gray_jpeg", "cmyk_jpeg", "exif6_jpeg")}
    sample = make_coco_sample(tmp_path / "coco", num_images=12)
    for path in sorted(Path(sample.images_dir).iterdir()):
        data = path.read_bytes()
        if data.startswith(b"\xff\xd8\xff"):
            jpegs[f"coco/{path.name}"] = data
    jpegs.update(_hand_made_jpegs())
    return jpegs


def test_our_reader_and_pillow_agree_on_every_sample_jpeg(tmp_path: Path) -> None:
    jpegs = _sample_jpegs(tmp_path)
    with _pillow_only():
        expected = {name: _outcome(data) for name, data in jpegs.items()}
    fast = set()
    for name, data in jpegs.items():
        assert _outcome(data) == expected[name], name
        if read_jpeg_header(data) is not None:
            fast.add(name)
    # The reader must really answer for the common kinds, not hand everything to Pillow.
    must_be_fast = {
        "rgb_jpeg", "gray_jpeg", "cmyk_jpeg", "exif6_jpeg", "progressive", "progressive_gray",
        "subsampling_444_optimized", "restart_interval", "comment", "jfif_dpi", "cmyk",
        "exif_big_endian", "exif_little_endian", "exif_thumbnail_be", "exif_thumbnail_le",
        "exif_orientation_out_of_range", "xmp_orientation", "exif_make_before_orientation", "exif_without_orientation_and_xmp",
        "icc_profile",
    }  # fmt: skip
    assert must_be_fast <= fast, must_be_fast - fast
    assert any(name.startswith("coco/") for name in fast)
    # And the sample set covers what it claims to.
    infos = {name: info for name, info in expected.items() if isinstance(info, ImageInfo)}
    assert infos["exif_big_endian"].exif_orientation == 8
    assert infos["exif_thumbnail_le"].exif_orientation == 7
    assert infos["xmp_orientation"].exif_orientation == 3
    assert infos["exif_orientation_out_of_range"].exif_orientation is None
    assert infos["damaged_exif_header"].exif_orientation is None
    assert {infos["cmyk"].mode, infos["gray_jpeg"].mode, infos["rgb_jpeg"].mode} == {
        "CMYK", "L", "RGB"
    }  # fmt: skip


def _segments(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each header segment up to and including the start of scan."""
    found = []
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        end = pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        found.append((pos, end))
        if data[pos + 1] == 0xDA:
            break
        pos = end
    return found


_INSERTABLE_MARKERS = [
    0xC0,
    0xC2,
    0xC4,
    0xC8,
    0xD0,
    0xD9,
    0xDB,
    0xDD,
    0xDE,
    0xE0,
    0xE1,
    0xE2,
    0xED,
    0xEE,
    0xFE,
] + [0x01, 0x02, 0xBF, 0xF0, 0xFF, 0x00]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    segments = _segments(data)
    header_end = segments[-1][1]
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        segments = _segments(bytes(out)) or segments
        choice = rng.randrange(8)
        at = rng.randrange(2, max(3, min(header_end, len(out) - 1)))
        start, end = rng.choice(segments)
        end = min(end, len(out))
        if rng.random() < 0.5:  # most fields that matter sit in the first bytes of a segment
            at = min(rng.randrange(start + 4, start + 16), len(out) - 1)
        if choice == 0:  # a random byte
            out[at] = rng.randrange(256)
        elif choice == 1:  # one bit
            out[at] ^= 1 << rng.randrange(8)
        elif choice == 2:  # a length field off by a little or a lot
            delta = rng.choice([-3, -2, -1, 1, 2, 3, rng.randrange(-400, 400)])
            length = max(0, min(0xFFFF, int.from_bytes(out[start + 2 : start + 4], "big") + delta))
            out[start + 2 : start + 4] = length.to_bytes(2, "big")
        elif choice == 3:  # a segment removed
            del out[start:end]
        elif choice == 4 and end > start + 2:  # a segment cut short, the rest of the file kept
            del out[rng.randrange(start + 2, end) : end]
        elif choice == 5:  # a segment inserted: random, or a copy of one already there
            if rng.random() < 0.5:
                payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
                new = _segment(rng.choice(_INSERTABLE_MARKERS), payload)
            else:
                new = bytes(out[start:end])
            out[start:start] = new
        elif choice == 6:  # the file cut inside the header
            del out[rng.randrange(2, max(3, min(header_end, len(out)))) :]
        elif end > start + 4:  # a segment shortened consistently: length and content
            keep = rng.randrange(0, end - start - 4)
            del out[start + 4 + keep : end]
            out[start + 2 : start + 4] = (keep + 2).to_bytes(2, "big")
        if len(out) < 4 or out[2] != 0xFF:
            break
    return bytes(out)


def _fuzz_bases() -> list[bytes]:
    made = _hand_made_jpegs()
    return [
        odd_image("rgb_jpeg", 24, 16),
        odd_image("gray_jpeg", 24, 16),
        odd_image("cmyk_jpeg", 24, 16),
        odd_image("exif6_jpeg", 24, 16),
        made["progressive"],
        made["exif_big_endian"],
        made["exif_thumbnail_le"],
        made["exif_make_before_orientation"],
        made["exif_without_orientation_and_xmp"],
        made["icc_profile"],
    ]


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow warns about each damaged EXIF
def test_mutated_headers_give_the_same_answer_as_pillow() -> None:
    """Thousands of damaged headers: whatever Pillow says (reject and why, or the header's
    size, mode and orientation), `inspect_image` with our reader says the same."""
    rng = random.Random(20261123)
    mutants = [_mutate(rng, base) for base in _fuzz_bases() for _ in range(400)]
    with _pillow_only():
        expected = [_outcome(data) for data in mutants]
    answered_by_us = 0
    for data, want in zip(mutants, expected, strict=True):
        got = _outcome(data)
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and got[0] == want[0], (data[:200].hex(), want, got)
        else:
            assert got == want, (data[:200].hex(), want, got)
        if data.startswith(b"\xff\xd8\xff") and read_jpeg_header(data) is not None:
            answered_by_us += 1
    rejected = sum(isinstance(want, tuple) for want in expected)
    # The mutations must exercise both sides: many rejected by Pillow, many read by us.
    assert rejected > len(mutants) // 5, rejected
    assert answered_by_us > len(mutants) // 5, answered_by_us


@pytest.mark.parametrize("orientation", [1, 6])
def test_verify_decode_still_decodes_with_pillow(orientation: int) -> None:
    good = _after_soi(
        _jpeg(),
        _segment(0xE1, b"Exif\0\0" + _tiff(">", [(_ORIENTATION, 3, 1, _short(">", orientation))])),
    )
    assert inspect_image(good, verify_decode=True).exif_orientation == orientation
    # The quantization tables removed: the header still reads fine, only decoding can notice.
    without_tables = b"".join(
        good[start:end] for start, end in _segments(good) if good[start + 1] != 0xDB
    )
    broken = good[:2] + without_tables + good[_segments(good)[-1][1] :]
    assert read_jpeg_header(broken) is not None
    assert inspect_image(broken).width == 40
    with pytest.raises(ImageRejected) as rejected:
        inspect_image(broken, verify_decode=True)
    assert rejected.value.reason == "corrupt"
