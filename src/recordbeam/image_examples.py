"""Examples from image files: read the bytes, check them, build the ``image/*`` features.

``ImageExampleEncoder`` is the sink encoder for every input kind; each kind adds its
label features by overriding :meth:`ImageExampleEncoder.label_features`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recordbeam import filesystems
from recordbeam.images import DEFAULT_MAX_PIXELS, ImageInfo, ImageRejected, inspect_image
from recordbeam.records import ImageRecord, Reject
from recordbeam.sink import Encoded, ExampleEncoder

#: Files larger than this are rejected before they are read, so one stray video or
#: archive cannot exhaust a worker's memory. Real photos are far smaller.
DEFAULT_MAX_IMAGE_BYTES = 256 * 1024 * 1024

IMAGE_KINDS = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/filename": "bytes",
    "image/source_id": "bytes",
    "image/key/sha256": "bytes",
}


@dataclass(frozen=True)
class ImageChecks:
    """Checks run on every image before it is written.

    Attributes:
        max_pixels: reject images whose header claims more pixels (decompression bombs).
        max_bytes: reject files larger than this without reading them.
        verify_decode: fully decode every image (slower; catches corrupt pixel data).
    """

    max_pixels: int | None = DEFAULT_MAX_PIXELS
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    verify_decode: bool = False


class ImageExampleEncoder(ExampleEncoder):
    """Turns an :class:`ImageRecord` into an Example with the image and its labels."""

    def __init__(self, checks: ImageChecks | None = None, split: str = "train") -> None:
        super().__init__(split)
        self.checks = checks or ImageChecks()

    def identity(self, record: ImageRecord) -> str:
        return record.identity

    def size(self, record: ImageRecord) -> int:
        return record.size

    def split(self, record: ImageRecord) -> str:
        return record.split

    def label_features(
        self, record: ImageRecord, info: ImageInfo
    ) -> tuple[dict[str, Any], dict[str, str], list[Reject], dict[str, int]]:
        """Features from the record's labels: ``(features, kinds, rejects, counts)``."""
        return {}, {}, [], {}

    def encode(self, record: ImageRecord) -> Encoded:
        def reject(reason: str, detail: str) -> Encoded:
            return Encoded(rejects=(Reject("image", record.path, reason, detail),))

        if record.size > self.checks.max_bytes:
            return reject(
                "too_large",
                f"file is {record.size} bytes, above the {self.checks.max_bytes}-byte limit; "
                "raise --max-image-bytes if it really is an image",
            )
        try:
            data = filesystems.read_bytes(record.path)
        except Exception as error:  # noqa: BLE001 - each filesystem raises its own types
            if not filesystems.exists(record.path):
                return reject("missing", "the file disappeared after it was listed; rerun when the input is stable")
            return reject("unreadable", f"cannot read the file ({error}); check its permissions")
        try:
            info = inspect_image(
                data, max_pixels=self.checks.max_pixels, verify_decode=self.checks.verify_decode
            )
        except ImageRejected as rejected:
            return reject(rejected.reason, rejected.detail)
        features = {
            "image/encoded": data,
            "image/format": info.format,
            "image/height": info.height,
            "image/width": info.width,
            "image/filename": record.labels.get("filename", record.path.rsplit("/", 1)[-1]),
            "image/source_id": str(record.labels.get("source_id", record.identity)),
            "image/key/sha256": hashlib.sha256(data).hexdigest(),
        }
        extra, kinds, rejects, counts = self.label_features(record, info)
        features.update(extra)
        counts = dict(counts)
        counts["images_written"] = 1
        if info.exif_orientation not in (None, 1):
            counts["exif_rotated"] = counts.get("exif_rotated", 0) + 1
        return Encoded(
            features=features, kinds={**IMAGE_KINDS, **kinds}, rejects=tuple(rejects), counts=counts
        )


def warn_size_mismatch(record: ImageRecord, info: ImageInfo, labels: Mapping[str, Any]) -> Reject | None:
    """A warning when the annotation's width/height disagree with the image header."""
    json_w, json_h = labels.get("width"), labels.get("height")
    if json_w is None or json_h is None or (json_w, json_h) == (info.width, info.height):
        return None
    return Reject(
        "warning", record.path, "size_mismatch",
        f"annotations say {json_w}x{json_h} but the image header says {info.width}x{info.height}; "
        "boxes were normalized with the header's size",
    )
