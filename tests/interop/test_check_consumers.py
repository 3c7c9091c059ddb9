"""``recordbeam check --for`` against the consumers that install here: a folder check
passes is read by the consumer, and one it fails is not.

- Model Garden's ``TfExampleDecoder`` and its ``process_source_id`` (tf-models-official,
  installed with ``--no-deps`` beside the interop extra);
- the ``tfrecord`` package's reader with its index files (the ``interop`` extra);
- ``tfds.builder_from_directory``.

DALI does not install here (CUDA wheels): its rules (uncompressed shards, ``.idx`` files in
the ``<offset> <framed length>`` format of its ``tfrecord2idx``) are tested in
tests/unit/test_consumers.py only.
"""

from __future__ import annotations

import glob
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from recordbeam import pipeline  # noqa: E402
from recordbeam.dataset.consumers import check_folder  # noqa: E402
from recordbeam.sources.coco.reader import CocoOptions  # noqa: E402
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.framing import RecordWriter, open_records  # noqa: E402
from recordbeam.tfrecord.protos import Example  # noqa: E402
from recordbeam.write.image_encoder import ImageChecks  # noqa: E402
from recordbeam.write.sink import ShardOptions  # noqa: E402

pytestmark = pytest.mark.interop

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def coco_out(tmp_path_factory):
    """COCO instances with masks, two uncompressed shards with their indexes."""
    root = tmp_path_factory.mktemp("check")
    sample = make_coco_sample(str(root / "sample"), num_images=12, seed=0)
    out = str(root / "out")
    coco = CocoOptions(sample.images_dir, sample.annotations, "train", include_masks=True)
    shards = ShardOptions(num_shards=2, index=True, max_reject_fraction=0.5)
    pipeline.run(lambda p: coco_to_tfrecord(p, out, coco, shards, ImageChecks()),
                 out, beam_args=IN_MEMORY, show_progress=False)
    return out


def shard_paths(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "*.tfrecord")))


def copy_with_record_changed(folder: str, target: str, change, objects: int = 0) -> str:
    """A copy of ``folder`` whose first shard's first record with at least ``objects``
    objects went through ``change`` (an Example message edited in place); the shard's
    index is rewritten to match."""
    shutil.copytree(folder, target)
    shard = shard_paths(target)[0]
    records = list(open_records(shard))
    examples = [Example.FromString(r) for r in records]
    number = next(i for i, e in enumerate(examples)
                  if len(e.features.feature["image/object/class/label"].int64_list.value) >= objects)
    change(examples[number])
    records[number] = examples[number].SerializeToString()
    index = io.StringIO()
    with open(shard, "wb") as f, RecordWriter(f, index=index) as writer:
        for record in records:
            writer.write(record)
    with open(shard + ".idx", "w") as f:
        f.write(index.getvalue())
    return target


def failed_rules(folder: str, consumer: str) -> list[str]:
    return [rule.name for rule in check_folder(folder, consumer).rules if not rule.ok]


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height)).save(out, format="PNG")
    return out.getvalue()


# ---------------------------------------------------------------- Model Garden


@pytest.fixture(scope="module")
def model_garden():
    decoder = pytest.importorskip(
        "official.vision.dataloaders.tf_example_decoder",
        reason="tf-models-official is not installed (pip install --no-deps tf-models-official "
        "tf-keras gin-config tf-slim)")
    utils = pytest.importorskip("official.vision.dataloaders.utils")
    return decoder.TfExampleDecoder(include_mask=True), utils.process_source_id


def model_garden_read(folder: str, model_garden) -> list[dict]:
    decoder, process_source_id = model_garden
    decoded = []
    for path in shard_paths(folder):
        for record in open_records(path):
            tensors = decoder.decode(tf.constant(record))
            tensors["source_id"] = process_source_id(tensors["source_id"])
            decoded.append({k: v.numpy() for k, v in tensors.items()})
    return decoded


def test_model_garden_reads_a_folder_check_passes(coco_out, model_garden):
    assert failed_rules(coco_out, "model-garden") == []
    decoded = model_garden_read(coco_out, model_garden)
    assert len(decoded) == 12
    for example in decoded:
        objects = len(example["groundtruth_classes"])
        assert example["groundtruth_instance_masks"].shape == (objects, example["height"], example["width"])
        assert example["image"].shape[:2] == (example["height"], example["width"])
        assert example["source_id"] > 0


def test_model_garden_refuses_a_string_source_id_check_fails(coco_out, tmp_path, model_garden):
    def string_id(example):
        del example.features.feature["image/source_id"].bytes_list.value[:]
        example.features.feature["image/source_id"].bytes_list.value.append(b"2007_000027")

    folder = copy_with_record_changed(coco_out, str(tmp_path / "id"), string_id)
    assert failed_rules(folder, "model-garden") == ["source-id"]
    assert failed_rules(folder, "efficientdet") == ["source-id"]
    with pytest.raises(tf.errors.InvalidArgumentError):
        model_garden_read(folder, model_garden)


def test_model_garden_refuses_masks_of_another_size_check_fails(coco_out, tmp_path, model_garden):
    def odd_masks(example):
        feature = example.features.feature
        height = feature["image/height"].int64_list.value[0]
        width = feature["image/width"].int64_list.value[0]
        masks = feature["image/object/mask"].bytes_list.value
        masks[1] = _png(width + 3, height)

    folder = copy_with_record_changed(coco_out, str(tmp_path / "mask"), odd_masks, objects=2)
    assert failed_rules(folder, "model-garden") == ["masks"]
    # Eagerly, map_fn refuses to stack the masks with a ValueError; in a tf.data graph the
    # same stack fails at run time.
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="(?i)shape"):
        model_garden_read(folder, model_garden)


# ---------------------------------------------------------------- the tfrecord package


_TFRECORD_READ = """
import json, sys
from tfrecord.reader import tfrecord_loader
path, workers = sys.argv[1], int(sys.argv[2])
ids = []
try:
    for worker in range(workers):
        for example in tfrecord_loader(path, path + ".idx",
                                       {"image/source_id": "byte", "image/object/area": "float"},
                                       shard=(worker, workers)):
            ids.append(bytes(example["image/source_id"]).decode())
except Exception as error:
    print(json.dumps({"error": type(error).__name__}))
else:
    print(json.dumps({"ids": ids}))
"""


def tfrecord_package_read(path: str, workers: int) -> dict:
    """``{"ids": [source ids]}`` as the tfrecord package reads ``path``, split between
    ``workers`` by its index (as its DataLoader workers do), or ``{"error": type name}``.

    In a process of its own: the package registers its own copy of TensorFlow's Example
    protos, which clashes with TensorFlow's in one process ("duplicate symbol").
    """
    if importlib.util.find_spec("tfrecord") is None:  # found, never imported here
        pytest.skip("the tfrecord package is not installed (interop extra)")
    done = subprocess.run([sys.executable, "-c", _TFRECORD_READ, path, str(workers)],
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def true_ids(path: str) -> dict:
    return {"ids": [Example.FromString(r).features.feature["image/source_id"].bytes_list.value[0].decode()
                    for r in open_records(path)]}


def test_the_tfrecord_package_reads_a_folder_check_passes(coco_out):
    assert failed_rules(coco_out, "torch") == []
    for path in shard_paths(coco_out):
        assert tfrecord_package_read(path, workers=3) == true_ids(path)


def test_the_tfrecord_package_misreads_a_stale_index_check_fails(coco_out, tmp_path):
    folder = str(tmp_path / "stale")
    shutil.copytree(coco_out, folder)
    first, second = shard_paths(folder)
    shutil.copyfile(second + ".idx", first + ".idx")  # the other shard's offsets
    assert failed_rules(folder, "torch") == ["index"]
    assert tfrecord_package_read(first, workers=2) != true_ids(first)


def test_the_tfrecord_package_fails_on_an_untyped_empty_feature_check_fails(coco_out, tmp_path):
    def untyped_area(example):
        example.features.feature["image/object/area"].Clear()

    folder = copy_with_record_changed(coco_out, str(tmp_path / "untyped"), untyped_area)
    assert failed_rules(folder, "torch") == ["kinds"]
    assert tfrecord_package_read(shard_paths(folder)[0], workers=1) == {"error": "IndexError"}


# ---------------------------------------------------------------- TFDS


def test_tfds_reads_a_folder_check_passes_and_not_one_it_fails(coco_out, tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    assert failed_rules(coco_out, "tfds") == []
    builder = tfds.builder_from_directory(coco_out)
    assert sum(1 for _ in builder.as_dataset(split="train")) == 12

    folder = str(tmp_path / "no-features")
    shutil.copytree(coco_out, folder)
    os.remove(os.path.join(folder, "features.json"))
    assert failed_rules(folder, "tfds") == ["metadata"]
    with pytest.raises(Exception):  # noqa: B017, PT011 - TFDS's own error types vary by version
        tfds.builder_from_directory(folder).as_dataset(split="train")


def test_check_counts_mask_pixels_it_never_decodes(coco_out):
    """The mask rule reads PNG headers only: every mask of the folder is a PNG whose
    header size is the size TensorFlow decodes."""
    for path in shard_paths(coco_out):
        for record in open_records(path):
            feature = Example.FromString(record).features.feature
            for mask in feature["image/object/mask"].bytes_list.value:
                decoded = tf.io.decode_png(mask, channels=1).numpy()
                header = (int.from_bytes(mask[20:24], "big"), int.from_bytes(mask[16:20], "big"))
                assert decoded.shape[:2] == header
                assert set(np.unique(decoded)) <= {0, 1}
