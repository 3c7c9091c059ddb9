"""Readers give per-object features one shape whatever the data holds (issue 17).

Three real COCO conversions: every image with one box, no image with a box, and a mix.
``read``, the PyTorch dataset, ``schema``, the TFDS metadata and ``report`` must see
``image/object/*`` as lists on all three, and ``image/height``, ``image/source_id`` as
scalars. (TFDS itself loads them in ``tests/interop/test_tfds.py``.)
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from samples import make_boxes_sample

import recordbeam
from recordbeam import pipeline
from recordbeam.cli import main as cli
from recordbeam.dataset.report import collect_stats
from recordbeam.dataset.schema import schema_json
from recordbeam.dataset.tfds import features_json
from recordbeam.sources.coco.encoder import OBJECT_KINDS
from recordbeam.sources.coco.reader import CocoOptions
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord
from recordbeam.sources.reshard import ReshardOptions, reshard
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]

BOXES = {"one_box": [1, 1, 1, 1], "no_box": [0, 0, 0], "mixed": [0, 1, 3, 1, 2]}
SCALARS = ("image/height", "image/width", "image/source_id", "image/filename", "image/encoded")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, tuple[str, dict[str, int]]]:
    """name -> (output folder, {file name: boxes}) for each of the three datasets."""
    made = {}
    for name, counts in BOXES.items():
        root = tmp_path_factory.mktemp(name)
        sample = make_boxes_sample(root / "sample", counts)
        out = str(root / "out")
        coco = CocoOptions(sample.images_dir, sample.annotations, "train")
        shards = ShardOptions(num_shards=2, index=True)
        pipeline.run(
            lambda p, c=coco, s=shards, o=out: coco_to_tfrecord(p, o, c, s, ImageChecks()),
            out,
            beam_args=IN_MEMORY,
            show_progress=False,
        )
        made[name] = (out, sample.expected["annotations_per_image"])
    return made


def check_shapes(example: dict, boxes: dict[str, int]) -> None:
    expected = boxes[example["image/filename"].item().decode()]
    for name in OBJECT_KINDS:
        assert example[name].ndim == 1, name
        assert example[name].shape == (expected,), name
    for name in SCALARS:
        assert example[name].ndim == 0, name


@pytest.mark.parametrize("dataset", list(BOXES))
def test_manifest_declares_per_object_features_as_lists(outputs, dataset):
    out, _ = outputs[dataset]
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        features = json.load(f)["features"]
    for name in OBJECT_KINDS:
        assert features[name]["list"] is True and features[name]["fixed_length"] is None, name
    assert features["image/height"] == {**features["image/height"], "fixed_length": 1, "list": False}


@pytest.mark.parametrize("dataset", list(BOXES))
def test_read_gives_1d_object_arrays_and_scalar_image_fields(outputs, dataset):
    out, boxes = outputs[dataset]
    reader = recordbeam.read(out)
    examples = list(reader)
    assert len(examples) == len(boxes)
    for example in examples:
        check_shapes(example, boxes)
    for index in range(len(reader)):  # random access decodes the same way
        check_shapes(reader[index], boxes)


@pytest.mark.parametrize("dataset", list(BOXES))
def test_torch_dataset_gives_the_same_shapes(outputs, dataset):
    import torch

    from recordbeam.dataset.torch_dataset import RecordIterableDataset

    out, boxes = outputs[dataset]
    loader = torch.utils.data.DataLoader(RecordIterableDataset(out), batch_size=None)
    seen = 0
    for example in loader:
        check_shapes(example, boxes)
        seen += 1
    assert seen == len(boxes)


@pytest.mark.parametrize("dataset", list(BOXES))
def test_schema_prints_var_len_for_objects_and_fixed_scalars(outputs, dataset, capsys):
    out, _ = outputs[dataset]
    assert cli.main(["schema", out, "--json"]) == cli.EXIT_OK
    described = json.loads(capsys.readouterr().out)["feature_description"]
    for name in OBJECT_KINDS:
        assert described[name]["type"] == "VarLenFeature", name
    for name in ("image/height", "image/source_id"):
        assert described[name] == {**described[name], "type": "FixedLenFeature", "shape": []}
    assert cli.main(["schema", out]) == cli.EXIT_OK
    assert '"image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32)' in capsys.readouterr().out
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    ragged = schema_json(manifest, "train", ragged=True)["feature_description"]
    assert ragged["image/object/class/label"]["type"] == "RaggedFeature"


@pytest.mark.parametrize("dataset", list(BOXES))
def test_tfds_features_declare_objects_with_unknown_length(outputs, dataset):
    out, _ = outputs[dataset]
    with open(os.path.join(out, "features.json"), encoding="utf-8") as f:
        written = json.load(f)["featuresDict"]["features"]
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        assert written == features_json(json.load(f))["featuresDict"]["features"]
    label = written["image/object/class/label"]
    assert label["pythonClassName"].endswith("Sequence") and label["sequence"]["length"] == "-1"
    xmin = written["image/object/bbox/xmin"]["tensor"]
    assert xmin["shape"] == {"dimensions": ["-1"]}
    assert written["image/height"]["tensor"]["shape"] == {}


@pytest.mark.parametrize("dataset", list(BOXES))
def test_report_counts_boxes_per_image(outputs, dataset, tmp_path):
    out, boxes = outputs[dataset]
    stats = collect_stats(recordbeam.read(out))
    want: dict[int, int] = {}
    for count in boxes.values():
        want[count] = want.get(count, 0) + 1
    assert dict(stats.boxes_per_image) == want
    assert len(stats.box_widths) == sum(boxes.values())
    assert np.allclose(stats.box_widths, 3.0)  # every sample box is 3 px wide
    page = tmp_path / "report.html"
    assert cli.main(["report", out, "--html", str(page)]) == cli.EXIT_OK
    assert "Boxes per image" in page.read_text()


def test_reshard_keeps_one_box_datasets_variable_length(outputs, tmp_path):
    source, boxes = outputs["one_box"]
    inputs = tuple(recordbeam.read(source).shard_paths)
    out = str(tmp_path / "resharded")
    manifest = pipeline.run(
        lambda p: reshard(p, out, ReshardOptions(inputs, "train"), ShardOptions(num_shards=1)),
        out,
        beam_args=IN_MEMORY,
        show_progress=False,
    ).manifest
    for name in OBJECT_KINDS:
        assert manifest["features"][name]["list"] is True, name
    for example in recordbeam.read(out):
        check_shapes(example, boxes)
