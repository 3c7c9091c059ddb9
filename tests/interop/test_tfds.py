"""TFDS loads our output folders as they are, from the TFDS files the sink writes."""

from __future__ import annotations

import io
import json
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import recordbeam  # noqa: E402
from recordbeam import pipeline  # noqa: E402
from recordbeam.sources.coco.reader import CocoOptions  # noqa: E402
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.example import encode_example  # noqa: E402
from recordbeam.write.image_encoder import ImageChecks  # noqa: E402
from recordbeam.write.sink import ExampleEncoder, ShardOptions, WriteShards  # noqa: E402

pytestmark = pytest.mark.interop

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def coco_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfds")
    sample = make_coco_sample(str(root / "sample"), num_images=24, seed=0)
    out = str(root / "out")
    for split in ("train", "val"):
        coco = CocoOptions(sample.images_dir, sample.annotations, split)
        shards = ShardOptions(num_shards=3 if split == "train" else 2, max_reject_fraction=0.5)
        pipeline.run(
            lambda p, c=coco, s=shards: coco_to_tfrecord(p, out, c, s, ImageChecks()),
            out,
            beam_args=IN_MEMORY,
            show_progress=False,
        )
    return out


def test_builder_from_directory_loads_every_split(coco_out):
    builder = tfds.builder_from_directory(coco_out)
    manifest = json.load(open(os.path.join(coco_out, "manifest.json")))
    for split in ("train", "val"):
        ours = list(recordbeam.read(coco_out, split, decode_images=True))
        theirs = list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))
        assert len(theirs) == len(ours) == manifest["splits"][split]["examples"]
        assert builder.info.splits[split].num_examples == len(ours)
        for a, b in zip(ours, theirs, strict=True):  # same shards, same order
            assert b["image/encoded"].shape == a["image/encoded"].shape
            # TF's and Pillow's JPEG decoders round differently by a few levels.
            diff = np.abs(b["image/encoded"].astype(int) - a["image/encoded"].astype(int))
            assert diff.max() <= (0 if a["image/format"].item() == b"png" else 8)
            assert b["image/encoded"].shape == (int(a["image/height"]), int(a["image/width"]), 3)
            for key in (
                "image/object/class/label",
                "image/object/bbox/xmin",
                "image/object/bbox/ymax",
            ):
                np.testing.assert_array_equal(b[key], a[key])
            assert b["image/source_id"] == a["image/source_id"].item()


def test_class_labels_carry_the_coco_names(coco_out):
    builder = tfds.builder_from_directory(coco_out)
    label = builder.info.features["image/object/class/label"].feature
    assert isinstance(label, tfds.features.ClassLabel)
    manifest = json.load(open(os.path.join(coco_out, "manifest.json")))
    for value, name in manifest["label_map"].items():
        assert label.int2str(int(value)) == name
    example = next(iter(tfds.as_numpy(builder.as_dataset(split="train"))))
    texts = [t.decode() for t in example["image/object/class/text"]]
    assert [label.int2str(int(v)) for v in example["image/object/class/label"]] == texts


def test_compressed_output_has_no_tfds_files_and_old_ones_go(coco_out, tmp_path):
    sample = make_coco_sample(str(tmp_path / "s"), num_images=8, seed=1)
    out = str(tmp_path / "out")
    for compression in ("none", "gzip"):
        coco = CocoOptions(sample.images_dir, sample.annotations, "train")
        shards = ShardOptions(num_shards=1, compression=compression, max_reject_fraction=1.0)
        pipeline.run(
            lambda p, c=coco, s=shards: coco_to_tfrecord(p, out, c, s, ImageChecks()),
            out,
            beam_args=IN_MEMORY,
            show_progress=False,
        )
        present = os.path.exists(os.path.join(out, "dataset_info.json"))
        assert present == (compression == "none")
    assert not any(n.endswith(".labels.txt") and n != "labels.txt" for n in os.listdir(out))


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (5, 4), (value, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


def test_classification_with_empty_shard_and_as_supervised(tmp_path):
    """A generic output: image + one class label per image, via WriteShards metadata."""
    out = str(tmp_path / "cls")
    records = [
        encode_example(
            {
                "image/encoded": png(i),
                "image/class/label": i % 3,
                "image/class/text": ["a", "b", "c"][i % 3],
            }
        )
        for i in range(5)
    ]
    import apache_beam as beam

    def build(p):
        sink = WriteShards(
            out,
            ExampleEncoder(),
            options=ShardOptions(num_shards=8),
            metadata=p
            | "Meta" >> beam.Create([{"task": "classification", "label_names": ["a", "b", "c"]}]),
        )
        _ = p | beam.Create(records) | sink
        return sink

    pipeline.run(build, out, beam_args=IN_MEMORY, show_progress=False)
    builder = tfds.builder_from_directory(out)
    assert builder.info.features["image/class/label"].names == ["a", "b", "c"]
    pairs = list(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True)))
    assert len(pairs) == 5  # 8 shards, some empty
    for image, label in pairs:
        assert image.shape == (4, 5, 3)
        assert image[0, 0, 0] % 3 == label  # red channel = i, label = i % 3


@pytest.mark.parametrize(
    "boxes", [[1, 1, 1], [0, 0, 0], [0, 1, 3, 2]], ids=["one_box", "no_box", "mixed"]
)
def test_object_features_load_as_vectors_whatever_the_box_counts(tmp_path, boxes):
    """features.json must not fix the object count: one box per image today, more tomorrow."""
    from samples import make_boxes_sample

    sample = make_boxes_sample(tmp_path / "sample", boxes)
    out = str(tmp_path / "out")
    coco = CocoOptions(sample.images_dir, sample.annotations, "train")
    pipeline.run(
        lambda p: coco_to_tfrecord(p, out, coco, ShardOptions(num_shards=1), ImageChecks()),
        out,
        beam_args=IN_MEMORY,
        show_progress=False,
    )
    builder = tfds.builder_from_directory(out)
    assert builder.info.features["image/object/bbox/xmin"].shape == (None,)
    assert builder.info.features["image/height"].shape == ()
    per_image = sample.expected["annotations_per_image"]
    examples = list(tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False)))
    assert len(examples) == len(boxes)
    for example in examples:
        want = per_image[example["image/filename"].decode()]
        for key in ("image/object/bbox/xmin", "image/object/class/label", "image/object/area"):
            assert example[key].shape == (want,), key
        assert np.asarray(example["image/height"]).shape == ()


@pytest.mark.case("COCO categories sharing a name, or named with spaces at the ends",
                  "TFDS's ClassLabel names each label once (`str2int` is unambiguous): a "
                  "repeated name becomes `<name>_<label>`, names stripped as TFDS reads them")
def test_repeated_and_padded_class_names_load_in_tfds(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (32, 24)).save(images / "a.jpg", "JPEG")
    names = {1: "dog", 3: "dog", 4: " cat "}
    annotations = tmp_path / "instances.json"
    annotations.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.jpg", "width": 32, "height": 24}],
        "annotations": [{"id": i, "image_id": 1, "category_id": i, "bbox": [2, 2, 8, 8],
                         "area": 64, "iscrowd": 0} for i in names],
        "categories": [{"id": i, "name": name} for i, name in names.items()]}))
    out = str(tmp_path / "out")
    coco = CocoOptions(str(images), str(annotations), "train")
    pipeline.run(
        lambda p: coco_to_tfrecord(p, out, coco, ShardOptions(num_shards=1), ImageChecks()),
        out, beam_args=IN_MEMORY, show_progress=False)
    with open(os.path.join(out, "labels.txt"), encoding="utf-8") as f:
        assert f.read() == "dog\ndog\n cat \n"
    builder = tfds.builder_from_directory(out)
    label = builder.info.features["image/object/class/label"].feature
    assert label.names == ["unused_0", "dog", "unused_2", "dog_3", "cat"]
    assert [label.str2int(name) for name in label.names] == [0, 1, 2, 3, 4]
    example = next(iter(tfds.as_numpy(builder.as_dataset(split="train"))))
    assert sorted(example["image/object/class/label"].tolist()) == [1, 3, 4]
