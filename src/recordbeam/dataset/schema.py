"""The parsing spec of an output folder, derived from its manifest.

``recordbeam schema OUT`` prints Python code that defines ``feature_description`` for
``tf.io.parse_single_example``; ``--json`` prints the same spec as data. The readers in
:mod:`recordbeam.dataset.reader` and the TFDS metadata in :mod:`recordbeam.dataset.tfds` use the
same rules, so every consumer sees one shape per feature:

* a feature the source declares as a list (per-object ``image/object/*``, a manifest's
  ``*_list`` columns; see :mod:`recordbeam.tfrecord.feature_spec`) is variable-length, even when
  every example of this dataset holds one value: its shape must not depend on the data;
* another feature present in every example with the same number ``k >= 1`` of values is
  fixed-length: ``FixedLenFeature([], dtype)`` for ``k == 1``, ``FixedLenFeature([k], dtype)``
  otherwise (``image/height``, ``image/source_id``: one value by definition);
* anything else (lengths differ, or some examples lack it) is variable-length:
  ``VarLenFeature`` (a ``SparseTensor``) or, with ``ragged=True``, ``RaggedFeature``.

No TensorFlow is imported here: the code is text for the user to run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recordbeam.tfrecord.feature_spec import is_list_feature

__all__ = [
    "FeatureShape",
    "SchemaError",
    "feature_shapes",
    "image_features",
    "label_features",
    "schema_code",
    "schema_json",
]

_TF_DTYPES = {"string": "tf.string", "int64": "tf.int64", "float32": "tf.float32"}


class SchemaError(ValueError):
    """The manifest does not describe what was asked (unknown split, no features)."""


@dataclass(frozen=True)
class FeatureShape:
    """How one feature parses.

    Attributes:
        name: the feature key in the Example.
        dtype: ``"string"``, ``"int64"`` or ``"float32"``.
        length: values per example when fixed-length, else None.
    """

    name: str
    dtype: str
    length: int | None

    @property
    def fixed(self) -> bool:
        return self.length is not None

    @property
    def scalar(self) -> bool:
        return self.length == 1


def _features_of(manifest: Mapping[str, Any], split: str | None) -> Mapping[str, Any]:
    if split is None:
        features = manifest.get("features")
    else:
        splits = manifest.get("splits", {})
        if split not in splits:
            raise SchemaError(
                f"the manifest has no split {split!r}; it has {sorted(splits) or 'none'}"
            )
        features = splits[split].get("features")
    if not features:
        raise SchemaError(
            "the manifest lists no features (the output holds no examples); write some "
            "examples first"
        )
    return features


def feature_shapes(manifest: Mapping[str, Any], split: str | None = None) -> list[FeatureShape]:
    """Every feature's dtype and fixed length, sorted by name.

    Args:
        manifest: a parsed ``manifest.json``.
        split: use this split's spec; None uses the spec merged over all splits.

    Raises:
        SchemaError: unknown split, or no features recorded.
    """
    shapes = []
    for name, spec in sorted(_features_of(manifest, split).items()):
        # A feature that is always empty has no useful fixed shape; VarLen parses it.
        length = None if is_list_feature(name, spec) else spec.get("fixed_length") or None
        shapes.append(FeatureShape(name, spec["dtype"], length))
    return shapes


def image_features(shapes: list[FeatureShape]) -> list[str]:
    """Names of features holding one encoded image per example (``.../encoded``)."""
    return [
        s.name
        for s in shapes
        if s.dtype == "string" and s.scalar and s.name.rsplit("/", 1)[-1] == "encoded"
    ]


def label_features(shapes: list[FeatureShape]) -> list[str]:
    """Names of int64 features holding class ids (``.../class/label``)."""
    return [s.name for s in shapes if s.dtype == "int64" and s.name.endswith("class/label")]


def _entry(shape: FeatureShape, ragged: bool) -> dict[str, Any]:
    if shape.fixed:
        return {
            "type": "FixedLenFeature",
            "shape": [] if shape.scalar else [shape.length],
            "dtype": shape.dtype,
        }
    if ragged:
        return {"type": "RaggedFeature", "dtype": shape.dtype, "row_splits_dtype": "int64"}
    return {"type": "VarLenFeature", "dtype": shape.dtype}


def schema_json(
    manifest: Mapping[str, Any], split: str | None = None, *, ragged: bool = False
) -> dict[str, Any]:
    """The spec as data: ``{"feature_description": {name: {"type", "dtype", ...}}}``.

    ``type`` is ``FixedLenFeature`` (with ``shape``), ``VarLenFeature`` or
    ``RaggedFeature`` (with ``row_splits_dtype``), named as in ``tf.io``.
    """
    shapes = feature_shapes(manifest, split)
    return {
        "split": split,
        "examples": manifest["splits"][split]["examples"]
        if split
        else manifest.get("totals", {}).get("examples"),
        "feature_description": {s.name: _entry(s, ragged) for s in shapes},
        "image_features": image_features(shapes),
    }


def _code_line(name: str, entry: Mapping[str, Any]) -> str:
    dtype = _TF_DTYPES[entry["dtype"]]
    key = json.dumps(name)
    if entry["type"] == "FixedLenFeature":
        return f"    {key}: tf.io.FixedLenFeature({entry['shape']}, {dtype}),"
    if entry["type"] == "RaggedFeature":
        return f"    {key}: tf.io.RaggedFeature({dtype}, row_splits_dtype=tf.int64),"
    return f"    {key}: tf.io.VarLenFeature({dtype}),"


def schema_code(
    manifest: Mapping[str, Any], split: str | None = None, *, ragged: bool = False, source: str = ""
) -> str:
    """Python code defining ``feature_description`` (and a ``parse`` function).

    Args:
        manifest: a parsed ``manifest.json``.
        split: use this split's spec; None merges all splits.
        ragged: ``RaggedFeature`` instead of ``VarLenFeature`` for variable-length features.
        source: where the manifest came from, for the header comment.
    """
    spec = schema_json(manifest, split, ragged=ragged)
    where = f" of {source}" if source else ""
    scope = f"split {split!r}" if split else "all splits"
    lines = [
        f"# Generated by `recordbeam schema` from the manifest{where} ({scope}).",
        "import tensorflow as tf",
        "",
        "feature_description = {",
    ]
    lines += [_code_line(n, e) for n, e in spec["feature_description"].items()]
    lines += [
        "}",
        "",
        "",
        "def parse(serialized):",
        "    return tf.io.parse_single_example(serialized, feature_description)",
    ]
    images = spec["image_features"]
    if images:
        lines += [
            "",
            "",
            "# Decode images after parsing, e.g. in dataset.map:",
            f"#   tf.io.decode_image(example[{json.dumps(images[0])}], channels=3, "
            "expand_animations=False)",
        ]
    return "\n".join(lines) + "\n"
