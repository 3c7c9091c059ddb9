"""What one Example must hold for a consumer: the record rules of ``recordbeam check``.

A rule takes a :class:`Record` (one parsed Example and where it is) and returns what is
wrong with it, in words a user can act on, or None. :mod:`recordbeam.dataset.consumers`
says which consumer applies which rule, and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recordbeam import feature_keys

__all__ = [
    "FLOAT32_EXACT_INTEGERS", "MASK", "Record", "RecordCheck", "boxes_normalized",
    "image_size", "keys_rule", "kinds_match_manifest", "labels_from_one", "labels_in_map",
    "masks_match_image", "numeric_source_id", "object_lists", "parse_record",
]

#: Integers up to 2**24 are exact in float32; EfficientDet's dataloader reads source_id as one.
FLOAT32_EXACT_INTEGERS = 2**24
MASK = feature_keys.MASK
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_MANIFEST_KINDS = {"string": "bytes", "int64": "int64", "float32": "float"}


# ---------------------------------------------------------------- one record's features


@dataclass(frozen=True)
class Record:
    """One Example as the rules see it: where it is, and ``name -> (kind, values)``
    (kind None for a feature written without a kind, how an empty list is stored)."""

    shard: str
    number: int
    features: Mapping[str, tuple[str | None, Sequence[Any]]]

    def values(self, name: str) -> Sequence[Any]:
        return self.features.get(name, (None, ()))[1]


def parse_record(shard: str, number: int, data: bytes) -> Record | str:
    # protobuf and numpy load here, not when the command line is parsed (the parser
    # names the consumers from this module).
    from recordbeam.tfrecord.example import Example, feature_kind

    try:
        feature_map = Example.FromString(data).features.feature
    except Exception:  # noqa: BLE001 - protobuf's DecodeError differs between backends
        return f"the record ({len(data)} bytes) is not a serialized tf.train.Example"
    features = {}
    for name, feature in feature_map.items():
        kind = feature_kind(feature)
        values = () if kind is None else getattr(feature, f"{kind}_list").value
        features[name] = (kind, values)
    return Record(shard, number, features)


# ---------------------------------------------------------------- record rules

RecordCheck = Callable[[Record], "str | None"]


def keys_rule(required: Mapping[str, str], optional: Mapping[str, str],
               scalars: Sequence[str]) -> RecordCheck:
    """Keys the decoder parses: ``required`` must be there, every key must have the dtype the
    decoder declares (another dtype fails ``tf.io.parse_single_example``) and a fixed-length
    scalar must hold exactly one value."""

    def check(record: Record) -> str | None:
        for name in required:
            if name not in record.features:
                return f"{name} is missing; the decoder parses it as a required feature"
        for name, kind in {**required, **optional}.items():
            found, values = record.features.get(name, (None, ()))
            if found is not None and found != kind:
                return f"{name} is stored as {found}, the decoder parses it as {kind}"
            if name in scalars and name in record.features and len(values) != 1:
                return f"{name} holds {len(values)} values; the decoder parses exactly one"
        return None

    return check


def object_lists(record: Record) -> str | None:
    lengths = {name: len(record.values(name)) for name in (*feature_keys.BOX, feature_keys.OBJECT_LABEL)}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name.rsplit('/', 2)[-2]}/{name.rsplit('/', 1)[-1]}={n}"
                           for name, n in lengths.items())
        return f"the object lists differ in length ({listed}); each object needs one of each"
    objects = lengths[feature_keys.OBJECT_LABEL]
    for name in (feature_keys.AREA, feature_keys.IS_CROWD):
        n = len(record.values(name))
        if n not in (0, objects):
            return f"{name} holds {n} values for {objects} objects (the decoder takes 0 or one per object)"
    return None


def boxes_normalized(record: Record) -> str | None:
    xmin, ymin, xmax, ymax = (record.values(name) for name in feature_keys.BOX)
    for i, box in enumerate(zip(xmin, ymin, xmax, ymax, strict=False)):
        if not all(0.0 <= v <= 1.0 for v in box) or box[0] > box[2] or box[1] > box[3]:
            shown = ", ".join(f"{v:.4g}" for v in box)
            return (f"object {i}: box (xmin, ymin, xmax, ymax) = ({shown}) is not normalized "
                    "to [0, 1] with min <= max; the trainer scales boxes by the image size")
    return None


def labels_from_one(record: Record) -> str | None:
    for i, label in enumerate(record.values(feature_keys.OBJECT_LABEL)):
        if label < 1:
            return (f"object {i}: label {label}; labels start at 1 (0 is the background class), "
                    "convert with --contiguous-labels or relabel")
    return None


def image_size(record: Record) -> str | None:
    from recordbeam.images.checks import ImageRejected, inspect_image

    encoded = record.values(feature_keys.ENCODED)
    if len(encoded) != 1:
        return None  # the keys rule says so
    try:
        info = inspect_image(encoded[0], max_pixels=None)
    except ImageRejected as rejected:
        return f"image/encoded is not a whole JPEG or PNG ({rejected.reason}): {rejected.detail}"
    height, width = record.values(feature_keys.HEIGHT), record.values(feature_keys.WIDTH)
    if len(height) != 1 or len(width) != 1:
        return None  # absent: the decoders take the decoded image's size (the keys rule checks counts)
    if (height[0], width[0]) != (info.height, info.width):
        return (f"image/height x image/width is {height[0]}x{width[0]} but the encoded image is "
                f"{info.height}x{info.width}")
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a PNG's IHDR chunk, without decoding; None when not a PNG."""
    if len(data) < 24 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")


def masks_match_image(record: Record) -> str | None:
    masks = record.values(MASK)
    objects = len(record.values(feature_keys.OBJECT_LABEL))
    if len(masks) != objects:
        return f"{MASK} holds {len(masks)} masks for {objects} objects; each object needs one"
    height, width = record.values(feature_keys.HEIGHT), record.values(feature_keys.WIDTH)
    if len(height) != 1 or len(width) != 1:
        return None  # the image-size rule says so
    for i, mask in enumerate(masks):
        size = _png_size(mask)
        if size is None:
            return f"object {i}: the mask is not a PNG; the decoder reads masks with decode_png"
        if size != (height[0], width[0]):
            return (f"object {i}: the mask is {size[0]}x{size[1]} but the image is "
                    f"{height[0]}x{width[0]}; masks are stacked at the image's size")
    return None


def numeric_source_id(*, empty_allowed: bool, float32: bool) -> RecordCheck:
    def check(record: Record) -> str | None:
        values = record.values(feature_keys.SOURCE_ID)
        if not values:
            return None if empty_allowed else "image/source_id is missing"
        text = values[0].decode("utf-8", "replace")
        if not text and empty_allowed:
            return None
        if not (text.isascii() and text.isdigit()):
            return (f"image/source_id is {text!r}, not a decimal integer; the trainer converts "
                    "it with tf.strings.to_number (write numeric ids, e.g. COCO's image ids)")
        if float32 and int(text) > FLOAT32_EXACT_INTEGERS:
            return (f"image/source_id {text} is above 2**24, which float32 (how the dataloader "
                    "reads it) cannot hold exactly; evaluation would match the wrong image")
        return None

    return check


def kinds_match_manifest(manifest: Mapping[str, Any]) -> RecordCheck:
    expected = {name: _MANIFEST_KINDS.get(spec.get("dtype"))
                for name, spec in manifest.get("features", {}).items()}

    def check(record: Record) -> str | None:
        for name, (kind, _values) in sorted(record.features.items()):
            want = expected.get(name)
            if name not in expected:
                return f"{name} is not in the manifest's features; a typed description would miss it"
            if kind is None:
                return (f"{name} is an empty value stored without a type, which the tfrecord "
                        "package cannot read (it takes a feature's type from its first value "
                        "list); write empty lists with their kind (encode_example's kinds=)")
            if want is not None and kind != want:
                return f"{name} is stored as {kind}, the manifest lists it as {want}"
        return None

    return check


def labels_in_map(manifest: Mapping[str, Any]) -> RecordCheck:
    names = {int(k): v for k, v in (manifest.get("label_map") or {}).items()
             if str(k).lstrip("-").isdigit()}

    def check(record: Record) -> str | None:
        texts = record.values(feature_keys.OBJECT_TEXT)
        for i, label in enumerate(record.values(feature_keys.OBJECT_LABEL)):
            if label not in names:
                return f"object {i}: label {label} is not in the manifest's label map"
            if i < len(texts) and texts[i].decode("utf-8", "replace") != names[label]:
                return (f"object {i}: class/text {texts[i].decode('utf-8', 'replace')!r} is not "
                        f"the label map's name {names[label]!r} for label {label}")
        return None

    return check
