"""Unit tests for recordbeam.tfrecord.feature_spec: the spec learned from written examples."""

from __future__ import annotations

import pytest

from recordbeam.tfrecord.example import Example, make_example
from recordbeam.tfrecord.feature_spec import FeatureSpec, is_list_feature, merge_spec_json


def _spec(*examples: dict, kinds: dict | None = None) -> FeatureSpec:
    spec = FeatureSpec()
    for features in examples:
        spec.observe(make_example(features, kinds))
    return spec


def test_feature_with_one_value_everywhere_is_fixed_length():
    out = _spec({"label": 3, "name": b"a"}, {"label": 7, "name": b"b"}).to_json()
    assert out["label"] == {
        "dtype": "int64",
        "fixed_length": 1,
        "list": False,
        "min_length": 1,
        "max_length": 1,
        "present_in": 2,
    }
    assert out["name"]["dtype"] == "string"
    assert out["name"]["fixed_length"] == 1


def test_feature_with_the_same_longer_length_everywhere_is_fixed_at_that_length():
    out = _spec({"xy": [1.0, 2.0]}, {"xy": [3.0, 4.0]}).to_json()
    assert out["xy"]["dtype"] == "float32"
    assert out["xy"]["fixed_length"] == 2


def test_feature_with_varying_lengths_is_variable_length():
    out = _spec(
        {"boxes": [0.1]}, {"boxes": [0.1, 0.2, 0.3]}, {"boxes": []}, kinds={"boxes": "float"}
    ).to_json()
    assert out["boxes"]["fixed_length"] is None
    assert (out["boxes"]["min_length"], out["boxes"]["max_length"]) == (0, 3)
    assert out["boxes"]["present_in"] == 3


def test_feature_missing_from_some_examples_is_variable_length():
    out = _spec({"a": 1, "b": 2}, {"a": 1}).to_json()
    assert out["a"]["fixed_length"] == 1
    assert out["b"]["fixed_length"] is None
    assert out["b"]["present_in"] == 1


def test_empty_feature_without_kind_takes_the_dtype_seen_later():
    # An image without boxes writes a kind-less empty feature; its dtype comes from others.
    out = _spec({"labels": []}, {"labels": [5, 6]}).to_json()
    assert out["labels"]["dtype"] == "int64"
    assert out["labels"]["min_length"] == 0


def test_feature_never_given_a_kind_is_reported_as_float32():
    out = _spec({"labels": []}).to_json()
    assert out["labels"]["dtype"] == "float32"
    assert out["labels"]["fixed_length"] == 0


def test_to_json_lists_features_sorted_by_name():
    out = _spec({"zeta": 1, "alpha": 2, "mid": 3}).to_json()
    assert list(out) == ["alpha", "mid", "zeta"]


def test_observe_accepts_any_wire_compatible_example():
    message = Example.FromString(make_example({"x": [1, 2]}).SerializeToString())
    spec = FeatureSpec()
    spec.observe(message)
    assert spec.examples == 1
    assert spec.to_json()["x"]["fixed_length"] == 2


def test_observe_refuses_a_feature_changing_dtype_and_names_it():
    spec = _spec({"label": 1})
    with pytest.raises(ValueError) as caught:
        spec.observe(make_example({"label": b"cat"}))
    message = str(caught.value)
    assert "'label'" in message
    assert "int64" in message and "string" in message


def test_merge_adds_counts_and_widens_lengths():
    a = _spec({"x": [1], "y": b"a"}, {"x": [1], "y": b"b"})
    b = _spec({"x": [1, 2, 3], "y": b"c"})
    merged = a.merge(b)
    assert merged.examples == 3
    out = merged.to_json()
    assert out["x"] == {
        "dtype": "int64",
        "fixed_length": None,
        "list": False,
        "min_length": 1,
        "max_length": 3,
        "present_in": 3,
    }
    assert out["y"]["fixed_length"] == 1
    assert out["y"]["present_in"] == 3


def test_merge_of_specs_equals_observing_everything_in_one_spec():
    examples = [{"x": [1.0] * n, "t": b"t"} for n in (0, 2, 2, 5)]
    examples += [{"x": [2.0], "extra": 1}]
    kinds = {"x": "float"}
    whole = _spec(*examples, kinds=kinds)
    split = _spec(*examples[:2], kinds=kinds).merge(_spec(*examples[2:], kinds=kinds))
    assert split.to_json() == whole.to_json()
    assert split.examples == whole.examples == 5


def test_feature_present_in_only_one_shard_is_variable_length_after_merge():
    merged = _spec({"a": 1, "only_here": 1}).merge(_spec({"a": 2}))
    out = merged.to_json()
    assert out["a"]["fixed_length"] == 1
    assert out["only_here"]["fixed_length"] is None
    assert out["only_here"]["present_in"] == 1


def test_merge_with_an_empty_spec_changes_nothing():
    spec = _spec({"a": [1, 2]}, {"a": [3]})
    assert spec.merge(FeatureSpec()).to_json() == spec.to_json()
    assert FeatureSpec().merge(spec).to_json() == spec.to_json()


def test_merge_takes_the_dtype_from_the_shard_that_saw_one():
    untyped = _spec({"labels": []})
    typed = _spec({"labels": [1]})
    assert untyped.merge(typed).to_json()["labels"]["dtype"] == "int64"
    assert typed.merge(untyped).to_json()["labels"]["dtype"] == "int64"


def test_merge_refuses_a_dtype_conflict_between_shards_and_names_the_feature():
    with pytest.raises(ValueError) as caught:
        _spec({"label": 1}).merge(_spec({"label": 0.5}))
    message = str(caught.value)
    assert "'label'" in message
    assert "int64" in message and "float32" in message


def test_merge_does_not_change_its_inputs():
    a = _spec({"x": [1]})
    b = _spec({"x": [1, 2]})
    before_a, before_b = a.to_json(), b.to_json()
    a.merge(b)
    assert a.to_json() == before_a
    assert b.to_json() == before_b


# --- list features: declared by the source, not learned from the data -----------------


def _declared(*examples: dict, lists: frozenset[str] = frozenset()) -> FeatureSpec:
    spec = FeatureSpec(lists=frozenset(lists))
    for features in examples:
        spec.observe(make_example(features))
    return spec


def test_declared_list_with_one_value_everywhere_stays_variable_length():
    # One box per image today; the spec must still parse two boxes tomorrow.
    out = _declared({"boxes": [0.5], "height": 3}, {"boxes": [0.25], "height": 4},
                    lists={"boxes"}).to_json()
    assert out["boxes"]["fixed_length"] is None and out["boxes"]["list"] is True
    assert (out["boxes"]["min_length"], out["boxes"]["max_length"]) == (1, 1)
    assert out["height"]["fixed_length"] == 1 and out["height"]["list"] is False


def test_declared_lists_are_kept_through_merges_and_declare_lists():
    a = _declared({"boxes": [0.5]}, lists={"boxes"})
    b = FeatureSpec()
    b.declare_lists(["labels"])
    b.observe(make_example({"boxes": [0.1], "labels": [1]}))
    out = a.merge(b).to_json()
    assert out["boxes"]["list"] and out["labels"]["list"]
    assert out["boxes"]["fixed_length"] is None and out["labels"]["fixed_length"] is None


def test_declared_names_no_example_holds_are_not_reported():
    assert set(_declared({"a": 1}, lists={"image/object/mask"}).to_json()) == {"a"}


def test_legacy_entries_without_list_key_take_per_object_names_as_lists():
    old = {"dtype": "float32", "fixed_length": 1, "min_length": 1, "max_length": 1, "present_in": 2}
    assert is_list_feature("image/object/bbox/xmin", old)
    assert not is_list_feature("image/height", old)
    assert not is_list_feature("image/object/bbox/xmin", {**old, "list": False})
    assert is_list_feature("tags", {**old, "list": True})


def test_merging_split_specs_keeps_a_list_variable_length_even_when_both_are_fixed():
    one_box = _declared({"boxes": [0.5]}, lists={"boxes"}).to_json()
    also_one = _declared({"boxes": [0.1]}).to_json()  # e.g. a split written by an older run
    merged = merge_spec_json(one_box, also_one, 1, 1)
    assert merged["boxes"]["list"] is True and merged["boxes"]["fixed_length"] is None
    plain = merge_spec_json(also_one, also_one, 1, 1)
    assert plain["boxes"]["list"] is False and plain["boxes"]["fixed_length"] == 1
