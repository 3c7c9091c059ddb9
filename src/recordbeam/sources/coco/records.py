"""What the COCO stages hand each other, and the compact coder they cross shuffles with.

The join by file name groups, under a :class:`JoinKey`, the image entries of the JSON
(:class:`ImageEntry`) with the files of the listing (:class:`ListedFile`); annotation
batches (:class:`AnnotationBatch`) and entries rejected before any file was looked for
(:class:`ImageNotLocated`) ride the same join keyed by image id, and pass on to the join
by image id, where they meet the :class:`LocatedImage` the first join found.

Every message is one byte of kind and its fields, no field names and no pickled class
(text as UTF-8 with ``surrogatepass``, so an odd name survives to its reject):
a shuffle holds millions of them. Annotations travel packed (:func:`pack_annotations`),
one blob per image: Beam's local runner keeps grouped values as Python objects, and a
blob costs a fraction of the memory of the nested tuples it holds.
"""

from __future__ import annotations

import pickle
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream


class Annotation(NamedTuple):
    """One checked item of ``annotations``, as read from the file (a batch holds those
    of one image). ``segmentation`` is kept only when masks are written, ``keypoints``
    (:class:`Keypoints`) only when keypoints are."""

    id: Any
    category_id: Any
    bbox: Any
    area: float
    iscrowd: int
    segmentation: Any = None
    keypoints: Any = None


class ObjectLabel(NamedTuple):
    """One object of an ``ImageRecord``: an annotation with its category resolved
    (``keypoints``, when written: :class:`NamedKeypoints`)."""

    annotation_id: Any
    label: int
    text: str
    bbox: Any
    area: float
    iscrowd: int
    segmentation: Any = None
    keypoints: Any = None


class Keypoints(NamedTuple):
    """An annotation's checked ``keypoints``: ``values`` flat ``x, y, v`` triples in pixels
    (``v`` COCO's 0 not labeled, 1 labeled but hidden, 2 visible) and ``num``, COCO's
    ``num_keypoints`` (the labeled ones)."""

    values: tuple[float, ...]
    num: int


class NamedKeypoints(NamedTuple):
    """An object's keypoints joined with its category's keypoint ``names`` (one ``x, y,
    v`` triple in ``values`` per name)."""

    values: tuple[float, ...]
    num: int
    names: tuple[str, ...]


class Category(NamedTuple):
    """One item of ``categories``; ``keypoints`` (names) and ``skeleton`` (1-based pairs
    of them) are read only when keypoints are written."""

    id: Any
    name: str
    keypoints: tuple[str, ...] = ()
    skeleton: tuple[tuple[int, int], ...] = ()


def pack_annotations(objects: Iterable[Annotation | ObjectLabel]) -> bytes:
    """Compact, picklable form of one image's annotations or objects (our own data only).

    Each is pickled as a plain tuple, without its trailing optional fields
    (``segmentation``, ``keypoints``) that are None: as compact as before these had names."""
    plain = tuple([_without_trailing_none(o) for o in objects])
    return pickle.dumps(plain, protocol=pickle.HIGHEST_PROTOCOL)


#: How many leading fields of :class:`Annotation` and :class:`ObjectLabel` are required.
_REQUIRED_FIELDS = 5


def _without_trailing_none(fields: tuple) -> tuple:
    """``fields`` less its trailing optional None fields, as a plain tuple (a slice of a
    NamedTuple is one)."""
    end = len(fields)
    while end > _REQUIRED_FIELDS and fields[end - 1] is None:
        end -= 1
    return fields[:end]


def unpack_annotations(blob: bytes) -> tuple[Annotation, ...]:
    """The annotations of :func:`pack_annotations`."""
    return _with_type(Annotation, _unpickle(blob))


def unpack_objects(blob: bytes) -> tuple[ObjectLabel, ...]:
    """The objects of an ``ImageRecord``'s ``labels["objects"]``."""
    return _with_type(ObjectLabel, _unpickle(blob))


#: Builds one of our NamedTuples from a tuple of all its fields: ``new_record(Annotation,
#: fields)``. It skips the NamedTuple's Python-level ``__new__`` (a third of the cost),
#: which matters once per annotation and per object of every image.
new_record = tuple.__new__

_NONES = (None,) * len(ObjectLabel._fields)


def _with_type(kind: type, rows: tuple[tuple, ...]) -> tuple:
    """``rows`` as ``kind``s, the optional fields they were packed without set to None."""
    size = len(kind._fields)  # type: ignore[attr-defined]
    return tuple([new_record(kind, fields if len(fields) == size
                             else fields + _NONES[:size - len(fields)])
                  for fields in rows])


def _unpickle(blob: bytes) -> tuple[tuple, ...]:
    return pickle.loads(blob)  # noqa: S301 - written by pack_annotations in this pipeline


#: The labels of an ``ImageRecord`` that hold LVIS's image-level category lists, named
#: as the image entries name them (the written labels of the categories).
LVIS_LISTS = ("neg_category_ids", "not_exhaustive_category_ids")
#: The label of an ``ImageRecord`` that holds its image-level labels (annotations with a
#: ``category_id`` and no ``bbox``): ``(annotation id, label, name)`` in annotation-id order.
IMAGE_LABELS = "image_labels"


def join_key(image_id: Any) -> str:
    """The key images and annotations meet under: the id as ``image/source_id`` writes it.
    Ids that read the same as text (``1`` and ``"1"``) meet, so the join can tell a
    duplicate id or an ``image_id`` of the wrong type from an unknown image."""
    return str(image_id)


def name_key(file_name: str) -> str:
    """The key image entries and listed files meet under in the join by file name: the
    name with letter case and Unicode normalisation folded. A ``file_name`` that differs
    from a file on disk only in those meets that file, so its ``missing`` reject can name
    it; names still match exactly. Only names that fold alike share a key: the join
    holds a handful of names per key, never a folder."""
    if file_name.isascii():
        return file_name.lower()
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", file_name).casefold())


@dataclass(frozen=True, slots=True)
class JoinKey:
    """Key of the join by file name: a file name's :func:`name_key`, or (``by_image_id``)
    the :func:`join_key` of a message for the join by image id."""

    text: str
    by_image_id: bool = False


class JoinMessage:
    """What the COCO joins group: one of the message types below."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ListedFile(JoinMessage):
    """An image file found by the listing."""

    path: str
    size: int
    modified: float = 0.0  # as listed


@dataclass(frozen=True, slots=True)
class ImageEntry(JoinMessage):
    """An item of ``images`` that passed its checks; sizes are None unless integers."""

    image_id: Any
    file_name: str
    width: int | None
    height: int | None


@dataclass(frozen=True, slots=True)
class AnnotationBatch(JoinMessage):
    """Annotations of one image (:func:`pack_annotations`); the id as the file spelled
    it, to compare its type with the image's."""

    image_id: Any
    packed: bytes


@dataclass(frozen=True, slots=True)
class CaptionBatch(JoinMessage):
    """Captions of one image from the captions file: ``(caption id, text)`` pairs; the
    image id as the file spelled it, to compare its type with the image's."""

    image_id: Any
    captions: tuple[tuple[Any, str], ...]


@dataclass(frozen=True, slots=True)
class ImageCategoryLists(JoinMessage):
    """An LVIS image entry's ``neg_category_ids`` and ``not_exhaustive_category_ids``
    (category ids as the file holds them), for the join by image id."""

    negative: tuple[Any, ...]
    not_exhaustive: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ImageNotLocated(JoinMessage):
    """The entry with this id was rejected before or while its file was looked for
    (``reason`` is its reject's), so its annotations are lost with it."""

    reason: str


@dataclass(frozen=True, slots=True)
class LocatedImage(JoinMessage):
    """An image entry joined with its file: what the join by image id needs of it."""

    image_id: Any
    name: str
    path: str
    size: int
    width: int | None
    height: int | None
    modified: float = 0.0  # of the file, as listed


# --- coders ----------------------------------------------------------------------------

_ANY = beam.coders.FastPrimitivesCoder().get_impl()  # ids, sizes: int, str or None


class JoinKeyCoder(beam.coders.Coder):
    """A :class:`JoinKey` as one byte (by image id or not) and its UTF-8 text."""

    def encode(self, value: JoinKey) -> bytes:
        return (b"\1" if value.by_image_id else b"\0") + value.text.encode("utf-8", "surrogatepass")

    def decode(self, encoded: bytes) -> JoinKey:
        return JoinKey(encoded[1:].decode("utf-8", "surrogatepass"), encoded[:1] == b"\1")

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return JoinKey


#: Kind byte of each message, in the order of the fields written after it.
_KINDS: dict[type, int] = {ListedFile: 0, ImageEntry: 1, AnnotationBatch: 2,
                           ImageNotLocated: 3, LocatedImage: 4, CaptionBatch: 5,
                           ImageCategoryLists: 6}
_TYPES = {kind: message_type for message_type, kind in _KINDS.items()}
#: How each field of a message is written: "t" text and "b" bytes length-prefixed, "v" a
#: varint, "d" a double, "a" Beam's primitive value (ids, image sizes, tuples).
_FIELD_CODES = {ListedFile: "tvd", ImageEntry: "ataa", AnnotationBatch: "ab",
                ImageNotLocated: "t", LocatedImage: "attvaad", CaptionBatch: "aa",
                ImageCategoryLists: "aa"}
_WRITE = {
    "t": lambda out, text: out.write(text.encode("utf-8", "surrogatepass"), True),
    "b": lambda out, data: out.write(data, True),
    "v": lambda out, number: out.write_var_int64(number),
    "d": lambda out, number: out.write_bigendian_double(number),
    "a": lambda out, value: _ANY.encode_to_stream(value, out, True),
}
_READ = {
    "t": lambda stream: stream.read_all(True).decode("utf-8", "surrogatepass"),
    "b": lambda stream: stream.read_all(True),
    "v": lambda stream: stream.read_var_int64(),
    "d": lambda stream: stream.read_bigendian_double(),
    "a": lambda stream: _ANY.decode_from_stream(stream, True),
}


class JoinMessageCoder(beam.coders.Coder):
    """A :class:`JoinMessage`: its kind byte, then its fields in order (:data:`_FIELD_CODES`)."""

    def encode(self, value: JoinMessage) -> bytes:
        out = create_OutputStream()
        out.write_byte(_KINDS[type(value)])
        for code, name in zip(_FIELD_CODES[type(value)], value.__slots__, strict=True):
            _WRITE[code](out, getattr(value, name))
        return out.get()

    def decode(self, encoded: bytes) -> JoinMessage:
        stream = create_InputStream(encoded)
        message_type = _TYPES[stream.read_byte()]
        return message_type(*[_READ[code](stream) for code in _FIELD_CODES[message_type]])

    def to_type_hint(self) -> type:
        return JoinMessage


beam.coders.registry.register_coder(JoinKey, JoinKeyCoder)
beam.coders.registry.register_coder(JoinMessage, JoinMessageCoder)
