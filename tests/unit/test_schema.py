"""schema: feature_description code and JSON from a manifest."""

from __future__ import annotations

import ast

import pytest

from recordbeam.dataset.schema import (
    SchemaError,
    feature_shapes,
    image_features,
    label_features,
    schema_code,
    schema_json,
)


def spec(dtype: str, fixed: int | None, lo: int, hi: int, present: int = 10) -> dict:
    return {
        "dtype": dtype,
        "fixed_length": fixed,
        "min_length": lo,
        "max_length": hi,
        "present_in": present,
    }


FEATURES = {
    "image/encoded": spec("string", 1, 1, 1),
    "image/height": spec("int64", 1, 1, 1),
    "embedding": spec("float32", 4, 4, 4),
    "image/object/class/label": spec("int64", None, 0, 3),
    "image/object/bbox/xmin": spec("float32", None, 0, 3),
    "always_empty": spec("float32", 0, 0, 0),
}
MANIFEST = {
    "features": FEATURES,
    "totals": {"examples": 10},
    "splits": {"train": {"examples": 10, "features": {"image/encoded": spec("string", 1, 1, 1)}}},
}


def test_fixed_and_variable_lengths():
    shapes = {s.name: s for s in feature_shapes(MANIFEST)}
    assert shapes["image/encoded"].scalar and shapes["embedding"].length == 4
    assert not shapes["image/object/class/label"].fixed
    assert not shapes["always_empty"].fixed  # an always-empty feature parses as var-len


def test_json_spec_names_tf_io_types():
    described = schema_json(MANIFEST)["feature_description"]
    assert described["image/encoded"] == {"type": "FixedLenFeature", "shape": [], "dtype": "string"}
    assert described["embedding"] == {"type": "FixedLenFeature", "shape": [4], "dtype": "float32"}
    assert described["image/object/bbox/xmin"] == {"type": "VarLenFeature", "dtype": "float32"}
    ragged = schema_json(MANIFEST, ragged=True)["feature_description"]
    assert ragged["image/object/class/label"]["type"] == "RaggedFeature"


def test_code_is_valid_python_with_every_feature():
    code = schema_code(MANIFEST, source="out")
    tree = ast.parse(code)
    assigned = [n for n in tree.body if isinstance(n, ast.Assign)]
    keys = {k.value for k in assigned[0].value.keys}
    assert keys == set(FEATURES)
    assert "tf.io.FixedLenFeature([4], tf.float32)" in code
    assert '"image/object/class/label": tf.io.VarLenFeature(tf.int64)' in code


def test_split_scope_and_errors():
    assert set(schema_json(MANIFEST, "train")["feature_description"]) == {"image/encoded"}
    with pytest.raises(SchemaError, match="no split 'val'.*train"):
        schema_json(MANIFEST, "val")
    with pytest.raises(SchemaError, match="no features"):
        feature_shapes({"features": {}})


def test_image_and_label_features_by_name_and_type():
    shapes = feature_shapes(MANIFEST)
    assert image_features(shapes) == ["image/encoded"]
    assert label_features(shapes) == ["image/object/class/label"]


def test_list_features_are_variable_length_even_with_one_value_everywhere():
    one_each = {
        # What a dataset with one box per image records: declared lists, one value each.
        "image/object/bbox/xmin": {**spec("float32", None, 1, 1), "list": True},
        "tags": {**spec("string", None, 1, 1), "list": True},
        "image/height": {**spec("int64", 1, 1, 1), "list": False},
        # A manifest written before lists were declared: no "list" key, fixed length 1.
        "image/object/class/label": spec("int64", 1, 1, 1),
        "image/source_id": spec("string", 1, 1, 1),
    }
    described = schema_json({"features": one_each, "totals": {}})["feature_description"]
    for name in ("image/object/bbox/xmin", "tags", "image/object/class/label"):
        assert described[name]["type"] == "VarLenFeature", name
    for name in ("image/height", "image/source_id"):
        assert described[name] == {"type": "FixedLenFeature", "shape": [], "dtype": one_each[name]["dtype"]}
