"""Shards from the COCO pipeline, read by TensorFlow the way detection training code reads them.

The feature dict below lists the keys and types Model Garden's detection decoder
(``official/vision/dataloaders/tf_example_decoder.py`` in tensorflow/models) parses; it is
written out here, not imported, so this test needs only TensorFlow.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402

from recordbeam import pipeline  # noqa: E402
from recordbeam.sources.coco.reader import CocoOptions  # noqa: E402
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.framing import open_records  # noqa: E402
from recordbeam.write.image_encoder import ImageChecks  # noqa: E402
from recordbeam.write.sink import ShardOptions  # noqa: E402

pytestmark = pytest.mark.interop

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]

MODEL_GARDEN_DETECTION = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64),
    "image/width": tf.io.FixedLenFeature((), tf.int64),
    "image/source_id": tf.io.FixedLenFeature((), tf.string),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
}

#: The other keys we write, as the Object Detection API's decoder types them.
OTHER_KEYS = {
    "image/format": tf.io.FixedLenFeature((), tf.string),
    "image/filename": tf.io.FixedLenFeature((), tf.string),
    "image/key/sha256": tf.io.FixedLenFeature((), tf.string),
    "image/object/class/text": tf.io.VarLenFeature(tf.string),
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("coco-tf"), num_images=24, seed=1)


def _convert(sample, output: str, compression: str) -> dict:
    coco = CocoOptions(sample.images_dir, sample.annotations)
    shards = ShardOptions(num_shards=2, compression=compression, max_reject_fraction=0.5)
    result = pipeline.run(
        lambda p: coco_to_tfrecord(p, output, coco, shards, ImageChecks()),
        output,
        beam_args=IN_MEMORY,
        show_progress=False,
    )
    return dict(result.manifest)


@pytest.fixture(scope="module", params=["none", "gzip"])
def dataset(request, sample, tmp_path_factory):
    """(shard paths, TF compression name, manifest) for one conversion of the sample."""
    output = str(tmp_path_factory.mktemp(f"tf-{request.param}") / "out")
    manifest = _convert(sample, output, request.param)
    paths = [os.path.join(output, s["file"]) for s in manifest["splits"]["train"]["shards"]]
    return paths, ("GZIP" if request.param == "gzip" else ""), manifest


@pytest.fixture(scope="module")
def tf_records(dataset):
    paths, compression, _ = dataset
    reader = tf.data.TFRecordDataset(paths, compression_type=compression)
    return [r.numpy() for r in reader]


def test_tfrecord_dataset_reads_every_shard(dataset, tf_records, sample):
    paths, _, manifest = dataset
    assert len(paths) == 2
    assert len(tf_records) == manifest["totals"]["examples"]
    assert len(tf_records) == len(sample.expected["good_images"])
    ours = [r for p in paths for r in open_records(p)]
    assert tf_records == ours


def test_model_garden_decoder_features_parse_every_example(tf_records, sample):
    filenames = []
    for record in tf_records:
        parsed = tf.io.parse_single_example(record, {**MODEL_GARDEN_DETECTION, **OTHER_KEYS})
        n = int(tf.size(parsed["image/object/bbox/xmin"].values))
        for key, spec in MODEL_GARDEN_DETECTION.items():
            if isinstance(spec, tf.io.VarLenFeature):
                assert parsed[key].values.dtype == spec.dtype
                assert int(tf.size(parsed[key].values)) == n, key
        filename = parsed["image/filename"].numpy().decode()
        filenames.append(filename)
        assert n == sample.expected["annotations_per_image"][filename]
        assert int(parsed["image/source_id"].numpy().decode()) > 0
        assert int(tf.size(parsed["image/object/class/text"].values)) == n
    assert sorted(filenames) == sample.expected["good_images"]


def test_images_without_objects_still_parse_with_int64_labels(tf_records, sample):
    empty = 0
    for record in tf_records:
        parsed = tf.io.parse_single_example(record, MODEL_GARDEN_DETECTION)
        labels = parsed["image/object/class/label"]
        assert labels.dtype == tf.int64
        if int(tf.size(labels.values)) == 0:
            empty += 1
    expected = sum(1 for k in sample.expected["annotations_per_image"].values() if k == 0)
    assert empty == expected > 0


def test_decode_image_matches_height_and_width(tf_records):
    for record in tf_records:
        parsed = tf.io.parse_single_example(record, {**MODEL_GARDEN_DETECTION, **OTHER_KEYS})
        height, width = int(parsed["image/height"]), int(parsed["image/width"])
        image = tf.io.decode_image(parsed["image/encoded"], expand_animations=False)
        assert tuple(image.shape[:2]) == (height, width)
        # Model Garden decodes with three channels whatever the stored mode.
        rgb = tf.io.decode_image(parsed["image/encoded"], channels=3, expand_animations=False)
        assert tuple(rgb.shape) == (height, width, 3)
        is_jpeg = bool(tf.io.is_jpeg(parsed["image/encoded"]).numpy())
        assert parsed["image/format"].numpy().decode() == ("jpeg" if is_jpeg else "png")


def test_boxes_are_normalized_and_ordered(tf_records):
    for record in tf_records:
        parsed = tf.io.parse_single_example(record, MODEL_GARDEN_DETECTION)
        box = {
            k: tf.sparse.to_dense(parsed[f"image/object/bbox/{k}"]).numpy()
            for k in ("xmin", "xmax", "ymin", "ymax")
        }
        for values in box.values():
            assert np.all((values >= 0.0) & (values <= 1.0))
        assert np.all(box["xmin"] <= box["xmax"])
        assert np.all(box["ymin"] <= box["ymax"])
        area = tf.sparse.to_dense(parsed["image/object/area"]).numpy()
        assert np.all(area >= 0.0)
