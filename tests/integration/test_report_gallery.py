"""report gallery: examples drawn from the written records, checked pixel by pixel.

Folders here are written by hand with the project's own encoder and framing (no
pipeline run), so each test knows exactly what the records hold.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from recordbeam.cli import main as cli
from recordbeam.dataset.gallery import THUMBNAIL_SIDE, class_colour, draw_example
from recordbeam.dataset.manifest import FORMAT as MANIFEST_FORMAT
from recordbeam.dataset.report import write_report
from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import RecordWriter

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


KINDS = {
    "image/object/bbox/xmin": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64",
    "image/object/class/text": "bytes",
    "image/object/mask": "bytes",
    "image/object/keypoint/x": "float",
    "image/object/keypoint/y": "float",
    "image/object/keypoint/visibility": "int64",
    "image/object/keypoint/num": "int64",
    "image/object/keypoint/text": "bytes",
    "image/caption": "bytes",
}
_DTYPES = {"float": "float32", "int64": "int64", "bytes": "string"}
DATA_URI = re.compile(r'src="data:image/jpeg;base64,([A-Za-z0-9+/=]+)"')
GREY = (128, 128, 128)


def encoded(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


def solid(width: int, height: int, colour=GREY) -> np.ndarray:
    return np.full((height, width, 3), colour, dtype=np.uint8)


def image_features(pixels: np.ndarray, name: str, fmt: str = "PNG") -> dict:
    return {
        "image/encoded": encoded(pixels, fmt),
        "image/format": fmt.lower(),
        "image/height": pixels.shape[0],
        "image/width": pixels.shape[1],
        "image/filename": name,
        "image/source_id": name,
    }


def kind_of(name: str, value) -> str:
    if name in KINDS:
        return KINDS[name]
    return "bytes" if isinstance(value, bytes | str) else "int64"


def write_folder(root, examples: list[dict], metadata: dict | None = None,
                 rejects: list[dict] | None = None) -> str:
    """One uncompressed shard of ``examples`` and a hand-written manifest."""
    root.mkdir(parents=True, exist_ok=True)
    name = "train-00000-of-00001.tfrecord"
    kinds: dict[str, str] = {}
    for ex in examples:
        kinds.update({k: kind_of(k, v) for k, v in ex.items()})
    with open(root / name, "wb") as f, RecordWriter(f, "none") as writer:
        for ex in examples:
            writer.write(encode_example(ex, kinds))
    features = {}
    for feature, kind in kinds.items():
        lengths = [len(ex[feature]) if isinstance(ex.get(feature), list) else 1
                   for ex in examples if feature in ex]
        listed = any(isinstance(ex.get(feature), list) for ex in examples)
        features[feature] = {
            "dtype": _DTYPES[kind],
            "fixed_length": None if listed else 1,
            "min_length": min(lengths),
            "max_length": max(lengths),
            "present_in": len(lengths),
        }
    n = len(examples)
    size = (root / name).stat().st_size
    manifest = {
        "format": MANIFEST_FORMAT,
        "features": features,
        "splits": {"train": {"examples": n, "bytes": size, "features": features,
                             "shards": [{"file": name, "examples": n, "bytes": size}]}},
        **(metadata or {}),
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    if rejects is not None:
        (root / "rejects.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rejects))
    return str(root)


def report(folder: str, tmp_path, **options) -> str:
    page = tmp_path / "report.html"
    write_report(folder, str(page), charts=False, **options)
    return page.read_text()


def section(page: str, heading: str) -> str:
    start = page.index(f"<h{'2' if heading == 'Rejected images' else '3'}>{heading}<")
    return page[start:]


def thumbnails(html: str) -> list[np.ndarray]:
    return [
        np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")).astype(int)
        for data in DATA_URI.findall(html)
    ]


def near(pixels: np.ndarray, colour, tolerance: float = 45.0) -> np.ndarray:
    return np.linalg.norm(pixels - np.asarray(colour), axis=-1) < tolerance


def boxed(label: int, box: tuple[float, float, float, float], text: str = "cat") -> dict:
    xmin, ymin, xmax, ymax = box
    return {
        "image/object/bbox/xmin": [xmin], "image/object/bbox/ymin": [ymin],
        "image/object/bbox/xmax": [xmax], "image/object/bbox/ymax": [ymax],
        "image/object/class/label": [label], "image/object/class/text": [text],
    }


def test_a_known_box_lands_on_its_scaled_pixels_and_nowhere_else(tmp_path):
    # 640x320 grey image, box from pixel (160, 80) to (480, 240); the thumbnail is
    # 320x160, so the outline runs from (80, 40) to (239, 119), 2 pixels wide, inside.
    example = {**image_features(solid(640, 320), "box.png"), **boxed(3, (0.25, 0.25, 0.75, 0.75))}
    folder = write_folder(tmp_path / "out", [example])
    (thumb,) = thumbnails(section(report(folder, tmp_path), "Gallery"))
    assert thumb.shape == (160, 320, 3)
    colour = class_colour(3)
    hit = near(thumb, colour)
    for x, y in [(160, 40), (160, 41), (160, 118), (160, 119), (80, 80), (81, 80), (238, 80),
                 (239, 80), (80, 40), (239, 119)]:
        assert hit[y, x], f"box colour missing at ({x}, {y}): {thumb[y, x]}"
    ys, xs = np.nonzero(hit)
    in_ring = (xs >= 79) & (xs <= 240) & (ys >= 39) & (ys <= 120) & ~(
        (xs >= 83) & (xs <= 236) & (ys >= 43) & (ys <= 116)
    )
    assert in_ring.all(), f"box colour outside the outline at {list(zip(xs[~in_ring], ys[~in_ring], strict=True))[:5]}"
    # Inside and outside the box the grey image shows through.
    assert near(thumb[60:100, 100:220], GREY, 12).all()
    assert near(thumb[130:, :], GREY, 12).all()
    # The class text "cat" sits above the box: white letters on black.
    label = thumb[26:40, 80:110]
    assert near(label, (255, 255, 255), 90).sum() > 10 and near(label, (0, 0, 0), 40).sum() > 50


def test_masks_keypoints_and_captions_are_drawn(tmp_path):
    # One person (label 1) with a mask over the left half and three keypoints, the third
    # not labeled (visibility 0): it must not be drawn.
    mask = np.zeros((200, 400), dtype=np.uint8)
    mask[:, :200] = 1
    example = {
        **image_features(solid(400, 200), "person.png"),
        **boxed(1, (0.05, 0.05, 0.95, 0.95), "person"),
        "image/object/mask": [encoded(mask)],
        "image/object/keypoint/x": [0.25, 0.75, 0.5],
        "image/object/keypoint/y": [0.5, 0.5, 0.8],
        "image/object/keypoint/visibility": [2, 1, 0],
        "image/object/keypoint/num": [2],
        "image/object/keypoint/text": [b"left", b"right", b"nose"],
        "image/caption": [b"a person on grey", b"two keypoints"],
    }
    metadata = {"label_map": {"1": "person"},
                "keypoints": {"1": {"names": ["left", "right", "nose"], "skeleton": [[1, 2], [2, 3]]}}}
    folder = write_folder(tmp_path / "out", [example], metadata)
    html = section(report(folder, tmp_path), "Gallery")
    assert "caption: a person on grey" in html and "caption: two keypoints" in html
    assert "class='problem'" not in html
    (thumb,) = thumbnails(html)
    assert thumb.shape == (160, 320, 3)
    colour = np.asarray(class_colour(1))
    tinted = np.asarray(GREY) * 0.55 + colour * 0.45
    assert near(thumb[100:140, 30:70], tinted, 12).all()  # the mask, left half
    assert near(thumb[100:140, 250:290], GREY, 12).all()  # no mask on the right
    # Full colour (the mask's tint is about 53 from it).
    assert near(thumb[80, 80], colour, 40) and near(thumb[80, 240], colour, 40)  # keypoints
    assert near(thumb[80, 160], colour, 40)  # the skeleton line from left to right
    assert not near(thumb[124:133, 155:166], colour, 40).any()  # the unlabeled nose
    assert not near(thumb[95:120, 190:215], colour, 40).any()  # nor its line to "right"


def test_keypoints_that_do_not_match_the_manifest_names_are_reported_not_drawn(tmp_path):
    example = {
        **image_features(solid(100, 100), "odd.png"),
        **boxed(1, (0.1, 0.1, 0.9, 0.9), "person"),
        "image/object/keypoint/x": [0.5, 0.5],
        "image/object/keypoint/y": [0.5, 0.5],
    }
    metadata = {"keypoints": {"1": {"names": ["a", "b", "c"], "skeleton": []}}}
    html = section(report(write_folder(tmp_path / "out", [example], metadata), tmp_path), "Gallery")
    assert "keypoints not drawn: 2 values, but the manifest&#x27;s names give 3" in html


def test_records_that_cannot_be_drawn_are_noted_under_the_picture_not_a_crash():
    base = {
        "image/object/bbox/xmin": np.array([np.nan, -5e30, 0.1], np.float32),
        "image/object/bbox/ymin": np.array([0.1, 0.1, 0.1], np.float32),
        "image/object/bbox/xmax": np.array([0.5, 1e30, 0.9], np.float32),
        "image/object/bbox/ymax": np.array([0.5, 0.5, 0.9], np.float32),
        "image/object/class/label": np.array([1, 2, 3]),
        "image/object/mask": np.array([b"not a png", encoded(np.ones((10, 10), np.uint8))], object),
    }
    good = draw_example({**base, "image/encoded": np.array(encoded(solid(50, 30)), object)})
    assert good.data_uri.startswith("data:image/jpeg;base64,")
    assert good.notes == (
        "mask 0 not drawn: it does not decode as an image",
        "mask 1 is 10x10, the image 50x30 (drawn stretched)",
        "box 0 not drawn: its corners are not finite numbers",
        "box 1 reaches outside the image (corners not in [0, 1])",
    )
    broken = draw_example({**base, "image/encoded": np.array(b"garbage", object)})
    assert broken.data_uri == "" and broken.notes == ("image/encoded does not decode as an image",)


def test_classification_label_goes_under_the_image(tmp_path):
    examples = [{**image_features(solid(50, 40, (10 * i, 0, 0)), f"{i}.png"),
                 "image/class/label": i % 2, "image/class/text": ["cat", "dog"][i % 2]}
                for i in range(4)]
    html = section(report(write_folder(tmp_path / "out", examples), tmp_path), "Gallery")
    assert html.count("class: cat") == 2 and html.count("class: dog") == 2
    # Small images are enlarged by a whole factor, at most 4 (50x40 -> 200x160), no labels drawn.
    shown = thumbnails(html)
    assert [t.shape for t in shown] == [(160, 200, 3)] * 4
    assert all(near(t, t[80, 100], 12).all() for t in shown)


def noisy_photo(seed: int, width: int = 1024, height: int = 768) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 200, width)[None, :, None] + np.linspace(0, 50, height)[:, None, None]
    return np.clip(ramp + rng.normal(0, 30, (height, width, 3)), 0, 255).astype(np.uint8)


def test_gallery_is_a_deterministic_sample_within_the_size_bound(tmp_path):
    examples = [{**image_features(noisy_photo(i), f"photo{i:02d}.jpg", "JPEG"),
                 **boxed(i % 5, (0.1, 0.2, 0.6, 0.9))} for i in range(30)]
    folder = write_folder(tmp_path / "out", examples)
    first, second = tmp_path / "a.html", tmp_path / "b.html"
    write_report(folder, str(first))
    write_report(folder, str(second))
    assert first.read_bytes() == second.read_bytes()
    page = first.read_text()
    shown = re.findall(r"<b>(photo\d\d\.jpg)</b>", page)
    assert len(shown) == 24 and len(set(shown)) == 24
    assert shown != sorted(shown)  # a sample by hash, not the first 24 in file order
    assert all(max(t.shape[:2]) == THUMBNAIL_SIDE for t in thumbnails(page))
    assert first.stat().st_size < 3_000_000, f"{first.stat().st_size:,} bytes"
    # A smaller gallery is the head of the same order.
    fewer = re.findall(r"<b>(photo\d\d\.jpg)</b>", report(folder, tmp_path, gallery=5))
    assert fewer == shown[:5]


def test_rejected_images_strip_shows_what_still_decodes(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "tiny.png").write_bytes(encoded(solid(8, 6, (0, 200, 0))))
    (inputs / "small.png").write_bytes(encoded(solid(9, 7, (0, 200, 0))))
    (inputs / "notes.jpg").write_bytes(b"this is not an image")
    rejects = [
        {"kind": "image", "source": str(inputs / "tiny.png"), "reason": "too_small",
         "detail": "8x6 is below the 16-pixel minimum", "split": "train"},
        {"kind": "image", "source": str(inputs / "gone.jpg"), "reason": "missing",
         "detail": "no such file", "split": "train"},
        {"kind": "image", "source": str(inputs / "notes.jpg"), "reason": "undecodable",
         "detail": "not an image", "split": "train"},
        {"kind": "image", "source": str(inputs / "small.png"), "reason": "too_small",
         "detail": "9x7 is below the 16-pixel minimum", "split": "train"},
        {"kind": "annotation", "source": "annotation 7", "reason": "unknown_category",
         "detail": "category 99", "split": "train"},
    ]
    example = image_features(solid(20, 20), "ok.png")
    folder = write_folder(tmp_path / "out", [example], rejects=rejects)
    strip = section(report(folder, tmp_path), "Rejected images")
    assert "2 of 4 rejected images shown; 2 skipped: the file is missing or does not decode" in strip
    assert "tiny.png" in strip and "too_small: 8x6 is below the 16-pixel minimum" in strip
    shown = thumbnails(strip)
    assert len(shown) == 2 and all(near(t, (0, 200, 0), 20).all() for t in shown)
    # One to show: the walk stops at the first that decodes, so at least one is not tried.
    limited = section(report(folder, tmp_path, gallery=1), "Rejected images")
    assert "1 of 4 rejected images shown" in limited and "not tried (raise --gallery" in limited
    assert len(thumbnails(limited)) == 1


def test_gallery_option_on_the_command_line(tmp_path, capsys):
    example = {**image_features(solid(64, 48), "one.png"), **boxed(0, (0.1, 0.1, 0.5, 0.5))}
    folder = write_folder(tmp_path / "out", [example])
    page = tmp_path / "cli.html"
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        cli.main(["report", folder, "--html", str(page), "--gallery", "-1"])
    assert exited.value.code == cli.EXIT_USAGE
    assert "--gallery: must be 0 or more, got -1" in capsys.readouterr().err
    assert cli.main(["report", folder, "--html", str(page), "--gallery", "0"]) == cli.EXIT_OK
    assert "Gallery" not in page.read_text() and "data:image" not in page.read_text()
    assert cli.main(["report", folder, "--html", str(page)]) == cli.EXIT_OK
    assert len(thumbnails(section(page.read_text(), "Gallery"))) == 1


def test_gallery_renders_in_headless_chromium(tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (CI installs Debian's chromium package)")
    # A page of gallery only: bright red images on white, easy to find in a screenshot.
    examples = [{**image_features(solid(320, 240, (230, 0, 0)), f"red{i}.png")} for i in range(6)]
    folder = write_folder(tmp_path / "out", examples)
    page, png = tmp_path / "gallery.html", tmp_path / "shot.png"
    write_report(folder, str(page), charts=False)
    subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=1200,1400", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    pixels = np.asarray(Image.open(png).convert("RGB")).astype(int)
    red = near(pixels, (230, 0, 0), 40)
    # Six 320x240 pictures laid out by the browser: a few hundred thousand red pixels.
    assert red.sum() > 4 * 320 * 240 * 0.9, f"only {red.sum()} red pixels: images not shown"
