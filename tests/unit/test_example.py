"""Example / SequenceExample codec: round trips, kind rules, errors, shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lanes import examples

from recordbeam.tfrecord.example import (
    Example,
    Feature,
    FeatureError,
    SequenceExample,
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
    feature_kind,
    make_example,
    make_feature,
    restore_shape,
    with_shape,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DTYPES = {"bytes": np.dtype(object), "float": np.dtype(np.float32), "int64": np.dtype(np.int64)}


def to_float32(values: list[float]) -> list[float]:
    """What a FloatList keeps of Python floats: the nearest float32 (inf past its range)."""
    with np.errstate(over="ignore"):
        return [float(np.float32(value)) for value in values]


@st.composite
def feature_values(draw, allow_empty: bool = True):
    """(value to encode, kind to force or None, kind it should decode as, expected values)."""
    shape = draw(st.sampled_from(["scalar", "list", "tuple", "array"]))
    kind = draw(st.sampled_from(["bytes", "str", "int64", "float32", "float64"]))
    sized = st.lists if allow_empty else (lambda e, **kw: st.lists(e, min_size=1, **kw))
    if kind == "bytes":
        values = draw(sized(st.binary(max_size=12), max_size=5))
        expected, decoded_kind = list(values), "bytes"
        array = np.array(values, dtype=object)
    elif kind == "str":
        values = draw(sized(st.text(max_size=8), max_size=5))
        expected, decoded_kind = [text.encode("utf-8") for text in values], "bytes"
        array = np.array(values, dtype=str) if values else np.array([], dtype=str)
    elif kind == "int64":
        values = draw(sized(st.integers(INT64_MIN, INT64_MAX), max_size=5))
        expected, decoded_kind = list(values), "int64"
        array = np.array(values, dtype=np.int64)
    elif kind == "float32":
        values = draw(sized(st.floats(width=32), max_size=5))
        expected, decoded_kind = list(values), "float"
        array = np.array(values, dtype=np.float32)
    else:
        values = draw(sized(st.floats(), max_size=5))
        expected, decoded_kind = to_float32(values), "float"
        array = np.array(values, dtype=np.float64)
    if shape == "scalar" and values:
        value, expected = values[0], expected[:1]
    elif shape == "tuple":
        value = tuple(values)
    elif shape == "array":
        value = array
        if kind == "str":
            # NumPy's fixed-width str arrays drop trailing NULs on their own ("\x00" reads
            # back as ""), so what can be encoded is what the array holds.
            expected = [str(text).encode("utf-8") for text in array.tolist()]
    else:
        value = values
    forced = draw(st.sampled_from([None, decoded_kind]))
    if not expected and forced is None:
        decoded_kind = "float"  # an empty value without a kind is written kind-less
    return value, forced, decoded_kind, expected


def assert_decoded(array: np.ndarray, kind: str, expected: list) -> None:
    assert array.dtype == DTYPES[kind]
    assert array.shape == (len(expected),)
    if kind == "float":
        np.testing.assert_array_equal(array, np.array(expected, dtype=np.float32))
    else:
        assert array.tolist() == expected


names = st.text(max_size=12)


@settings(max_examples=examples(100))
@given(st.dictionaries(names, feature_values(), max_size=6))
def test_example_round_trip(drawn: dict) -> None:
    features = {name: value for name, (value, _, _, _) in drawn.items()}
    kinds = {name: forced for name, (_, forced, _, _) in drawn.items() if forced}
    decoded = decode_example(encode_example(features, kinds))
    assert sorted(decoded) == sorted(features)
    for name, (_, _, kind, expected) in drawn.items():
        assert_decoded(decoded[name], kind, expected)


@settings(max_examples=examples(100))
@given(
    context=st.dictionaries(names, feature_values(), max_size=3),
    lists=st.dictionaries(
        names,
        st.sampled_from(["bytes", "int64", "float"]).flatmap(
            lambda kind: st.lists(
                st.lists(
                    {
                        "bytes": st.binary(max_size=6),
                        "int64": st.integers(INT64_MIN, INT64_MAX),
                        "float": st.floats(width=32),
                    }[kind],
                    max_size=3,
                ),
                max_size=4,
            ).map(lambda steps: (kind, steps))
        ),
        max_size=3,
    ),
)
def test_sequence_example_round_trip(context: dict, lists: dict) -> None:
    context_values = {name: value for name, (value, _, _, _) in context.items()}
    kinds = {name: forced for name, (_, forced, _, _) in context.items() if forced}
    # kinds covers context and lists alike; distinct names keep the drawn kinds apart.
    lists = {f"list:{name}": drawn for name, drawn in lists.items()}
    feature_lists = {name: steps for name, (_, steps) in lists.items()}
    data = encode_sequence_example(context_values, feature_lists, kinds)
    decoded_context, decoded_lists = decode_sequence_example(data)
    assert sorted(decoded_context) == sorted(context)
    for name, (_, _, kind, expected) in context.items():
        assert_decoded(decoded_context[name], kind, expected)
    assert sorted(decoded_lists) == sorted(lists)
    for name, (kind, steps) in lists.items():
        assert len(decoded_lists[name]) == len(steps)
        # Empty steps take the list's kind; a list of only empty steps has none (float32).
        list_kind = kind if any(steps) else "float"
        for decoded_step, step in zip(decoded_lists[name], steps, strict=True):
            assert_decoded(decoded_step, list_kind, step)


@settings(max_examples=examples(100))
@given(feature_values())
@example((float("nan"), None, "float", [float("nan")]))  # NaN != NaN: compare the bytes
def test_encode_fast_paths_agree_with_make_feature(drawn) -> None:
    # encode_example stores common values without make_feature's general dispatch.
    value, forced, _, _ = drawn
    kinds = {"x": forced} if forced else None
    stored = Example.FromString(encode_example({"x": value}, kinds)).features.feature["x"]
    expected = make_feature("x", value, forced)
    assert stored.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True)


def test_scalars_of_each_python_and_numpy_type() -> None:
    decoded = decode_example(
        encode_example(
            {
                "bytes": b"\x00\xff",
                "bytearray": bytearray(b"ab"),
                "memoryview": memoryview(b"cd"),
                "str": "naïve",
                "numpy str": np.str_("x"),
                "int": 7,
                "bool": True,
                "numpy int": np.uint8(200),
                "numpy bool": np.bool_(True),
                "float": 0.1,
                "numpy float": np.float16(1.5),
            }
        )
    )
    assert decoded["bytes"].tolist() == [b"\x00\xff"]
    assert decoded["bytearray"].tolist() == [b"ab"]
    assert decoded["memoryview"].tolist() == [b"cd"]
    assert decoded["str"].tolist() == ["naïve".encode()]
    assert decoded["numpy str"].tolist() == [b"x"]
    assert decoded["int"].tolist() == [7] and decoded["int"].dtype == np.int64
    assert decoded["bool"].tolist() == [1]
    assert decoded["numpy int"].tolist() == [200]
    assert decoded["numpy bool"].tolist() == [1]
    assert decoded["float"].dtype == np.float32 and decoded["float"][0] == np.float32(0.1)
    assert decoded["numpy float"].tolist() == [1.5]


def test_numpy_arrays_of_each_dtype_family() -> None:
    decoded = decode_example(
        encode_example(
            {
                "uint8": np.array([0, 255], dtype=np.uint8),
                "bool": np.array([True, False]),
                "float16": np.array([0.5, -2], dtype=np.float16),
                "bytes": np.array([b"a", b"bc"]),
                "unicode": np.array(["é", "z"]),
                "object": np.array([b"x", "y"], dtype=object),
                "uint64 in range": np.array([INT64_MAX], dtype=np.uint64),
            }
        )
    )
    assert decoded["uint8"].tolist() == [0, 255]
    assert decoded["bool"].tolist() == [1, 0]
    assert decoded["float16"].tolist() == [0.5, -2.0]
    assert decoded["bytes"].tolist() == [b"a", b"bc"]
    assert decoded["unicode"].tolist() == ["é".encode(), b"z"]
    assert decoded["object"].tolist() == [b"x", b"y"]
    assert decoded["uint64 in range"].tolist() == [INT64_MAX]


def test_float_feature_accepts_ints_and_mixed_lists_become_float() -> None:
    decoded = decode_example(
        encode_example({"forced": [1, 2], "mixed": [1, 2.5, True]}, {"forced": "float"})
    )
    assert decoded["forced"].dtype == np.float32 and decoded["forced"].tolist() == [1.0, 2.0]
    assert decoded["mixed"].dtype == np.float32 and decoded["mixed"].tolist() == [1.0, 2.5, 1.0]


def test_float_rounds_to_float32_and_overflows_to_inf() -> None:
    decoded = decode_example(encode_example({"x": [0.1, 1e39, -1e39, 3.4028235e38]}))
    assert decoded["x"][0] == np.float32(0.1) and float(decoded["x"][0]) != 0.1
    assert decoded["x"][1] == math.inf and decoded["x"][2] == -math.inf
    assert decoded["x"][3] == np.finfo(np.float32).max


def test_int64_limits_round_trip() -> None:
    decoded = decode_example(encode_example({"x": [INT64_MIN, -1, 0, INT64_MAX]}))
    assert decoded["x"].tolist() == [INT64_MIN, -1, 0, INT64_MAX]


@pytest.mark.parametrize(
    ("features", "kinds", "words"),
    [
        ({"label": 1.0}, {"label": "int64"}, ["'label'", "1.0", "integers"]),
        ({"label": [1, 2, 2.5]}, {"label": "int64"}, ["'label'", "2.5"]),
        ({"label": np.zeros(2)}, {"label": "int64"}, ["'label'", "float64"]),
        ({"score": b"x"}, {"score": "float"}, ["'score'", "b'x'", "real numbers"]),
        ({"text": 3}, {"text": "bytes"}, ["'text'", "3", "bytes or str"]),
        ({"mixed": [b"a", 1]}, None, ["'mixed'", "mixes bytes"]),
        ({"mixed": [1, "a"]}, None, ["'mixed'", "mixes bytes"]),
        ({"big": 2**63}, None, ["'big'", str(2**63), "int64 range"]),
        ({"small": [0, -(2**63) - 1]}, None, ["'small'", str(-(2**63) - 1), "int64 range"]),
        ({"huge": np.array([2**64 - 1], dtype=np.uint64)}, None, ["'huge'", "int64 range"]),
        ({"none": None}, None, ["'none'", "None"]),
        ({"none in list": [1, None]}, None, ["'none in list'", "None"]),
        ({"nested": [[1, 2], [3]]}, None, ["'nested'", "nested", "with_shape"]),
        ({"set": {1, 2}}, None, ["'set'", "sets"]),
        ({"complex": np.array([1j])}, None, ["'complex'", "complex128"]),
        (
            {"dates": np.array(["2024-01-01"], dtype="datetime64[D]")},
            None,
            ["'dates'", "datetime64"],
        ),
        ({"object": np.array([object()])}, None, ["'object'", "object"]),
    ],
)
def test_wrong_values_raise_feature_error_naming_feature_and_value(features, kinds, words) -> None:
    with pytest.raises(FeatureError) as raised:
        encode_example(features, kinds)
    message = str(raised.value)
    for word in words:
        assert word in message, message
    assert raised.value.feature == next(iter(features))
    assert isinstance(raised.value, TypeError)


def test_error_message_for_a_large_value_stays_short() -> None:
    with pytest.raises(FeatureError) as raised:
        encode_example({"image/encoded": b"\xff" * 100_000}, {"image/encoded": "int64"})
    assert len(str(raised.value)) < 400


def test_unknown_kind_and_non_string_name_are_refused() -> None:
    with pytest.raises(ValueError, match="'x'.*'int32'"):
        encode_example({"x": 1}, {"x": "int32"})
    with pytest.raises(FeatureError, match="names must be str"):
        encode_example({1: 1})


def test_empty_value_without_kind_is_written_kind_less() -> None:
    data = encode_example({"empty list": [], "empty array": np.array([]), "empty tuple": ()})
    parsed = Example.FromString(data)
    for name in ("empty list", "empty array", "empty tuple"):
        assert parsed.features.feature[name].WhichOneof("kind") is None
    assert decode_example(data)["empty list"].dtype == np.float32
    assert decode_example(data, {"empty list": "int64"})["empty list"].dtype == np.int64


@pytest.mark.parametrize("kind", ["bytes", "float", "int64"])
def test_empty_value_with_kind_keeps_the_kind(kind: str) -> None:
    data = encode_example({"x": []}, {"x": kind})
    assert feature_kind(Example.FromString(data).features.feature["x"]) == kind
    decoded = decode_example(data)["x"]
    assert decoded.dtype == DTYPES[kind] and decoded.size == 0


def test_make_feature_and_feature_kind() -> None:
    assert feature_kind(make_feature("a", [1, 2])) == "int64"
    assert feature_kind(make_feature("a", 1, "float")) == "float"
    assert feature_kind(make_feature("a", "x")) == "bytes"
    assert feature_kind(make_feature("a", [])) is None
    assert feature_kind(Feature()) is None
    assert list(make_feature("a", [3, 4]).int64_list.value) == [3, 4]


def test_make_example_serializes_to_what_encode_example_returns() -> None:
    features = {"b": [1.5], "a": "x", "c": np.arange(3)}
    assert make_example(features).SerializeToString(deterministic=True) == encode_example(features)


def test_encoding_does_not_depend_on_dict_order() -> None:
    forward = {f"feature{i}": [i, i + 1] for i in range(20)}
    backward = dict(reversed(list(forward.items())))
    assert encode_example(forward) == encode_example(backward)


def test_nd_arrays_are_flattened_in_c_order() -> None:
    array = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    fortran = np.asfortranarray(array)
    decoded = decode_example(encode_example({"c": array, "f": fortran, "t": array.T}))
    assert decoded["c"].tolist() == list(range(24))
    assert decoded["f"].tolist() == list(range(24))
    assert decoded["t"].tolist() == [int(v) for v in np.ravel(array.T, order="C")]


def test_with_shape_round_trips_the_shape() -> None:
    mask = (np.arange(30).reshape(2, 3, 5) % 7).astype(np.uint8)
    features = with_shape("mask", mask)
    assert features["mask/shape"] == [2, 3, 5]
    decoded = decode_example(encode_example(features))
    restored = restore_shape(decoded, "mask")
    assert restored.shape == (2, 3, 5)
    np.testing.assert_array_equal(restored, mask)


def test_with_shape_of_a_scalar_and_an_empty_array() -> None:
    decoded = decode_example(
        encode_example({**with_shape("s", np.float32(2.5)), **with_shape("e", np.zeros((0, 4)))})
    )
    assert restore_shape(decoded, "s").shape == () and restore_shape(decoded, "s") == 2.5
    assert restore_shape(decoded, "e").shape == (0, 4)


def test_restore_shape_rejects_a_shape_that_does_not_fit() -> None:
    decoded = {"m": np.arange(6), "m/shape": np.array([4, 2])}
    with pytest.raises(ValueError, match="'m' has 6 values but m/shape is \\[4, 2\\]"):
        restore_shape(decoded, "m")


def test_decode_rejects_bytes_that_are_not_an_example() -> None:
    with pytest.raises(ValueError, match="not a serialized tf.train.Example"):
        decode_example(b"\xff\xff\xff")
    with pytest.raises(ValueError, match="not a serialized tf.train.SequenceExample"):
        decode_sequence_example(b"\x0a\x05\x01")


def test_sequence_feature_list_kinds_are_unified() -> None:
    data = encode_sequence_example(
        {"id": "video-1"},
        {
            "ints": [[1], [], [2, 3]],
            "mixed": [[1], [2.5]],
            "mixed in a step": [[], [1, 2.5], [3]],
            "array": np.arange(6).reshape(3, 2),
        },
    )
    parsed = SequenceExample.FromString(data)
    empty_step = parsed.feature_lists.feature_list["ints"].feature[1]
    assert feature_kind(empty_step) == "int64"  # the empty step takes the list's kind
    context, lists = decode_sequence_example(data)
    assert context["id"].tolist() == [b"video-1"]
    assert [step.tolist() for step in lists["ints"]] == [[1], [], [2, 3]]
    assert all(step.dtype == np.float32 for step in lists["mixed"])
    assert [step.tolist() for step in lists["mixed"]] == [[1.0], [2.5]]
    assert [step.tolist() for step in lists["array"]] == [[0, 1], [2, 3], [4, 5]]
    assert all(step.dtype == np.float32 for step in lists["mixed in a step"])
    assert [step.tolist() for step in lists["mixed in a step"]] == [[], [1.0, 2.5], [3.0]]
    mixed_empty = parsed.feature_lists.feature_list["mixed in a step"].feature[0]
    assert feature_kind(mixed_empty) == "float"


def test_sequence_errors_name_the_feature_list() -> None:
    with pytest.raises(FeatureError, match="'frames'.*share a kind"):
        encode_sequence_example({}, {"frames": [[b"a"], [1]]})
    with pytest.raises(FeatureError, match="'frames'.*sequence of per-step values"):
        encode_sequence_example({}, {"frames": "abc"})
    with pytest.raises(FeatureError, match="'frames'.*1.5"):
        encode_sequence_example({}, {"frames": [[1], [1.5]]}, {"frames": "int64"})


def test_sequence_example_without_context_or_lists() -> None:
    assert decode_sequence_example(encode_sequence_example({}, {})) == ({}, {})
    context, lists = decode_sequence_example(encode_sequence_example({}, {"empty": []}))
    assert context == {} and lists == {"empty": []}
