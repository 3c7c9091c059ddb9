"""tf.io.serialize_tensor and tf.io.parse_tensor for numpy arrays, without TensorFlow.

A serialized tensor is a TensorProto (see ``protos/tensor.proto``). Detection and
segmentation datasets use it to store arrays of any rank in a single bytes feature, e.g.
``{"image/object/mask": serialize_tensor(masks)}``, which a TensorFlow input pipeline
reads back with ``tf.io.parse_tensor(x, tf.uint8)``.

Supported dtypes: float16/32/64, int8/16/32/64, uint8/16/32/64, bool, complex64/128 and
strings (numpy ``S``, ``U`` or object arrays of bytes / str). Not supported: bfloat16,
the float8 / int4 family, quantized types, resources and variants.

:func:`serialize_tensor` writes exactly what ``tf.io.serialize_tensor`` writes: numeric
elements go to ``tensor_content`` as little-endian bytes in C order, strings go to
``string_val`` (str is UTF-8 encoded). The dtype is numpy's, so ``serialize_tensor(3.0)``
is a float64 tensor whereas TensorFlow would make ``3.0`` a float32; pass
``np.float32(3.0)`` to match.

:func:`parse_tensor` also reads the typed ``*_val`` fields that ``tf.make_tensor_proto``
uses instead of ``tensor_content``, with TensorFlow's rules: no values means zeros (or
empty strings), fewer values than elements repeat the last value (so one value fills the
whole shape), and values beyond the element count are ignored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recordbeam.tfrecord.protos import DataType, TensorProto

__all__ = ["parse_tensor", "serialize_tensor"]

_DT = {value.name: value.number for value in DataType.values}

# (numpy kind, itemsize) -> DataType, so that byte order never changes the lookup.
_NUMERIC_DTYPES = {
    ("f", 2): _DT["DT_HALF"],
    ("f", 4): _DT["DT_FLOAT"],
    ("f", 8): _DT["DT_DOUBLE"],
    ("i", 1): _DT["DT_INT8"],
    ("i", 2): _DT["DT_INT16"],
    ("i", 4): _DT["DT_INT32"],
    ("i", 8): _DT["DT_INT64"],
    ("u", 1): _DT["DT_UINT8"],
    ("u", 2): _DT["DT_UINT16"],
    ("u", 4): _DT["DT_UINT32"],
    ("u", 8): _DT["DT_UINT64"],
    ("b", 1): _DT["DT_BOOL"],
    ("c", 8): _DT["DT_COMPLEX64"],
    ("c", 16): _DT["DT_COMPLEX128"],
}
_NUMPY_OF = {
    number: np.dtype(f"<{kind}{size}") if kind != "b" else np.dtype(np.bool_)
    for (kind, size), number in _NUMERIC_DTYPES.items()
}
_STRING = _DT["DT_STRING"]

# DataType -> (typed field, numpy dtype the field's values arrive in). Complex fields hold
# real and imaginary parts interleaved; half_val holds float16 bit patterns.
_TYPED_FIELDS = {
    _DT["DT_HALF"]: ("half_val", np.uint16),
    _DT["DT_FLOAT"]: ("float_val", np.float32),
    _DT["DT_DOUBLE"]: ("double_val", np.float64),
    _DT["DT_INT8"]: ("int_val", np.int32),
    _DT["DT_INT16"]: ("int_val", np.int32),
    _DT["DT_INT32"]: ("int_val", np.int32),
    _DT["DT_UINT8"]: ("int_val", np.int32),
    _DT["DT_UINT16"]: ("int_val", np.int32),
    _DT["DT_INT64"]: ("int64_val", np.int64),
    _DT["DT_UINT32"]: ("uint32_val", np.uint32),
    _DT["DT_UINT64"]: ("uint64_val", np.uint64),
    _DT["DT_BOOL"]: ("bool_val", np.bool_),
    _DT["DT_COMPLEX64"]: ("scomplex_val", np.float32),
    _DT["DT_COMPLEX128"]: ("dcomplex_val", np.float64),
}


def _type_name(number: int) -> str:
    """TensorFlow's short name of a DataType ("float", "int32", "string", ...)."""
    value = DataType.values_by_number.get(number)
    return value.name.removeprefix("DT_").lower() if value else f"DataType {number}"


def _data_type_of(dtype: Any) -> int:
    """The DataType for a numpy dtype-like (or anything with ``as_numpy_dtype``, as tf.DType)."""
    numpy_dtype = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    if numpy_dtype.kind in "SUO":
        return _STRING
    number = _NUMERIC_DTYPES.get((numpy_dtype.kind, numpy_dtype.itemsize))
    if number is None:
        raise ValueError(
            f"dtype {numpy_dtype} has no TensorFlow counterpart that recordbeam supports"
        )
    return number


def _string_bytes(element: Any) -> bytes:
    if isinstance(element, bytes):
        return element
    if isinstance(element, str):
        return element.encode("utf-8")
    raise ValueError(
        f"a string tensor holds bytes or str only, got {element!r} ({type(element).__name__}); "
        "convert the array to a numeric dtype or to strings first"
    )


def serialize_tensor(array: Any) -> bytes:
    """Serializes an array as TensorFlow's ``tf.io.serialize_tensor`` does.

    Args:
        array: a numpy array or anything ``np.asarray`` accepts, of a supported dtype
            (module docstring). Its shape, including rank 0 and zero-size dims, is kept.

    Returns:
        The serialized TensorProto; ``tf.io.parse_tensor(data, dtype)`` reads it back.

    Raises:
        ValueError: the dtype is not supported, or an object array holds non-strings.
    """
    values = np.asarray(array)
    proto = TensorProto()
    proto.tensor_shape.SetInParent()  # a scalar still writes its (empty) shape, as TF does
    for size in values.shape:
        proto.tensor_shape.dim.add(size=size)
    data_type = _data_type_of(values.dtype)
    proto.dtype = data_type
    if data_type == _STRING:
        proto.string_val.extend(_string_bytes(element) for element in values.ravel().tolist())
    elif values.size:
        little_endian = values.dtype.newbyteorder("<") if values.dtype.kind != "b" else None
        proto.tensor_content = np.ascontiguousarray(values, dtype=little_endian).tobytes()
    return proto.SerializeToString()


def _shape_of(proto: Any) -> tuple[int, ...]:
    shape = proto.tensor_shape
    sizes = tuple(dim.size for dim in shape.dim)
    if shape.unknown_rank or any(size < 0 for size in sizes):
        raise ValueError(
            f"serialized tensor has a partly unknown shape {list(sizes)}; "
            "a stored tensor must have a fully known shape"
        )
    return sizes


def _fill_like_tensorflow(values: np.ndarray, count: int) -> np.ndarray:
    """Stretches typed-field values to ``count`` elements the way TensorFlow does."""
    if len(values) >= count:
        return values[:count]
    if len(values) == 0:
        return np.zeros(count, dtype=values.dtype)
    padding = np.full(count - len(values), values[-1], dtype=values.dtype)
    return np.concatenate([values, padding])


def _typed_values(proto: Any, data_type: int, count: int) -> np.ndarray:
    field, field_dtype = _TYPED_FIELDS[data_type]
    raw = getattr(proto, field)
    values = np.fromiter(raw, dtype=field_dtype, count=len(raw))
    target = _NUMPY_OF[data_type]
    if target.kind == "c":
        pairs = values[: len(values) // 2 * 2]
        values = pairs[0::2] + 1j * pairs[1::2].astype(target)
        return _fill_like_tensorflow(values.astype(target), count)
    if data_type == _DT["DT_HALF"]:
        values = values.view(np.float16)
    # int_val carries int8/16 and uint8/16 as int32; the cast wraps, as TensorFlow's does.
    return _fill_like_tensorflow(values.astype(target.newbyteorder("=")), count)


def parse_tensor(data: bytes, dtype: Any = None) -> np.ndarray:
    """Parses a serialized TensorProto, as ``tf.io.parse_tensor`` does, into a numpy array.

    Args:
        data: bytes from :func:`serialize_tensor`, ``tf.io.serialize_tensor`` or
            ``tf.make_tensor_proto(...).SerializeToString()``.
        dtype: the expected dtype (numpy dtype-like; ``bytes``/``str``/``object`` mean a string
            tensor; a ``tf.DType`` also works). None accepts whatever the data holds.

    Returns:
        An array of the stored shape (0-d for a scalar); strings come back as an object array
        of ``bytes``, as TensorFlow's ``.numpy()`` gives them.

    Raises:
        ValueError: ``data`` is no TensorProto, its dtype is unsupported or differs from
            ``dtype``, its shape is unknown, or ``tensor_content`` does not fit the shape.
    """
    try:
        proto = TensorProto.FromString(data)
    except Exception as error:  # protobuf's DecodeError differs between its backends
        raise ValueError(
            f"bytes are not a serialized tensor ({len(data)} bytes): {error}"
        ) from error
    data_type = proto.dtype
    if data_type != _STRING and data_type not in _NUMPY_OF:
        raise ValueError(
            f"serialized tensor has dtype {_type_name(data_type)}, which recordbeam cannot "
            "parse; supported: float16/32/64, (u)int8/16/32/64, bool, complex64/128, string"
        )
    if dtype is not None and _data_type_of(dtype) != data_type:
        raise ValueError(
            f"Type mismatch between parsed tensor ({_type_name(data_type)}) and dtype "
            f"({_type_name(_data_type_of(dtype))})"
        )
    shape = _shape_of(proto)
    count = int(np.prod(shape, dtype=np.int64))
    if data_type == _STRING:
        strings = list(proto.string_val)
        if len(strings) < count:
            strings += [strings[-1] if strings else b""] * (count - len(strings))
        values = np.empty(count, dtype=object)
        values[:] = strings[:count]
        return values.reshape(shape)
    target = _NUMPY_OF[data_type]
    if proto.tensor_content:
        content = proto.tensor_content
        if len(content) != count * target.itemsize:
            raise ValueError(
                f"serialized {_type_name(data_type)} tensor of shape {list(shape)} needs "
                f"{count * target.itemsize} bytes of tensor_content but has {len(content)}"
            )
        values = np.frombuffer(content, dtype=target).astype(target.newbyteorder("="))
        return values.reshape(shape)
    return _typed_values(proto, data_type, count).reshape(shape)
