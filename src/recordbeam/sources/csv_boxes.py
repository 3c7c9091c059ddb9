"""What the CSV box formats (``openimages``, ``box-csv``) share: rows of box tables joined
with a listing of images by an image key, on workers.

A format reads its tables on workers and keys each usable row by the image it names
(``<split>/<name>``): a :class:`BoxRow` (one object) or an :class:`ImageLabelRow` (an
image-level label); it lists its image folders on workers, keying each image the same way
(:class:`ListedImage`). :class:`JoinRowsWithImages` groups the three by key and yields one
:class:`~recordbeam.sources.annotated_files.ParsedImage` per image (its objects as
``NamedObject``s) with its image-level labels beside it, rejects rows naming no image
(naming the table and its lines) and keeps images no row names, with no objects.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from recordbeam.records import Reject
from recordbeam.sources.annotated_files import NamedObject, ParsedImage


class RowMessage:
    """What the join by image key groups: an image found by a listing, or a table row."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ListedImage(RowMessage):
    path: str
    size: int
    modified: float = 0.0  # as listed


@dataclass(frozen=True, slots=True)
class BoxRow(RowMessage):
    """One object of a table row.

    Attributes:
        where: ``<table>:<line>``, or ``<table>: row '<text>'`` when the line is not known.
        name: the class as the table names it (a class name, an Open Images label id).
        bbox: ``(x, y, width, height)``: pixels, or fractions of the image if ``normalized``.
        extra: the format's per-object feature values.
        normalized: ``bbox`` is in fractions of the image.
        width, height: the image size the row states (0: none).
    """

    where: str
    name: str
    bbox: tuple[float, float, float, float]
    extra: tuple[int, ...] = ()
    normalized: bool = False
    width: int = 0
    height: int = 0


@dataclass(frozen=True, slots=True)
class ImageLabelRow(RowMessage):
    """An image-level label: the class the table names, and where."""

    where: str
    name: str


_FIELDS = beam.coders.FastPrimitivesCoder()


class RowMessageCoder(beam.coders.Coder):
    """A :class:`RowMessage` as a kind number and its fields, in Beam's primitive coding
    (a bbox table holds millions of rows: no pickling)."""

    def encode(self, value: RowMessage) -> bytes:
        if type(value) is ListedImage:
            return _FIELDS.encode((0, value.path, value.size, value.modified))
        if type(value) is BoxRow:
            return _FIELDS.encode((1, value.where, value.name, value.bbox, value.extra,
                                   value.normalized, value.width, value.height))
        return _FIELDS.encode((2, value.where, value.name))

    def decode(self, encoded: bytes) -> RowMessage:
        kind, *fields = _FIELDS.decode(encoded)
        if kind == 0:
            return ListedImage(*fields)
        if kind == 1:
            where, name, bbox, extra, normalized, width, height = fields
            return BoxRow(where, name, tuple(bbox), tuple(extra), normalized, width, height)
        return ImageLabelRow(*fields)

    def to_type_hint(self) -> type:
        return RowMessage


beam.coders.registry.register_coder(RowMessage, RowMessageCoder)


class JoinedImage(NamedTuple):
    """An image joined with its rows: its objects, and its image-level labels' classes
    (with where each was read)."""

    parsed: ParsedImage
    image_labels: tuple[tuple[str, str], ...]  # (class, where)


def image_key(split: str, name: str) -> str:
    """The key rows and images meet by: the split, then the image's name or id."""
    return f"{split}/{name}"


def split_of_key(key: str) -> str:
    return key.split("/", 1)[0]


def csv_fields(line: str) -> list[str] | None:
    """The fields of one CSV line (quotes as ``csv`` reads them); None when the line is
    not one complete row (an open quote: a quoted line break)."""
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error:
        return None
    return rows[0] if len(rows) == 1 else []


class JoinRowsWithImages(beam.DoFn):
    """(image key, [RowMessage]) -> a :class:`JoinedImage`, or the rejects of rows whose
    image is not there.

    Args:
        format_name: prefixes the counters (``openimages_images_without_rows``).
        image_folder: named in messages about missing images (``<folder>/<split>``).
    """

    def __init__(self, format_name: str, image_folder: str) -> None:
        self._format = format_name
        self._image_folder = image_folder

    def process(self, element):
        key, messages = element
        split = split_of_key(key)
        images = sorted((m.path, m.size, m.modified) for m in messages
                        if type(m) is ListedImage)
        boxes = sorted((m for m in messages if type(m) is BoxRow), key=_row_order)
        labels = sorted({(m.name, m.where) for m in messages if type(m) is ImageLabelRow},
                        key=lambda label: (_where_order(label[1]), label[0]))
        name = key.split("/", 1)[1]
        if not images:
            wheres = [row.where for row in boxes] + [where for _name, where in labels]
            shown = ", ".join(wheres[:5]) + (f" and {len(wheres) - 5} more" if len(wheres) > 5
                                             else "")
            yield TaggedOutput("rejects", Reject(
                "image", wheres[0], "missing",
                f"{shown} name the image {name!r}, which is not in "
                f"{self._image_folder}/{split} (pass --images if the images are elsewhere); "
                "its rows were not written", split))
            return
        if len(images) > 1:
            names = ", ".join(path for path, _size, _modified in images)
            yield TaggedOutput("rejects", Reject(
                "image", images[0][0], "duplicate_file_name",
                f"{len(images)} images have the id {name!r} ({names}); keep one. None of them "
                "was written", split))
            return
        path, size, modified = images[0]
        if not boxes and not labels:
            yield TaggedOutput("counts", ((split, f"{self._format}_images_without_rows"), 1))
        width = next((row.width for row in boxes if row.width), None)
        height = next((row.height for row in boxes if row.height), None)
        objects = tuple(NamedObject(row.where, row.name, row.bbox, row.extra, None,
                                    row.normalized) for row in boxes)
        filename = path.rsplit("/", 1)[-1]
        yield JoinedImage(
            ParsedImage(key, split, path, size, filename, width, height, objects, None,
                        modified=modified),
            tuple(labels))


def _where_order(where: str) -> tuple[str, int, str]:
    """Rows in table order: ``file:12`` by file then line number."""
    table, _, line = where.rpartition(":")
    return (table, int(line), "") if line.isdigit() else (where, 0, where)


def _row_order(row: BoxRow) -> tuple[Any, ...]:
    return (_where_order(row.where), row.name, row.bbox)
