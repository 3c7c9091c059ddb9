"""Open Images input: box tables, class descriptions, image-level labels, image folders.

ROOT is the folder as Open Images is downloaded (or as Datumaro exports it)::

    ROOT[/annotations]/<split>-annotations-bbox.csv      ImageID,Source,LabelName,Confidence,
                                                         XMin,XMax,YMin,YMax,IsOccluded,
                                                         IsTruncated,IsGroupOf,IsDepiction,...
    ROOT[/annotations]/class-descriptions[-boxable].csv  LabelName,DisplayName (v4-v6: no
                                                         header; v6/v7 ``oidv*-`` files: one)
    ROOT[/annotations]/<split>-annotations-human-imagelabels[-boxable].csv   optional:
                                                         ImageID,Source,LabelName,Confidence
    ROOT/images/<split>/<ImageID>.jpg                    the images (``--images`` elsewhere)

Tables may carry the ``oidv6-`` / ``oidv7-`` prefix of the real downloads; the split is
the rest of the name before ``-annotations`` (``train``, ``validation``, ``test``).

Where the work happens: the launcher lists the tables, reads each one's header line and
the class descriptions (~600 to 20k rows: small, and the label map must be known to check
an existing output folder). The box table of the real dataset is 1.2 GB / 14.6 M rows: it
is read on workers by byte ranges (``ReadFromTextWithFilename``, splittable, the header
skipped), each row parsed there and keyed by ``<split>/<ImageID>``, and the rows grouped
with the image listing by a ``GroupByKey``, never on the launcher. Open Images tables
have no quoted line breaks, so a line is a row; a line that does not parse as one is a
reject naming the table and the row's text (a line number is not known to a byte-range
reader).

Written as the Object Detection API's Open Images converter writes it: normalized
corners to ``image/object/bbox/*``, ``image/object/group_of``, ``occluded``,
``truncated``, ``depiction`` (-1 where the table says unknown or lacks the column);
positive image-level labels (Confidence 1) to ``image/class/label`` and ``text``. Labels
1..K follow the class descriptions' order; the text written is the DisplayName.
"""

from __future__ import annotations

import csv
import io
import posixpath
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from apache_beam.pvalue import TaggedOutput

from recordbeam import feature_keys, filesystems
from recordbeam.dataset.class_names import (
    DUPLICATE_CLASS_NAME,
    check_class_list,
    repeated_name_warnings,
)
from recordbeam.errors import DataError, UsageError
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.annotated_files import ParsedImage
from recordbeam.sources.conversion import conversion
from recordbeam.sources.csv_boxes import (
    BoxRow,
    BoxTable,
    ImageLabelRow,
    ImageListing,
    ReadBoxTables,
    csv_fields,
    header_line,
    image_key,
)
from recordbeam.sources.detection import DetectionEncoder, DetectionObject, object_fields
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import refuse_split, require_folder, require_images_option
from recordbeam.sources.listing import skipped_prefix
from recordbeam.sources.text import as_number

#: The per-object features the OD API's Open Images converter writes beside the boxes,
#: and the column each comes from.
OID_OBJECT_COLUMNS = {
    feature_keys.GROUP_OF: "IsGroupOf",
    feature_keys.OCCLUDED: "IsOccluded",
    feature_keys.TRUNCATED: "IsTruncated",
    feature_keys.DEPICTION: "IsDepiction",
}
OID_OBJECT_KINDS = {key: "int64" for key in OID_OBJECT_COLUMNS}
#: The image-level label features.

BOX_COLUMNS = ("ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax")
IMAGE_LABEL_COLUMNS = ("ImageID", "LabelName", "Confidence")

_VERSION = r"(?:oidv\d+-)?"
_BOX_TABLE = re.compile(_VERSION + r"(?P<split>[^-]+)-annotations-bbox\.csv")
_LABEL_TABLE = re.compile(
    _VERSION + r"(?P<split>[^-]+)-annotations-human-imagelabels(?:-boxable)?\.csv")
_CLASS_TABLE = re.compile(_VERSION + r"class-descriptions(?P<boxable>-boxable)?\.csv")


class OpenImagesError(DataError, ValueError):
    """An Open Images folder that cannot be used as given (no box table, no class
    descriptions, a table without its columns)."""


class NotAnOpenImagesFolder(UsageError, OpenImagesError):  # UsageError first: its exit code
    """--input is not an Open Images folder at all: a usage error (exit 2), as for the
    other formats."""


@dataclass(frozen=True)
class OpenImagesOptions(filesystems.RootAndImagesInputs):
    """What to read.

    Attributes:
        root: the Open Images folder (any Beam filesystem); tables in it or in its
            ``annotations/`` folder.
        images_dir: the folder of the split folders of images; None: ``ROOT/images``.
        allow_outside_root: also read files that symbolic links lead outside ``root`` and
            ``images_dir``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    images_dir: str | None = None
    allow_outside_root: bool = False

    @property
    def image_root(self) -> str:
        return (self.images_dir or filesystems.join(self.root.rstrip("/"), "images")).rstrip("/")

    def image_folder(self, split: str) -> str:
        return filesystems.join(self.image_root, split)

    @property
    def table_patterns(self) -> list[str]:
        return [filesystems.glob_below(self.root, "*.csv"),
                filesystems.glob_below(self.root, "annotations", "*.csv")]


@dataclass(frozen=True)
class Table:
    """One table to read on workers: its split, and where its columns are."""

    path: str
    split: str
    columns: dict[str, int] = field(hash=False)


@dataclass(frozen=True)
class Tables:
    """What the launcher found: the box and image-label tables, the class descriptions."""

    boxes: tuple[Table, ...]
    image_labels: tuple[Table, ...]
    class_descriptions: str
    not_read: tuple[str, ...] = ()  # other CSVs (rotation, masks, machine labels...)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted({table.split for table in (*self.boxes, *self.image_labels)}))


# --- the launcher: find the tables, read their headers and the classes ------------------


def find_tables(options: OpenImagesOptions) -> Tables:
    """List the tables (no reads but each one's first line); raises
    :class:`OpenImagesError` when there is no box table or no class descriptions."""
    paths = sorted({meta.path for pattern in options.table_patterns
                    for meta in filesystems.iter_match(pattern)})
    roots = options.input_roots()
    boxes, labels, classes, others = [], [], [], []
    for path in paths:
        name = posixpath.basename(path)
        if match := _BOX_TABLE.fullmatch(name):
            filesystems.refuse_outside(roots, path, "box table")
            boxes.append(Table(path, match["split"], header_columns(path, BOX_COLUMNS)))
        elif match := _LABEL_TABLE.fullmatch(name):
            filesystems.refuse_outside(roots, path, "image-level label table")
            labels.append(Table(path, match["split"], header_columns(path, IMAGE_LABEL_COLUMNS)))
        elif match := _CLASS_TABLE.fullmatch(name):
            classes.append((not match["boxable"], path))
        else:
            others.append(path)
    box_splits = {table.split for table in boxes}
    if "validation" in box_splits and "val" not in box_splits:
        # v7's image-level tables say val (oidv7-val-annotations-human-imagelabels.csv)
        # beside the box table of validation (validation-annotations-bbox.csv).
        labels = [replace(table, split="validation") if table.split == "val" else table
                  for table in labels]
    root = options.root.rstrip("/")
    where = f"{root} or {filesystems.join(root, 'annotations')}"
    if not boxes:
        raise NotAnOpenImagesFolder(f"no <split>-annotations-bbox.csv in {where}; --input "
                                    "takes the Open Images folder holding the box tables")
    if not classes:
        raise OpenImagesError(f"no class-descriptions*.csv in {where}; it maps the tables' "
                              "LabelName (/m/...) to class names and is needed")
    # The boxable list (the 601 box classes) makes the label map; else the full one.
    classes.sort()
    best = [path for rank, path in classes if rank == classes[0][0]]
    if len(best) > 1:
        raise OpenImagesError(f"{len(best)} class description files ({', '.join(best)}); "
                              "keep the one that matches the tables")
    others += [path for _rank, path in classes if path != best[0]]
    filesystems.refuse_outside(roots, best[0], "class description table")
    return Tables(tuple(boxes), tuple(labels), best[0], tuple(sorted(others)))


def header_columns(path: str, required: Sequence[str]) -> dict[str, int]:
    """Column name -> position, from the first line of ``path``."""
    line = header_line(path, OpenImagesError)
    names = [name.strip() for name in (csv_fields(line) or [])]
    columns = {name: i for i, name in enumerate(names)}
    missing = [name for name in required if name not in columns]
    if missing:
        raise OpenImagesError(f"{path}:1: the header has no column {', '.join(missing)}; the "
                              f"table's first line names its columns ({','.join(required)}...)")
    return columns


def read_class_descriptions(path: str) -> tuple[list[str], list[str], list[str]]:
    """(label ids, display names, warnings) in the file's order: ``LabelName,DisplayName``
    rows, with or without that header line. A display name that cannot be a class name
    is refused (:class:`~recordbeam.dataset.class_names.ClassNameError`); one given to two
    label ids is legal (the ids tell them apart) and said in ``warnings``."""
    try:
        text = filesystems.read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise OpenImagesError(f"{path}: not UTF-8 text; save it as UTF-8") from None
    ids: list[str] = []
    names: list[str] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    # newline="": a quoted line break stays in its field, where the name check finds it.
    rows = csv.reader(io.StringIO(text, newline=""))
    number = 0
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except csv.Error as error:
            raise OpenImagesError(f"{path}:{rows.line_num}: not a CSV row ({error}); a row is "
                                  "LabelName,DisplayName") from None
        number = rows.line_num
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) < 2 or not row[0].strip():
            raise OpenImagesError(f"{path}:{number}: expected LabelName,DisplayName; fix the "
                                  "line (quote a name holding commas)")
        label_id, name = row[0].strip(), ",".join(row[1:]).strip()
        if number == 1 and (label_id, name) == ("LabelName", "DisplayName"):
            continue
        if label_id in seen:
            raise OpenImagesError(f"{path}:{number}: {label_id} already appears on line "
                                  f"{seen[label_id]}; list each class once")
        seen[label_id] = number
        ids.append(label_id)
        names.append(name or label_id)
        lines.append(number)
    if not ids:
        raise OpenImagesError(f"{path} lists no classes")
    places = [f"line {line}, {label_id}" for line, label_id in zip(lines, ids, strict=True)]
    repeats = check_class_list(names, places, path, repeats_allowed=True)
    return ids, names, repeated_name_warnings(names, places, repeats)


# --- the workers: rows ---------------------------------------------------------------


def row_source(table: Table, line: str) -> str:
    """Where a row was read: its table and its text (a line number is not known to a
    reader of byte ranges)."""
    return f"{table.path}: row {line!r}"


def _fields(table: Table, line: str, what: str) -> tuple[str, list[str] | Reject]:
    """Where the row was read, and its fields or the reject of a row whose fields the
    header does not name (its ``what`` was not written)."""
    where = row_source(table, line)
    fields = csv_fields(line)
    if fields is None or len(fields) != len(table.columns):
        return where, Reject("annotation", where, "malformed_row", (
            f"{where}: not a row of {len(table.columns)} fields as the header names; the "
            f"{what} was not written"), table.split)
    return where, fields


def parse_box_line(table: Table, line: str) -> Iterator[Any]:
    """One line of a box table -> ``(key, BoxRow)``, or a reject naming the table and row."""
    if not line.strip():
        return
    where, fields = _fields(table, line, "box")
    if isinstance(fields, Reject):
        yield TaggedOutput("rejects", fields)
        return

    def value(column: str) -> str:
        return fields[table.columns[column]].strip()

    image_id, label_id = value("ImageID"), value("LabelName")
    if not image_id or not label_id:
        yield TaggedOutput("rejects", Reject("annotation", where, "missing_field", (
            f"{where}: no {'ImageID' if not image_id else 'LabelName'}; the box was not "
            "written"), table.split))
        return
    corners = [as_number(value(column)) for column in ("XMin", "YMin", "XMax", "YMax")]
    if None in corners:
        yield TaggedOutput("rejects", Reject("annotation", where, "invalid_bbox", (
            f"{where}: XMin, XMax, YMin and YMax must be numbers; the box was not written"),
            table.split))
        return
    xmin, ymin, xmax, ymax = corners
    if xmax <= xmin or ymax <= ymin:
        yield TaggedOutput("rejects", Reject("annotation", where, "degenerate_bbox", (
            f"{where}: box XMin={xmin:g} XMax={xmax:g} YMin={ymin:g} YMax={ymax:g} has no "
            "area (max must be above min); the box was not written"), table.split))
        return
    flags = []
    for column in OID_OBJECT_COLUMNS.values():
        flag = _flag(value(column)) if column in table.columns else -1
        if flag is None:
            yield TaggedOutput("rejects", Reject("annotation", where, "malformed_row", (
                f"{where}: {column} is {value(column)!r}, not 1, 0 or -1; the box was not "
                "written"), table.split))
            return
        flags.append(flag)
    yield image_key(table.split, image_id), BoxRow(
        where, label_id, (xmin, ymin, xmax - xmin, ymax - ymin), tuple(flags), True)


def parse_image_label_line(table: Table, line: str) -> Iterator[Any]:
    """One line of an image-label table -> ``(key, ImageLabelRow)`` for a positive label;
    a negative one (Confidence 0) is counted."""
    if not line.strip():
        return
    where, fields = _fields(table, line, "label")
    if isinstance(fields, Reject):
        yield TaggedOutput("rejects", fields)
        return
    image_id = fields[table.columns["ImageID"]].strip()
    label_id = fields[table.columns["LabelName"]].strip()
    confidence = as_number(fields[table.columns["Confidence"]].strip())
    if not image_id or not label_id or confidence not in (0.0, 1.0):
        yield TaggedOutput("rejects", Reject("annotation", where, "malformed_row", (
            f"{where}: needs an ImageID, a LabelName and a Confidence of 1 or 0; the label "
            "was not written"), table.split))
        return
    if confidence == 0.0:
        yield TaggedOutput("counts", ((table.split, "openimages_negative_image_labels_skipped"), 1))
        return
    yield image_key(table.split, image_id), ImageLabelRow(where, label_id)


def _flag(text: str) -> int | None:
    number = as_number(text) if text else -1.0
    return int(number) if number in (-1.0, 0.0, 1.0) else None


def parse_table_line(table: Table, data: bytes, boxes: bool) -> Iterator[Any]:
    """One line of a table as read (bytes) -> its keyed row, or a reject naming it when it
    is not UTF-8 (Beam's text reader would fail the whole run on it)."""
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError:
        where = row_source(table, data.decode("utf-8", "backslashreplace"))
        yield TaggedOutput("rejects", Reject("annotation", where, "malformed_row", (
            f"{where}: bytes that are not UTF-8; save the table as UTF-8. The row was not "
            "written"), table.split))
        return
    yield from (parse_box_line if boxes else parse_image_label_line)(table, line)


#: Image files below the image folder outside every split folder a table names.
IN_NO_SPLIT = "openimages_images_in_no_split"
#: Files below the image folder that are no image.
NON_IMAGES = "openimages_non_image_files_skipped"


def key_below(root: str, path: str) -> str:
    """The key of an image below the image folder ``root``: ``<split>/<ImageID>``, the
    split being the first folder below ``root`` (``""`` for an image in ``root`` itself)."""
    split, _, rest = filesystems.relative_name(root, path).partition("/")
    return image_key(split, posixpath.splitext(rest)[0]) if rest else image_key("", split)


def non_image_key(root: str, splits: Sequence[str], path: str) -> Any:
    """The count of a file below ``root`` that is no image: its split's, if in a split's
    folder."""
    split, _, rest = filesystems.relative_name(root, path).partition("/")
    return (split, NON_IMAGES) if rest and split in splits else NON_IMAGES


def in_no_split(folder: str, count: int, root: str, splits: Sequence[str]) -> Iterator[Any]:
    """The count and the warning of ``count`` images in ``folder`` (below the image folder
    ``root``; ``""``: in it) that no table's split names: not converted."""
    yield TaggedOutput("counts", (IN_NO_SPLIT, count))
    where = filesystems.join(root, folder) if folder else root
    said = (f"the split {folder!r}: no {folder}-annotations-bbox.csv names it" if folder
            else "no split folder")
    yield Reject("warning", where, "image_in_no_split", (
        f"{count} image file{'s' if count > 1 else ''} in {where} {'are' if count > 1 else 'is'}"
        f" in {said} (the tables name {', '.join(splits)}); not converted. Add the split's "
        "tables, or move the images into a split's folder"))


def build_openimages_record(parsed: ParsedImage, label_ids: Sequence[str],
                            names: Sequence[str], class_file: str) -> Iterator[Any]:
    """A joined image -> its ImageRecord: objects labelled 1..K by the class descriptions'
    order (text: the DisplayName), positive image-level labels beside them."""
    labels = {label_id: label for label, label_id in enumerate(label_ids, 1)}
    objects = []
    for obj in parsed.objects:
        label = labels.get(obj.name)
        if label is None:
            yield TaggedOutput("rejects", Reject(
                "annotation", obj.source, "unknown_category",
                f"{obj.source}: LabelName {obj.name!r} is not in {class_file}; use the class "
                "descriptions of the same release. The image was written without this object",
                parsed.split))
            continue
        objects.append(object_fields(DetectionObject(
            obj.source, label, names[label - 1], obj.bbox, obj.extra, None, True)))
    image_labels: dict[str, int] = {}
    for label_id, _where in parsed.image_labels:
        label = labels.get(label_id)
        if label is None:
            yield TaggedOutput("counts", (
                (parsed.split, "openimages_image_labels_not_in_classes"), 1))
        else:
            image_labels.setdefault(label_id, label)
    image_id = parsed.image_id.split("/", 1)[1]
    yield ImageRecord(
        identity=parsed.image_id, path=parsed.path, size=parsed.size, split=parsed.split,
        labels={"source_id": image_id, "filename": parsed.filename, "width": None,
                "height": None, "objects": tuple(objects),
                "image_labels": tuple((label, names[label - 1])
                                      for label in image_labels.values())},
        modified=(parsed.modified,))


class ReadOpenImages(ReadBoxTables):
    """Read an Open Images folder into ``ImageRecord``s for :class:`OpenImagesEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`.
    On construction it lists the tables and reads their header lines and the class
    descriptions (:class:`OpenImagesError` when they cannot be used): ``splits``,
    ``label_ids`` and ``display_names`` are known before the run. ``skip_below``, the
    output folder when it lies inside the image folder, is left out of the listing.
    """

    def __init__(self, options: OpenImagesOptions, skip_below: str | None = None) -> None:
        self.input_roots = options.input_roots()
        self.tables = tables = find_tables(options)
        self.label_ids, self.display_names, name_warnings = read_class_descriptions(
            tables.class_descriptions)
        root, splits = options.image_root, tables.splits
        super().__init__(
            "openimages", root, splits,
            tables=[BoxTable(table.path, partial(parse_table_line, table, boxes=boxes), True)
                    for table, boxes in [*((t, True) for t in tables.boxes),
                                         *((t, False) for t in tables.image_labels)]],
            listings=[ImageListing(root, key_below, partial(non_image_key, root, splits))],
            build=partial(build_openimages_record, label_ids=self.label_ids,
                          names=self.display_names, class_file=tables.class_descriptions),
            classes=self.display_names, also_read=[tables.class_descriptions],
            skip_prefix=skipped_prefix(root, skip_below),
            in_no_split=partial(in_no_split, root=root, splits=splits),
            warnings=[Reject("warning", tables.class_descriptions, DUPLICATE_CLASS_NAME, detail)
                      for detail in name_warnings],
            # Tables not read (rotation, masks, machine labels...) are said, not dropped.
            counts=[("openimages_tables_not_read", len(tables.not_read))] if tables.not_read
            else [])


def openimages_input_patterns(options: OpenImagesOptions, tables: Tables) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``)."""
    return [filesystems.everything_below(options.image_root),
            *(filesystems.literal(t.path) for t in (*tables.boxes, *tables.image_labels)),
            filesystems.literal(tables.class_descriptions)]


class OpenImagesEncoder(DetectionEncoder):
    """The detection features, the OD API's ``group_of``, ``occluded``, ``truncated`` and
    ``depiction``, and the positive image-level labels (``image/class/label``, ``text``)."""

    def __init__(self, checks=None, split: str = "train", fixes=None) -> None:
        super().__init__(checks, split, fixes, extra_kinds=OID_OBJECT_KINDS, image_labels=True)

    def object_counts(self, columns) -> dict[str, int]:
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


# --- the conversion ---------------------------------------------------------------------


def prepare(request: Request) -> Conversion:
    """``convert openimages``: checks the inputs before any job (the folders are there;
    the tables are found, their headers and the classes read; a typed --split names the
    tables' one split)."""
    oid = OpenImagesOptions(request.input, request.images, request.allow_outside_root)
    require_folder(request.input, "; --input takes an Open Images folder holding the "
                   "*-annotations-bbox.csv tables (or annotations/ with them) and images/")
    require_images_option(request)
    read = ReadOpenImages(oid)  # lists the tables, reads their headers and the classes
    refuse_split(request, read.splits, "the splits come from the tables' names")
    return conversion("openimages", oid, read.splits, openimages_input_patterns(oid, read.tables),
                      request.output, lambda: ReadOpenImages(oid, skip_below=request.output),
                      lambda read, checks, fixes: OpenImagesEncoder(checks, read.splits[0], fixes))
