"""What a COCO record is written as: Model Garden's and the Object Detection API's
detection features, with masks, keypoints, captions, LVIS's category lists and image-level
labels when the run writes them (:class:`CocoEncoder`)."""

from __future__ import annotations

from typing import Any

from recordbeam import feature_keys
from recordbeam.images.boxes import InvalidBox
from recordbeam.images.checks import ImageInfo
from recordbeam.images.masks import InvalidMask, mask_png, segmentation_to_mask
from recordbeam.images.transcode import orient_point
from recordbeam.records import CAPTIONS_WRITTEN, IMAGE_LABELS_WRITTEN, ImageRecord, Reject
from recordbeam.sources.coco.join import lost_annotation_reason
from recordbeam.sources.coco.records import (
    IMAGE_LABELS,
    LVIS_LISTS,
    ObjectLabel,
    unpack_objects,
)
from recordbeam.sources.detection import DetectionEncoder, Geometry
from recordbeam.write.image_encoder import warn_size_mismatch

OBJECT_KINDS = {
    **feature_keys.DETECTION_KINDS,
    feature_keys.IS_CROWD: "int64",
    feature_keys.AREA: "float",
}
#: Per-object keypoint features as the Object Detection API's create_coco_tf_record.py
#: writes them: ``num`` one per object; the others flat, one value per keypoint name of
#: the object's category (the manifest's ``keypoints`` names split them again).
KEYPOINT_NUM_KIND = {feature_keys.KEYPOINT_NUM: "int64"}
KEYPOINT_FLAT_KINDS = {
    feature_keys.KEYPOINT_X: "float",
    feature_keys.KEYPOINT_Y: "float",
    feature_keys.KEYPOINT_VISIBILITY: "int64",
    feature_keys.KEYPOINT_TEXT: "bytes",
}
#: LVIS's image-level category lists, named as TensorFlow Datasets' ``lvis`` builder names
#: them (under ``image/``, as they describe the image): the written labels of the
#: categories.
LVIS_LIST_FEATURES = dict(zip(LVIS_LISTS, (feature_keys.NEG_CATEGORY_IDS,
                                          feature_keys.NOT_EXHAUSTIVE_CATEGORY_IDS), strict=True))
#: Image-level labels: annotations with a ``category_id`` and no ``bbox`` (COCO's "labels"
#: files, as Datumaro writes them), written as Open Images' are.
#: The per-object features: one value per object, so lists even when an image holds one
#: (and the image-level lists, which may hold one value or none).
OBJECT_FEATURES = frozenset({*OBJECT_KINDS, feature_keys.MASK, *KEYPOINT_NUM_KIND,
                             *KEYPOINT_FLAT_KINDS, feature_keys.CAPTION,
                             *LVIS_LIST_FEATURES.values(), *feature_keys.IMAGE_LABEL_KINDS})
#: Objects written with label 0 (a category id 0, without --contiguous-labels).
LABEL_0_OBJECTS = "objects_with_label_0"


def _box_masks_written(objects: tuple[ObjectLabel, ...], rejects: list[Reject]) -> int:
    """How many of the objects written have ``segmentation: []``: their masks are boxes."""
    rejected = {r.source for r in rejects if r.kind == "annotation"}
    return sum(1 for obj in objects if _no_outline(obj)
               and f"annotation {obj.annotation_id}" not in rejected)


def _no_outline(obj: ObjectLabel) -> bool:
    """``segmentation: []``: a box without an outline (not an absent segmentation, which
    ``--include-masks`` refuses as a file without any)."""
    return isinstance(obj.segmentation, (list, tuple)) and not obj.segmentation


class CocoEncoder(DetectionEncoder):
    """Adds the detection features Model Garden's and the OD API's decoders read.

    With image fixes (``recordbeam.images.transcode.ImageFixes``): boxes are normalized, so a
    ``max_side`` resize leaves them valid (``area`` is scaled to the written pixels). With
    ``apply_exif`` the boxes move with the pixels, unless the annotation's ``width`` /
    ``height`` say the tool showed the rotated image (see
    :meth:`~recordbeam.sources.detection.DetectionEncoder.geometry`).

    ``include_masks`` adds ``image/object/mask``: one 0/1 PNG per written object, of the
    written image's size, aligned with the other object features.

    ``include_keypoints`` adds the Object Detection API's keypoint features: per object
    ``keypoint/num`` (COCO's ``num_keypoints``), and flat over the objects, one value per
    keypoint name of the object's category, ``keypoint/x`` and ``/y`` (normalized and
    moved with the pixels as the boxes are; points not labeled stay at 0, 0 as COCO
    stores them), ``/visibility`` (0, 1, 2) and ``/text`` (the names).

    ``captions`` adds ``image/caption`` (one value per caption, maybe none);
    ``write_objects=False`` (a captions file alone) leaves the object features out. LVIS
    category lists are written when the record has them.
    """

    #: Objects assumed per image when planning shards before the annotations are joined
    #: (COCO's average is about 7).
    TYPICAL_OBJECTS = 7

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False, include_keypoints: bool = False,
                 captions: bool = False, write_objects: bool = True) -> None:
        extra = {feature_keys.IS_CROWD: "int64", feature_keys.AREA: "float"}
        if include_masks:
            extra[feature_keys.MASK] = "bytes"
        if include_keypoints:
            extra.update(KEYPOINT_NUM_KIND)
        super().__init__(checks, split, fixes, extra_kinds=extra,
                         flat_kinds=KEYPOINT_FLAT_KINDS if include_keypoints else None)
        self.include_masks = include_masks
        self.include_keypoints = include_keypoints
        self.captions = captions
        self.write_objects = write_objects
        self.list_features = OBJECT_FEATURES

    def label_features(self, record: ImageRecord, info: ImageInfo):
        if self.write_objects:
            columns, kinds, rejects, counts = super().label_features(record, info)
            if self.include_masks:
                counts["masks_from_boxes"] = _box_masks_written(self.objects(record), rejects)
            # Category id 0 (Label Studio numbers its categories from 0) is written as
            # label 0, which detection trainers read as background: counted, and said.
            counts[LABEL_0_OBJECTS] = columns[feature_keys.OBJECT_LABEL].count(0)
        else:
            warning = warn_size_mismatch(record, info, record.labels)
            columns, kinds, rejects, counts = {}, {}, [warning] if warning else [], {}
        if self.captions:
            texts = [text for _caption_id, text in record.labels.get("captions", ())]
            columns[feature_keys.CAPTION], kinds[feature_keys.CAPTION] = texts, "bytes"
            counts[CAPTIONS_WRITTEN] = len(texts)
        for key, feature in LVIS_LIST_FEATURES.items():
            if key in record.labels:
                columns[feature], kinds[feature] = list(record.labels[key]), "int64"
        image_labels = record.labels.get(IMAGE_LABELS)
        if image_labels:
            columns[feature_keys.CLASS_LABEL] = [label for _id, label, _text in image_labels]
            columns[feature_keys.CLASS_TEXT] = [text for _id, _label, text in image_labels]
            kinds.update(feature_keys.IMAGE_LABEL_KINDS)
            counts[IMAGE_LABELS_WRITTEN] = len(image_labels)
        return columns, kinds, rejects, counts

    def objects(self, record: ImageRecord) -> tuple[ObjectLabel, ...]:
        return unpack_objects(record.labels["objects"])

    def input_labels(self, record: ImageRecord) -> Any:
        labels = dict(record.labels)
        if "objects" in labels:  # pickled: compared by what they hold, not by their bytes
            labels["objects"] = self.objects(record)
        return labels

    def lost_with(self, record: ImageRecord, reject: Reject) -> tuple[Reject, ...]:
        """The objects and captions of an image rejected while writing, as annotation
        rejects."""
        reason = lost_annotation_reason(reject.reason)
        captions = tuple(
            Reject("annotation", f"caption {caption_id}", reason,
                   f"caption {caption_id} belongs to image {record.path}, which was rejected "
                   f"({reject.reason}; see its image's reject)", reject.split)
            for caption_id, _text in record.labels.get("captions", ()))
        image_labels = tuple(
            Reject("annotation", f"annotation {ann_id}", reason,
                   f"annotation {ann_id} (a label of the whole image) belongs to image "
                   f"{record.path}, which was rejected ({reject.reason}; see its image's "
                   "reject)", reject.split)
            for ann_id, _label, _text in record.labels.get(IMAGE_LABELS, ()))
        return super().lost_with(record, reject) + captions + image_labels

    def object_source(self, obj: ObjectLabel) -> str:
        return f"annotation {obj.annotation_id}"

    def size_kinds(self) -> dict[str, str]:
        """Masks, whose size depends on the pixels, are not counted (nor keypoints, whose
        count per object depends on the category)."""
        return OBJECT_KINDS if self.write_objects else {}

    def extra_values(self, obj: ObjectLabel, geometry: Geometry) -> tuple:
        """``is_crowd``, ``area`` scaled to the written pixels and, with masks, the mask
        (raises ``InvalidMask``)."""
        written, displayed = geometry.written, geometry.displayed
        area = obj.area * ((written[0] * written[1]) / (displayed[0] * displayed[1]))
        values: tuple = (obj.iscrowd, area)
        if self.include_masks:
            values += (self.object_mask(obj, geometry) if _no_outline(obj) else mask_png(
                segmentation_to_mask(obj.segmentation, *geometry.frame), geometry.move,
                written),)
        if self.include_keypoints:
            values += (obj.keypoints.num if obj.keypoints else 0,)
        return values

    def flat_values(self, obj: ObjectLabel, geometry: Geometry) -> tuple[list, ...]:
        """x, y, visibility and names of the object's keypoints (empty lists without)."""
        xs: list[float] = []
        ys: list[float] = []
        keypoints = obj.keypoints
        if keypoints is None:
            return xs, ys, [], []
        width, height = geometry.frame
        values = keypoints.values
        visibility = [int(v) for v in values[2::3]]
        for x, y, v in zip(values[0::3], values[1::3], visibility, strict=True):
            point = orient_point(x / width, y / height, geometry.move) if v else (0.0, 0.0)
            xs.append(point[0])
            ys.append(point[1])
        return xs, ys, visibility, list(keypoints.names)

    def object_reject(self, obj: ObjectLabel, bad: InvalidBox | InvalidMask,
                      record: ImageRecord, geometry: Geometry) -> Reject:
        return Reject(
            "annotation", f"annotation {obj.annotation_id}", bad.reason,
            f"{bad.detail} (image {record.path}); the image was written without this object",
        )

    def object_mask(self, obj: ObjectLabel, geometry: Geometry) -> bytes:
        """The mask of an object whose ``segmentation`` is ``[]`` (as CVAT's and Datumaro's
        COCO exports write boxes): its box's."""
        box = ObjectLabel(obj.annotation_id, obj.label, obj.text, obj.bbox, obj.area,
                          obj.iscrowd)  # no segmentation: the box is the mask
        return super().object_mask(box, geometry)

    def object_counts(self, columns: dict[str, list]) -> dict[str, int]:
        return {"masks_written": len(columns[feature_keys.MASK])} if self.include_masks else {}
