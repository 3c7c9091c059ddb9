"""Protocol buffer messages of tf.train.Example and TensorProto, without TensorFlow or protoc.

The ``.proto`` files beside this module document the messages; this module builds the very
same descriptors in Python (``descriptor_pb2``) and asks protobuf for message classes.
Nothing is generated ahead of time, so any protobuf runtime from 4.25 to 6.x works.

The descriptors go into a private :class:`~google.protobuf.descriptor_pool.DescriptorPool`,
never the default one. TensorFlow registers its own ``tensorflow.Example`` in the default
pool; keeping ours apart (and in our own package, ``recordbeam.tfexample``) means
``import recordbeam`` and ``import tensorflow`` can happen in one process in either order.
The messages are wire-compatible with TensorFlow's, so bytes move freely between the two.

``tests/unit/test_protos.py`` checks that the ``.proto`` files and the tables below agree.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "POOL",
    "BytesList",
    "DataType",
    "Example",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "Features",
    "FloatList",
    "Int64List",
    "SequenceExample",
    "TensorProto",
    "TensorShapeProto",
]

EXAMPLE_PACKAGE = "recordbeam.tfexample"
TENSOR_PACKAGE = "recordbeam.tftensor"

_F = descriptor_pb2.FieldDescriptorProto
_SCALAR_TYPES = {
    "bytes": _F.TYPE_BYTES,
    "string": _F.TYPE_STRING,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "bool": _F.TYPE_BOOL,
}

# (name, number, type, repeated, packed). A type that is not a scalar names a message or
# enum by its full name; "enum:" marks an enum.
_FieldSpec = tuple[str, int, str, bool, bool]

# Proto3 packs repeated scalars anyway; TensorFlow's files say [packed = true] explicitly
# and so do ours, so the descriptors carry the option too.
_FEATURE_MESSAGES: dict[str, list[_FieldSpec]] = {
    "BytesList": [("value", 1, "bytes", True, False)],
    "FloatList": [("value", 1, "float", True, True)],
    "Int64List": [("value", 1, "int64", True, True)],
    "FeatureList": [("feature", 1, f"{EXAMPLE_PACKAGE}.Feature", True, False)],
}
_FEATURE_ONEOF = (
    "kind",
    [
        ("bytes_list", 1, f"{EXAMPLE_PACKAGE}.BytesList"),
        ("float_list", 2, f"{EXAMPLE_PACKAGE}.FloatList"),
        ("int64_list", 3, f"{EXAMPLE_PACKAGE}.Int64List"),
    ],
)
# message name -> (map field name, number, value message)
_FEATURE_MAPS = {
    "Features": ("feature", 1, f"{EXAMPLE_PACKAGE}.Feature"),
    "FeatureLists": ("feature_list", 1, f"{EXAMPLE_PACKAGE}.FeatureList"),
}
_EXAMPLE_MESSAGES: dict[str, list[_FieldSpec]] = {
    "Example": [("features", 1, f"{EXAMPLE_PACKAGE}.Features", False, False)],
    "SequenceExample": [
        ("context", 1, f"{EXAMPLE_PACKAGE}.Features", False, False),
        ("feature_lists", 2, f"{EXAMPLE_PACKAGE}.FeatureLists", False, False),
    ],
}

DATA_TYPES: dict[str, int] = {
    name: number
    for number, name in enumerate(
        [
            "DT_INVALID",
            "DT_FLOAT",
            "DT_DOUBLE",
            "DT_INT32",
            "DT_UINT8",
            "DT_INT16",
            "DT_INT8",
            "DT_STRING",
            "DT_COMPLEX64",
            "DT_INT64",
            "DT_BOOL",
            "DT_QINT8",
            "DT_QUINT8",
            "DT_QINT32",
            "DT_BFLOAT16",
            "DT_QINT16",
            "DT_QUINT16",
            "DT_UINT16",
            "DT_COMPLEX128",
            "DT_HALF",
            "DT_RESOURCE",
            "DT_VARIANT",
            "DT_UINT32",
            "DT_UINT64",
            "DT_FLOAT8_E5M2",
            "DT_FLOAT8_E4M3FN",
            "DT_FLOAT8_E4M3FNUZ",
            "DT_FLOAT8_E4M3B11FNUZ",
            "DT_FLOAT8_E5M2FNUZ",
            "DT_INT4",
            "DT_UINT4",
            "DT_INT2",
            "DT_UINT2",
            "DT_FLOAT4_E2M1FN",
        ]
    )
}
_TENSOR_MESSAGES: dict[str, list[_FieldSpec]] = {
    "TensorShapeProto.Dim": [
        ("size", 1, "int64", False, False),
        ("name", 2, "string", False, False),
    ],
    "TensorShapeProto": [
        ("dim", 2, f"{TENSOR_PACKAGE}.TensorShapeProto.Dim", True, False),
        ("unknown_rank", 3, "bool", False, False),
    ],
    "TensorProto": [
        ("dtype", 1, f"enum:{TENSOR_PACKAGE}.DataType", False, False),
        ("tensor_shape", 2, f"{TENSOR_PACKAGE}.TensorShapeProto", False, False),
        ("version_number", 3, "int32", False, False),
        ("tensor_content", 4, "bytes", False, False),
        ("half_val", 13, "int32", True, True),
        ("float_val", 5, "float", True, True),
        ("double_val", 6, "double", True, True),
        ("int_val", 7, "int32", True, True),
        ("string_val", 8, "bytes", True, False),
        ("scomplex_val", 9, "float", True, True),
        ("int64_val", 10, "int64", True, True),
        ("bool_val", 11, "bool", True, True),
        ("dcomplex_val", 12, "double", True, True),
        ("uint32_val", 16, "uint32", True, True),
        ("uint64_val", 17, "uint64", True, True),
    ],
}

FEATURE_FILE = "recordbeam/tfrecord/protos/feature.proto"
EXAMPLE_FILE = "recordbeam/tfrecord/protos/example.proto"
TENSOR_FILE = "recordbeam/tfrecord/protos/tensor.proto"


def _add_field(message: descriptor_pb2.DescriptorProto, spec: _FieldSpec) -> _F:
    name, number, type_name, repeated, packed = spec
    field = message.field.add(name=name, number=number, json_name=_json_name(name))
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name in _SCALAR_TYPES:
        field.type = _SCALAR_TYPES[type_name]
    elif type_name.startswith("enum:"):
        field.type = _F.TYPE_ENUM
        field.type_name = "." + type_name.removeprefix("enum:")
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = "." + type_name
    if packed:
        field.options.packed = True
    return field


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _add_map(
    message: descriptor_pb2.DescriptorProto, package: str, spec: tuple[str, int, str]
) -> None:
    """Adds ``map<string, value> name = number`` the way protoc spells a map: an entry type."""
    name, number, value_type = spec
    entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
    entry = message.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _add_field(entry, ("key", 1, "string", False, False))
    _add_field(entry, ("value", 2, value_type, False, False))
    _add_field(message, (name, number, f"{package}.{message.name}.{entry_name}", True, False))


def _feature_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name=FEATURE_FILE, package=EXAMPLE_PACKAGE, syntax="proto3"
    )
    for name in ("BytesList", "FloatList", "Int64List"):
        message = file.message_type.add(name=name)
        for spec in _FEATURE_MESSAGES[name]:
            _add_field(message, spec)
    feature = file.message_type.add(name="Feature")
    oneof_name, members = _FEATURE_ONEOF
    feature.oneof_decl.add(name=oneof_name)
    for name, number, type_name in members:
        _add_field(feature, (name, number, type_name, False, False)).oneof_index = 0
    _add_map(file.message_type.add(name="Features"), EXAMPLE_PACKAGE, _FEATURE_MAPS["Features"])
    feature_list = file.message_type.add(name="FeatureList")
    for spec in _FEATURE_MESSAGES["FeatureList"]:
        _add_field(feature_list, spec)
    _add_map(
        file.message_type.add(name="FeatureLists"), EXAMPLE_PACKAGE, _FEATURE_MAPS["FeatureLists"]
    )
    return file


def _example_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name=EXAMPLE_FILE, package=EXAMPLE_PACKAGE, syntax="proto3", dependency=[FEATURE_FILE]
    )
    for name, fields in _EXAMPLE_MESSAGES.items():
        message = file.message_type.add(name=name)
        for spec in fields:
            _add_field(message, spec)
    return file


def _tensor_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name=TENSOR_FILE, package=TENSOR_PACKAGE, syntax="proto3"
    )
    enum = file.enum_type.add(name="DataType")
    for name, number in DATA_TYPES.items():
        enum.value.add(name=name, number=number)
    shape = file.message_type.add(name="TensorShapeProto")
    dim = shape.nested_type.add(name="Dim")
    for spec in _TENSOR_MESSAGES["TensorShapeProto.Dim"]:
        _add_field(dim, spec)
    for spec in _TENSOR_MESSAGES["TensorShapeProto"]:
        _add_field(shape, spec)
    tensor = file.message_type.add(name="TensorProto")
    for spec in _TENSOR_MESSAGES["TensorProto"]:
        _add_field(tensor, spec)
    return file


def file_descriptor_protos() -> list[descriptor_pb2.FileDescriptorProto]:
    """The three files' descriptors, in dependency order (as protoc would describe them)."""
    return [_feature_file(), _example_file(), _tensor_file()]


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for file in file_descriptor_protos():
        pool.Add(file)
    return pool


POOL = _build_pool()


def _message_class(full_name: str) -> type:
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


BytesList = _message_class(f"{EXAMPLE_PACKAGE}.BytesList")
FloatList = _message_class(f"{EXAMPLE_PACKAGE}.FloatList")
Int64List = _message_class(f"{EXAMPLE_PACKAGE}.Int64List")
Feature = _message_class(f"{EXAMPLE_PACKAGE}.Feature")
Features = _message_class(f"{EXAMPLE_PACKAGE}.Features")
FeatureList = _message_class(f"{EXAMPLE_PACKAGE}.FeatureList")
FeatureLists = _message_class(f"{EXAMPLE_PACKAGE}.FeatureLists")
Example = _message_class(f"{EXAMPLE_PACKAGE}.Example")
SequenceExample = _message_class(f"{EXAMPLE_PACKAGE}.SequenceExample")
TensorShapeProto = _message_class(f"{TENSOR_PACKAGE}.TensorShapeProto")
TensorProto = _message_class(f"{TENSOR_PACKAGE}.TensorProto")
DataType = POOL.FindEnumTypeByName(f"{TENSOR_PACKAGE}.DataType")
