"""The coder of :class:`~recordbeam.records.ImageRecord`, what every source hands the writer.

Registered with Beam's coder registry on import, so a PCollection typed ``ImageRecord``
(each source's ``records``) crosses the writer's shuffle as its fields (text
length-prefixed, the size a varint, labels as Beam's primitive values) instead of a
pickled object. ``records.py`` itself stays free of Beam.

Text may hold lone surrogates (file names that are not UTF-8, JSON ``\\udcxx`` escapes):
it is written with ``surrogatepass`` and labels holding such text are pickled, so every
record a source yields survives the shuffle unchanged.

:class:`NamedTupleCoder` is the coder a source registers for its own records between
stages, when their fields are Beam's primitive values (text that is UTF-8: Beam writes it
strictly).
"""

from __future__ import annotations

import pickle
from typing import Any

import apache_beam as beam
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream

from recordbeam.records import ImageRecord

_LABELS = beam.coders.FastPrimitivesCoder()  # dicts, lists, numbers, text
#: First byte of the labels: how they were written.
_PRIMITIVE_LABELS, _PICKLED_LABELS = b"\0", b"\1"


class ImageRecordCoder(beam.coders.Coder):
    """An :class:`ImageRecord` as its six fields: the first four in declaration order,
    then the modification times (a count and doubles), then the labels."""

    def encode(self, value: ImageRecord) -> bytes:
        out = create_OutputStream()
        _write_text(out, value.identity)
        _write_text(out, value.path)
        out.write_var_int64(value.size)
        _write_text(out, value.split)
        out.write_var_int64(len(value.modified))
        for seconds in value.modified:
            out.write_bigendian_double(seconds)
        labels = dict(value.labels)
        try:
            out.write(_PRIMITIVE_LABELS + _LABELS.encode(labels))
        except UnicodeEncodeError:  # Beam's coder writes text as strict UTF-8
            out.write(_PICKLED_LABELS + pickle.dumps(labels, protocol=pickle.HIGHEST_PROTOCOL))
        return out.get()

    def decode(self, encoded: bytes) -> ImageRecord:
        stream = create_InputStream(encoded)
        identity = _read_text(stream)
        path = _read_text(stream)
        size = stream.read_var_int64()
        split = _read_text(stream)
        modified = tuple(stream.read_bigendian_double() for _ in range(stream.read_var_int64()))
        rest = stream.read_all(False)
        if rest[:1] == _PICKLED_LABELS:
            labels = pickle.loads(rest[1:])  # noqa: S301 - written by encode, in this pipeline
        else:
            labels = _LABELS.decode(rest[1:])
        return ImageRecord(identity, path, size, split, labels, modified)

    def to_type_hint(self) -> type:
        return ImageRecord


class NamedTupleCoder(beam.coders.Coder):
    """A ``NamedTuple`` of Beam's primitive values as its fields, without the pickled class
    Beam's default coder writes with each element. Registered for a type with
    ``beam.coders.registry.register_coder(Kind, NamedTupleCoder)``."""

    def __init__(self, kind: type) -> None:
        self._kind = kind

    @classmethod
    def from_type_hint(cls, typehint: type, registry: Any) -> NamedTupleCoder:
        return cls(typehint)

    def encode(self, value: tuple) -> bytes:
        return _LABELS.encode(tuple(value))

    def decode(self, encoded: bytes) -> Any:
        return self._kind(*_LABELS.decode(encoded))

    def to_type_hint(self) -> type:
        return self._kind


def _write_text(out, text: str) -> None:
    out.write(text.encode("utf-8", "surrogatepass"), True)


def _read_text(stream) -> str:
    return stream.read_all(True).decode("utf-8", "surrogatepass")


beam.coders.registry.register_coder(ImageRecord, ImageRecordCoder)
