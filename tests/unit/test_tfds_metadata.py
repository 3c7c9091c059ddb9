"""tfds_metadata: TFDS's dataset_info.json / features.json from a manifest (no TFDS here)."""

from __future__ import annotations

import json

from recordbeam.dataset.tfds import (
    DATASET_INFO,
    FEATURES,
    class_names,
    files_for,
    is_tfds_file,
    labels_file_name,
)


def spec(dtype: str, fixed: int | None) -> dict:
    return {
        "dtype": dtype,
        "fixed_length": fixed,
        "min_length": 0,
        "max_length": 3,
        "present_in": 5,
    }


def manifest(shard_file: str = "train-00000-of-00002.tfrecord", task: str = "detection") -> dict:
    return {
        "task": task,
        "label_map": {"1": "cat", "3": "dog"},
        "features": {
            "image/encoded": spec("string", 1),
            "image/object/class/label": spec("int64", None),
            "image/class/label": spec("int64", 1),
            "image/format": spec("string", 1),
        },
        "splits": {
            "train": {
                "bytes": 100,
                "shards": [
                    {"file": shard_file, "examples": 3, "bytes": 60},
                    {
                        "file": shard_file.replace("00000-of", "00001-of"),
                        "examples": 2,
                        "bytes": 40,
                    },
                ],
            }
        },
    }


def test_class_names_index_by_label_value_with_gaps_named():
    assert class_names(manifest()) == ["unused_0", "cat", "unused_2", "dog"]
    assert class_names({"label_names": ["a", "b"]}) == ["a", "b"]
    assert class_names({}) is None
    assert class_names({"label_map": {"0": "unused_1", "1": "x"}}) == ["unused_1", "x"]


def test_dataset_info_declares_our_file_names_and_shard_lengths():
    files = files_for(manifest())
    info = json.loads(files[DATASET_INFO])
    (split,) = info["splits"]
    assert split["name"] == "train" and split["shardLengths"] == ["3", "2"]
    assert split["filepathTemplate"] == "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
    assert info["fileFormat"] == "tfrecord"
    assert "supervisedKeys" not in info  # detection has no single (image, label) pair


def test_features_and_label_files():
    files = files_for(manifest())
    features = json.loads(files[FEATURES])["featuresDict"]["features"]
    assert features["image/encoded"]["pythonClassName"].endswith("image_feature.Image")
    seq = features["image/object/class/label"]
    assert seq["pythonClassName"].endswith("Sequence")
    assert seq["sequence"]["feature"]["classLabel"]["numClasses"] == "4"
    assert features["image/class/label"]["classLabel"]["numClasses"] == "4"
    assert features["image/format"]["pythonClassName"].endswith("Text")
    labels = files[labels_file_name("image/object/class/label")].decode().split()
    assert labels == ["unused_0", "cat", "unused_2", "dog"]


def test_classification_gets_supervised_keys():
    m = manifest(task="classification")
    del m["features"]["image/object/class/label"]
    info = json.loads(files_for(m)[DATASET_INFO])
    items = [i["featureKey"] for i in info["supervisedKeys"]["tuple"]["items"]]
    assert items == ["image/encoded", "image/class/label"]


def test_compressed_shards_get_no_tfds_files():
    assert files_for(manifest("train-00000-of-00002.tfrecord.gz")) == {}


def test_names_are_recognized_as_ours():
    for name in files_for(manifest()):
        assert is_tfds_file(name)
    assert not is_tfds_file("labels.txt") and not is_tfds_file("notes.json")


def test_per_object_features_have_unknown_length_with_one_object_everywhere():
    one_box = manifest()
    one_box["features"] = {
        "image/encoded": spec("string", 1),
        "image/object/class/label": {**spec("int64", None), "min_length": 1, "max_length": 1,
                                     "list": True},
        "image/object/bbox/xmin": {**spec("float32", None), "min_length": 1, "max_length": 1,
                                   "list": True},
        "image/object/area": spec("float32", 1),  # an older manifest: no "list" key
        "image/height": {**spec("int64", 1), "list": False},
    }
    features = json.loads(files_for(one_box)[FEATURES])["featuresDict"]["features"]
    label = features["image/object/class/label"]
    assert label["pythonClassName"].endswith("Sequence") and label["sequence"]["length"] == "-1"
    for name in ("image/object/bbox/xmin", "image/object/area"):
        assert features[name]["tensor"]["shape"] == {"dimensions": ["-1"]}, name
    assert features["image/height"]["tensor"]["shape"] == {}
