"""TensorFlow reads every new output kind: class folders, manifests (Examples and
SequenceExamples), images re-encoded with --transcode jpeg, and COCO masks."""

from __future__ import annotations

import glob
import json
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from recordbeam import pipeline  # noqa: E402
from recordbeam.images.transcode import ImageFixes  # noqa: E402
from recordbeam.sources.coco.reader import CocoOptions  # noqa: E402
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord  # noqa: E402
from recordbeam.sources.imagefolder import reader as imagefolder  # noqa: E402
from recordbeam.sources.manifest import reader as manifest  # noqa: E402
from recordbeam.testing.samples import make_image_folder_sample, make_manifest_sample  # noqa: E402
from recordbeam.write.image_encoder import ImageChecks  # noqa: E402
from recordbeam.write.sink import ShardOptions  # noqa: E402

pytestmark = pytest.mark.interop
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
SHARDS = ShardOptions(num_shards=2, max_reject_fraction=0.5)
IMAGE = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/format": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64),
    "image/width": tf.io.FixedLenFeature((), tf.int64),
}


def _run(build, out):
    return pipeline.run(build, out, beam_args=IN_MEMORY, show_progress=False).manifest


def _serialized(out):
    files = sorted(glob.glob(os.path.join(out, "*.tfrecord")))
    return [r.numpy() for r in tf.data.TFRecordDataset(files)]


def test_class_folders_transcoded_to_jpeg_decode_with_three_channels(tmp_path):
    sample = make_image_folder_sample(tmp_path / "in")
    out = str(tmp_path / "out")
    _run(
        lambda p: imagefolder.to_tfrecord(
            p,
            out,
            imagefolder.ImageFolderOptions(sample.root, label_offset=1),
            SHARDS,
            ImageChecks(),
            ImageFixes("jpeg"),
        ),
        out,
    )
    spec = {
        **IMAGE,
        "image/class/label": tf.io.FixedLenFeature((), tf.int64),
        "image/class/text": tf.io.FixedLenFeature((), tf.string),
    }
    records = _serialized(out)
    assert len(records) == len(sample.expected["good"])
    for record in records:
        parsed = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_jpeg(parsed["image/encoded"], channels=3)
        assert image.shape == (parsed["image/height"], parsed["image/width"], 3)
        name = parsed["image/class/text"].numpy().decode()
        assert parsed["image/class/label"] == sorted(sample.classes).index(name) + 1


def test_manifest_examples_and_sequence_examples_parse(tmp_path):
    sample = make_manifest_sample(tmp_path / "in", fmt="jsonl", include_bad=False, num_rows=9)
    out = str(tmp_path / "rows")
    _run(
        lambda p: manifest.to_tfrecord(
            p, out, manifest.TableOptions(sample.manifest), SHARDS, ImageChecks(), ImageFixes("jpeg")
        ),
        out,
    )
    spec = {
        **IMAGE,
        "label": tf.io.FixedLenFeature((), tf.int64),
        "box": tf.io.FixedLenFeature((4,), tf.float32),
        "tags": tf.io.VarLenFeature(tf.string),
    }
    labels = sorted(r["label"] for r in sample.rows)
    parsed = [tf.io.parse_single_example(r, spec) for r in _serialized(out)]
    assert sorted(int(p["label"]) for p in parsed) == labels
    for p in parsed:
        assert tf.io.decode_jpeg(p["image/encoded"], channels=3).shape[-1] == 3

    grouped = str(tmp_path / "groups")
    _run(
        lambda p: manifest.to_tfrecord(
            p, grouped, manifest.TableOptions(sample.manifest, group_by="video"), SHARDS, ImageChecks()
        ),
        grouped,
    )
    videos = {}
    for row in sample.rows:
        videos.setdefault(row["video"], []).append(row)
    records = _serialized(grouped)
    assert len(records) == len(videos)
    for record in records:
        context, lists = tf.io.parse_single_sequence_example(
            record,
            context_features={"video": tf.io.FixedLenFeature((), tf.string)},
            sequence_features={
                "frame": tf.io.FixedLenSequenceFeature((), tf.int64),
                "image/encoded": tf.io.FixedLenSequenceFeature((), tf.string),
                "box": tf.io.FixedLenSequenceFeature((4,), tf.float32),
            },
        )
        rows = videos[context["video"].numpy().decode()]
        assert lists["frame"].numpy().tolist() == [r["frame"] for r in rows]
        assert lists["box"].shape == (len(rows), 4)
        for encoded in lists["image/encoded"]:
            assert tf.io.decode_image(encoded, channels=3).shape[-1] == 3


def test_coco_masks_decode_to_0_1_arrays_matching_the_polygons(tmp_path):
    os.makedirs(tmp_path / "images")
    Image.new("RGB", (48, 32), (5, 5, 5)).save(tmp_path / "images" / "p.jpg")
    polygons = [[[3, 4, 20, 4, 20, 15, 3, 15]], [[30, 10, 44, 10, 37, 28]]]
    doc = {
        "images": [{"id": 7, "file_name": "p.jpg", "width": 48, "height": 32}],
        "annotations": [
            {
                "id": i + 1,
                "image_id": 7,
                "category_id": 1,
                "iscrowd": 0,
                "bbox": [3, 4, 17, 11],
                "segmentation": s,
            }
            for i, s in enumerate(polygons)
        ],
        "categories": [{"id": 1, "name": "shape"}],
    }
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    out = str(tmp_path / "out")
    _run(
        lambda p: coco_to_tfrecord(
            p,
            out,
            CocoOptions(str(tmp_path / "images"), str(tmp_path / "ann.json"), include_masks=True),
            SHARDS,
            ImageChecks(),
        ),
        out,
    )
    (record,) = _serialized(out)
    parsed = tf.io.parse_single_example(
        record, {**IMAGE, "image/object/mask": tf.io.VarLenFeature(tf.string)}
    )
    masks = tf.sparse.to_dense(parsed["image/object/mask"], default_value=b"")
    assert masks.shape[0] == 2
    for encoded, polygon in zip(masks, polygons, strict=True):
        mask = tf.io.decode_png(encoded, channels=1)[:, :, 0].numpy()
        assert mask.shape == (32, 48) and set(np.unique(mask)) == {0, 1}
        xs, ys = polygon[0][0::2], polygon[0][1::2]
        inside = (int(np.mean(ys)), int(np.mean(xs)))  # the centroid of a convex polygon
        assert mask[inside] == 1 and mask[0, 0] == 0
        assert mask.sum() >= 0.9 * _area(xs, ys)


def _area(xs, ys):
    return abs(sum(xs[i] * ys[i - 1] - xs[i - 1] * ys[i] for i in range(len(xs)))) / 2
