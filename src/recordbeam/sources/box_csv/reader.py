"""Box CSV input (Roboflow's "TensorFlow Object Detection CSV"): one table per split.

ROOT is the folder as exported::

    ROOT/<split>/_annotations.csv    filename,width,height,class,xmin,ymin,xmax,ymax
    ROOT/<split>/<image>             the images, beside their table

One row per box, pixel corners; the classes are the sorted names found (labels 1..K). The
launcher lists ``ROOT/*/_annotations.csv`` (the splits) and reads each table's first line
(its header); the tables are read, and the image folders listed, on workers, and the
rows joined with the images by ``<split>/<filename>``. An image no row names is written
with no objects; a row naming no image is a reject naming ``<table>:<line>``.
"""

from __future__ import annotations

import csv
import io
import posixpath
from dataclasses import dataclass
from functools import partial
from typing import BinaryIO

from apache_beam.pvalue import TaggedOutput

from recordbeam import feature_keys, filesystems
from recordbeam.errors import DataError, UsageError
from recordbeam.records import Reject
from recordbeam.sources.annotated_files import build_record
from recordbeam.sources.conversion import conversion
from recordbeam.sources.csv_boxes import (
    BoxRow,
    BoxTable,
    ImageListing,
    ReadBoxTables,
    header_line,
    image_key,
)
from recordbeam.sources.detection import DetectionEncoder
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import refuse_split, require_folder, require_images_option
from recordbeam.sources.text import as_number, as_whole

#: The table of each split, in its folder.
TABLE_NAME = "_annotations.csv"
#: The columns a table must have (any order, any case).
COLUMNS = ("filename", "width", "height", "class", "xmin", "ymin", "xmax", "ymax")


class BoxCsvError(DataError, ValueError):
    """A box CSV folder that cannot be used as given (no tables, a table without the columns)."""


class NotABoxCsvFolder(UsageError, BoxCsvError):  # UsageError first: its exit code
    """--input is not a box CSV folder at all: a usage error (exit 2), as for the other formats."""


@dataclass(frozen=True)
class BoxCsvOptions(filesystems.RootAndImagesInputs):
    """What to read.

    Attributes:
        root: the exported folder (any Beam filesystem).
        images_dir: where the images are (``<images_dir>/<split>/``); None: beside the tables.
        allow_outside_root: also read files that symbolic links lead outside ``root`` and
            ``images_dir``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    images_dir: str | None = None
    allow_outside_root: bool = False

    def table(self, split: str) -> str:
        return filesystems.join(self.root.rstrip("/"), split, TABLE_NAME)

    def image_folder(self, split: str) -> str:
        return filesystems.join((self.images_dir or self.root).rstrip("/"), split)


def find_splits(options: BoxCsvOptions) -> list[str]:
    """The splits: the folders of ROOT holding an ``_annotations.csv`` (a listing)."""
    pattern = filesystems.glob_below(options.root, "*", TABLE_NAME)
    return sorted({posixpath.basename(posixpath.dirname(meta.path))
                   for meta in filesystems.iter_match(pattern)})


def column_positions(header: list[str], path: str) -> dict[str, int]:
    """Column name -> position, from a table's header; raises :class:`BoxCsvError` when a
    column is missing."""
    positions = {name.strip().lower(): i for i, name in enumerate(header)}
    missing = [name for name in COLUMNS if name not in positions]
    if missing:
        raise BoxCsvError(
            f"{path}:1: the header has no column {', '.join(missing)}; a box CSV starts with "
            f"the header {','.join(COLUMNS)}")
    return positions


def read_header(path: str) -> dict[str, int]:
    """The column positions of one table, from its first line (read on the launcher)."""
    line = header_line(path, BoxCsvError)
    try:
        header = next(csv.reader([line]), [])
    except csv.Error as error:
        raise BoxCsvError(f"{path}:1: the header is not a CSV row ({error})") from None
    return column_positions(header, path)


def parse_table(data: bytes | BinaryIO, path: str, split: str):
    """The rows of one table (its bytes, or a binary file streamed piece by piece):
    ``(key, BoxRow)`` for each usable row, and an annotation reject naming
    ``<table>:<line>`` for each row that is not."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    # Bytes that are not UTF-8 become U+FFFD here, and their rows are rejected below.
    # Streamed: a table read whole would sit in one worker's memory (~60 bytes per box).
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="replace", newline="")
    reader = csv.reader(text)
    try:
        positions = column_positions(next(reader, []), path)
    except (BoxCsvError, csv.Error) as bad:
        detail = str(bad) if isinstance(bad, BoxCsvError) else (
            f"{path}:1: the header is not a CSV row ({bad})")
        yield TaggedOutput("rejects", Reject("annotation", f"{path}:1", "malformed_row",
                                             detail, split))
        return
    start = reader.line_num
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            where = f"{path}:{start + 1}"
            yield TaggedOutput("rejects", Reject(
                "annotation", where, "malformed_row",
                f"{where}: not a CSV row ({error}); the rest of the table was not read. Fix "
                "the quotes and rerun", split))
            return
        first, start = start + 1, reader.line_num
        where = f"{path}:{first}"
        if start > first:
            # A quote left open swallows the lines after it into one field: say which.
            yield TaggedOutput("rejects", Reject(
                "annotation", where, "malformed_row",
                f"{where}: a quoted field runs on to line {start}, so lines {first}-{start} "
                "are one row that does not parse; close the quote. None of those lines was "
                "written", split))
            continue
        if not any(field.strip() for field in fields):
            continue
        if any("\ufffd" in field for field in fields):
            yield TaggedOutput("rejects", Reject(
                "annotation", where, "malformed_row",
                f"{where}: bytes that are not UTF-8 (or a U+FFFD character); save the table "
                "as UTF-8. The box was not written", split))
            continue
        row = parse_row(fields, positions, where, split)
        if isinstance(row, Reject):
            yield TaggedOutput("rejects", row)
        else:
            yield row


def parse_row(fields: list[str], positions: dict[str, int], where: str,
              split: str) -> tuple[str, BoxRow] | Reject:
    """One row -> (image key, its box), or the reject saying why it cannot be used."""
    if len(fields) < len(positions):
        return Reject("annotation", where, "malformed_row", (
            f"{where}: {len(fields)} fields where the header has {len(positions)} "
            f"({','.join(COLUMNS)}); the box was not written"), split)

    def value(column: str) -> str:
        return fields[positions[column]].strip()

    filename, name = value("filename"), value("class")
    if not filename or not name:
        return Reject("annotation", where, "missing_field", (
            f"{where}: the row has no {'filename' if not filename else 'class'}; the box was "
            "not written"), split)
    corners = [as_number(value(column)) for column in ("xmin", "ymin", "xmax", "ymax")]
    if None in corners:
        return Reject("annotation", where, "invalid_bbox", (
            f"{where} ({name!r}): xmin, ymin, xmax and ymax must be numbers; the box was not "
            "written"), split)
    xmin, ymin, xmax, ymax = corners
    if xmax <= xmin or ymax <= ymin:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({name!r}): box xmin={xmin:g} ymin={ymin:g} xmax={xmax:g} ymax={ymax:g} "
            "has no area (max must be above min); the box was not written"), split)
    width, height = as_whole(value("width"), 1) or 0, as_whole(value("height"), 1) or 0
    return image_key(split, filename), BoxRow(
        where, name, (xmin, ymin, xmax - xmin, ymax - ymin), (), False, width, height)


def key_in_split(split: str, folder: str, path: str) -> str:
    """The key of an image of a split's ``folder``: its name there, as the table's filename
    column gives it."""
    return image_key(split, filesystems.relative_name(folder, path))


class ReadBoxCsv(ReadBoxTables):
    """Read a box CSV folder into ``ImageRecord``s for :class:`BoxCsvEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`.
    ``splits`` (the folders holding a table, from a listing) and the tables' headers are
    checked on construction (:class:`BoxCsvError`). ``skip_below``, the output folder when
    it lies inside ROOT, is left out of the listings. The classes are the names found in
    the tables, sorted (``classes`` is None).
    """

    def __init__(self, options: BoxCsvOptions, skip_below: str | None = None) -> None:
        self.input_roots = options.input_roots()
        splits = find_splits(options)
        if not splits:
            inside = filesystems.exists(filesystems.join(options.root, TABLE_NAME))
            raise NotABoxCsvFolder(
                f"{options.root} has no <split>/{TABLE_NAME}; --input takes the folder a box "
                "CSV export holds (train/_annotations.csv, ...)" + (
                    f"; {options.root} holds {TABLE_NAME} itself, so it is a split folder: "
                    "pass the folder above it (the split is named as this folder)"
                    if inside else ""))
        for split in splits:
            filesystems.refuse_outside(self.input_roots, options.table(split), "box table")
            read_header(options.table(split))
        skip_prefix = None
        if skip_below:
            roots = {options.root, options.images_dir or options.root}
            prefixes = [filesystems.prefix_below(root, skip_below) for root in roots]
            skip_prefix = next((prefix for prefix in prefixes if prefix), None)
        super().__init__(
            "box_csv", (options.images_dir or options.root).rstrip("/"), splits,
            tables=[BoxTable(options.table(split),
                             partial(parse_table, path=options.table(split), split=split))
                    for split in splits],
            listings=[ImageListing(options.image_folder(split), partial(key_in_split, split),
                                   "box_csv_other_files_skipped", TABLE_NAME)
                      for split in splits],
            build=partial(build_record, class_list="the classes found"),
            skip_prefix=skip_prefix)


def box_csv_input_patterns(options: BoxCsvOptions, splits: list[str] | tuple[str, ...]) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``)."""
    return [*(filesystems.everything_below(options.image_folder(split)) for split in splits),
            *(filesystems.literal(options.table(split)) for split in splits)]


class BoxCsvEncoder(DetectionEncoder):
    """The detection features (boxes, class label and text); images without rows are
    counted as they are written."""

    def object_counts(self, columns) -> dict[str, int]:
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


# --- the conversion ---------------------------------------------------------------------


def prepare(request: Request) -> Conversion:
    """``convert box-csv``: checks the inputs before any job (the folders are there, a
    table at least, whose header reads; a typed --split names the export's one split)."""
    boxes = BoxCsvOptions(request.input, request.images, request.allow_outside_root)
    require_folder(request.input, "; --input takes the folder a box CSV export holds: "
                   "<split>/_annotations.csv beside the images")
    require_images_option(request)
    splits = ReadBoxCsv(boxes).splits  # lists ROOT/*/_annotations.csv, reads their headers
    refuse_split(request, splits, "the splits come from the folders holding _annotations.csv")
    return conversion("box-csv", boxes, splits, box_csv_input_patterns(boxes, splits),
                      request.output, lambda: ReadBoxCsv(boxes, skip_below=request.output),
                      lambda read, checks, fixes: BoxCsvEncoder(checks, read.splits[0], fixes))
