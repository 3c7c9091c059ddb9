"""The .proto files and the descriptors built in Python must describe the same messages."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool

from recordbeam.tfrecord import protos

PROTO_DIR = Path(protos.__file__).parent
PROTO_FILES = {
    protos.FEATURE_FILE: PROTO_DIR / "feature.proto",
    protos.EXAMPLE_FILE: PROTO_DIR / "example.proto",
    protos.TENSOR_FILE: PROTO_DIR / "tensor.proto",
}

_BLOCK_OPEN = re.compile(r"^(message|enum|oneof)\s+(\w+)\s*\{$")
_FIELD = re.compile(
    r"^(repeated\s+)?(map<\s*\w+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*(\[[^\]]*\])?\s*;$"
)
_ENUM_VALUE = re.compile(r"^(\w+)\s*=\s*(\d+)\s*;$")

_TYPE_NAMES = {
    descriptor.FieldDescriptor.TYPE_BYTES: "bytes",
    descriptor.FieldDescriptor.TYPE_STRING: "string",
    descriptor.FieldDescriptor.TYPE_FLOAT: "float",
    descriptor.FieldDescriptor.TYPE_DOUBLE: "double",
    descriptor.FieldDescriptor.TYPE_INT32: "int32",
    descriptor.FieldDescriptor.TYPE_INT64: "int64",
    descriptor.FieldDescriptor.TYPE_UINT32: "uint32",
    descriptor.FieldDescriptor.TYPE_UINT64: "uint64",
    descriptor.FieldDescriptor.TYPE_BOOL: "bool",
}


def parse_proto_text(text: str) -> tuple[dict, dict, str]:
    """Reads messages, enums and the package out of .proto text (the subset our files use).

    Returns ``({message path: {field: (number, repeated, type, packed, oneof)}},
    {enum name: {value name: number}}, package)``.
    """
    messages: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    package = ""
    stack: list[tuple[str, str]] = []
    for raw_line in text.splitlines():
        line = raw_line.split("//", 1)[0].strip()
        if not line or line.startswith(("syntax", "import")):
            continue
        if line.startswith("package"):
            package = line.removeprefix("package").strip(" ;")
            continue
        if line == "}":
            stack.pop()
            continue
        opened = _BLOCK_OPEN.match(line)
        if opened:
            stack.append((opened.group(1), opened.group(2)))
            if opened.group(1) == "message":
                messages[".".join(n for k, n in stack if k == "message")] = {}
            elif opened.group(1) == "enum":
                enums[opened.group(2)] = {}
            continue
        kind, name = stack[-1]
        if kind == "enum":
            value = _ENUM_VALUE.match(line)
            assert value, f"cannot read enum line {raw_line!r}"
            enums[name][value.group(1)] = int(value.group(2))
            continue
        field = _FIELD.match(line)
        assert field, f"cannot read field line {raw_line!r}"
        repeated, type_name, field_name, number, options = field.groups()
        message_path = ".".join(n for k, n in stack if k == "message")
        oneof = name if kind == "oneof" else None
        packed = bool(options and re.search(r"packed\s*=\s*true", options))
        is_map = type_name.startswith("map<")
        messages[message_path][field_name] = (
            int(number),
            bool(repeated) or is_map,
            re.sub(r"\s+", "", type_name) if is_map else type_name.split(".")[-1],
            packed,
            oneof,
        )
    assert not stack, "unbalanced braces"
    return messages, enums, package


def _type_of(field: descriptor.FieldDescriptor) -> str:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = (
            field.message_type.fields_by_name["key"],
            field.message_type.fields_by_name["value"],
        )
        return f"map<{_type_of(key)},{_type_of(value)}>"
    if field.message_type is not None:
        return field.message_type.name
    if field.enum_type is not None:
        return field.enum_type.name
    return _TYPE_NAMES[field.type]


def _repeated(field: descriptor.FieldDescriptor) -> bool:
    # protobuf 7 drops FieldDescriptor.label; is_repeated came in 5.x beside it.
    if hasattr(field, "is_repeated"):
        return field.is_repeated
    return field.label == descriptor.FieldDescriptor.LABEL_REPEATED


def described_messages(file: descriptor.FileDescriptor) -> tuple[dict, dict]:
    """The same shape as parse_proto_text's result, read from the built descriptors."""
    messages: dict[str, dict] = {}

    def visit(message: descriptor.Descriptor, path: str) -> None:
        messages[path] = {
            field.name: (
                field.number,
                _repeated(field),
                _type_of(field),
                field.GetOptions().packed,
                field.containing_oneof.name if field.containing_oneof else None,
            )
            for field in message.fields
        }
        for nested in message.nested_types:
            if not nested.GetOptions().map_entry:
                visit(nested, f"{path}.{nested.name}")

    for message in file.message_types_by_name.values():
        visit(message, message.name)
    enums = {
        enum.name: {value.name: value.number for value in enum.values}
        for enum in file.enum_types_by_name.values()
    }
    return messages, enums


@pytest.mark.parametrize("file_name", sorted(PROTO_FILES))
def test_proto_files_match_python_descriptors(file_name: str) -> None:
    text_messages, text_enums, package = parse_proto_text(PROTO_FILES[file_name].read_text())
    built = protos.POOL.FindFileByName(file_name)
    built_messages, built_enums = described_messages(built)
    assert package == built.package
    assert text_messages == built_messages
    assert text_enums == built_enums
    assert text_messages, "the parser found no messages; the test would prove nothing"


def test_parser_notices_a_changed_field_number() -> None:
    text = PROTO_FILES[protos.FEATURE_FILE].read_text()
    drifted = text.replace("Int64List int64_list = 3;", "Int64List int64_list = 4;")
    assert drifted != text
    text_messages, _, _ = parse_proto_text(drifted)
    built_messages, _ = described_messages(protos.POOL.FindFileByName(protos.FEATURE_FILE))
    assert text_messages != built_messages


def test_messages_live_in_a_private_pool() -> None:
    assert protos.Example.DESCRIPTOR.file.pool is protos.POOL
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("recordbeam.tfexample.Example")


def test_importing_protos_twice_in_fresh_processes_works() -> None:
    code = "import recordbeam.tfrecord.protos, recordbeam.tfrecord.example, recordbeam.tfrecord.tensor; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpc_tools (grpcio-tools) is not installed, so protoc cannot compile the .proto files",
)
def test_protoc_compiles_the_proto_files_to_our_descriptors(tmp_path: Path) -> None:
    root = PROTO_DIR.parent.parent.parent  # the src directory: imports are "recordbeam/tfrecord/protos/..."
    out = tmp_path / "descriptors.pb"
    # A child process: grpc_tools carries its own protobuf runtime, which can crash the
    # interpreter when loaded beside Beam's and TensorFlow's in the test process.
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"--descriptor_set_out={out}"]
        + [str(path.relative_to(root)) for path in PROTO_FILES.values()],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    ours = {file.name: file for file in protos.file_descriptor_protos()}
    assert sorted(file.name for file in compiled.file) == sorted(ours)
    for file in compiled.file:
        expected = ours[file.name]
        assert file.package == expected.package
        assert file.dependency == expected.dependency
        assert file.enum_type == expected.enum_type
        assert _without_json_names(file.message_type) == _without_json_names(expected.message_type)


def _without_json_names(messages) -> list[descriptor_pb2.DescriptorProto]:
    """Copies with json_name cleared: whether protoc fills it in varies between versions."""
    copies = []
    for message in messages:
        copy = descriptor_pb2.DescriptorProto()
        copy.CopyFrom(message)
        for field in copy.field:
            field.ClearField("json_name")
        nested = _without_json_names(copy.nested_type)
        del copy.nested_type[:]
        copy.nested_type.extend(nested)
        copies.append(copy)
    return copies
