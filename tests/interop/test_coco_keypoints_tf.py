"""COCO keypoints and captions read back by TensorFlow with the feature spec the Object
Detection API's decoder uses for them (``VarLenFeature``s, written out here, not
imported), and checked against the JSON they came from."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402
from samples import make_coco_extras_sample  # noqa: E402

from recordbeam import pipeline  # noqa: E402
from recordbeam.sources.coco.reader import CocoOptions  # noqa: E402
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord  # noqa: E402
from recordbeam.write.image_encoder import ImageChecks  # noqa: E402
from recordbeam.write.sink import ShardOptions  # noqa: E402

pytestmark = pytest.mark.interop

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]

OD_API_KEYPOINTS = {
    "image/source_id": tf.io.FixedLenFeature((), tf.string),
    "image/width": tf.io.FixedLenFeature((), tf.int64),
    "image/height": tf.io.FixedLenFeature((), tf.int64),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/keypoint/x": tf.io.VarLenFeature(tf.float32),
    "image/object/keypoint/y": tf.io.VarLenFeature(tf.float32),
    "image/object/keypoint/visibility": tf.io.VarLenFeature(tf.int64),
    "image/object/keypoint/num": tf.io.VarLenFeature(tf.int64),
    "image/object/keypoint/text": tf.io.VarLenFeature(tf.string),
    "image/caption": tf.io.VarLenFeature(tf.string),
}


def _dense(parsed, key):
    return tf.sparse.to_dense(parsed[key]).numpy().tolist()


def test_tensorflow_reads_keypoints_and_captions_as_the_json_says(tmp_path):
    sample = make_coco_extras_sample(tmp_path / "in")
    out = os.fspath(tmp_path / "out")
    coco = CocoOptions(sample.images_dir, sample.keypoints, include_keypoints=True,
                       captions=sample.captions)
    shards = ShardOptions(num_shards=2, max_reject_fraction=1.0)
    pipeline.run(lambda p: coco_to_tfrecord(p, out, coco, shards, ImageChecks()),
                 out, beam_args=IN_MEMORY, show_progress=False)
    with open(sample.keypoints, encoding="utf-8") as f:
        document = json.load(f)
    with open(sample.captions, encoding="utf-8") as f:
        captions = json.load(f)["annotations"]
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        names_of = {int(label): entry["names"]
                    for label, entry in json.load(f)["keypoints"].items()}
    rejected = {13, 14, 15}  # malformed keypoints (see make_coco_extras_sample)
    shard_files = sorted(tf.io.gfile.glob(os.path.join(out, "*.tfrecord")))
    seen = 0
    for record in tf.data.TFRecordDataset(shard_files):
        parsed = tf.io.parse_single_example(record, OD_API_KEYPOINTS)
        image_id = int(parsed["image/source_id"].numpy())
        width, height = int(parsed["image/width"]), int(parsed["image/height"])
        annotations = sorted((a for a in document["annotations"]
                              if a["image_id"] == image_id and a["id"] not in rejected),
                             key=lambda a: a["id"])
        labels = _dense(parsed, "image/object/class/label")
        assert labels == [a["category_id"] for a in annotations]
        # split the flat lists with the manifest's names, as a reader would
        xs, ys = _dense(parsed, "image/object/keypoint/x"), _dense(parsed, "image/object/keypoint/y")
        visibility = _dense(parsed, "image/object/keypoint/visibility")
        texts = _dense(parsed, "image/object/keypoint/text")
        start = 0
        for annotation, label in zip(annotations, labels, strict=True):
            count = len(names_of.get(label, []))
            values = annotation.get("keypoints") or [0] * (3 * count)
            for k in range(count):
                x, y, v = values[3 * k: 3 * k + 3]
                assert visibility[start + k] == v
                assert texts[start + k] == names_of[label][k].encode()
                expected = (x / width, y / height) if v else (0.0, 0.0)
                np.testing.assert_allclose((xs[start + k], ys[start + k]), expected, rtol=1e-6)
            start += count
        assert start == len(xs) == len(ys) == len(visibility)
        assert _dense(parsed, "image/object/keypoint/num") == [
            a.get("num_keypoints", 0) for a in annotations]
        expected_captions = [c["caption"].encode() for c in sorted(
            (c for c in captions if c.get("image_id") == image_id and "caption" in c),
            key=lambda c: c["id"])]
        assert _dense(parsed, "image/caption") == expected_captions
        seen += 1
    assert seen == 4
