"""serialize_tensor / parse_tensor without TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from recordbeam.tfrecord.protos import DataType, TensorProto
from recordbeam.tfrecord.tensor import parse_tensor, serialize_tensor

NUMERIC_DTYPES = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
]
SHAPES = [(), (1,), (5,), (2, 3), (2, 1, 4), (0,), (3, 0), (0, 2, 5)]


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values that use the dtype's whole range: extremes, signs, fractions."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    real = rng.standard_normal(shape) * 1e3
    if dt.kind == "c":
        return (real + 1j * rng.standard_normal(shape)).astype(dt)
    return real.astype(dt)


def dt(name: str) -> int:
    return DataType.values_by_name[name].number


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_numeric_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    array = sample(dtype, shape)
    parsed = parse_tensor(serialize_tensor(array), dtype)
    assert parsed.dtype == array.dtype
    assert parsed.shape == array.shape
    np.testing.assert_array_equal(parsed, array)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint16", "complex128"])
def test_byte_order_of_the_input_does_not_matter(dtype: str) -> None:
    array = sample(dtype, (3, 2))
    big_endian = array.astype(array.dtype.newbyteorder(">"))
    assert serialize_tensor(big_endian) == serialize_tensor(array)
    parsed = parse_tensor(serialize_tensor(big_endian))
    assert parsed.dtype.isnative
    np.testing.assert_array_equal(parsed, array)


def test_elements_are_stored_little_endian_in_c_order() -> None:
    array = np.array([[1, 2], [3, 4]], dtype=np.int32)
    proto = TensorProto.FromString(serialize_tensor(np.asfortranarray(array)))
    assert proto.dtype == dt("DT_INT32")
    assert [dim.size for dim in proto.tensor_shape.dim] == [2, 2]
    assert proto.tensor_content == b"".join(v.to_bytes(4, "little") for v in (1, 2, 3, 4))


def test_scalar_bytes_match_tensorflow() -> None:
    # tf.io.serialize_tensor(np.float32(3)) as printed by TensorFlow 2.21: dtype 1, an empty
    # tensor_shape, tensor_content 00 00 40 40.
    assert serialize_tensor(np.float32(3)).hex() == "08011200220400004040"


@pytest.mark.parametrize(
    "array",
    [
        np.array([b"ab", b"", b"\x00z"], dtype=object),
        np.array([["x", "é"], ["", "yz"]]),
        np.array([b"one", b"two"]),
        np.array(b"scalar"),
        np.array("scalar text"),
        np.array([b"a", "b"], dtype=object),
        np.empty((0, 3), dtype=object),
    ],
    ids=["object bytes", "unicode 2-D", "S dtype", "bytes scalar", "str scalar", "mixed", "empty"],
)
def test_string_round_trip(array: np.ndarray) -> None:
    parsed = parse_tensor(serialize_tensor(array), bytes)
    assert parsed.dtype == object
    assert parsed.shape == array.shape
    expected = [v.encode() if isinstance(v, str) else v for v in array.ravel().tolist()]
    assert parsed.ravel().tolist() == expected


def test_strings_go_to_string_val() -> None:
    proto = TensorProto.FromString(serialize_tensor(np.array(["a", "bc"])))
    assert proto.dtype == dt("DT_STRING")
    assert list(proto.string_val) == [b"a", b"bc"]
    assert proto.tensor_content == b""


def typed_proto(data_type: str, shape: list[int], **fields) -> bytes:
    proto = TensorProto(dtype=dt(data_type), **fields)
    proto.tensor_shape.SetInParent()
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto.SerializeToString()


@pytest.mark.parametrize(
    ("data_type", "field", "values", "expected"),
    [
        ("DT_FLOAT", "float_val", [1.5, -2.0, 3.25], np.array([1.5, -2.0, 3.25], np.float32)),
        ("DT_DOUBLE", "double_val", [0.1, 2.0, 3.0], np.array([0.1, 2.0, 3.0])),
        (
            "DT_INT32",
            "int_val",
            [-(2**31), 0, 2**31 - 1],
            np.array([-(2**31), 0, 2**31 - 1], np.int32),
        ),
        ("DT_INT16", "int_val", [-5, 6, 7], np.array([-5, 6, 7], np.int16)),
        ("DT_INT8", "int_val", [-128, 127, 3], np.array([-128, 127, 3], np.int8)),
        ("DT_UINT8", "int_val", [0, 255, 7], np.array([0, 255, 7], np.uint8)),
        ("DT_UINT16", "int_val", [0, 65535, 7], np.array([0, 65535, 7], np.uint16)),
        ("DT_INT64", "int64_val", [-(2**63), 1, 2**63 - 1], np.array([-(2**63), 1, 2**63 - 1])),
        ("DT_UINT32", "uint32_val", [0, 2**32 - 1, 5], np.array([0, 2**32 - 1, 5], np.uint32)),
        ("DT_UINT64", "uint64_val", [0, 2**64 - 1, 5], np.array([0, 2**64 - 1, 5], np.uint64)),
        ("DT_BOOL", "bool_val", [True, False, True], np.array([True, False, True])),
        # float16 bit patterns: 0x3C00 is 1.0, 0xC000 is -2.0, 0x3800 is 0.5.
        ("DT_HALF", "half_val", [0x3C00, 0xC000, 0x3800], np.array([1.0, -2.0, 0.5], np.float16)),
        (
            "DT_COMPLEX64",
            "scomplex_val",
            [1, 2, 3, 4, 5, 6],
            np.array([1 + 2j, 3 + 4j, 5 + 6j], np.complex64),
        ),
        ("DT_COMPLEX128", "dcomplex_val", [1, -1, 0, 0, 2, 2], np.array([1 - 1j, 0, 2 + 2j])),
        ("DT_STRING", "string_val", [b"a", b"", b"c"], np.array([b"a", b"", b"c"], dtype=object)),
    ],
)
def test_typed_value_fields(data_type, field, values, expected) -> None:
    parsed = parse_tensor(typed_proto(data_type, [3], **{field: values}))
    assert parsed.dtype == expected.dtype
    assert parsed.tolist() == expected.tolist()


def test_one_typed_value_fills_the_whole_shape() -> None:
    parsed = parse_tensor(typed_proto("DT_FLOAT", [2, 3], float_val=[7.5]))
    assert parsed.shape == (2, 3)
    assert (parsed == 7.5).all()
    strings = parse_tensor(typed_proto("DT_STRING", [2], string_val=[b"x"]))
    assert strings.tolist() == [b"x", b"x"]
    complex_fill = parse_tensor(typed_proto("DT_COMPLEX64", [2], scomplex_val=[1, 2]))
    assert complex_fill.tolist() == [1 + 2j, 1 + 2j]


def test_typed_values_follow_tensorflows_fill_rules() -> None:
    # Fewer values than elements repeat the last one; none give zeros; extra ones are ignored
    # (what tf.io.parse_tensor does with such protos).
    assert parse_tensor(typed_proto("DT_INT64", [4], int64_val=[1, 2])).tolist() == [1, 2, 2, 2]
    assert parse_tensor(typed_proto("DT_INT64", [3])).tolist() == [0, 0, 0]
    assert parse_tensor(typed_proto("DT_STRING", [2])).tolist() == [b"", b""]
    assert parse_tensor(typed_proto("DT_INT64", [2], int64_val=[1, 2, 3])).tolist() == [1, 2]


def test_int_val_wraps_into_narrow_types_like_tensorflow() -> None:
    # 300 does not fit int8; TensorFlow keeps the low byte: 300 - 256 = 44.
    assert parse_tensor(typed_proto("DT_INT8", [1], int_val=[300])).tolist() == [44]


def test_dtype_mismatch_is_refused_with_tensorflows_words() -> None:
    data = serialize_tensor(np.float32(1))
    with pytest.raises(
        ValueError, match=r"Type mismatch between parsed tensor \(float\) and dtype \(double\)"
    ):
        parse_tensor(data, np.float64)
    with pytest.raises(ValueError, match=r"\(float\) and dtype \(string\)"):
        parse_tensor(data, bytes)
    assert parse_tensor(data, "float32") == 1


@pytest.mark.parametrize(
    "name", ["DT_BFLOAT16", "DT_VARIANT", "DT_RESOURCE", "DT_QINT8", "DT_INVALID"]
)
def test_unsupported_dtypes_are_named(name: str) -> None:
    data = typed_proto(name, [1], half_val=[0])
    with pytest.raises(ValueError, match=name.removeprefix("DT_").lower()):
        parse_tensor(data)


def test_content_length_must_fit_the_shape() -> None:
    data = typed_proto("DT_FLOAT", [5], tensor_content=b"\x00" * 8)
    with pytest.raises(
        ValueError, match="shape \\[5\\] needs 20 bytes of tensor_content but has 8"
    ):
        parse_tensor(data)


def test_unknown_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown shape"):
        parse_tensor(typed_proto("DT_FLOAT", [-1, 2]))
    proto = TensorProto(dtype=dt("DT_FLOAT"))
    proto.tensor_shape.unknown_rank = True
    with pytest.raises(ValueError, match="unknown shape"):
        parse_tensor(proto.SerializeToString())


def test_garbage_is_not_a_tensor() -> None:
    with pytest.raises(ValueError, match="not a serialized tensor"):
        parse_tensor(b"\xff\xff\xff\xff")


@pytest.mark.parametrize(
    "array",
    [
        np.array([1, None], dtype=object),
        np.array(["2024-01-01"], dtype="datetime64[D]"),
        np.zeros(2, "V4"),
    ],
    ids=["object of ints", "datetime64", "void"],
)
def test_unsupported_arrays_cannot_be_serialized(array: np.ndarray) -> None:
    with pytest.raises(ValueError):
        serialize_tensor(array)


def test_parsed_arrays_are_writable() -> None:
    parsed = parse_tensor(serialize_tensor(np.arange(3)))
    parsed[0] = 9
    assert parsed.tolist() == [9, 1, 2]
