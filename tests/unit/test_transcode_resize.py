"""``--max-side`` on JPEGs: decoded at one of libjpeg's DCT scales, yet written at exactly
``scaled_size``, close to a full-size decode's LANCZOS picture in every EXIF orientation,
with boxes, masks and keypoints on the pixels they name. References come from Pillow
decoding at full size and from drawn marks, not from the code under test."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys

import numpy as np
import photos
import pytest
from photos import photo_like_jpeg, photo_like_pixels
from PIL import Image, ImageOps

from recordbeam.images.checks import inspect_image
from recordbeam.images.transcode import DEFAULT_JPEG_QUALITY, ImageFixes, fix_image, scaled_size
from recordbeam.records import ImageRecord
from recordbeam.sources.coco.encoder import CocoEncoder
from recordbeam.sources.coco.records import NamedKeypoints, ObjectLabel, pack_annotations

# Odd sizes: a DCT-scaled decode of them ends in a pixel that holds part of a source pixel.
WIDTH, HEIGHT = 1601, 1201


@pytest.fixture(scope="module")
def pixels() -> np.ndarray:
    return photo_like_pixels(WIDTH, HEIGHT, seed=3)


def _jpeg(picture: np.ndarray | Image.Image, orientation: int | None = None,
          quality: int = 90) -> bytes:
    image = picture if isinstance(picture, Image.Image) else Image.fromarray(picture)
    out = io.BytesIO()
    options: dict = {"quality": quality}
    if orientation is not None:
        options["exif"] = Image.Exif()
        options["exif"][0x0112] = orientation
    image.save(out, "JPEG", **options)
    return out.getvalue()


def _open(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _full_size_reference(data: bytes, size: tuple[int, int], apply_exif: bool = False,
                         mode: str = "RGB") -> np.ndarray:
    """What the plain loop writes: decode whole, LANCZOS to ``size``, encode, decode."""
    image = _open(data)
    if apply_exif:
        image = ImageOps.exif_transpose(image)
    written = image.convert(mode).resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    written.save(out, "JPEG", quality=DEFAULT_JPEG_QUALITY)
    return np.asarray(_open(out.getvalue()), dtype=np.float64)


def _psnr(ours: bytes, reference: np.ndarray) -> float:
    picture = np.asarray(_open(ours), dtype=np.float64)
    assert picture.shape == reference.shape
    return float(10 * np.log10(255**2 / np.mean((picture - reference) ** 2)))


@pytest.mark.parametrize(("max_side", "decoded"), [
    (100, (201, 151)),  # 1/8: 201 >= 1.5 x 100
    (256, (401, 301)),  # 1/4: 401 >= 1.5 x 256 = 384, where 1/8 would give 201
    (500, (801, 601)),  # 1/2: 801 >= 750, where 1/4 would give 401
    (1000, (1601, 1201)),  # 1/2 would give 801 < 1500: decoded whole
])
def test_a_jpeg_is_decoded_at_the_smallest_dct_scale_keeping_one_and_a_half_times_the_size(
        pixels, decoded_sizes, max_side, decoded):
    data = _jpeg(pixels)
    info = inspect_image(data)
    decoded_sizes.clear()
    fixed = fix_image(data, info, ImageFixes(max_side=max_side))
    assert decoded_sizes[0] == ("JPEG", decoded)
    assert (fixed.width, fixed.height) == scaled_size(WIDTH, HEIGHT, max_side)
    assert _open(fixed.data).size == (fixed.width, fixed.height)


@pytest.mark.parametrize(("width", "height", "max_side"), [
    (1601, 1201, 256), (1201, 1601, 333), (3001, 97, 64), (97, 3001, 200), (1024, 1024, 100),
    (1000, 7, 10),
])
@pytest.mark.parametrize("orientation", [1, 6])
def test_written_size_is_scaled_size_of_the_displayed_image(width, height, max_side,
                                                            orientation):
    yy, xx = np.mgrid[0:height, 0:width]
    gradient = np.stack([xx * 255 // width, yy * 255 // height, (xx + yy) % 256], -1)
    data = _jpeg(gradient.astype(np.uint8), orientation)
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=max_side, apply_exif=True))
    shown = (height, width) if orientation == 6 else (width, height)
    assert (fixed.width, fixed.height) == scaled_size(*shown, max_side)
    assert _open(fixed.data).size == (fixed.width, fixed.height)


@pytest.mark.parametrize("apply_exif", [True, False])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_orientation_gives_the_full_size_decodes_picture(pixels, decoded_sizes,
                                                               orientation, apply_exif):
    data = _jpeg(pixels, orientation)
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=256, apply_exif=apply_exif))
    turned = apply_exif and orientation in (5, 6, 7, 8)
    assert (fixed.width, fixed.height) == ((192, 256) if turned else (256, 192))
    assert ("JPEG", (401, 301)) in decoded_sizes
    # A region left unmoved by a mirror or turn shifts the picture by half a pixel: ~28 dB.
    reference = _full_size_reference(data, (fixed.width, fixed.height), apply_exif)
    assert _psnr(fixed.data, reference) >= 38


def test_a_camera_sized_photo_stays_within_38_db_of_the_full_size_decode(decoded_sizes):
    data = _jpeg(photo_like_pixels(1600, 1200, seed=0))
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=512))
    assert ("JPEG", (800, 600)) in decoded_sizes
    assert _psnr(fixed.data, _full_size_reference(data, (512, 384))) >= 38


@pytest.mark.parametrize(("mode", "transcode", "written_mode"), [
    ("L", "keep", "L"), ("L", "jpeg", "RGB"), ("CMYK", "jpeg", "RGB"), ("CMYK", "keep", "RGB"),
])
def test_grayscale_and_cmyk_jpegs_are_scaled_too(pixels, decoded_sizes, mode, transcode,
                                                 written_mode):
    data = _jpeg(Image.fromarray(pixels).convert(mode))
    fixed = fix_image(data, inspect_image(data), ImageFixes(transcode, max_side=256))
    assert ("JPEG", (401, 301)) in decoded_sizes
    assert _open(fixed.data).mode == written_mode
    reference = _full_size_reference(data, (256, 192), mode=written_mode)
    assert _psnr(fixed.data, reference) >= 38


def test_a_progressive_jpeg_is_scaled_too(pixels, decoded_sizes):
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90, progressive=True)
    data = out.getvalue()
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=256))
    assert ("JPEG", (401, 301)) in decoded_sizes
    assert _psnr(fixed.data, _full_size_reference(data, (256, 192))) >= 38


def test_a_png_is_decoded_whole_and_resized_as_it_always_was(pixels, decoded_sizes):
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    data = out.getvalue()
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=256))
    assert decoded_sizes == [("PNG", (WIDTH, HEIGHT))]
    expected = io.BytesIO()
    _open(data).resize((256, 192), Image.Resampling.LANCZOS, reducing_gap=3.0).save(
        expected, "PNG")
    assert fixed.data == expected.getvalue()


def test_a_jpeg_no_dct_scale_fits_is_resized_as_it_always_was(pixels, decoded_sizes):
    data = _jpeg(pixels)
    fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=1000))
    assert decoded_sizes == [("JPEG", (WIDTH, HEIGHT))]
    expected = io.BytesIO()
    _open(data).resize((1000, 750), Image.Resampling.LANCZOS, reducing_gap=3.0).save(
        expected, "JPEG", quality=DEFAULT_JPEG_QUALITY)
    assert fixed.data == expected.getvalue()


def test_runs_that_do_not_resize_decode_whole_and_write_what_they_always_wrote(
        pixels, decoded_sizes):
    data = _jpeg(pixels, orientation=6)
    turned = fix_image(data, inspect_image(data), ImageFixes(apply_exif=True))
    assert decoded_sizes == [("JPEG", (WIDTH, HEIGHT))]
    expected = io.BytesIO()
    _open(data).transpose(Image.Transpose.ROTATE_270).save(
        expected, "JPEG", quality=DEFAULT_JPEG_QUALITY)
    assert turned.data == expected.getvalue()
    assert fix_image(data, inspect_image(data), ImageFixes(max_side=2000)) is None


def test_the_same_jpeg_and_options_give_the_same_bytes_in_a_fresh_interpreter():
    program = (
        "import hashlib, io, sys\n"
        f"sys.path.insert(0, {os.path.dirname(photos.__file__)!r})\n"
        "from PIL import Image\n"
        "from recordbeam.images.checks import inspect_image\n"
        "from recordbeam.images.transcode import ImageFixes, fix_image\n"
        "from photos import photo_like_jpeg\n"
        "data = photo_like_jpeg(1601, 1201, seed=5, orientation=7)\n"
        "fixed = fix_image(data, inspect_image(data), ImageFixes(max_side=300, apply_exif=True))\n"
        "print(hashlib.sha256(fixed.data).hexdigest())\n"
    )
    fresh = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip()
    data = photo_like_jpeg(1601, 1201, seed=5, orientation=7)
    fixes = ImageFixes(max_side=300, apply_exif=True)
    here = [fix_image(data, inspect_image(data), fixes).data for _ in range(2)]
    assert here[0] == here[1]
    assert fresh == hashlib.sha256(here[0]).hexdigest()


# --- boxes, masks and keypoints follow the scaled picture -----------------------------------

# Stored pixels: a white box with a red corner square at its top left, on dark grey.
BOX = (400, 300, 1000, 700)  # xmin, ymin, xmax, ymax
CORNER = 60


def _marked_jpeg(orientation: int) -> bytes:
    picture = np.full((HEIGHT, WIDTH, 3), 40, np.uint8)
    xmin, ymin, xmax, ymax = BOX
    picture[ymin:ymax, xmin:xmax] = 255
    picture[ymin:ymin + CORNER, xmin:xmin + CORNER] = (255, 0, 0)
    return _jpeg(picture, orientation, quality=95)


def _region(mask: np.ndarray) -> tuple[float, float, float, float]:
    rows, columns = np.nonzero(mask)
    return columns.min(), rows.min(), columns.max() + 1, rows.max() + 1


def _encoded(data: bytes, tmp_path, fixes: ImageFixes) -> dict:
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    xmin, ymin, xmax, ymax = BOX
    obj = ObjectLabel(1, 1, "thing", (xmin, ymin, xmax - xmin, ymax - ymin),
                      float((xmax - xmin) * (ymax - ymin)), 0,
                      [[xmin, ymin, xmax, ymin, xmax, ymax, xmin, ymax]],
                      NamedKeypoints((xmin, ymin, 2, xmax, ymax, 2), 2, ("corner", "far")))
    record = ImageRecord("1", str(path), len(data), "train", {
        "source_id": "1", "filename": "a.jpg", "width": WIDTH, "height": HEIGHT,
        "objects": pack_annotations([obj])})
    encoded = CocoEncoder(fixes=fixes, include_masks=True, include_keypoints=True).encode(record)
    assert not encoded.rejects
    return encoded.features


@pytest.mark.parametrize("apply_exif", [True, False])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_boxes_masks_and_keypoints_follow_the_scaled_picture(tmp_path, decoded_sizes,
                                                             orientation, apply_exif):
    features = _encoded(_marked_jpeg(orientation), tmp_path,
                        ImageFixes(max_side=256, apply_exif=apply_exif))
    assert ("JPEG", (401, 301)) in decoded_sizes
    width, height = features["image/width"], features["image/height"]
    turned = apply_exif and orientation in (5, 6, 7, 8)
    assert (width, height) == scaled_size(*((HEIGHT, WIDTH) if turned else (WIDTH, HEIGHT)), 256)
    picture = np.asarray(_open(features["image/encoded"]), dtype=np.int64)
    assert picture.shape[:2] == (height, width)
    red, green = picture[..., 0], picture[..., 1]
    white = _region(red > 128)  # the box, its red corner included
    corner = _region((red > 128) & (green < 100))

    box = [features[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")]
    in_pixels = np.array(box) * (width, height, width, height)
    # one written pixel of slack: a JPEG edge blurs over about one pixel either way
    np.testing.assert_allclose(in_pixels, white, atol=1.0)

    mask = np.asarray(_open(features["image/object/mask"][0]))
    assert mask.shape == (height, width)
    np.testing.assert_allclose(_region(mask), white, atol=1.0)

    xs, ys = features["image/object/keypoint/x"], features["image/object/keypoint/y"]
    near, far = ((x * width, y * height) for x, y in zip(xs, ys, strict=True))
    corners = [(corner[i], corner[j]) for i in (0, 2) for j in (1, 3)]
    assert min(np.hypot(near[0] - cx, near[1] - cy) for cx, cy in corners) <= 1.0
    far_corners = [(white[i], white[j]) for i in (0, 2) for j in (1, 3)]
    assert min(np.hypot(far[0] - cx, far[1] - cy) for cx, cy in far_corners) <= 1.0
    assert min(np.hypot(far[0] - cx, far[1] - cy) for cx, cy in corners) > CORNER / 8
