"""Our Example / SequenceExample / serialized tensors against TensorFlow's own readers and writers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from lanes import examples  # noqa: E402

from recordbeam.tfrecord import protos  # noqa: E402
from recordbeam.tfrecord.example import (  # noqa: E402
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
)
from recordbeam.tfrecord.tensor import parse_tensor, serialize_tensor  # noqa: E402

pytestmark = pytest.mark.interop

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TF_DTYPES = {"bytes": tf.string, "float": tf.float32, "int64": tf.int64}
NP_DTYPES = {"bytes": np.dtype(object), "float": np.dtype(np.float32), "int64": np.dtype(np.int64)}
INTEROP = settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- import order


IMPORTS = {
    "recordbeam": "import recordbeam.tfrecord.example as rb\nimport recordbeam.tfrecord.tensor as rt\n"
                  "import tensorflow as tf\n",
    "tensorflow": "import tensorflow as tf\nimport recordbeam.tfrecord.example as rb\n"
                  "import recordbeam.tfrecord.tensor as rt\n",
}
#: Each side reads what the other writes, with ``rb``, ``rt`` and ``tf`` imported.
BOTH_WAYS = textwrap.dedent(
    """
    import numpy as np
    data = rb.encode_example({"label": [1, 2], "text": "hé", "score": 0.5})
    parsed = tf.io.parse_single_example(
        data,
        {"label": tf.io.VarLenFeature(tf.int64), "text": tf.io.VarLenFeature(tf.string),
         "score": tf.io.VarLenFeature(tf.float32)},
    )
    assert parsed["label"].values.numpy().tolist() == [1, 2]
    assert parsed["text"].values.numpy().tolist() == ["hé".encode()]
    theirs = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(int64_list=tf.train.Int64List(value=[7]))}))
    assert rb.decode_example(theirs.SerializeToString())["x"].tolist() == [7]
    assert tf.train.Example.FromString(data).features.feature["label"].int64_list.value == [1, 2]
    tensor = tf.io.parse_tensor(rt.serialize_tensor(np.eye(2, dtype=np.float32)), tf.float32)
    assert tensor.numpy().tolist() == [[1, 0], [0, 1]]
    """
)


def _imported_first() -> str:
    """Which of recordbeam's Example codec and TensorFlow this process imported first."""
    order = list(sys.modules)  # in the order the modules were first imported
    return ("recordbeam" if order.index("recordbeam.tfrecord.example") < order.index("tensorflow")
            else "tensorflow")


@pytest.mark.parametrize("first", list(IMPORTS))
def test_both_import_orders_work_in_one_process(first: str) -> None:
    """Either import order leaves both working. The order this test process already has
    is checked here; the other in a fresh interpreter."""
    if _imported_first() == first:
        import recordbeam.tfrecord.tensor as rt

        exec(BOTH_WAYS, {"rb": sys.modules["recordbeam.tfrecord.example"], "rt": rt, "tf": tf})
        return
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", IMPORTS[first] + BOTH_WAYS + "print('ok')"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


# ---------------------------------------------------------------- descriptors


def _fields(message_descriptor) -> dict:
    return {
        field.name: (field.number, field.type, field.label, _type_name(field))
        for field in message_descriptor.fields
    }


def _type_name(field) -> str | None:
    if field.message_type is not None:
        entry = field.message_type
        if entry.GetOptions().map_entry:
            return "map:" + _type_name(entry.fields_by_name["value"])
        return entry.name
    return field.enum_type.name if field.enum_type is not None else None


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (protos.BytesList, tf.train.BytesList),
        (protos.FloatList, tf.train.FloatList),
        (protos.Int64List, tf.train.Int64List),
        (protos.Feature, tf.train.Feature),
        (protos.Features, tf.train.Features),
        (protos.FeatureList, tf.train.FeatureList),
        (protos.FeatureLists, tf.train.FeatureLists),
        (protos.Example, tf.train.Example),
        (protos.SequenceExample, tf.train.SequenceExample),
    ],
    ids=lambda message: message.DESCRIPTOR.name,
)
def test_example_descriptors_match_tensorflows(ours, theirs) -> None:
    assert _fields(ours.DESCRIPTOR) == _fields(theirs.DESCRIPTOR)


def test_tensor_descriptors_are_a_subset_of_tensorflows() -> None:
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

    ours, theirs = (
        _fields(protos.TensorProto.DESCRIPTOR),
        _fields(tensor_pb2.TensorProto.DESCRIPTOR),
    )
    assert ours == {name: theirs[name] for name in ours}
    assert _fields(protos.TensorShapeProto.DESCRIPTOR) == _fields(
        tensor_shape_pb2.TensorShapeProto.DESCRIPTOR
    )
    ours = {v.name: v.number for v in protos.DataType.values}
    theirs = dict(types_pb2.DataType.items())
    assert {name: ours[name] for name in ours if name in theirs} == {
        name: number for name, number in theirs.items() if name in ours
    }
    # Types an older TensorFlow lacks (2.19 beside Beam 2.60: DT_INT2, DT_UINT2,
    # DT_FLOAT4_E2M1FN) are ones it added later, numbered after all of its own (the
    # reference types, DT_*_REF from 101 on, aside).
    newer = {name: number for name, number in ours.items() if name not in theirs}
    last = max(number for name, number in theirs.items() if not name.endswith("_REF"))
    assert all(last < number < 100 for number in newer.values()), newer


# ---------------------------------------------------------------- Examples

names = st.text(alphabet="abcxyz/_0123456789", min_size=1, max_size=10)


@st.composite
def drawn_feature(draw) -> tuple[str | None, list, str | None]:
    """(kind or None for an empty value without kind, values, kind to force or None)."""
    kind = draw(st.sampled_from(["bytes", "float", "int64"]))
    element = {
        "bytes": st.binary(max_size=10) | st.text(max_size=6).map(str.encode),
        "float": st.floats(width=32, allow_nan=False),
        "int64": st.integers(INT64_MIN, INT64_MAX),
    }[kind]
    values = draw(st.lists(element, max_size=5))
    forced = draw(st.sampled_from([None, kind]))
    if not values and forced is None:
        return None, [], None
    return kind, values, forced


def tf_feature(kind: str | None, values: list):
    if kind is None:
        return tf.train.Feature()
    if kind == "bytes":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if kind == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def assert_same_values(ours: np.ndarray, theirs: np.ndarray, kind: str | None) -> None:
    assert ours.dtype == NP_DTYPES[kind or "float"]
    assert ours.tolist() == theirs.tolist()


def var_len_specs(drawn: dict, empty_dtypes: dict) -> dict:
    return {
        name: tf.io.VarLenFeature(TF_DTYPES[kind] if kind else empty_dtypes[name])
        for name, (kind, _, _) in drawn.items()
    }


@INTEROP
@given(
    drawn=st.dictionaries(names, drawn_feature(), min_size=1, max_size=6),
    data=st.data(),
)
def test_our_examples_are_what_tensorflow_builds_and_parses(drawn: dict, data) -> None:
    features = {name: values for name, (_, values, _) in drawn.items()}
    kinds = {name: forced for name, (_, _, forced) in drawn.items() if forced}
    ours = encode_example(features, kinds)

    built_by_tf = tf.train.Example(
        features=tf.train.Features(
            feature={name: tf_feature(kind, values) for name, (kind, values, _) in drawn.items()}
        )
    )
    assert tf.train.Example.FromString(ours) == built_by_tf

    # A kind-less (empty) feature must parse as whichever dtype the reader asks for.
    empty_dtypes = {
        name: data.draw(st.sampled_from(list(TF_DTYPES.values())), label=f"dtype of {name}")
        for name, (kind, _, _) in drawn.items()
        if kind is None
    }
    parsed = tf.io.parse_single_example(ours, var_len_specs(drawn, empty_dtypes))
    decoded = decode_example(ours)
    assert sorted(decoded) == sorted(drawn)
    for name, (kind, _, _) in drawn.items():
        assert_same_values(decoded[name], parsed[name].values.numpy(), kind)

    # And the other way round: TensorFlow serializes, we decode.
    from_tf = decode_example(built_by_tf.SerializeToString())
    for name, (kind, _, _) in drawn.items():
        assert_same_values(from_tf[name], decoded[name], kind)


@st.composite
def drawn_feature_list(draw) -> tuple[str | None, list[list]]:
    kind = draw(st.sampled_from(["bytes", "float", "int64"]))
    element = {
        "bytes": st.binary(max_size=6),
        "float": st.floats(width=32, allow_nan=False),
        "int64": st.integers(INT64_MIN, INT64_MAX),
    }[kind]
    steps = draw(st.lists(st.lists(element, max_size=3), max_size=4))
    return (kind if any(steps) else None), steps


def steps_of(sparse, step_count: int) -> list[list]:
    """Per-step value lists out of a [steps, max_len] SparseTensor."""
    steps: list[list] = [[] for _ in range(step_count)]
    for (step, _), value in zip(
        sparse.indices.numpy(), sparse.values.numpy().tolist(), strict=True
    ):
        steps[step].append(value)
    return steps


@INTEROP
@given(
    context=st.dictionaries(names.map(lambda n: "c/" + n), drawn_feature(), max_size=3),
    lists=st.dictionaries(names.map(lambda n: "s/" + n), drawn_feature_list(), max_size=3),
)
def test_our_sequence_examples_match_tensorflow(context: dict, lists: dict) -> None:
    kinds = {name: forced for name, (_, _, forced) in context.items() if forced}
    ours = encode_sequence_example(
        {name: values for name, (_, values, _) in context.items()},
        {name: steps for name, (_, steps) in lists.items()},
        kinds,
    )
    built_by_tf = tf.train.SequenceExample()
    for name, (kind, values, _) in context.items():
        built_by_tf.context.feature[name].CopyFrom(tf_feature(kind, values))
    for name, (kind, steps) in lists.items():
        feature_list = built_by_tf.feature_lists.feature_list[name]
        feature_list.SetInParent()
        for step in steps:
            feature_list.feature.add().CopyFrom(tf_feature(kind, step))
    assert tf.train.SequenceExample.FromString(ours) == built_by_tf

    decoded_context, decoded_lists = decode_sequence_example(ours)
    tf_context, tf_lists = decode_sequence_example(built_by_tf.SerializeToString())
    assert sorted(decoded_context) == sorted(context) == sorted(tf_context)
    assert sorted(decoded_lists) == sorted(lists) == sorted(tf_lists)
    if not context and not lists:
        return
    parsed_context, parsed_lists = tf.io.parse_single_sequence_example(
        ours,
        context_features=var_len_specs(context, dict.fromkeys(context, tf.int64)) or None,
        sequence_features={
            name: tf.io.VarLenFeature(TF_DTYPES[kind or "float"])
            for name, (kind, _) in lists.items()
        }
        or None,
    )
    for name, (kind, _, _) in context.items():
        assert_same_values(decoded_context[name], parsed_context[name].values.numpy(), kind)
        assert_same_values(tf_context[name], decoded_context[name], kind)
    for name, (kind, steps) in lists.items():
        theirs = steps_of(parsed_lists[name], len(steps))
        assert [step.tolist() for step in decoded_lists[name]] == theirs
        assert [step.tolist() for step in tf_lists[name]] == theirs
        assert all(step.dtype == NP_DTYPES[kind or "float"] for step in decoded_lists[name])


def test_a_detection_example_parses_with_fixed_len_and_var_len_specs() -> None:
    boxes = np.array([[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]], dtype=np.float32)
    ours = encode_example(
        {
            "image/encoded": b"\xff\xd8jpeg",
            "image/height": 480,
            "image/width": np.int64(640),
            "image/object/bbox/xmin": boxes[:, 0],
            "image/object/class/label": np.array([3, 7]),
            "image/object/class/text": ["cat", "dög"],
            "image/object/area": [],
        }
    )
    parsed = tf.io.parse_single_example(
        ours,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/height": tf.io.FixedLenFeature([], tf.int64),
            "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
            "image/object/class/label": tf.io.VarLenFeature(tf.int64),
            "image/object/class/text": tf.io.VarLenFeature(tf.string),
            "image/object/area": tf.io.VarLenFeature(tf.int64),
        },
    )
    assert parsed["image/encoded"].numpy() == b"\xff\xd8jpeg"
    assert parsed["image/height"].numpy() == 480 and parsed["image/width"].numpy() == 640
    assert parsed["image/object/bbox/xmin"].values.numpy().tolist() == boxes[:, 0].tolist()
    assert parsed["image/object/class/label"].values.numpy().tolist() == [3, 7]
    assert parsed["image/object/class/text"].values.numpy().tolist() == [b"cat", "dög".encode()]
    assert parsed["image/object/area"].values.numpy().tolist() == []


# ---------------------------------------------------------------- tensors

NUMERIC = [
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
SHAPES = [(), (4,), (2, 3), (0,), (3, 0, 2)]


def sample(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(sum(shape) + len(dtype))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return (rng.standard_normal(shape) * 1e3).astype(dt)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_serialized_tensors_match_tensorflow(dtype: str, shape: tuple[int, ...]) -> None:
    array = sample(dtype, shape)
    ours = serialize_tensor(array)
    theirs = tf.io.serialize_tensor(array).numpy()
    assert ours == theirs

    read_by_tf = tf.io.parse_tensor(ours, tf.as_dtype(dtype)).numpy()
    assert read_by_tf.dtype == array.dtype and read_by_tf.shape == array.shape
    np.testing.assert_array_equal(read_by_tf, array)

    read_by_us = parse_tensor(theirs, tf.as_dtype(dtype))
    assert read_by_us.dtype == array.dtype and read_by_us.shape == array.shape
    np.testing.assert_array_equal(read_by_us, array)


@pytest.mark.parametrize(
    "array",
    [np.array([b"ab", b"", b"\x00"], dtype=object), np.array([["é", "x"]]), np.array(b"s")],
    ids=["bytes", "unicode 2-D", "scalar"],
)
def test_serialized_string_tensors_match_tensorflow(array: np.ndarray) -> None:
    ours = serialize_tensor(array)
    theirs = tf.io.serialize_tensor(array).numpy()
    assert ours == theirs
    expected = [v.encode() if isinstance(v, str) else v for v in array.ravel().tolist()]
    # .numpy() of a scalar string tensor is plain bytes; asarray makes it a 0-d array.
    read_by_tf = np.asarray(tf.io.parse_tensor(ours, tf.string).numpy(), dtype=object)
    assert read_by_tf.shape == array.shape and read_by_tf.ravel().tolist() == expected
    read_by_us = parse_tensor(theirs, tf.string)
    assert read_by_us.shape == array.shape and read_by_us.ravel().tolist() == expected


@pytest.mark.parametrize(
    ("value", "kwargs"),
    [
        (1.5, {"dtype": tf.float32, "shape": [2, 3]}),
        ([1.5, -2.0], {"dtype": tf.float64, "shape": [4]}),
        (True, {"shape": [3]}),
        ([1 + 2j], {"dtype": tf.complex64, "shape": [3]}),
        ([1 - 2j, 3j], {"dtype": tf.complex128}),
        (["a", "bc"], {"shape": [3]}),
        (0.5, {"dtype": tf.float16, "shape": [2, 2]}),
        (-3, {"dtype": tf.int8, "shape": [2]}),
        (7, {"dtype": tf.uint16, "shape": [2]}),
        (2**40, {"dtype": tf.int64, "shape": [2]}),
        (2**63, {"dtype": tf.uint64, "shape": [2]}),
        (5, {"dtype": tf.uint32, "shape": [1]}),
        ([], {"dtype": tf.int32, "shape": [0, 2]}),
    ],
    ids=str,
)
def test_typed_field_protos_from_make_tensor_proto(value, kwargs) -> None:
    proto = tf.make_tensor_proto(value, **kwargs)
    expected = tf.make_ndarray(proto)
    parsed = parse_tensor(proto.SerializeToString())
    assert parsed.dtype == expected.dtype and parsed.shape == expected.shape
    assert parsed.tolist() == expected.tolist()
    by_tf = tf.io.parse_tensor(proto.SerializeToString(), tf.as_dtype(proto.dtype)).numpy()
    assert parsed.tolist() == by_tf.tolist()
