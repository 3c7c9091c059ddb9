"""The detection encoder's shared parts: normalized boxes (YOLO) and masks from polygons
or, when an object has none, from its box."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from recordbeam.images.checks import inspect_image
from recordbeam.records import ImageRecord
from recordbeam.sources.detection import DetectionEncoder, DetectionObject, object_fields


def _record(tmp_path, objects, width=100, height=50):
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="PNG")
    path = tmp_path / "a.png"
    path.write_bytes(buffer.getvalue())
    fields = tuple(object_fields(obj) for obj in objects)
    record = ImageRecord("a", str(path), path.stat().st_size, "train",
                         {"source_id": "a", "filename": "a.png", "width": None,
                          "height": None, "objects": fields})
    return record, inspect_image(path.read_bytes())


def _mask(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def test_normalized_boxes_are_scaled_by_the_header_size(tmp_path):
    record, info = _record(tmp_path, [
        DetectionObject("a.txt:1", 1, "dog", (0.1, 0.2, 0.5, 0.4), normalized=True),
        DetectionObject("a.txt:2", 1, "dog", (0.9, 0.9, 0.5, 0.5), normalized=True)])
    features, _kinds, rejects, counts = DetectionEncoder().label_features(record, info)
    assert features["image/object/bbox/xmin"] == [0.1, 0.9]
    assert features["image/object/bbox/xmax"] == [0.6, 1.0]  # the second one clipped
    assert features["image/object/bbox/ymax"] == [0.6, 1.0]
    assert counts["boxes_clipped"] == 1 and rejects == []


def test_masks_come_from_polygons_or_from_the_box(tmp_path):
    triangle = [[0.0, 0.0, 0.5, 0.0, 0.0, 1.0]]  # normalized, like a YOLO segment line
    record, info = _record(tmp_path, [
        DetectionObject("a.txt:1", 1, "dog", (0.0, 0.0, 0.5, 1.0), segmentation=triangle,
                        normalized=True),
        DetectionObject("b.xml: object[0]", 2, "cat", (60.0, 10.0, 20.0, 10.0))])
    encoder = DetectionEncoder(include_masks=True)
    features, kinds, rejects, counts = encoder.label_features(record, info)
    assert kinds["image/object/mask"] == "bytes" and rejects == []
    triangle_mask, box_mask = (_mask(png) for png in features["image/object/mask"])
    assert triangle_mask.shape == box_mask.shape == (50, 100)
    assert triangle_mask[2, 2] == 1 and triangle_mask[45, 45] == 0 and triangle_mask[2, 60] == 0
    assert box_mask.sum() == 20 * 10 and box_mask[10:20, 60:80].all()
    assert counts["masks_written"] == 2 and counts["masks_from_boxes"] == 1


def test_object_fields_leave_out_the_defaults():
    assert object_fields(DetectionObject("s", 1, "dog", (1, 2, 3, 4), (0,))) == (
        "s", 1, "dog", (1, 2, 3, 4), (0,))
    assert len(object_fields(DetectionObject("s", 1, "d", (1, 2, 3, 4), normalized=True))) == 7
