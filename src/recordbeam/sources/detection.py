"""What detection sources share: the object record and the encoder of its features.

A detection source turns each annotated object into a :class:`DetectionObject` (VOC) or
an object of its own with ``bbox``, ``label`` and ``text`` (COCO's ``ObjectLabel``, with
the hooks of :class:`DetectionEncoder` overridden) and lets :class:`DetectionEncoder` write the features Model Garden's and the Object Detection API's decoders read:
``image/object/bbox/{xmin,xmax,ymin,ymax}`` (normalized corners), ``class/label`` and
``class/text``, plus the per-object features a format adds (``extra_kinds``: VOC's
``difficult``, ``truncated`` and ``view``; COCO's ``is_crowd``, ``area`` and masks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from recordbeam import feature_keys
from recordbeam.images.boxes import InvalidBox, normalize_box
from recordbeam.images.checks import ImageInfo
from recordbeam.images.masks import InvalidMask, mask_png, segmentation_to_mask
from recordbeam.images.transcode import orient_box, scaled_size
from recordbeam.records import OBJECTS_WRITTEN, ImageRecord, Reject
from recordbeam.tfrecord.example import encode_example
from recordbeam.write.image_encoder import ImageExampleEncoder, warn_size_mismatch

#: The features every detection source writes, one value per object.
BOX_KINDS = feature_keys.DETECTION_KINDS


class DetectionObject(NamedTuple):
    """One annotated object, ready to encode.

    Attributes:
        source: where it was read, for rejects (``Annotations/x.xml: object[2]``).
        label: the class label written.
        text: the class name written.
        bbox: ``(x, y, width, height)`` in pixels of the annotated image, as COCO's
            (in fractions of the image's width and height when ``normalized``).
        extra: values of the encoder's ``extra_kinds`` features, in their order.
        segmentation: the object's outline for ``include_masks``, as COCO writes it
            (polygons ``[[x1, y1, x2, y2, ...], ...]`` or an RLE dict), in the same units as
            ``bbox``; None: the box is the mask.
        normalized: ``bbox`` and polygons are fractions of the image (YOLO), multiplied by
            the size read from the image header.
    """

    source: str
    label: int
    text: str
    bbox: tuple[float, float, float, float]
    extra: tuple[Any, ...] = ()
    segmentation: Any = None
    normalized: bool = False


def object_fields(obj: DetectionObject) -> tuple:
    """``obj`` as the plain tuple an :class:`ImageRecord` carries (the record coder writes
    tuples of primitives compactly); the defaults at the end are left out, so formats
    without masks or normalized boxes store what they always stored."""
    fields = tuple(obj)
    while len(fields) > 4 and fields[-1] == _DEFAULTS[len(fields) - 5]:
        fields = fields[:-1]
    return fields


#: The defaults of :class:`DetectionObject`'s last fields (``extra`` onwards).
_DEFAULTS = ((), None, False)


def box_around(points: Sequence[float]) -> tuple[float, float, float, float]:
    """``(x, y, width, height)`` around the points ``[x1, y1, x2, y2, ...]``."""
    xs, ys = points[0::2], points[1::2]
    return min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)


def union_of(polygons: list[list[float]], masks: list[dict[str, Any]]) -> Any:
    """The segmentation of an object made of several shapes: its ``polygons``, or its one
    box RLE mask (see :mod:`recordbeam.images.masks`), or the union of their pixels (drawn
    when the mask is written); None when it has neither."""
    if masks and (polygons or len(masks) > 1):
        return {"size": masks[0]["size"], "union": [*([polygons] if polygons else []), *masks]}
    return polygons or (masks[0] if masks else None)


class Geometry(NamedTuple):
    """Where an image's boxes live and where they go.

    Attributes:
        frame: ``(width, height)`` the boxes are normalized against.
        move: the EXIF orientation the normalized boxes are moved by (1: not moved).
        displayed: ``(width, height)`` of the image as shown (EXIF applied when written so).
        written: ``(width, height)`` of the pixels written (after ``max_side``).
        annotated_rotated: the annotation's size is the EXIF-rotated one (no size warning).
    """

    frame: tuple[int, int]
    move: int
    displayed: tuple[int, int]
    written: tuple[int, int]
    annotated_rotated: bool


class DetectionEncoder(ImageExampleEncoder):
    """Writes an image and its :class:`DetectionObject` list (``labels["objects"]``).

    Boxes are clipped to the image (counted as ``boxes_clipped``) and normalized by the
    image header's size; a box with no area inside the image is rejected with its
    object's ``source``. ``extra_kinds`` (feature -> kind) names the per-object features
    a format adds beside the boxes; each object's ``extra`` holds their values in order.
    ``flat_kinds`` names features to which each object adds any number of values
    (COCO's keypoints), from :meth:`flat_values`. With ``image_labels``, the classes of the
    whole image (``labels["image_labels"]``: ``(label, name)`` pairs) are written too, as
    ``image/class/label`` and ``image/class/text``.
    """

    #: Objects assumed per image when planning shards before the annotations are read.
    TYPICAL_OBJECTS = 3

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 extra_kinds: Mapping[str, str] | None = None,
                 include_masks: bool = False,
                 flat_kinds: Mapping[str, str] | None = None, image_labels: bool = False) -> None:
        super().__init__(checks, split, fixes)
        self.extra_kinds = dict(extra_kinds or {})
        self.include_masks = include_masks
        if include_masks:
            self.extra_kinds[feature_keys.MASK] = "bytes"
        self.flat_kinds = dict(flat_kinds or {})
        self.object_kinds = {**BOX_KINDS, **self.extra_kinds, **self.flat_kinds}
        self.image_labels = image_labels
        self.list_features = frozenset({
            *self.object_kinds, *(feature_keys.IMAGE_LABEL_KINDS if image_labels else ())})

    def objects(self, record: ImageRecord) -> Sequence[Any]:
        """The objects of ``record``: :class:`DetectionObject`s from the plain tuples of
        their fields the source stored (a format that packs them otherwise unpacks them
        here)."""
        return tuple(DetectionObject(*fields) for fields in record.labels["objects"])

    def object_source(self, obj: Any) -> str:
        """Where ``obj`` was read, for its rejects."""
        return obj.source

    def size_kinds(self) -> Mapping[str, str]:
        """The per-object features counted by :meth:`label_size` (those whose size does not
        depend on the pixels: not masks)."""
        return {key: kind for key, kind in self.object_kinds.items()
                if key != feature_keys.MASK}

    def label_size(self, record: ImageRecord | None) -> int:
        """The object features' keys, and per object what four corners, a label, a
        10-letter class name and the other features (0.5, 90 or a 10-letter word) take."""
        measured = getattr(self, "_object_bytes", None)
        if measured is None:
            kinds = self.size_kinds()
            empty = {key: [] for key in kinds}
            one = {key: [0.5] if kind == "float" else [90] if kind == "int64" else ["n" * 10]
                   for key, kind in kinds.items()}
            keys = len(encode_example(empty, kinds))
            measured = self._object_bytes = (keys, len(encode_example(one, kinds)) - keys)
        keys, per_object = measured
        objects = self.TYPICAL_OBJECTS if record is None else len(self.objects(record))
        return keys + objects * per_object

    def lost_with(self, record: ImageRecord, reject: Reject) -> tuple[Reject, ...]:
        """The objects of an image rejected while writing, as annotation rejects."""
        reason = "image_missing" if reject.reason == "missing" else "image_rejected"
        sources = (self.object_source(obj) for obj in self.objects(record))
        return tuple(
            Reject("annotation", source, reason,
                   f"{source} belongs to image {record.path}, which was rejected "
                   f"({reject.reason}; see its image's reject)", reject.split)
            for source in sources
        )

    def geometry(self, record: ImageRecord, info: ImageInfo) -> Geometry:
        """Which pixels the boxes were drawn on, and how they move when written (see
        :class:`Geometry`). An annotation size equal to the EXIF-rotated size (tools that
        apply EXIF) means the boxes already are in displayed coordinates, so they are only
        normalized against that size; otherwise they are in stored pixels and move with
        them (``--apply-exif``)."""
        orientation = self.fixes.applied_orientation(info) if self.fixes else 1
        swapped = orientation in (5, 6, 7, 8)
        displayed = (info.height, info.width) if swapped else (info.width, info.height)
        frame, move = (info.width, info.height), orientation
        if swapped and (record.labels.get("width"), record.labels.get("height")) == displayed:
            frame, move = displayed, 1  # annotated on the rotated image
        written = scaled_size(*displayed, self.fixes.max_side if self.fixes else None)
        return Geometry(frame, move, displayed, written, frame == displayed and swapped)

    def pixel_box(self, obj: Any, geometry: Geometry) -> tuple[float, float, float, float]:
        """``obj``'s box in pixels of ``geometry.frame`` (normalized boxes scaled up)."""
        if not getattr(obj, "normalized", False):
            return obj.bbox
        width, height = geometry.frame
        x, y, w, h = obj.bbox
        return (x * width, y * height, w * width, h * height)

    def extra_values(self, obj: Any, geometry: Geometry) -> tuple[Any, ...]:
        """The values of ``extra_kinds`` written for ``obj``: its ``extra`` as it is, then
        with ``include_masks`` its mask (a format whose extras depend on the written
        pixels, as an area, overrides this)."""
        if not self.include_masks:
            return obj.extra
        return (*obj.extra, self.object_mask(obj, geometry))

    def object_mask(self, obj: Any, geometry: Geometry) -> bytes:
        """The PNG mask of ``obj`` at the written size: its segmentation, or its box when
        it has none (raises ``InvalidMask``)."""
        width, height = geometry.frame
        segmentation = obj.segmentation
        if segmentation is None:
            x, y, w, h = self.pixel_box(obj, geometry)
            segmentation = [[x, y, x + w, y, x + w, y + h, x, y + h]]
        elif obj.normalized and isinstance(segmentation, list):
            segmentation = [[value * (width if i % 2 == 0 else height)
                             for i, value in enumerate(polygon)] for polygon in segmentation]
        pixels = segmentation_to_mask(segmentation, width, height)
        return mask_png(pixels, geometry.move, geometry.written)

    def flat_values(self, obj: Any, geometry: Geometry) -> tuple[Sequence[Any], ...]:
        """The values ``obj`` adds to each of ``flat_kinds``, in their order (none by
        default); may raise ``InvalidBox`` to reject the object."""
        return ()

    def object_reject(self, obj: Any, bad: InvalidBox | InvalidMask, record: ImageRecord,
                      geometry: Geometry) -> Reject:
        """The reject of an object whose box (or mask) cannot be written."""
        if isinstance(bad, InvalidMask):
            return Reject("annotation", obj.source, bad.reason,
                          f"{obj.source}: {bad.detail} (image {record.path}); the image was "
                          "written without this object")
        x, y, w, h = self.pixel_box(obj, geometry)
        width, height = geometry.frame
        return Reject(
            "annotation", obj.source, bad.reason,
            f"{obj.source}: box from ({x:g}, {y:g}) to ({x + w:g}, {y + h:g}) has no area "
            f"inside the {width}x{height} image {record.path}; the image was written without "
            "this object")

    def label_features(self, record: ImageRecord, info: ImageInfo):
        # Runs for every image: the columns are filled through local names, and the
        # orientation move is skipped when there is none (most images).
        xmins: list[float] = []
        xmaxs: list[float] = []
        ymins: list[float] = []
        ymaxs: list[float] = []
        labels: list[int] = []
        texts: list[str] = []
        extra_columns: list[list] = [[] for _ in self.extra_kinds]
        flat_columns: list[list] = [[] for _ in self.flat_kinds]
        rejects: list[Reject] = []
        clipped = masks_from_boxes = 0
        geometry = self.geometry(record, info)
        width, height = geometry.frame
        move = geometry.move
        pixel_box, extra_values = self.pixel_box, self.extra_values
        flat_values = self.flat_values if flat_columns else None
        count_box_masks = self.include_masks
        for obj in self.objects(record):
            try:
                box = normalize_box(pixel_box(obj, geometry), width, height)
                extra = extra_values(obj, geometry)
                flat = flat_values(obj, geometry) if flat_values else ()
            except (InvalidBox, InvalidMask) as bad:
                rejects.append(self.object_reject(obj, bad, record, geometry))
                continue
            if box.clipped:
                clipped += 1
            if count_box_masks and getattr(obj, "segmentation", 0) is None:
                masks_from_boxes += 1
            if move == 1:
                xmin, ymin, xmax, ymax = box.xmin, box.ymin, box.xmax, box.ymax
            else:
                xmin, ymin, xmax, ymax = orient_box(box.xmin, box.ymin, box.xmax, box.ymax,
                                                    move)
            xmins.append(xmin)
            xmaxs.append(xmax)
            ymins.append(ymin)
            ymaxs.append(ymax)
            labels.append(obj.label)
            texts.append(obj.text)
            for column, value in zip(extra_columns, extra, strict=True):
                column.append(value)
            for column, values in zip(flat_columns, flat, strict=True):
                column.extend(values)
        box_columns = (xmins, xmaxs, ymins, ymaxs, labels, texts)  # in BOX_KINDS' order
        columns: dict[str, list] = dict(zip(
            (*BOX_KINDS, *self.extra_kinds, *self.flat_kinds),
            (*box_columns, *extra_columns, *flat_columns), strict=True))
        warning = None if geometry.annotated_rotated else warn_size_mismatch(
            record, info, record.labels)
        if warning:
            rejects.append(warning)
        counts = {OBJECTS_WRITTEN: len(labels), "boxes_clipped": clipped,
                  **self.object_counts(columns)}
        if self.include_masks and type(self).extra_values is DetectionEncoder.extra_values:
            counts["masks_written"] = len(columns[feature_keys.MASK])
            counts["masks_from_boxes"] = masks_from_boxes
        kinds = dict(self.object_kinds)
        if self.image_labels:
            image_labels = record.labels.get("image_labels", ())
            columns[feature_keys.CLASS_LABEL] = [label for label, _text in image_labels]
            columns[feature_keys.CLASS_TEXT] = [text for _label, text in image_labels]
            kinds.update(feature_keys.IMAGE_LABEL_KINDS)
        return columns, kinds, rejects, counts

    def object_counts(self, columns: Mapping[str, list]) -> dict[str, int]:
        """Counts a format adds for the objects written (``columns``: the features)."""
        return {}
