"""recordbeam.tfrecord.wire: hand-written Example bytes equal protobuf's, errors equal, no big copies."""

from __future__ import annotations

import array
import math
import struct
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from lanes import examples

from recordbeam.tfrecord import wire
from recordbeam.tfrecord.example import Example, FeatureError, make_example
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.wire import (
    LARGE_VALUE_BYTES,
    MAP_KEY_ORDER,
    encode_example_chunks,
    encode_example_fast,
    encode_example_observed,
    observed_spec,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def protobuf_bytes(features, kinds=None) -> bytes:
    """The reference: recordbeam's protobuf message, serialized with sorted map keys."""
    return make_example(features, kinds).SerializeToString(deterministic=True)


def outcome(function, *args):
    """("ok", result) or ("error", exception type, message), to compare two encoders."""
    try:
        return ("ok", function(*args))
    except Exception as error:  # noqa: BLE001 - both sides must fail the same way
        return ("error", type(error), str(error))


def wire_bytes(features, kinds=None) -> bytes:
    return b"".join(encode_example_chunks(features, kinds))


# --- random feature values ----------------------------------------------------------------------

large_bytes = st.builds(
    lambda size, fill: bytes([fill]) * size,
    st.integers(LARGE_VALUE_BYTES - 2, 3 * LARGE_VALUE_BYTES),
    st.integers(0, 255),
)
some_bytes = st.one_of(st.binary(max_size=12), large_bytes)
ints = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MAX, -1, 0, 127, 128, 2**32, -(2**31)]),
)
floats = st.one_of(
    st.floats(),  # nan, inf, subnormals, beyond float32's range
    st.sampled_from([3.4028235677973366e38, 3.4028235e38 * 1.0000001, -1e300, 1e-46, -0.0]),
)
numeric_dtypes = st.sampled_from(
    ["i1", "i2", "<i4", ">i8", "u1", "u2", "u4", "<u8", "?", "<f2", "<f4", ">f4", "f8"]
)
numpy_arrays = st.one_of(
    numeric_dtypes.flatmap(
        lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0))
    ),
    hnp.arrays("S4", st.integers(0, 4)),
    hnp.arrays("U4", st.integers(0, 4)),
)
numpy_scalars = st.one_of(
    st.builds(np.int64, ints),
    st.builds(np.int8, st.integers(-128, 127)),
    st.builds(np.uint64, st.integers(0, 2**64 - 1)),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.float64, floats),
    st.builds(np.bool_, st.booleans()),
)
good_values = st.one_of(
    some_bytes,
    st.text(max_size=8),  # non-ASCII included, surrogates excluded
    ints,
    floats,
    st.booleans(),
    st.lists(some_bytes, max_size=4),
    st.lists(st.text(max_size=6), max_size=4).map(tuple),
    st.lists(st.one_of(st.binary(max_size=5), st.text(max_size=5)), max_size=4),
    st.lists(ints, max_size=6),
    st.lists(ints, min_size=33, max_size=40),  # the numpy varint path
    st.lists(st.one_of(ints, floats), max_size=6),
    st.lists(floats, max_size=6),
    numpy_arrays,
    numpy_scalars,
    st.builds(bytearray, some_bytes),
    st.builds(memoryview, some_bytes),
    st.just([]),
    st.just(np.array([])),
)
bad_values = st.one_of(
    st.just(None),
    st.just([[1, 2]]),
    st.just([b"a", 1]),
    st.just([1, b"a"]),
    st.just({1, 2}),
    st.just([1, None]),
    st.just(object()),
    st.integers(INT64_MAX + 1, 2**70),
    st.integers(-(2**70), INT64_MIN - 1),
    st.just([1, 2**64]),
    st.just(2**1100),
    st.just([1.5, 2**1100]),
    st.just(np.array([1 + 2j])),
    st.just(np.array(["2020-01-01"], dtype="datetime64[D]")),
    st.just(np.array([2**64 - 1], dtype=np.uint64)),
    st.just(np.array([b"x", 1], dtype=object)),
    st.just("\ud800"),
)
kinds_drawn = st.sampled_from([None, None, "bytes", "float", "int64"])
names = st.text(max_size=6)  # "", non-ASCII, astral characters


@st.composite
def feature_dicts(draw, values):
    count = draw(st.integers(0, 6))
    features, kinds = {}, {}
    for _ in range(count):
        name = draw(names)
        features[name] = draw(values)
        kind = draw(kinds_drawn)
        if kind is not None:
            kinds[name] = kind
    return features, (kinds or None)


# --- equality with protobuf ---------------------------------------------------------------------


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feature_dicts(good_values))
def test_bytes_and_errors_equal_protobuf_for_random_features(drawn):
    features, kinds = drawn
    expected = outcome(protobuf_bytes, features, kinds)
    assert outcome(wire_bytes, features, kinds) == expected
    assert outcome(encode_example_fast, features, kinds) == expected


@settings(max_examples=examples(100), deadline=None)
@given(feature_dicts(st.one_of(good_values, bad_values)))
def test_bad_values_raise_the_same_errors_as_protobuf(drawn):
    features, kinds = drawn
    assert outcome(wire_bytes, features, kinds) == outcome(protobuf_bytes, features, kinds)


@settings(max_examples=examples(100), deadline=None)
@given(feature_dicts(good_values))
def test_observed_spec_equals_feature_spec_of_the_message(drawn):
    features, kinds = drawn
    try:
        message = make_example(features, kinds)
    except FeatureError:
        return  # errors are compared above; here only storable dicts matter
    by_message, by_lengths = FeatureSpec(), FeatureSpec()
    by_message.observe(message)
    by_lengths.observe_lengths(observed_spec(features, kinds))
    assert by_lengths == by_message


@pytest.mark.parametrize(
    "value",
    [None, [[1.0]], [b"a", 2], 2**64, [1, 2.5, "x"], np.array([1j]), "\ud800", 2**2000],
    ids=repr,
)
@pytest.mark.parametrize("kind", [None, "bytes", "float", "int64"])
def test_each_bad_value_gives_the_codecs_error(value, kind):
    features, kinds = {"f": value}, {"f": kind} if kind else None
    expected = outcome(protobuf_bytes, features, kinds)
    if kind is None:  # all are refused without a kind; some fit a forced kind (2**64 as float)
        assert expected[0] == "error"
    assert outcome(wire_bytes, features, kinds) == expected


@pytest.mark.parametrize(
    ("value", "kind"),
    [(b"x", "float"), ("x", "int64"), (1.5, "int64"), ([1, 2.0], "int64"), (3, "bytes")],
)
def test_value_not_fitting_its_kind_is_a_feature_error_naming_the_feature(value, kind):
    with pytest.raises(FeatureError, match="'my/feature'") as info:
        encode_example_chunks({"ok": 1, "my/feature": value}, {"my/feature": kind})
    assert info.value.feature == "my/feature"


def test_unknown_kind_and_non_str_name_fail_as_in_make_example():
    for features, kinds in [({"a": 1}, {"a": "double"}), ({1: b"x"}, None), ({b"k": 1}, None)]:
        expected = outcome(protobuf_bytes, features, kinds)
        assert expected[0] == "error"
        assert outcome(wire_bytes, features, kinds) == expected


def test_first_bad_feature_in_dict_order_is_reported():
    features = {"z_bad": None, "a_bad": [b"x", 1]}
    with pytest.raises(FeatureError) as info:
        encode_example_chunks(features)
    assert info.value.feature == "z_bad"


# --- layout details checked against protobuf, value by value -----------------------------------


def entry_keys(data: bytes) -> list[bytes]:
    """Keys of a serialized Example's map entries in written order (all lengths below 128)."""
    keys, position = [], 2
    while position < len(data):
        entry_length, key_length = data[position + 1], data[position + 3]
        keys.append(data[position + 4 : position + 4 + key_length])
        position += 2 + entry_length
    return keys


def test_map_entries_sorted_by_utf8_bytes_with_non_ascii_keys():
    # No key is a prefix of another here, so every runtime agrees on the order.
    keys = ["z", "é", "\uffff", "\U00010000", "A", "ä", "b\x00", "ab"]
    features = {key: index for index, key in enumerate(keys)}
    data = wire_bytes(features)
    assert data == protobuf_bytes(features)
    # Independently of protobuf: UTF-8 byte order, which is not UTF-16 order for astral keys.
    assert entry_keys(data) == sorted(key.encode("utf-8") for key in keys)
    assert "\U00010000".encode("utf-16-be") < "\uffff".encode("utf-16-be")


def test_keys_that_prefix_each_other_follow_the_runtimes_order():
    keys = ["a", "ab", "", "abc", "b", "é", "éa"]
    features = dict.fromkeys(keys, 1)
    written = entry_keys(wire_bytes(features))
    assert written == entry_keys(protobuf_bytes(features))
    by_bytes = sorted(key.encode("utf-8") for key in keys)
    if MAP_KEY_ORDER == "utf8":
        assert written == by_bytes
    else:  # upb: a key after the keys it is a prefix of
        assert MAP_KEY_ORDER == "utf8, longer prefix first"
        assert written == [b"abc", b"ab", b"a", b"b", "éa".encode(), "é".encode(), b""]


def test_empty_values_with_and_without_kind():
    features = {"none": [], "floats": [], "ints": np.array([]), "texts": np.array([], dtype=str)}
    kinds = {"floats": "float", "ints": "int64"}
    assert wire_bytes(features, kinds) == protobuf_bytes(features, kinds)
    parsed = Example.FromString(wire_bytes(features, kinds)).features.feature
    assert parsed["floats"].WhichOneof("kind") == "float_list"
    assert parsed["ints"].WhichOneof("kind") == "int64_list"
    assert parsed["none"].WhichOneof("kind") is None
    assert parsed["texts"].WhichOneof("kind") is None


def test_no_features_is_empty_bytes():
    assert encode_example_chunks({}) == []
    assert encode_example_fast({}) == protobuf_bytes({}) == b""


def test_negative_int64_takes_ten_bytes_and_extremes_round_trip():
    values = [INT64_MIN, -1, 0, 1, INT64_MAX]
    parsed = Example.FromString(encode_example_fast({"v": values})).features.feature["v"]
    assert list(parsed.int64_list.value) == values
    # -1 alone: Feature(0x1a len Int64List(0x0a len=10 ff*9 01)).
    single = encode_example_fast({"v": -1})
    assert single.endswith(b"\x1a\x0c\x0a\x0a" + b"\xff" * 9 + b"\x01")


def test_floats_are_float32_little_endian_and_overflow_to_inf():
    data = encode_example_fast({"v": [1.5, 1e300, -1e300]})
    assert data.endswith(struct.pack("<3f", 1.5, math.inf, -math.inf))
    assert data == protobuf_bytes({"v": [1.5, 1e300, -1e300]})


def test_ints_written_as_float_round_through_double_like_protobuf():
    # 2**62 + 2**37 + 1 rounds differently int64 -> float32 directly than via double.
    value = 2**62 + 2**37 + 1
    for features in ({"v": np.array([value])}, {"v": [value, value]}, {"v": value}):
        assert wire_bytes(features, {"v": "float"}) == protobuf_bytes(features, {"v": "float"})


def test_non_contiguous_arrays_and_memoryviews():
    grid = np.arange(24, dtype=np.int64).reshape(4, 6)
    buffer = np.arange(40, dtype=np.uint8).reshape(5, 8)
    features = {
        "transposed": grid.T,
        "strided": np.linspace(0, 1, 20)[::3],
        "view_strided": memoryview(buffer)[::2],
        "view_2d": memoryview(buffer),
        "view_ints": memoryview(array.array("i", range(2000))),
    }
    assert wire_bytes(features) == protobuf_bytes(features)


# --- no copies of large values ------------------------------------------------------------------


def test_one_megabyte_value_is_a_piece_that_is_the_callers_object():
    image = np.random.default_rng(0).bytes(1 << 20)
    features = {"image/encoded": image, "image/height": 480, "label": [1, 2], "name": "x"}
    pieces = encode_example_chunks(features)
    assert any(piece is image for piece in pieces)
    assert sum(len(piece) for piece in pieces) - len(image) < 200  # nothing else is large
    assert b"".join(pieces) == protobuf_bytes(features)


def test_large_bytes_in_lists_bytearrays_and_memoryviews_are_not_copied():
    first, second = b"a" * 5000, b"b" * 9000
    mutable = bytearray(b"c" * 7000)
    view = memoryview(b"d" * 6000)
    features = {"frames": [first, b"small", second], "mutable": mutable, "view": view}
    pieces = encode_example_chunks(features)
    assert any(piece is first for piece in pieces)
    assert any(piece is second for piece in pieces)
    views = [piece for piece in pieces if isinstance(piece, memoryview)]
    assert {id(piece.obj) for piece in views} == {id(mutable), id(view.obj)}
    assert b"".join(pieces) == protobuf_bytes(features)


def test_small_values_are_joined_into_few_pieces():
    features = {f"f{i}": [i, i + 1] for i in range(50)} | {"text": "hello"}
    pieces = encode_example_chunks(features)
    assert len(pieces) == 1
    assert type(pieces[0]) is bytes


def test_encode_example_observed_returns_pieces_and_spec_in_one_pass():
    features = {"img": b"x" * 10_000, "boxes": [0.1, 0.2], "empty": [], "label": np.array([3])}
    pieces, observed = encode_example_observed(features)
    assert b"".join(pieces) == protobuf_bytes(features)
    assert observed == {
        "img": ("string", 1),
        "boxes": ("float32", 2),
        "empty": (None, 0),
        "label": ("int64", 1),
    }


def test_observe_lengths_refuses_unknown_dtype_and_conflicting_dtypes():
    spec = FeatureSpec()
    spec.observe_lengths({"a": ("int64", 2)})
    with pytest.raises(ValueError, match="'a' is int64 in some examples and float32"):
        spec.observe_lengths({"a": ("float32", 2)})
    with pytest.raises(ValueError, match="unknown dtype 'double'"):
        FeatureSpec().observe_lengths({"b": ("double", 1)})


def test_common_values_never_take_the_protobuf_path(monkeypatch):
    def refuse(name, value, kinds):
        raise AssertionError(f"{name!r} went through make_example")

    features = {
        "bytes": b"x",
        "text": "ü",
        "int": -5,
        "bool": True,
        "float": 0.25,
        "texts": ["a", "b"],
        "blobs": (b"a", b"b" * 5000),
        "ints": [1, 2, 3],
        "many_ints": list(range(-50, 50)),
        "mixed": [1, 2.5],
        "floats64": np.linspace(0, 1, 5),
        "floats32": np.ones((2, 2), np.float32),
        "labels": np.array([1, 2], np.int32),
        "crowd": np.zeros(3, bool),
        "np_int": np.int64(7),
        "np_float": np.float32(0.5),
        "names": np.array(["a", "bc"]),
        "raw": np.array([b"a", b"bc"]),
        "buffer": bytearray(b"abc"),
        "view": memoryview(b"abc"),
        "empty": [],
        "empty_float": np.array([]),
    }
    kinds = {"empty_float": "float", "labels": "float"}
    expected = protobuf_bytes(features, kinds)
    monkeypatch.setattr(wire, "_general_path", refuse)
    assert wire_bytes(features, kinds) == expected


def test_float32_overflow_becomes_inf_without_numpy_warnings():
    features = {"list": [1e300, 2.0], "array": np.array([-1e300, 1.0]), "ints": np.array([2**62])}
    kinds = {"ints": "float"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = wire_bytes(features, kinds)
    assert data == protobuf_bytes(features, kinds)
    assert struct.pack("<2f", -math.inf, 1.0) in data


def test_long_int_arrays_are_encoded_in_blocks_like_protobuf(monkeypatch):
    monkeypatch.setattr(wire, "_VARINT_BLOCK", 7)  # several blocks without a huge array
    values = np.random.default_rng(3).integers(INT64_MIN, INT64_MAX, 100, endpoint=True)
    assert wire_bytes({"v": values}) == protobuf_bytes({"v": values})
