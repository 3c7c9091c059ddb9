"""The gallery of ``recordbeam report``: a few examples per split, drawn from the records.

Numbers do not show a box drawn one pixel off or a mask of the wrong object; a picture
does. Every drawing starts from the *written* records (``image/encoded`` and the label
features as a trainer reads them, never the input files): boxes with their class text,
masks as translucent overlays, keypoints with their category's skeleton. Captions and
classification labels go under the picture as text.

Which examples: per split, the ``N`` whose salted SHA-256 of their identity (the image's
``image/key/sha256``, ``image/source_id`` and ``image/filename``, or the image bytes when
none is written) is smallest, ties broken by position. A reshard or a rerun of the same
inputs shows the same examples, and a sample by hash spreads over every shard.

Pictures are JPEG thumbnails (longest side :data:`THUMBNAIL_SIDE`; small images enlarged
by a whole factor up to :data:`MAX_ENLARGE`) embedded as ``data:`` URIs, so the page stays one file. Image pixels are drawn as stored (EXIF orientation is
not applied), because that is what a trainer's ``decode_jpeg`` sees.

The strip of rejected images shows image rejects from ``rejects.jsonl`` whose file still
decodes (too small, size mismatch...), each with its reason; a file that is missing or
does not decode is skipped and counted.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import io
import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from recordbeam import feature_keys

__all__ = [
    "DEFAULT_GALLERY",
    "THUMBNAIL_SIDE",
    "GallerySample",
    "RejectStrip",
    "Thumbnail",
    "class_colour",
    "draw_example",
    "rejected_images",
]

DEFAULT_GALLERY = 24
THUMBNAIL_SIDE = 320
JPEG_QUALITY = 80
MAX_ENLARGE = 4
BOX_WIDTH = 2
MASK_OPACITY = 0.45
#: A reject's file larger than this is not read for the strip (it may not be an image at all).
MAX_REJECT_BYTES = 64 * 1024 * 1024

_SALT = b"recordbeam-gallery/1\0"
_IDENTITY = (feature_keys.SHA256, feature_keys.SOURCE_ID, feature_keys.FILENAME)
# Saturated colours far from grey, black and white, so a drawing stands out on photos.
_PALETTE = (
    (255, 56, 56), (44, 153, 168), (255, 157, 151), (255, 112, 31), (72, 249, 10),
    (146, 204, 23), (61, 219, 134), (26, 147, 52), (0, 212, 187), (255, 178, 29),
    (0, 194, 255), (52, 69, 147), (100, 115, 255), (132, 56, 255), (203, 56, 255),
    (255, 149, 200), (207, 210, 49), (236, 24, 0),
)


def class_colour(label: int) -> tuple[int, int, int]:
    """The colour boxes, masks and keypoints of class ``label`` are drawn in."""
    return _PALETTE[label % len(_PALETTE)]


@dataclass(frozen=True)
class Thumbnail:
    """One drawn picture: a JPEG ``data:`` URI and the text that goes under it."""

    data_uri: str
    title: str
    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be drawn, and why


@dataclass
class GallerySample:
    """The ``size`` examples with the smallest salted identity hashes seen so far."""

    size: int
    _heap: list = field(default_factory=list)  # (-hash, -position, example): largest on top

    def offer(self, example: Mapping[str, np.ndarray], position: int) -> None:
        if self.size <= 0:
            return
        rank = int.from_bytes(_identity_hash(example), "big")
        entry = (-rank, -position, dict(example))
        if len(self._heap) < self.size:
            heapq.heappush(self._heap, entry)
        elif entry[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, entry)

    def examples(self) -> list[dict[str, np.ndarray]]:
        """The chosen examples, smallest hash first."""
        return [e for _, _, e in sorted(self._heap, key=lambda t: (-t[0], -t[1]))]


def _identity_hash(example: Mapping[str, np.ndarray]) -> bytes:
    digest = hashlib.sha256(_SALT)
    parts = [_bytes(example[name]) for name in _IDENTITY if name in example]
    if not any(parts):
        parts = [_bytes(example.get(feature_keys.ENCODED, b""))]
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.digest()


def _bytes(value: Any) -> bytes:
    item = value.item() if isinstance(value, np.ndarray) and value.size == 1 else value
    if isinstance(item, bytes):
        return item
    if isinstance(item, np.ndarray):  # an empty feature
        return b""
    return str(item).encode("utf-8")


def _text(value: Any) -> str:
    return _bytes(value).decode("utf-8", "replace")


def _values(example: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    value = example.get(name)
    return np.atleast_1d(value) if value is not None else np.empty(0)


# --- drawing -----------------------------------------------------------------------------


def _thumbnail_size(width: int, height: int) -> tuple[int, int]:
    longest = max(width, height)
    if longest > THUMBNAIL_SIDE:
        scale = THUMBNAIL_SIDE / longest
        return max(1, round(width * scale)), max(1, round(height * scale))
    # Small images are enlarged by a whole factor (pixels stay sharp squares), so their
    # boxes and class texts can be told apart.
    factor = max(1, min(MAX_ENLARGE, THUMBNAIL_SIDE // longest))
    return width * factor, height * factor


def _decode_thumbnail(data: bytes) -> tuple[Image.Image, tuple[int, int]]:
    """The picture scaled to thumbnail size, and the stored image's ``(width, height)``."""
    with warnings.catch_warnings():
        # Size is bounded by the reads before; Pillow's advice on palettes is not for the user.
        warnings.simplefilter("ignore")
        image = Image.open(io.BytesIO(data))
        full = image.size
        size = _thumbnail_size(*full)
        image.draft("RGB", size)  # JPEG: decode at a reduced scale, much faster
        smaller = size[0] < full[0]
        picture = image.convert("RGB").resize(
            size, Image.Resampling.LANCZOS if smaller else Image.Resampling.NEAREST
        )
    return picture, full


def _data_uri(picture: Image.Image) -> str:
    out = io.BytesIO()
    # 4:4:4 keeps thin coloured lines in their colour (4:2:0 smears them over 2 pixels).
    picture.save(out, "JPEG", quality=JPEG_QUALITY, subsampling=0)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default()


def _draw_masks(
    picture: Image.Image, masks: Sequence[Any], labels: Sequence[int], full: tuple[int, int]
) -> list[str]:
    notes = []
    for number, data in enumerate(masks):
        try:
            with Image.open(io.BytesIO(_bytes(data))) as mask_image:
                mask_size = mask_image.size
                mask = np.asarray(mask_image.convert("L")) > 0
        except (OSError, ValueError, SyntaxError):
            notes.append(f"mask {number} not drawn: it does not decode as an image")
            continue
        if mask_size != full:
            notes.append(
                f"mask {number} is {mask_size[0]}x{mask_size[1]}, the image "
                f"{full[0]}x{full[1]} (drawn stretched)"
            )
        alpha = Image.fromarray((mask * round(255 * MASK_OPACITY)).astype(np.uint8), "L")
        alpha = alpha.resize(picture.size, Image.Resampling.NEAREST)
        label = int(labels[number]) if number < len(labels) else number
        picture.paste(Image.new("RGB", picture.size, class_colour(label)), (0, 0), alpha)
    return notes


def _draw_boxes(
    picture: Image.Image, boxes: np.ndarray, labels: Sequence[int], texts: Sequence[str]
) -> list[str]:
    draw = ImageDraw.Draw(picture)
    font = _font()
    width, height = picture.size
    notes = []
    for number, box in enumerate(boxes):
        if not np.isfinite(box).all():
            notes.append(f"box {number} not drawn: its corners are not finite numbers")
            continue
        if (box < 0).any() or (box > 1).any():
            notes.append(f"box {number} reaches outside the image (corners not in [0, 1])")
        # Far-off corners would overflow Pillow's integer coordinates; the edge shows them.
        xmin, ymin, xmax, ymax = np.clip(box, -0.01, 1.01)
        label = int(labels[number]) if number < len(labels) else 0
        x0, x1 = sorted((round(float(xmin) * width), round(float(xmax) * width)))
        y0, y1 = sorted((round(float(ymin) * height), round(float(ymax) * height)))
        draw.rectangle((x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)), outline=class_colour(label),
                       width=BOX_WIDTH)
        text = texts[number] if number < len(texts) else ""
        if text:
            left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
            text_height = bottom - top + 2
            # Above the box when there is room, else inside its top edge.
            y = y0 - text_height if y0 >= text_height else y0 + BOX_WIDTH
            x = x0 + BOX_WIDTH if y != y0 - text_height else x0
            draw.rectangle((x, y, x + right - left + 3, y + text_height - 1), fill=(0, 0, 0))
            draw.text((x + 2 - left, y + 1 - top), text, fill=(255, 255, 255), font=font)
    return notes


def _keypoint_groups(
    example: Mapping[str, np.ndarray], labels: Sequence[int], keypoints: Mapping[str, Any]
) -> tuple[list[tuple[int, int, int]], str | None]:
    """``(label, start, count)`` per object into the flat keypoint lists, or why not."""
    total = len(_values(example, feature_keys.KEYPOINT_X))
    if not keypoints:
        return [], "keypoints not drawn: the manifest has no \"keypoints\" names to split them"
    groups, start = [], 0
    for label in labels:
        spec = keypoints.get(str(int(label)))
        if spec is None:
            return [], f"keypoints not drawn: the manifest names no keypoints for label {int(label)}"
        count = len(spec.get("names", []))
        groups.append((int(label), start, count))
        start += count
    if start != total:
        return [], (
            f"keypoints not drawn: {total} values, but the manifest's names give {start} "
            f"for these {len(labels)} objects"
        )
    return groups, None


def _draw_keypoints(
    picture: Image.Image,
    example: Mapping[str, np.ndarray],
    labels: Sequence[int],
    keypoints: Mapping[str, Any],
) -> list[str]:
    groups, problem = _keypoint_groups(example, labels, keypoints)
    if problem:
        return [problem]
    xs, ys = _values(example, feature_keys.KEYPOINT_X), _values(example, feature_keys.KEYPOINT_Y)
    if len(ys) != len(xs):
        return [f"keypoints not drawn: {len(xs)} x values but {len(ys)} y values"]
    visibility = _values(example, feature_keys.KEYPOINT_VISIBILITY)
    if len(visibility) != len(xs):
        visibility = np.full(len(xs), 2)  # no visibility written: every point counts
    draw = ImageDraw.Draw(picture)
    width, height = picture.size
    for label, start, count in groups:
        colour = class_colour(label)
        points = [
            (float(np.clip(xs[i], -0.01, 1.01)) * width, float(np.clip(ys[i], -0.01, 1.01)) * height)
            if int(visibility[i]) > 0 and np.isfinite(xs[i]) and np.isfinite(ys[i])
            else None
            for i in range(start, start + count)
        ]
        for pair in keypoints[str(label)].get("skeleton", []):
            a, b = int(pair[0]) - 1, int(pair[1]) - 1  # COCO's skeleton is 1-based
            if 0 <= a < count and 0 <= b < count and points[a] and points[b]:
                draw.line((points[a], points[b]), fill=colour, width=2)
        for point in points:
            if point:
                x, y = point
                draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colour, outline=(255, 255, 255))
    return []


def draw_example(
    example: Mapping[str, np.ndarray],
    class_names: Sequence[str] | None = None,
    keypoints: Mapping[str, Any] | None = None,
) -> Thumbnail:
    """One written example as a thumbnail with its labels drawn on it.

    Args:
        example: the example's features, as :class:`~recordbeam.dataset.reader.SplitReader`
            returns them (images not decoded).
        class_names: names by label value, for labels written without ``class/text``.
        keypoints: the manifest's ``"keypoints"``: per label (as text) the category's
            keypoint ``names`` and 1-based ``skeleton`` pairs.
    """
    title = next(
        (_text(example[n]) for n in (feature_keys.FILENAME, feature_keys.SOURCE_ID) if _text(example.get(n, b""))),
        "",
    )
    title = os.path.basename(title) or title

    def name_of(label: int) -> str:
        if class_names and 0 <= label < len(class_names):
            return class_names[label]
        return str(label)

    lines = []
    if feature_keys.CLASS_LABEL in example or feature_keys.CLASS_TEXT in example:
        texts = [_text(v) for v in _values(example, feature_keys.CLASS_TEXT)]
        labels = [int(v) for v in _values(example, feature_keys.CLASS_LABEL)]
        lines.append("class: " + ", ".join(texts if any(texts) else [name_of(v) for v in labels]))
    lines.extend("caption: " + _text(c) for c in _values(example, feature_keys.CAPTION))
    try:
        picture, full = _decode_thumbnail(_bytes(example.get(feature_keys.ENCODED, b"")))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return Thumbnail("", title, tuple(lines), ("image/encoded does not decode as an image",))
    labels = [int(v) for v in _values(example, feature_keys.OBJECT_LABEL)]
    notes = []
    if feature_keys.MASK in example:
        notes += _draw_masks(picture, list(_values(example, feature_keys.MASK)), labels, full)
    if all(name in example for name in feature_keys.BOX):
        boxes = np.stack([_values(example, name).astype(float) for name in feature_keys.BOX], axis=1) \
            if len({len(_values(example, n)) for n in feature_keys.BOX}) == 1 else None
        if boxes is None:
            notes.append("boxes not drawn: xmin, ymin, xmax and ymax differ in length")
        else:
            texts = [_text(v) for v in _values(example, feature_keys.OBJECT_TEXT)]
            if not any(texts):
                texts = [name_of(v) for v in labels]
            notes += _draw_boxes(picture, boxes, labels, texts)
    if feature_keys.KEYPOINT_X in example and len(_values(example, feature_keys.KEYPOINT_X)):
        notes += _draw_keypoints(picture, example, labels, keypoints or {})
    return Thumbnail(_data_uri(picture), title, tuple(lines), tuple(notes))


# --- rejected images -----------------------------------------------------------------------


@dataclass(frozen=True)
class RejectStrip:
    """The rejected images shown, and how many were not."""

    shown: tuple[tuple[Thumbnail, str], ...]  # (picture, split)
    image_rejects: int
    not_decodable: int  # tried, but missing or not an image
    not_tried: int  # beyond the limit
    refused: int = 0  # rejected outside_root: the run never opened them, nor does the report


#: The reason of files the conversion refused to open (links leading out of its folders).
OUTSIDE_ROOT = "outside_root"


def _read_limited(path: str, limit: int) -> bytes | None:
    if "://" in path:
        from recordbeam import filesystems  # Beam, only for remote paths

        size = filesystems.size_of(path)
        if size is None or size > limit:
            return None
        return filesystems.read_bytes(path)
    if not os.path.isfile(path) or os.path.getsize(path) > limit:
        return None
    with open(path, "rb") as f:
        return f.read()


def _reject_thumbnail(path: str) -> Image.Image | None:
    try:
        data = _read_limited(path, MAX_REJECT_BYTES)
        if data is None:
            return None
        picture, _ = _decode_thumbnail(data)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return picture


def _image_rejects(lines: Iterable[str]) -> list[dict[str, Any]]:
    rejects = []
    for line in lines:
        try:
            reject = json.loads(line)
        except ValueError:
            continue  # rejects.jsonl is ours; a damaged line must not stop the report
        if isinstance(reject, dict) and reject.get("kind") == "image" and reject.get("source"):
            rejects.append(reject)
    return rejects


def rejected_images(rejects_lines: Iterable[str], limit: int) -> RejectStrip:
    """Up to ``limit`` image rejects whose file still decodes, in salted-hash order of their
    paths (the same folder shows the same ones). Files rejected ``outside_root`` are never
    opened: links lead them out of the run's folders, to files the run refused to read."""
    rejects = _image_rejects(rejects_lines)
    refused = sum(1 for r in rejects if r.get("reason") == OUTSIDE_ROOT)
    order = sorted(
        (r for r in rejects if r.get("reason") != OUTSIDE_ROOT),
        key=lambda r: (hashlib.sha256(_SALT + str(r["source"]).encode("utf-8")).digest(),
                       str(r["source"]), str(r.get("reason"))),
    )
    shown, failed, tried = [], 0, 0
    for reject in order:
        if len(shown) >= limit:
            break
        tried += 1
        picture = _reject_thumbnail(str(reject["source"]))
        if picture is None:
            failed += 1
            continue
        path = str(reject["source"])
        thumbnail = Thumbnail(
            _data_uri(picture),
            os.path.basename(path.rstrip("/")) or path,
            (f"{reject.get('reason', '')}: {reject.get('detail', '')}",),
        )
        shown.append((thumbnail, str(reject.get("split") or "")))
    return RejectStrip(tuple(shown), len(rejects), failed, len(rejects) - refused - tried,
                       refused)
