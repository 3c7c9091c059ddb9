"""The read transform of the box-table formats (``openimages``, ``box-csv``):
:class:`ReadBoxTables`, tables of rows joined with listings of images by an image key,
on workers.

A format configures it with plain Python: its tables, each with its row parser
(:class:`BoxTable`); its image folders, each with the rule that keys an image
(:class:`ImageListing`); its record builder; its class names. The transform reads the
tables and lists the folders on workers: each usable row becomes ``(key, row)``, a
:class:`BoxRow` (one object) or an :class:`ImageLabelRow` (an image-level label), each
image ``(key, ListedImage)``, the key being ``<split>/<name>`` (:func:`image_key`).
:class:`JoinRowsWithImages` groups them by key and yields one
:class:`~recordbeam.sources.annotated_files.ParsedImage` per image (its objects as
``NamedObject``s, its image-level labels beside them), rejects rows naming no image
(naming the table and its lines) and keeps images no row names, with no objects. The
format's builder turns each into an ``ImageRecord``; the transform also gathers the
rejects and counts, the metadata (label map, inputs fingerprint) and the planned sizes.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from recordbeam import filesystems
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.annotated_files import (
    NamedObject,
    ParsedImage,
    class_names,
    detection_metadata,
    listed_images,
    listed_time,
    text_metadata,
)
from recordbeam.sources.fingerprint import input_terms
from recordbeam.sources.result import SourceRead


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


def header_line(path: str, error: type[Exception]) -> str:
    """The first line of a table (read on the launcher: at most 1 MiB, not a whole table
    without line feeds), without its line end; raises ``error`` for one that is not UTF-8
    or whose lines end in a carriage return alone (the workers cut lines at line feeds)."""
    with filesystems.open_read(path) as f:
        first = f.readline(1 << 20)
    try:
        line = first.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text; save it as UTF-8") from None
    if "\r" in line:
        raise error(f"{path}: its lines end in a carriage return alone (classic Mac line "
                    "ends); save it with LF or CRLF line ends")
    return line


class JoinRowsWithImages(beam.DoFn):
    """(image key, [RowMessage]) -> a :class:`ParsedImage` (its image-level labels as
    ``(class, where)``), or the rejects of rows whose image is not there.

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
        yield ParsedImage(key, split, path, size, filename, width, height, objects, None,
                          modified=modified, image_labels=tuple(labels))


def _where_order(where: str) -> tuple[str, int, str]:
    """Rows in table order: ``file:12`` by file then line number."""
    table, _, line = where.rpartition(":")
    return (table, int(line), "") if line.isdigit() else (where, 0, where)


def _row_order(row: BoxRow) -> tuple[Any, ...]:
    return (_where_order(row.where), row.name, row.bbox)


# --- the read transform -------------------------------------------------------------


@dataclass(frozen=True)
class BoxTable:
    """A table to read on workers, and its row parser.

    Attributes:
        path: the table.
        parse: its rows: ``(key, row)`` for each usable row, rejects and counts as
            ``TaggedOutput``s. It is given the open table (binary, streamed: a row may
            span lines, and the parser counts them) or, when ``by_lines``, the bytes of
            each line after the header: the table is then read by byte ranges, spread
            over workers (a table of millions of rows).
    """

    path: str
    parse: Callable[[Any], Iterable[Any]]
    by_lines: bool = False


@dataclass(frozen=True)
class ImageListing:
    """An image folder to list on a worker, and its rule: ``key(folder, path)`` is an
    image's key, its split first. ``skipped`` and ``not_counted`` are
    :func:`listed_images`'s: the count of a file that is no image, and a file name left
    out of it."""

    folder: str
    key: Callable[[str, str], str]
    skipped: str | Callable[[str], Any] | None = None
    not_counted: str | None = None


class _ReadTasks(beam.DoFn):
    """A table read whole and parsed, or an image folder listed, here on a worker. An
    image whose key names no split of the tables goes to the ``unsplit`` output: its
    split (its folder)."""

    def __init__(self, tasks: Sequence[BoxTable | ImageListing], splits: Sequence[str],
                 skip_prefix: str | None) -> None:
        self._tasks = tuple(tasks)
        self._splits = frozenset(splits)
        self._skip = skip_prefix

    def process(self, index: int):
        task = self._tasks[index]
        if isinstance(task, BoxTable):
            with filesystems.open_read(task.path) as f:
                yield from task.parse(f)
            return
        for found in listed_images(task.folder, self._skip, task.skipped, task.not_counted):
            if isinstance(found, TaggedOutput):
                yield found
                continue
            key = task.key(task.folder, found.path)
            split = split_of_key(key)
            if split in self._splits:
                yield key, ListedImage(found.path, found.size_in_bytes, listed_time(found))
            else:
                yield TaggedOutput("unsplit", split)


def _parse_line(element: tuple[str, bytes], parse: Callable[[bytes], Iterable[Any]]):
    _path, data = element
    return parse(data)


def _built(image, build, *classes):
    """``build(image, *classes)``: Beam hands extra arguments to functions only, not to
    partials (no annotations: Beam would type ``classes`` from them)."""
    return build(image, *classes)


def _file_metadata(path: str) -> list[Any]:
    return [text_metadata(meta) for meta in filesystems.iter_match(filesystems.literal(path))]


class ReadBoxTables(beam.PTransform):
    """Box tables and image folders -> ``ImageRecord``s, as a
    :class:`~recordbeam.sources.result.SourceRead`.

    Args:
        format_name: prefixes the counters (``openimages_images_without_rows``).
        image_folder: named in messages about missing images (``<folder>/<split>``).
        splits: the splits the tables name.
        tables: the tables, each with its row parser.
        listings: the image folders, each with its key rule.
        build: ``ParsedImage`` -> its ``ImageRecord``, rejects and counts (``TaggedOutput``);
            given the class names found as its second argument when ``classes`` is None.
        classes: the class names in label order; None: the sorted names the rows give.
        also_read: files read on the launcher besides the tables (in the fingerprint).
        skip_prefix: left out of the listings (the output folder, inside an input).
        in_no_split: ``(folder, images)`` -> the warning (and counts) of images listed in
            a split no table names; None: no listing finds any.
        warnings: rejects known before the run (the class list's).
        counts: counts known before the run.
    """

    def __init__(self, format_name: str, image_folder: str, splits: Sequence[str], *,
                 tables: Sequence[BoxTable], listings: Sequence[ImageListing],
                 build: Callable[..., Iterable[Any]], classes: Sequence[str] | None = None,
                 also_read: Sequence[str] = (), skip_prefix: str | None = None,
                 in_no_split: Callable[[str, int], Iterable[Any]] | None = None,
                 warnings: Sequence[Reject] = (), counts: Sequence[Any] = ()) -> None:
        super().__init__()
        self.splits = tuple(splits)
        self.classes = classes
        self._format, self._image_folder = format_name, image_folder
        self._tables, self._listings = tuple(tables), tuple(listings)
        self._build, self._also_read = build, tuple(also_read)
        self._skip_prefix, self._in_no_split = skip_prefix, in_no_split
        self._warnings, self._counts = list(warnings), list(counts)

    def expand(self, pbegin):
        tasks = [table for table in self._tables if not table.by_lines] + list(self._listings)
        read = (
            pbegin
            | "ListTasks" >> beam.Create(list(range(len(tasks))))
            | "ReadTables" >> beam.ParDo(_ReadTasks(tasks, self.splits, self._skip_prefix))
            .with_output_types(tuple[str, RowMessage])  # (split/name, row or image)
            .with_outputs("rejects", "counts", "inputs", "unsplit", main="by_key")
        )
        keyed, rejects, counts = [read.by_key], [read.rejects], [read.counts]
        for index, table in enumerate(table for table in self._tables if table.by_lines):
            rows = (
                pbegin
                | f"ReadTable{index}" >> beam.io.ReadFromTextWithFilename(
                    table.path, skip_header_lines=1,
                    coder=beam.coders.BytesCoder())  # (path, line bytes), by byte ranges
                | f"ParseRows{index}" >> beam.FlatMap(_parse_line, table.parse)
                .with_output_types(tuple[str, RowMessage])  # (split/name, row)
                .with_outputs("rejects", "counts", main="by_key")
            )
            keyed.append(rows.by_key)
            rejects.append(rows.rejects)
            counts.append(rows.counts)
        if self._in_no_split:
            warn = self._in_no_split
            unsplit = (
                read.unsplit
                | "CountInNoSplit" >> beam.combiners.Count.PerElement()  # (folder, images)
                | "InNoSplit" >> beam.FlatMap(lambda found: warn(*found))
                .with_outputs("counts", main="warnings")
            )
            rejects.append(unsplit.warnings)
            counts.append(unsplit.counts)
        if self._warnings:
            rejects.append(pbegin | "LauncherWarnings" >> beam.Create(self._warnings))
        if self._counts:
            counts.append(pbegin | "LauncherCounts" >> beam.Create(self._counts))
        rows = keyed[0] if len(keyed) == 1 else keyed | "AllRows" >> beam.Flatten()
        joined = (
            rows
            | "JoinByImageKey" >> beam.GroupByKey()  # (split/name, [RowMessage])
            | "Join" >> beam.ParDo(JoinRowsWithImages(self._format, self._image_folder))
            .with_output_types(Any).with_outputs("rejects", "counts", main="parsed")
        )
        classes = class_names(joined.parsed, self.classes)
        built = joined.parsed | "BuildRecords" >> beam.FlatMap(
            _built, self._build, *([classes] if self.classes is None else []),
        ).with_output_types(ImageRecord).with_outputs("rejects", "counts", main="records")
        files = [*(table.path for table in self._tables), *self._also_read]
        tables = (pbegin | "Tables" >> beam.Create(files)
                  | "TableMetadata" >> beam.FlatMap(_file_metadata).with_output_types(Any))
        terms = input_terms((read.inputs, tables) | "Inputs" >> beam.Flatten())
        metadata = detection_metadata(pbegin, classes, terms)
        rejects += [joined.rejects, built.rejects]
        counts += [joined.counts, built.counts]
        sizes = joined.parsed | "PlannedSizes" >> beam.Map(lambda image: (image.split, image.size))
        return SourceRead(built.records, rejects | "Rejects" >> beam.Flatten(),
                          counts | "Counts" >> beam.Flatten(), metadata, sizes)
