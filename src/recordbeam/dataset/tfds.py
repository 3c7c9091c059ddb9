"""The files TensorFlow Datasets needs to load an output folder as it is.

``tfds.builder_from_directory(OUT)`` reads ``dataset_info.json`` (splits, shard lengths,
file format and where the shards are) and ``features.json`` (how to decode each feature),
plus one ``<feature>.labels.txt`` per ``ClassLabel`` feature with its class names. We
write all of them from the manifest at finalize time; TFDS is not imported.

File names: TFDS's default shard name is ``{name}-{split}.tfrecord-{i:05d}-of-{n:05d}``,
but each ``SplitInfo`` may declare a ``filepathTemplate``. Ours is
``{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}``, which TFDS expands to exactly our
``train-00000-of-00004.tfrecord``, so nothing is renamed or duplicated. The shards of a
split incremental runs keep are numbered without their count (``train-00012.tfrecord``,
:mod:`recordbeam.write.incremental`): their template is ``{SPLIT}-{SHARD_INDEX}.{FILEFORMAT}``
and a number no file holds (a shard of an earlier version) has length 0, which TFDS skips
without opening.

Features keep their flat names (``image/encoded``, ``image/object/bbox/xmin``), the keys
``tf.io.parse_single_example`` and :mod:`recordbeam.dataset.reader` use too:

* ``.../encoded`` (one string per example): ``Image`` with 3 channels, decoded to uint8;
* ``.../class/label`` (int64) when the manifest names the classes: ``ClassLabel``, in a
  ``Sequence`` when an example holds several (one per object);
* other features: ``Tensor`` (``Text`` for names, formats and class texts), of shape
  ``()`` / ``(k,)`` when fixed-length and ``(None,)`` otherwise; list features (per-object
  ``image/object/*``, list columns) are never fixed-length, see :mod:`recordbeam.dataset.schema`,
  so a dataset with one box per image loads like any other. Boxes are therefore the
  four ``image/object/bbox/{ymin,xmin,ymax,xmax}`` vectors rather than TFDS's packed
  ``BBoxFeature``, which would need a fifth, duplicated feature in every example.

TFDS reads only uncompressed TFRecords (its reader passes no compression type), so a
folder with compressed shards gets no TFDS files, and stale ones are removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from recordbeam.dataset.class_names import name_problem
from recordbeam.dataset.names import indexed_shard_number
from recordbeam.dataset.schema import FeatureShape, feature_shapes, image_features, label_features

__all__ = [
    "DATASET_INFO",
    "FEATURES",
    "FILEPATH_TEMPLATE",
    "class_names",
    "dataset_info_json",
    "features_json",
    "files_for",
    "is_tfds_file",
]

DATASET_INFO = "dataset_info.json"
FEATURES = "features.json"
FILEPATH_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
INDEXED_TEMPLATE = "{SPLIT}-{SHARD_INDEX}.{FILEFORMAT}"
VERSION = "1.0.0"
#: The most label values a ``ClassLabel`` names (one line each, ``unused_<value>`` for gaps):
#: past it the labels are written as plain integers (ids far apart, as COCO's may be).
MAX_CLASS_LABELS = 1 << 20
_LABELS_FILE = re.compile(r"^[A-Za-z0-9_.\-]+\.labels\.txt$")
_TEXT_NAMES = {"text", "filename", "format", "source_id"}

_FEATURES_DICT = "tensorflow_datasets.core.features.features_dict.FeaturesDict"
_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_TEXT = "tensorflow_datasets.core.features.text_feature.Text"
_IMAGE = "tensorflow_datasets.core.features.image_feature.Image"
_CLASS_LABEL = "tensorflow_datasets.core.features.class_label_feature.ClassLabel"
_SEQUENCE = "tensorflow_datasets.core.features.sequence_feature.Sequence"


def is_tfds_file(name: str) -> bool:
    """True for the names :func:`write` creates (top level of the output folder)."""
    return name in (DATASET_INFO, FEATURES) or bool(_LABELS_FILE.match(name))


def labels_file_name(feature: str) -> str:
    """Where TFDS looks for a ClassLabel's names: the feature path with dots for slashes."""
    return feature.replace("/", ".") + ".labels.txt"


def class_names(manifest: Mapping[str, Any]) -> list[str] | None:
    """Class names indexed by label value, or None when the manifest names no classes.

    ``label_map`` (label value -> name) wins; label values without a name (COCO ids have
    gaps; 0 is unused with 1-based labels) get ``unused_<value>`` so that index ``i``
    always names label ``i`` (None when a value reaches :data:`MAX_CLASS_LABELS`). Without a map, ``label_names`` is taken as 0-based. Each
    name is as TFDS can read it back (see :func:`_distinct_lines`).
    """
    label_map = manifest.get("label_map")
    if label_map:
        by_value = {int(k): str(v) for k, v in label_map.items()}
        if min(by_value) < 0:
            return None  # ClassLabel cannot hold negative labels
        if max(by_value) >= MAX_CLASS_LABELS:
            return None  # ids far apart (COCO's may reach 2^63): a name per value is no list
        names = [by_value.get(value) for value in range(max(by_value) + 1)]
    else:
        names = [str(n) for n in manifest.get("label_names") or ()]
    return _distinct_lines(names) if names else None


def _distinct_lines(names: list[str | None]) -> list[str]:
    """The names as TFDS reads them back from its labels file, each line stripped: blank
    lines are dropped and a name given twice is refused, so a missing or unusable name
    becomes ``unused_<value>`` and a repeated one ``<name>_<value>`` (underscores first
    until unique)."""
    stripped = [name.strip() if name is not None and name_problem(name) is None else None
                for name in names]
    taken = {name for name in stripped if name is not None}
    seen: set[str] = set()
    result = []
    for value, name in enumerate(stripped):
        if name is None or name in seen:
            name = f"unused_{value}" if name is None else f"{name}_{value}"
            while name in taken:
                name = "_" + name
            taken.add(name)
        seen.add(name)
        result.append(name)
    return result


def _shape(shape: FeatureShape) -> dict[str, Any]:
    if shape.scalar:
        return {}
    return {"dimensions": [str(shape.length if shape.fixed else -1)]}


def _feature(
    shape: FeatureShape, images: set[str], labels: set[str], num_classes: int | None
) -> dict[str, Any]:
    if shape.name in images:
        return {
            "pythonClassName": _IMAGE,
            "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"},
        }
    if shape.name in labels and num_classes:
        inner = {"pythonClassName": _CLASS_LABEL, "classLabel": {"numClasses": str(num_classes)}}
    elif shape.dtype == "string" and shape.name.rsplit("/", 1)[-1] in _TEXT_NAMES:
        inner = {"pythonClassName": _TEXT, "text": {}}
    else:
        return {
            "pythonClassName": _TENSOR,
            "tensor": {"shape": _shape(shape), "dtype": shape.dtype, "encoding": "none"},
        }
    if shape.scalar:
        return inner
    return {
        "pythonClassName": _SEQUENCE,
        "sequence": {"feature": inner, "length": str(shape.length if shape.fixed else -1)},
    }


def features_json(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The content of ``features.json`` (a flat ``FeaturesDict``)."""
    shapes = feature_shapes(manifest)
    images = set(image_features(shapes))
    names = class_names(manifest)
    labels = set(label_features(shapes)) if names else set()
    num_classes = len(names) if names else None
    return {
        "pythonClassName": _FEATURES_DICT,
        "featuresDict": {
            "features": {s.name: _feature(s, images, labels, num_classes) for s in shapes}
        },
    }


def _supervised_keys(manifest: Mapping[str, Any], shapes: list[FeatureShape]) -> dict | None:
    """``as_supervised=True`` pairs (image, label) for single-label classification."""
    images = image_features(shapes)
    scalar_labels = [s.name for s in shapes if s.scalar and s.name in label_features(shapes)]
    if manifest.get("task") != "classification" or len(images) != 1 or len(scalar_labels) != 1:
        return None
    return {"tuple": {"items": [{"featureKey": images[0]}, {"featureKey": scalar_labels[0]}]}}


def dataset_info_json(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The content of ``dataset_info.json``: splits with shard lengths and our file names."""
    splits = manifest.get("splits", {})
    info: dict[str, Any] = {
        "name": "recordbeam",
        "description": (
            f"Written by recordbeam {manifest.get('recordbeam_version', '')}"
            + (f" ({manifest['task']})" if manifest.get("task") else "")
            + "; manifest.json in this folder lists shards, features and rejects."
        ),
        "version": VERSION,
        "fileFormat": "tfrecord",
        "splits": [_split_info(name, entry) for name, entry in sorted(splits.items())],
    }
    keys = _supervised_keys(manifest, feature_shapes(manifest))
    if keys:
        info["supervisedKeys"] = keys
    return info


def _split_info(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """One split's ``SplitInfo``: its shard lengths in the order of its template's names."""
    shards = entry["shards"]
    numbers = [indexed_shard_number(s["file"]) for s in shards]
    if shards and None not in numbers:  # numbered shards: a length per number, 0 for gaps
        lengths = ["0"] * (max(numbers) + 1)
        for number, shard in zip(numbers, shards, strict=True):
            lengths[number] = str(shard["examples"])
        template = INDEXED_TEMPLATE
    else:
        lengths, template = [str(s["examples"]) for s in shards], FILEPATH_TEMPLATE
    return {"name": name, "numBytes": str(entry["bytes"]), "shardLengths": lengths,
            "filepathTemplate": template}


def _readable_by_tfds(manifest: Mapping[str, Any]) -> bool:
    """Uncompressed shards, named in each split by one template."""
    for entry in manifest.get("splits", {}).values():
        files = [s["file"] for s in entry["shards"]]
        numbered = {indexed_shard_number(f) is not None for f in files}
        if len(numbered) > 1 or not all(f.endswith(".tfrecord") for f in files):
            return False
    return bool(manifest.get("features"))


def files_for(manifest: Mapping[str, Any]) -> dict[str, bytes]:
    """Every TFDS file for this manifest, name -> content; empty when TFDS cannot read
    the folder (compressed shards, or no examples)."""
    if not _readable_by_tfds(manifest):
        return {}
    files = {
        DATASET_INFO: _json_bytes(dataset_info_json(manifest)),
        FEATURES: _json_bytes(features_json(manifest)),
    }
    names = class_names(manifest)
    if names:
        text = "".join(f"{n}\n" for n in names).encode("utf-8")
        for feature in label_features(feature_shapes(manifest)):
            files[labels_file_name(feature)] = text
    return files


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")
