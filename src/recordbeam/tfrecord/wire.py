"""Serialize tf.train.Example straight to protobuf wire bytes, without building a message.

:func:`recordbeam.tfrecord.example.encode_example` fills a protobuf message and serializes it, which
copies every bytes value twice (into the message, then into the serialized string). For image
records the image dominates the record, so this module writes the wire format by hand and
hands back *pieces* whose concatenation is the record: large bytes values (an encoded image)
are pieces of their own that reference the caller's object, so together with
:meth:`recordbeam.tfrecord.framing.RecordWriter.write_chunks` the image is never copied on its way to
the file (only read, for the CRC).

The output is byte for byte what ``make_example(features, kinds).SerializeToString(
deterministic=True)`` returns: the same value rules, the same kinds, the same errors (see
:mod:`recordbeam.tfrecord.example`). Common values (bytes, str, int, float, bool, lists of them,
numpy numeric / bytes / str arrays and numpy scalars) are encoded here; anything else (object
arrays, ``range``, array subclasses, ...) and every value the fast path refuses is handed to
:func:`recordbeam.tfrecord.example.make_example` for that one feature, which either raises its usual
error or returns the feature to serialize. So the rules live in one place.

Wire layout (field numbers from TensorFlow's ``example.proto`` / ``feature.proto``)::

    Example   { Features features = 1 }
    Features  { map<string, Feature> feature = 1 }   # entries: key = 1, value = 2
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                             Int64List int64_list = 3 } }
    BytesList { repeated bytes value = 1 }
    FloatList { repeated float value = 1 [packed] }   # little-endian float32
    Int64List { repeated int64 value = 1 [packed] }   # varints; negatives take 10 bytes

Protobuf's deterministic mode sorts map entries by key, comparing the UTF-8 bytes of string
keys (the same as Python's ``str`` order: UTF-8 keeps code point order). Runtimes differ when
one key is a prefix of another: C++ (TensorFlow) and pure-Python protobuf put ``"a"`` before
``"ab"``, while the upb runtime (Python's default since protobuf 4.21; 6.33 here) puts
``"ab"`` first, a quirk of its sorter (protocolbuffers/protobuf PR #26621 proposes changing
it). Both orders parse to the same Example. To stay byte-identical to
:func:`recordbeam.tfrecord.example.encode_example`, this module asks the installed runtime once, at
import, which order it uses (:data:`MAP_KEY_ORDER`). A map entry always carries both its key
(even ``""``) and its value (even an empty ``Feature``), and an Example without features
serializes to ``b""``.
"""

from __future__ import annotations

import logging
import struct
import sys
from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np

from recordbeam.tfrecord.example import Kind, feature_kind, make_example

__all__ = [
    "LARGE_VALUE_BYTES",
    "MAP_KEY_ORDER",
    "encode_example_chunks",
    "encode_example_fast",
    "encode_example_observed",
    "observed_spec",
]

_log = logging.getLogger(__name__)

# Bytes values at least this long become pieces of their own instead of being copied into
# the surrounding small pieces; below it a copy is cheaper than one more piece to write.
LARGE_VALUE_BYTES = 4096

# The dtype names FeatureSpec reports (TensorFlow's), by kind.
_DTYPE = {"bytes": "string", "float": "float32", "int64": "int64"}
# Tag bytes: field number << 3 | wire type 2 (length-delimited).
_KIND_TAG = {"bytes": b"\x0a", "float": b"\x12", "int64": b"\x1a"}
_VALUE_TAG = b"\x0a"  # field 1 of Example, Features, the *List messages; key of a map entry
_ENTRY_VALUE_TAG = b"\x12"  # field 2 of a map entry

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_U64 = 2**64 - 1
_F32 = struct.Struct("<f")
_F32_INF = (b"\x00\x00\x80\x7f", b"\x00\x00\x80\xff")
_ONE_BYTE = [bytes((n,)) for n in range(128)]
_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)
_GROUPS = np.arange(10)
# Lists of ints longer than this are varint-encoded with numpy instead of a Python loop.
_NUMPY_VARINT_MIN = 32
_VARINT_BLOCK = 1 << 18
_F32_DTYPE = np.dtype("<f4")
_I64_DTYPE = np.dtype("<i8")
_NATIVE_LITTLE_ENDIAN = sys.byteorder == "little" and array("f").itemsize == 4

# What the fast path may fail with; the feature then goes through make_example, which
# raises the error users get from the protobuf codec (or encodes what we did not handle).
_FAST_PATH_ERRORS = (TypeError, ValueError, OverflowError)

# One feature: (pieces of the serialized Feature, their total length, kind or None, count).
_Encoded = tuple[list[Any], int, Kind | None, int]


def _varint(n: int) -> bytes:
    """Base-128 varint of a non-negative int below 2**64."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varints(values: np.ndarray) -> bytes:
    """Packed varints of a 1-D int64 array; negatives as 10-byte two's complement."""
    if values.size > _VARINT_BLOCK:  # bounds the 80 bytes per value of scratch memory
        return b"".join(
            _varints(values[start : start + _VARINT_BLOCK])
            for start in range(0, values.size, _VARINT_BLOCK)
        )
    unsigned = values.view(np.uint64)[:, None] >> _SHIFTS  # value >> 0, 7, ..., 63
    # (value >> 7k) is non-zero exactly for the groups a varint writes (at least one).
    count = np.maximum(np.count_nonzero(unsigned, axis=1), 1)[:, None]
    groups = (unsigned & np.uint64(0x7F)).astype(np.uint8)
    groups |= (_GROUPS < count - 1).astype(np.uint8) << 7  # continuation bits
    return groups[_GROUPS < count].tobytes()


def _int64_payload(values: list[int]) -> bytes:
    """Packed varints of Python ints already known to be within int64."""
    if len(values) > _NUMPY_VARINT_MIN:
        return _varints(np.array(values, dtype=np.int64))
    return b"".join([_varint(value & _U64) for value in values])


def _float32(value: float) -> bytes:
    try:
        return _F32.pack(value)
    except OverflowError:  # finite but beyond float32: protobuf's C cast gives inf
        return _F32_INF[value < 0]


def _packed(kind: Kind, payload: bytes, count: int) -> _Encoded:
    """A Feature holding one packed FloatList / Int64List of ``count`` values."""
    if not count:
        return [_KIND_TAG[kind] + b"\x00"], 2, kind, 0
    body = _VALUE_TAG + _varint(len(payload))
    head = _KIND_TAG[kind] + _varint(len(body) + len(payload))
    if len(payload) >= LARGE_VALUE_BYTES:
        pieces = [head + body, payload]
    else:
        pieces = [head + body + payload]
    return pieces, len(head) + len(body) + len(payload), kind, count


def _one_bytes_feature(value: Any, length: int) -> _Encoded:
    """A Feature holding a BytesList of one value (bytes or a byte-format memoryview)."""
    inner = _VALUE_TAG + (_ONE_BYTE[length] if length < 0x80 else _varint(length))
    size = len(inner) + length
    head = _KIND_TAG["bytes"] + (_ONE_BYTE[size] if size < 0x80 else _varint(size))
    if length >= LARGE_VALUE_BYTES:
        return [head + inner, value], len(head) + size, "bytes", 1  # the caller's object
    return [head + inner + value], len(head) + size, "bytes", 1


def _bytes_feature(items: list[Any]) -> _Encoded:
    """A Feature holding a BytesList; ``items`` are bytes or byte-format memoryviews."""
    parts: list[Any] = []
    size = 0
    large = False
    for item in items:
        length = len(item)
        head = _VALUE_TAG + (_ONE_BYTE[length] if length < 0x80 else _varint(length))
        parts.append(head)
        parts.append(item)
        size += len(head) + length
        if length >= LARGE_VALUE_BYTES:
            large = True
    head = _KIND_TAG["bytes"] + (_ONE_BYTE[size] if size < 0x80 else _varint(size))
    if not large:
        return [head + b"".join(parts)], len(head) + size, "bytes", len(items)
    # Large values stay pieces of their own (the caller's objects); the rest is joined.
    pieces: list[Any] = []
    run = _add_pieces(pieces, [head], parts)
    if run:
        pieces.append(b"".join(run))
    return pieces, len(head) + size, "bytes", len(items)


def _add_pieces(out: list[Any], run: list[Any], pieces: Any) -> list[Any]:
    """Append ``pieces`` to ``out`` behind the open ``run`` of small pieces: large pieces go
    in as they are (never copied), small ones are joined. Returns the new open run."""
    for piece in pieces:
        if len(piece) >= LARGE_VALUE_BYTES:
            out.append(b"".join(run))
            out.append(piece)
            run = []
        else:
            run.append(piece)
    return run


def _int64_feature(values: list[int]) -> _Encoded | None:
    low, high = min(values), max(values)
    if low < _INT64_MIN or high > _INT64_MAX:
        return None
    if low >= 0 and high < 0x80:  # one byte each, the common case (labels, flags, sizes)
        return _packed("int64", bytes(values), len(values))
    return _packed("int64", _int64_payload(values), len(values))


def _float_feature(values: list[Any]) -> _Encoded:
    if len(values) == 1:
        return _packed("float", _float32(float(values[0])), 1)
    if _NATIVE_LITTLE_ENDIAN:
        # array("f") converts each number to a double, then casts it to float, as protobuf
        # does (and as numpy's astype below; beyond float32's range both give inf), at a
        # fraction of numpy's per-call cost for the few values of a typical list.
        return _packed("float", array("f", values).tobytes(), len(values))
    # Through float64 first, as protobuf does (Python number -> double -> float).
    doubles = np.array(values, dtype=np.float64)
    return _packed("float", doubles.astype(_F32_DTYPE).tobytes(), len(values))


def _encode_array(array: np.ndarray, kind: Kind | None) -> _Encoded | None:
    dtype = array.dtype
    code = dtype.kind
    if not array.size:
        # Empty arrays of storable dtypes give an empty list of the given kind, or no kind.
        if code not in "iubfSUO":
            return None
        return ([_KIND_TAG[kind] + b"\x00"], 2, kind, 0) if kind else ([], 0, None, 0)
    if code == "f":
        if kind not in (None, "float") or dtype.itemsize > 8:
            return None
        payload = np.asarray(array, dtype=_F32_DTYPE).tobytes()
        return _packed("float", payload, array.size)
    if code in "iub":
        if kind == "float":
            # int64 -> double -> float, as protobuf rounds a Python int; never int -> float.
            payload = array.astype(np.float64).astype(_F32_DTYPE).tobytes()
            return _packed("float", payload, array.size)
        if kind not in (None, "int64"):
            return None
        if array.size <= _NUMPY_VARINT_MIN:  # numpy's per-call cost outweighs its speed here
            return _int64_feature(array.ravel().tolist())
        low, high = array.min(), array.max()
        if code == "u" and dtype.itemsize == 8 and high > _INT64_MAX:
            return None
        if low >= 0 and high < 0x80:  # one byte each, the common case (labels, flags, sizes)
            return _packed("int64", array.astype(np.uint8).tobytes(), array.size)
        flat = np.ascontiguousarray(array, dtype=_I64_DTYPE).ravel()
        return _packed("int64", _varints(flat), array.size)
    if code == "S" and kind in (None, "bytes"):
        return _bytes_feature(array.ravel().tolist())
    if code == "U" and kind in (None, "bytes"):
        return _bytes_feature([text.encode("utf-8") for text in array.ravel().tolist()])
    return None


def _byte_view(value: bytearray | memoryview) -> memoryview | None:
    """A flat byte view of a contiguous buffer (no copy), or None if it is not contiguous."""
    view = memoryview(value)
    if not view.c_contiguous:
        return None
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def _encode_value(value: Any, kind: Kind | None) -> _Encoded | None:
    """The serialized Feature for ``value``, or None to leave it to make_example."""
    value_type = type(value)
    if value_type is bytes:
        return _one_bytes_feature(value, len(value)) if kind in (None, "bytes") else None
    if value_type is str:
        if kind not in (None, "bytes"):
            return None
        encoded = value.encode("utf-8")
        return _one_bytes_feature(encoded, len(encoded))
    if value_type is float:
        return _packed("float", _float32(value), 1) if kind in (None, "float") else None
    if value_type is int or value_type is bool:
        if kind == "float":
            return _packed("float", _float32(float(value)), 1)
        if kind in (None, "int64") and _INT64_MIN <= value <= _INT64_MAX:
            return _packed("int64", _varint(int(value) & _U64), 1)
        return None
    if value_type is list or value_type is tuple:
        return _encode_list(value, kind)
    if value_type is np.ndarray:
        return _encode_array(value, kind)
    if value_type is bytearray or value_type is memoryview:
        if kind not in (None, "bytes"):
            return None
        view = _byte_view(value)
        return None if view is None else _one_bytes_feature(view, len(view))
    if isinstance(value, (np.integer, np.bool_)):
        return _encode_value(int(value), kind)
    if isinstance(value, np.floating) and value.dtype.itemsize <= 8:
        return _encode_value(float(value), kind)
    return None


def _encode_list(values: list[Any] | tuple[Any, ...], kind: Kind | None) -> _Encoded | None:
    if not values:
        return ([_KIND_TAG[kind] + b"\x00"], 2, kind, 0) if kind else ([], 0, None, 0)
    first = type(values[0])
    if first is bytes or first is str:
        if kind not in (None, "bytes"):
            return None
        items = []
        for item in values:
            item_type = type(item)
            if item_type is bytes:
                items.append(item)
            elif item_type is str:
                items.append(item.encode("utf-8"))
            else:
                return None
        return _bytes_feature(items)
    any_float = False
    for item in values:
        item_type = type(item)
        if item_type is float:
            any_float = True
        elif item_type is not int:
            return None  # bools, numpy scalars, nested lists, None...: the general path
    if kind == "float" or (kind is None and any_float):
        return _float_feature(list(values))
    if kind == "int64" and not any_float:
        return _int64_feature(list(values))
    if kind is None:
        return _int64_feature(list(values))
    return None


def _general_path(name: Any, value: Any, kinds: Mapping[str, Any] | None) -> _Encoded:
    """One feature through make_example: raises its error, or gives the Feature to store."""
    feature = make_example({name: value}, kinds).features.feature[name]
    kind = feature_kind(feature)
    serialized = feature.SerializeToString()
    count = len(getattr(feature, f"{kind}_list").value) if kind else 0
    return [serialized], len(serialized), kind, count


def encode_example_observed(
    features: Mapping[str, Any], kinds: Mapping[str, Kind] | None = None
) -> tuple[list[bytes | memoryview], dict[str, tuple[str | None, int]]]:
    """Serializes an Example as pieces and reports each feature's dtype and number of values.

    Args:
        features: feature names to values, as for :func:`recordbeam.tfrecord.example.make_example`.
        kinds: optional ``{name: kind}`` forcing the kind of some features (names not in
            ``features`` are ignored).

    Returns:
        ``(pieces, observed)``: ``b"".join(pieces)`` is the serialized Example (see
        :func:`encode_example_chunks`); ``observed`` maps each feature name to
        ``(dtype, length)`` with dtype ``"string"``, ``"float32"``, ``"int64"`` or None (an
        empty value without a kind), ready for ``FeatureSpec.observe_lengths``.

    Raises:
        FeatureError: a value does not fit its kind (the same error make_example raises).
        ValueError: ``kinds`` names a kind that does not exist.
    """
    entries = []
    observed: dict[str, tuple[str | None, int]] = {}
    # Beyond float32's range a value becomes inf, as in protobuf; numpy would warn each time.
    with np.errstate(over="ignore"):
        for name, value in features.items():
            encoded = None
            try:
                kind = kinds.get(name) if kinds else None
                if type(name) is str and (kind is None or kind in _KIND_TAG):
                    encoded = _encode_value(value, kind)
            except _FAST_PATH_ERRORS:
                encoded = None
            if encoded is None:
                encoded = _general_path(name, value, kinds)  # raises for a non-str name
            pieces, size, kind, count = encoded
            sort_key, key_head = _KEY_HEADS.get(name) or _new_key_head(name)
            entries.append((sort_key, key_head, pieces, size))
            observed[name] = (_DTYPE[kind] if kind else None, count)
    if not entries:
        return [], observed
    entries.sort(key=_first, reverse=_SORT_REVERSED)

    # Sizes first (every length prefix precedes what it measures), then the pieces.
    heads = []
    features_size = 0
    for _sort_key, key_head, _pieces, size in entries:
        size_head = _ONE_BYTE[size] if size < 0x80 else _varint(size)
        entry_size = len(key_head) + len(size_head) + size
        entry_head = b"".join(
            (
                _VALUE_TAG,
                _ONE_BYTE[entry_size] if entry_size < 0x80 else _varint(entry_size),
                key_head,
                size_head,
            )
        )
        heads.append(entry_head)
        features_size += len(entry_head) + size

    # Runs of small pieces are joined; large ones stay as they are (never copied).
    out: list[bytes | memoryview] = []
    run = [_VALUE_TAG, _varint(features_size)]
    for entry_head, (_sort_key, _head, pieces, _size) in zip(heads, entries, strict=True):
        run.append(entry_head)
        if len(pieces) == 1 and len(pieces[0]) < LARGE_VALUE_BYTES:
            run.append(pieces[0])
            continue
        run = _add_pieces(out, run, pieces)
    if run:
        out.append(b"".join(run))
    return out, observed


def _first(entry: tuple[bytes, Any, Any, Any]) -> bytes:
    return entry[0]


def _utf8(key: bytes) -> bytes:
    return key


def _utf8_longer_prefix_first(key: bytes) -> bytes:
    # UTF-8 never contains 0xFF, so the sentinel sorts a key after every key it prefixes.
    return key + b"\xff"


# Map key orders seen in protobuf runtimes: name -> (sort key of an entry, reversed).
_KEY_ORDERS = {
    "utf8": (_utf8, False),
    "utf8, longer prefix first": (_utf8_longer_prefix_first, False),
    "utf8 descending": (_utf8, True),
    "utf8 descending, shorter prefix first": (_utf8_longer_prefix_first, True),
}


def _runtime_key_order() -> str:
    """Which of _KEY_ORDERS the installed protobuf runtime uses for deterministic output."""
    keys = ["", "0", "a", "ab", "b", "\u00e9", "\U00010000"]
    data = make_example(dict.fromkeys(keys, [])).SerializeToString(deterministic=True)
    # All lengths here are below 128, so each varint is one byte: walk the entries.
    written, position = [], 2
    while position < len(data):
        entry_length, key_length = data[position + 1], data[position + 3]
        written.append(data[position + 4 : position + 4 + key_length])
        position += 2 + entry_length
    encoded = [key.encode("utf-8") for key in keys]
    for name, (sort_key, reverse) in _KEY_ORDERS.items():
        if sorted(encoded, key=sort_key, reverse=reverse) == written:
            return name
    _log.warning(
        "the protobuf runtime orders map keys in a way recordbeam.tfrecord.wire does not know "
        "(%r); wire output will differ from encode_example in key order only",
        written,
    )
    return "utf8"


#: The map key order of deterministic serialization in the installed protobuf runtime, which
#: the wire encoder follows: "utf8" (C++, pure Python) or "utf8, longer prefix first" (upb).
MAP_KEY_ORDER = _runtime_key_order()
_SORT_KEY, _SORT_REVERSED = _KEY_ORDERS[MAP_KEY_ORDER]

# Feature name -> (sort key, start of its map entry up to the value's length). Names repeat in
# every record of a dataset, so this saves encoding them again; cleared when it grows large.
_KEY_HEADS: dict[str, tuple[bytes, bytes]] = {}
_KEY_HEADS_MAX = 4096


def _new_key_head(name: str) -> tuple[bytes, bytes]:
    key = name.encode("utf-8")
    cached = (_SORT_KEY(key), _VALUE_TAG + _varint(len(key)) + key + _ENTRY_VALUE_TAG)
    if len(_KEY_HEADS) >= _KEY_HEADS_MAX:
        _KEY_HEADS.clear()
    _KEY_HEADS[name] = cached
    return cached


def encode_example_chunks(
    features: Mapping[str, Any], kinds: Mapping[str, Kind] | None = None
) -> list[bytes | memoryview]:
    """Serializes an Example as a list of pieces, without copying large bytes values.

    ``b"".join(pieces)`` equals ``make_example(features, kinds).SerializeToString(
    deterministic=True)``. Bytes values of at least :data:`LARGE_VALUE_BYTES` are pieces of
    their own: the caller's ``bytes`` object itself, or a byte-format memoryview of a
    ``bytearray`` / contiguous ``memoryview``; so do not modify those until the pieces are
    written. Pass the pieces to :meth:`recordbeam.tfrecord.framing.RecordWriter.write_chunks`.

    Arguments and errors as :func:`encode_example_observed`.
    """
    return encode_example_observed(features, kinds)[0]


def encode_example_fast(
    features: Mapping[str, Any], kinds: Mapping[str, Kind] | None = None
) -> bytes:
    """The serialized Example as one bytes object (``b"".join`` of the pieces)."""
    pieces = encode_example_observed(features, kinds)[0]
    if len(pieces) == 1 and type(pieces[0]) is bytes:
        return pieces[0]
    return b"".join(pieces)


def observed_spec(
    features: Mapping[str, Any], kinds: Mapping[str, Kind] | None = None
) -> dict[str, tuple[str | None, int]]:
    """``{name: (dtype, length)}`` of the Example these features make, as FeatureSpec sees it.

    dtype is ``"string"``, ``"float32"``, ``"int64"`` or None (an empty value without a kind).
    To encode and observe at once use :func:`encode_example_observed`.
    """
    return encode_example_observed(features, kinds)[1]
