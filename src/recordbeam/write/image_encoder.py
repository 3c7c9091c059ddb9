"""Examples from image files: read the bytes, check them, build the ``image/*`` features.

``ImageExampleEncoder`` is the sink encoder for every input kind; each kind adds its
label features by overriding :meth:`ImageExampleEncoder.label_features`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from recordbeam import feature_keys, filesystems
from recordbeam.images.checks import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_PIXELS,
    ImageInfo,
    ImageRejected,
    inspect_image,
)
from recordbeam.images.transcode import ImageFixes, convert_foreign, fix_image
from recordbeam.records import ImageRecord, Reject
from recordbeam.tfrecord.example import encode_example
from recordbeam.write.encoder import Encoded, ExampleEncoder
from recordbeam.write.planning import RECORD_FRAMING

IMAGE_KINDS = feature_keys.IMAGE_KINDS


class LoadedImage(NamedTuple):
    """One image read, checked and fixed (see :meth:`ImageExampleEncoder.load_image`)."""

    fields: dict[str, Any]
    info: ImageInfo
    counts: dict[str, int]
    digest: bytes | None  # None: not known (see ImageExampleEncoder._loaded_image)


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

    def __post_init__(self) -> None:
        # A limit of 0 or less would reject every image, silently: refuse it.
        if self.max_pixels is not None and self.max_pixels <= 0:
            raise ValueError(f"max_pixels must be above 0 (None: no limit), got {self.max_pixels}")
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be above 0, got {self.max_bytes}")


class ImageExampleEncoder(ExampleEncoder):
    """Turns an :class:`ImageRecord` into an Example with the image and its labels."""

    has_images = True

    #: The folders the run was given (the read transform's ``input_roots``, set by the
    #: pipeline): a file whose links lead outside them is rejected ``outside_root``
    #: unopened. None: files are read wherever they are (``--allow-outside-root``).
    input_roots: filesystems.InputRoots | None = None

    def __init__(self, checks: ImageChecks | None = None, split: str = "train",
                 fixes: ImageFixes | None = None) -> None:
        super().__init__(split)
        self.checks = checks or ImageChecks()
        # Fixes that change nothing are dropped, so the default path stays a plain read.
        self.fixes = fixes if fixes is not None and fixes.active else None

    #: A file name or source id of this many bytes is assumed where none is known yet.
    TYPICAL_NAME_BYTES = 24

    def identity(self, record: ImageRecord) -> str:
        return record.identity

    def size(self, record: ImageRecord) -> int:
        """The image file's bytes plus what its record adds: the other image features (by
        the lengths of this record's file name and source id), the labels, the framing."""
        name = record.labels.get("filename", record.path.rsplit("/", 1)[-1])
        source_id = record.labels.get("source_id", record.identity)
        return (record.size + self._fixed_features_bytes() + _text_bytes(name)
                + _text_bytes(source_id) + self.label_size(record) + RECORD_FRAMING)

    def size_overhead(self) -> int:
        return (self._fixed_features_bytes() + 2 * self.TYPICAL_NAME_BYTES
                + self.label_size(None) + RECORD_FRAMING)

    def label_size(self, record: ImageRecord | None) -> int:
        """Expected bytes of the label features of ``record`` (None: of a typical one)."""
        return 0

    def _fixed_features_bytes(self) -> int:
        """Bytes of the ``image/*`` features other than the image itself, with an empty
        file name and source id: measured once by encoding them (keys, a 4-digit height
        and width, the hex SHA-256, and 3 bytes for the image's length prefix)."""
        measured = getattr(self, "_fixed_bytes", None)
        if measured is None:
            template = {feature_keys.ENCODED: b"", feature_keys.FORMAT: "jpeg", feature_keys.HEIGHT: 4096,
                        feature_keys.WIDTH: 4096, feature_keys.FILENAME: "", feature_keys.SOURCE_ID: "",
                        feature_keys.SHA256: "0" * 64}
            measured = self._fixed_bytes = len(encode_example(template, IMAGE_KINDS)) + 3
        return measured

    def split(self, record: ImageRecord) -> str:
        return record.split

    def input_description(self, record: ImageRecord) -> Any:
        return (record.identity, record.split, record.path, record.size,
                self.input_labels(record))

    def input_labels(self, record: ImageRecord) -> Any:
        """The record's labels as plain values, for its input key (a format that packs
        them into bytes gives them unpacked)."""
        return record.labels

    def input_files(self, record: ImageRecord) -> tuple[str, ...]:
        return (record.path,)

    def modified_times(self, record: ImageRecord) -> tuple[float, ...]:
        return record.modified

    def label_features(
        self, record: ImageRecord, info: ImageInfo
    ) -> tuple[dict[str, Any], dict[str, str], list[Reject], dict[str, int]]:
        """Features from the record's labels: ``(features, kinds, rejects, counts)``."""
        return {}, {}, [], {}

    def embedded_image(self, record: ImageRecord) -> bytes | Reject | None:
        """The image's bytes when ``record.path`` is not the image but a file holding it
        (labelme's ``imageData``), or a ``Reject`` when they cannot be had from there;
        None (every record of the other formats): read ``record.path`` itself."""
        return None

    def refuse_outside(self, path: str) -> Reject | None:
        """The ``outside_root`` reject of a file whose real path (links resolved) leaves
        :attr:`input_roots`, else None. Asked before anything opens the file: a link may
        lead to any file the worker can read."""
        roots = self.input_roots
        target = roots.outside(path) if roots is not None else None
        if target is None:
            return None
        return Reject("image", path, "outside_root", (
            f"symbolic links lead this file to {target!r}, outside {roots.describe()}; it "
            "was not read (pass --allow-outside-root to read files links lead elsewhere)"))

    def read_image(
        self, path: str, size: int, name: str, data: bytes | None = None
    ) -> tuple[dict[str, Any], ImageInfo, dict[str, int]] | Reject:
        """:meth:`load_image`'s ``(fields, info, counts)``, or its ``Reject``."""
        loaded = self.load_image(path, size, name, data)
        return loaded if isinstance(loaded, Reject) else (loaded.fields, loaded.info, loaded.counts)

    def image_digest(self, record: ImageRecord) -> bytes | None:
        """The SHA-256 of the record's image bytes as read (what :meth:`encode` gives as
        ``Encoded.image_digest``), read here on its own; None when there is none to read
        (too large, unreadable, an embedded image missing: the write rejects those)."""
        embedded = self.embedded_image(record)
        if isinstance(embedded, Reject):
            return None
        return self._digest_of(record.path, record.size, embedded)

    def _digest_of(self, path: str, size: int, data: bytes | None = None) -> bytes | None:
        if data is None:
            # A file outside the input roots is not opened here either: the write
            # rejects it outside_root.
            if (size > self.checks.max_bytes or size == 0
                    or self.refuse_outside(path) is not None):
                return None
            try:
                data = filesystems.read_bytes(path)
            except Exception:  # noqa: BLE001 - the write stage says why, as a reject
                return None
        return hashlib.sha256(data).digest()

    def load_image(
        self, path: str, size: int, name: str, data: bytes | None = None
    ) -> LoadedImage | Reject:
        """Read, check and fix one image file; a file :meth:`refuse_outside` refuses is
        not opened.

        Args:
            path: the file on any Beam filesystem.
            size: its size from the listing (checked against ``max_bytes`` before reading).
            name: its file name, for fixes that look at it (a PNG named ``.jpg``).
            data: the image's bytes when already in hand (:meth:`embedded_image`); None:
                read from ``path``.

        Returns:
            A :class:`LoadedImage`: ``fields`` holds ``encoded``, ``format``, ``height``,
            ``width`` and ``key/sha256`` of the bytes to write; ``info`` is the original's
            header (boxes are normalized against it, see ``ImageFixes.applied_orientation``);
            ``counts`` has ``fix_<name>`` per fix applied; ``digest`` is the SHA-256 of the
            bytes as read (the same as ``key/sha256`` unless a fix changed them). Or an
            image ``Reject``.
        """
        if data is None:
            refused = self.refuse_outside(path)
            if refused is not None:
                return refused
        return self._load(path, size, name, data)

    def _load(
        self, path: str, size: int, name: str, data: bytes | None
    ) -> LoadedImage | Reject:
        def reject(reason: str, detail: str) -> Reject:
            return Reject("image", path, reason, detail)

        if size > self.checks.max_bytes:
            return reject(
                "too_large",
                f"file is {size} bytes, above the {self.checks.max_bytes}-byte limit; "
                "raise --max-image-bytes if it really is an image",
            )
        if data is None and size == 0:
            # Listed as empty: not opened, and rejected as empty below. A FIFO or another
            # special file lists as empty, and reading it would wait for a writer forever.
            data = b""
        try:
            data = filesystems.read_bytes(path) if data is None else data
        except Exception as error:  # noqa: BLE001 - each filesystem raises its own types
            if not filesystems.exists(path):
                return reject("missing", "the file disappeared after it was listed; rerun when the input is stable")
            return reject("unreadable", f"cannot read the file ({error}); check its permissions")
        fixed = None
        try:
            try:
                info = inspect_image(
                    data, max_pixels=self.checks.max_pixels, verify_decode=self.checks.verify_decode
                )
            except ImageRejected as rejected:
                if rejected.reason != "unsupported_format" or self.fixes is None:
                    raise
                fixed = convert_foreign(data, self.fixes, max_pixels=self.checks.max_pixels)
                info = fixed.source_info
            if fixed is None and self.fixes is not None:
                fixed = fix_image(data, info, self.fixes, name)
        except ImageRejected as rejected:
            return reject(rejected.reason, rejected.detail)
        counts: dict[str, int] = {}
        digest = hashlib.sha256(data)
        if fixed is not None and fixed.data is not data:
            data = fixed.data
            written = hashlib.sha256(data)
        else:
            written = digest
        if fixed is not None:
            counts = {f"fix_{fix}": 1 for fix in fixed.fixes}
        fields = {
            "encoded": data,
            "format": fixed.format if fixed else info.format,
            "height": fixed.height if fixed else info.height,
            "width": fixed.width if fixed else info.width,
            "key/sha256": written.hexdigest(),
        }
        applied = self.fixes.applied_orientation(info) if self.fixes else 1
        if info.exif_orientation not in (None, 1) and applied == 1:
            counts["exif_rotated"] = 1  # written unrotated; TensorFlow ignores the tag
        return LoadedImage(fields, info, counts, digest.digest())

    def _loaded_image(self, path: str, size: int, name: str,
                      data: bytes | None) -> LoadedImage | Reject:
        """:meth:`load_image`; or, for a subclass that reads images its own way (it
        overrides :meth:`read_image`), what that gives, without a digest (its examples
        are not compared for duplicates)."""
        if type(self).read_image is ImageExampleEncoder.read_image:
            return self.load_image(path, size, name, data)
        loaded = self.read_image(path, size, name, data) if data is not None else \
            self.read_image(path, size, name)
        return loaded if isinstance(loaded, Reject) else LoadedImage(*loaded, None)

    def encode(self, record: ImageRecord) -> Encoded:
        name = record.labels.get("filename", record.path.rsplit("/", 1)[-1])
        # An image embedded in an annotation file comes from a file the source read, and
        # checked, already (annotated_files.read_annotation); load_image checks the others.
        embedded = self.embedded_image(record)
        loaded = embedded if isinstance(embedded, Reject) else self._loaded_image(
            record.path, record.size, name, embedded)
        if isinstance(loaded, Reject):
            return Encoded(rejects=(loaded, *self.lost_with(record, loaded)))
        fields, info, image_counts, digest = loaded
        features = {feature_keys.image_key(key): value for key, value in fields.items()}
        features[feature_keys.FILENAME] = name
        features[feature_keys.SOURCE_ID] = str(record.labels.get("source_id", record.identity))
        extra, kinds, rejects, counts = self.label_features(record, info)
        features.update(extra)
        counts = dict(counts)
        for key, n in image_counts.items():
            counts[key] = counts.get(key, 0) + n
        counts["images_written"] = 1
        return Encoded(
            features=features, kinds={**IMAGE_KINDS, **kinds}, rejects=tuple(rejects), counts=counts,
            image_digest=digest,
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


def _text_bytes(value: Any) -> int:
    return len(str(value).encode("utf-8", "backslashreplace"))
