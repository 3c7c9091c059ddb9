"""CSV and JSON Lines manifests input: one row per example (or per step of a sequence).

A row names one or more images (paths relative to the manifest's folder, or URLs of any
Beam filesystem) and any other columns. Every column has one type for the whole dataset:

=============  ==============================  ==========================
type           values                          written as
=============  ==============================  ==========================
``int64``      integers (JSON true/false: 1/0) int64 feature
``float``      numbers                         float feature
``bytes``      text                            bytes feature (UTF-8)
``image``      image paths                     the image's bytes and size
``*_list``     JSON lists of one element type  a list feature
=============  ==============================  ==========================

Types come from ``--schema`` (``{"column": "type"}``) or are inferred. **Inference runs
on the launcher, before the graph is built, over the first ``schema_sample_rows`` rows
only** (10,000 by default), keeping each column's type and the line it was first seen
on: the launcher's time and memory do not grow with the manifest. The schema shapes the
graph (which columns are images, which splits exist), and a disagreement within the
sample fails the command at once with the file and line. Integers widen to float; any
other disagreement names the first row that does not agree.

The workers read the manifest in byte ranges (:class:`ManifestRange`, ``range_bytes``
each): a range reads the lines that *begin* in it, so it skips the partial line it starts
in and finishes the one that crosses its end. Every row is checked against the schema
there: rows that do not parse, and rows that disagree with the sample (a type, a column,
a split it did not show), are rejects naming ``<manifest>:<line>``. A range does not know
its first line number, so each one counts its lines and rows are numbered once every
range is read (:func:`first_lines`): exact lines for one extra pass over a list as long
as the ranges, never a second read of the file. A CSV whose quoted fields hold line breaks
cannot be cut (a range could start inside a field): the sample detects them, or
``csv_multiline`` says so, and one worker reads it as one text stream.

Image paths are joined with a listing of the manifest's folder for their sizes, and the
bytes are read only by the shard writer. With ``group_by`` rows are grouped into
``tf.train.SequenceExample``s: columns that never vary within a group go to the context,
the others (and images) become feature lists with one step per row, in manifest order.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import AsList, AsSingleton, TaggedOutput

from recordbeam import feature_keys, filesystems
from recordbeam.dataset import layout
from recordbeam.errors import DataError, UsageError
from recordbeam.images.transcode import ImageFixes
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.annotated_files import listed_time
from recordbeam.sources.conversion import settings_of, write_read
from recordbeam.sources.fingerprint import input_terms, inputs_entry
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import archive_kind, refuse_split, require_file
from recordbeam.sources.listing import ListFilesBelow, MatchFile, skipped_prefix
from recordbeam.sources.record_coder import NamedTupleCoder
from recordbeam.sources.result import SourceRead
from recordbeam.sources.splits import split_share
from recordbeam.sources.text import is_text
from recordbeam.write.encoder import Encoded
from recordbeam.write.image_encoder import IMAGE_KINDS, ImageChecks, ImageExampleEncoder
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

TYPES = ("int64", "float", "bytes", "image", "int64_list", "float_list", "bytes_list")
_ALIASES = {"int": "int64", "integer": "int64", "float32": "float", "string": "bytes",
            "str": "bytes", "text": "bytes", "string_list": "bytes_list", "int_list": "int64_list"}
#: Feature kind written for each type.
FEATURE_KIND = {kind: kind.removesuffix("_list") for kind in TYPES if kind != "image"}
_IMAGE_NAME = re.compile(r"[^\n]*\.(jpe?g|png|gif|bmp|webp|tiff?)$", re.IGNORECASE)
_INT = re.compile(r"[+-]?\d+")
#: Distinct values allowed in a split column: more means it is not a split column.
MAX_SPLITS = 64
#: Rows the launcher reads to infer the schema (``--schema-sample-rows``).
DEFAULT_SAMPLE_ROWS = 10_000
#: Bytes of manifest per reading task at most: big enough that a task's start-up is noise,
#: small enough that a 10 GB manifest spreads over 160 tasks.
DEFAULT_RANGE_BYTES = 64 * 1024 * 1024
#: A smaller manifest is still cut into this many ranges, while each holds at least
#: :data:`MIN_RANGE_BYTES`: one worker takes seconds over a 3 MB manifest of 100k rows.
MIN_RANGES = 16
MIN_RANGE_BYTES = 256 * 1024
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")


class TableError(DataError, ValueError):
    """The manifest or its schema cannot be used as given (names the file and line)."""


class TableOptionError(UsageError, TableError):  # UsageError first: its exit code
    """An option that does not fit the manifest (a column it does not have, split
    fractions that do not add up, a --schema file that is no schema): exit 2."""


@dataclass(frozen=True)
class TableOptions:
    """What to read and how to lay it out.

    Attributes:
        manifest: the ``.csv`` or ``.jsonl`` file (any Beam filesystem).
        split: split of every row when neither ``split_column`` nor ``split_fractions``.
        schema: path of a JSON ``{"column": "type"}``; None infers the types.
        image_columns: columns holding image paths; empty: the ``image`` columns of the
            schema (given or inferred: text columns whose every value ends in an image
            extension).
        split_column: column whose value is the example's split (not written as a feature).
        split_fractions: ``(("train", 0.8), ("val", 0.2))``: splits by a salted hash of
            the first image path (or of the group), so an image always lands in one split.
        group_by: write SequenceExamples, one per distinct value of this column.
        allow_outside_root: also read image paths with ``..`` or absolute local paths
            (refused by default: a row may only name files below the manifest's folder,
            or URLs of any Beam filesystem).
        schema_sample_rows: rows the launcher reads to infer the schema and learn the
            split names (0: every row, which
            costs a pass over the whole manifest before the job starts).
        splits: the values the split column may hold; empty: those of the sample.
        csv_multiline: the CSV has quoted fields holding line breaks, so it cannot be
            cut into byte ranges: one worker reads it (also chosen when the sample shows
            one).
        range_bytes: size of the byte ranges the manifest is cut into, one task each.
    """

    manifest: str
    split: str = "train"
    schema: str | None = None
    image_columns: tuple[str, ...] = ()
    split_column: str | None = None
    split_fractions: tuple[tuple[str, float], ...] = ()
    group_by: str | None = None
    allow_outside_root: bool = False
    schema_sample_rows: int = DEFAULT_SAMPLE_ROWS
    splits: tuple[str, ...] = ()
    csv_multiline: bool = False
    range_bytes: int = DEFAULT_RANGE_BYTES

    def input_roots(self) -> filesystems.InputRoots | None:
        """The folders this run reads (see :class:`recordbeam.filesystems.InputRoots`): the
        manifest's own."""
        return filesystems.input_roots((manifest_dir(self.manifest),), self.allow_outside_root)

    def __post_init__(self) -> None:
        if self.schema_sample_rows < 0:
            raise UsageError("--schema-sample-rows takes 0 (every row) or a positive count")
        if self.range_bytes < 1:
            raise UsageError("the manifest's range size must be at least one byte")
        if self.splits and not self.split_column:
            raise UsageError("--splits names the values of --split-column; give that too")
        for name in self.splits:
            if not _SPLIT_NAME.fullmatch(name):
                raise UsageError(
                    f"--splits: {name!r} is no split name (letters, digits and underscores)")
        if self.csv_multiline and not is_csv(self.manifest):
            raise UsageError(f"--csv-multiline is for CSV manifests, and {self.manifest} is "
                             "not one (.csv or .tsv); drop it")
        if self.split_fractions:
            fractions = [fraction for _name, fraction in self.split_fractions]
            if min(fractions) <= 0 or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
                raise TableOptionError("--split fractions must be positive and add up to 1, "
                                       f"got {sum(fractions):g}")
            if self.split_column:
                raise TableOptionError("give either a split column or split fractions, not both")


def parse_split_fractions(text: str) -> tuple[tuple[str, float], ...]:
    """``"train=0.8,val=0.1,test=0.1"`` -> ``(("train", 0.8), ("val", 0.1), ("test", 0.1))``."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            out.append((name.strip(), float(value)))
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise TableOptionError(f"cannot read split {part!r}: write NAME=FRACTION, e.g. "
                                   "train=0.8")
    return tuple(out)


@dataclass
class Schema:
    """Column name -> type, in manifest column order, and the inferred splits."""

    types: dict[str, str]
    image_columns: tuple[str, ...]
    splits: tuple[str, ...] = ()
    #: A CSV's column names (the workers reading later byte ranges never see line 1).
    header: tuple[str, ...] = ()
    #: Why the manifest must be read by one worker (None: it can be cut in byte ranges).
    one_reader_reason: str | None = None
    #: The types were inferred from the first ``sample_rows`` rows (0: from every row).
    sample_rows: int = 0
    inferred: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"columns": dict(self.types), "image_columns": list(self.image_columns)}


# --- reading rows ----------------------------------------------------------------------


def is_csv(path: str) -> bool:
    return path.lower().endswith((".csv", ".tsv"))


def iter_rows(path: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """``(line, row)`` for each row, or ``(line, problem)`` for a row that does not parse.

    CSV values are strings (empty means missing); JSON Lines values keep their JSON types.
    ``line`` is where the row starts (1 is a CSV's header).
    """
    with filesystems.open_read(path) as raw:
        # Bytes that are not UTF-8 become lone surrogates, found row by row below: such a
        # row is a problem at its line, as in a byte range (_ReadRange._lines), not an
        # exception that stops the whole read.
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
        if is_csv(path):
            yield from _csv_rows(text, "\t" if path.lower().endswith(".tsv") else ",")
        else:
            yield from _jsonl_rows(text)


#: A row whose bytes are not UTF-8 (decoded with ``surrogateescape``, they hold lone surrogates).
NOT_UTF8 = "is not UTF-8 text (the manifest must be saved as UTF-8)"


def _csv_rows(text: io.TextIOWrapper, delimiter: str) -> Iterator[tuple[int, dict | str]]:
    reader = csv.reader(text, delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as error:
        yield 1, f"cannot read the header ({error})"
        return
    if not all(map(is_text, header)):
        yield 1, "the header is not UTF-8 text; is this a CSV file, saved as UTF-8?"
        return
    if len(set(header)) != len(header) or any(not h.strip() for h in header):
        yield 1, "the header has empty or repeated column names; give every column a unique name"
        return
    start = reader.line_num + 1
    while True:
        try:
            row = _csv_row(next(reader), header)
        except StopIteration:
            return
        except csv.Error as error:
            row = f"not valid CSV ({error})"
        line, start = start, reader.line_num + 1
        if row is not None:
            yield line, row


def _csv_row(cells: list[str], header: Sequence[str]) -> dict[str, str] | str | None:
    """A CSV row's cells as a row, a problem, or None (a blank line)."""
    if not cells:
        return None
    if not all(map(is_text, cells)):
        return NOT_UTF8
    if len(cells) != len(header):
        return f"has {len(cells)} fields but the header has {len(header)}"
    return dict(zip(header, cells, strict=True))


def _jsonl_rows(text: io.TextIOWrapper) -> Iterator[tuple[int, dict | str]]:
    for line, content in enumerate(bounded_lines(text), 1):
        if isinstance(content, int):
            yield line, too_long(content, "characters")
            continue
        row = _json_line(content) if is_text(content) else NOT_UTF8
        if row is not None:
            yield line, row


# --- types -----------------------------------------------------------------------------


def value_type(value: Any, from_csv: bool) -> str | None:
    """The type of one cell (None: missing); ``"invalid"`` for values no type can hold."""
    if value is None or (from_csv and value == ""):
        return None
    if from_csv:
        if _INT.fullmatch(value.strip()):
            return "int64"
        if value.lstrip().startswith("["):
            try:
                return value_type(json.loads(value), False)
            except (json.JSONDecodeError, RecursionError):
                return "bytes"
        try:
            float(value)
            return "float"
        except ValueError:
            pass
    if isinstance(value, bool) or (isinstance(value, int)):
        return "int64"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "image" if _IMAGE_NAME.fullmatch(value) else "bytes"
    if isinstance(value, list):
        if any(isinstance(v, (list, dict)) for v in value):
            return "invalid"  # no type holds lists of lists (and a deep one would recurse)
        inner = {value_type(v, False) for v in value}
        if not inner:
            return "list"
        if inner <= {"int64"}:
            return "int64_list"
        if inner <= {"int64", "float"}:
            return "float_list"
        if inner <= {"bytes", "image"}:
            return "bytes_list"
    return "invalid"


def merge_types(a: str | None, b: str | None) -> str | None:
    """The type holding both, or raise ``ValueError`` when none does."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    pair = {a, b}
    if pair == {"int64", "float"}:
        return "float"
    if pair == {"int64_list", "float_list"}:
        return "float_list"
    if pair == {"image", "bytes"}:
        return "bytes"
    if "list" in pair and (pair - {"list"}).pop().endswith("_list"):
        return (pair - {"list"}).pop()
    raise ValueError(f"{a} vs {b}")


def infer_schema(options: TableOptions) -> Schema:
    """Read the first ``options.schema_sample_rows`` rows and return every column's type
    (see the module docstring); the rest of the manifest is not opened here.

    With ``options.schema`` the types come from that file and the sample only checks that
    every column is named. The split column's values in the sample are the run's splits
    (unless ``options.splits`` names them); the workers reject later rows that disagree.

    Raises:
        TableError: a type disagreement (naming both lines), an unknown column or type,
            no image column, a manifest without rows.
    """
    path = options.manifest
    given = load_schema_file(options.schema) if options.schema else None
    types: dict[str, str | None] = {}
    first: dict[str, int] = {}
    splits: dict[str, int] = {}
    rows = 0
    from_csv = is_csv(path)
    header: tuple[str, ...] = ()
    line_breaks_in_cells = False
    first_problem: tuple[int, str] | None = None
    limit = options.schema_sample_rows or None
    seen = 0
    sample = iter_rows(path)
    with closing(sample):  # leaving the loop early closes the file unread
        for seen, (line, row) in enumerate(sample, 1):
            if limit is not None and seen > limit:
                break  # rows that do not parse count too: the sample stays bounded
            if isinstance(row, str):
                if line == 1 and from_csv:
                    raise TableError(f"{path}:1: {row}")
                first_problem = first_problem or (line, row)
                continue
            rows += 1
            if from_csv and not header:
                header = tuple(row)
                line_breaks_in_cells = any(_breaks_line(c) for c in header)
            if from_csv and not line_breaks_in_cells:
                line_breaks_in_cells = any(_breaks_line(v) for v in row.values())
            if options.split_column and not options.splits and options.split_column in row:
                # A column no row has is named below, with the columns there are.
                _note_split(path, line, row, options.split_column, splits)
            for column, value in row.items():
                if given is not None:
                    if column not in given:
                        raise TableError(f"{path}:{line}: column {column!r} is not in the "
                                         f"schema {options.schema}; add it there")
                    continue
                kind = value_type(value, from_csv)
                if kind == "invalid":
                    raise TableError(f"{path}:{line}: column {column!r} holds {_short(value)}, "
                                     "which is no feature type (nested or mixed lists, objects)")
                if column not in types:
                    types[column], first[column] = kind, line
                    continue
                known = types[column]
                try:
                    merged = merge_types(known, kind)
                except ValueError:
                    raise TableError(
                        f"{path}:{line}: column {column!r} is {kind} ({_short(value)}) but it is "
                        f"{known} from line {first[column]} on; the type of a feature must be the "
                        "same across the dataset. Fix the row, or give the types with --schema."
                    ) from None
                if known is None and merged is not None:
                    first[column] = line
                types[column] = merged
    if rows == 0 and first_problem:
        line, problem = first_problem
        with filesystems.open_read(path) as raw:
            archive = archive_kind(raw.read(512))
        if archive:
            raise TableError(f"{path} is a {archive} archive: a manifest is read as it is "
                             "(in byte ranges, by many workers); extract it and pass the file")
        if limit is not None and seen > limit:
            raise TableError(
                f"{path}: none of the first {limit} lines read for the schema is a row (line "
                f"{line}: {problem}); fix them, or read further with --schema-sample-rows")
        if not from_csv and not path.lower().endswith((".jsonl", ".json", ".ndjson")):
            raise TableError(
                f"{path}: no line of it is a row (line {line}: {problem}); it was read as "
                "JSON Lines, as every manifest not named .csv or .tsv is: a CSV manifest "
                "must be named .csv")
        raise TableError(f"{path}: no line of it is a row (line {line}: {problem}); is it a "
                         "CSV or JSON Lines manifest?")
    if rows == 0:
        raise TableError(f"{path} holds no rows")
    resolved = dict(given) if given is not None else {c: _settle(t) for c, t in types.items()}
    for column in options.image_columns:
        if column not in resolved:
            raise TableOptionError(f"{path}: --image-columns names {column!r}, which is not a "
                                   f"column; the columns are {', '.join(map(repr, resolved))}")
        resolved[column] = "image"
    images = tuple(c for c, t in resolved.items() if t == "image")
    if not images:
        raise TableError(f"{path}: no column holds image paths (values ending in .jpg, .png...); "
                         "name it with --image-columns or give it the type 'image' in --schema")
    for column, flag in ((options.split_column, "--split-column"), (options.group_by, "--group-by")):
        if column and column not in resolved:
            raise TableOptionError(f"{path}: {flag} names {column!r}, which is not a column; "
                                   f"the columns are {', '.join(map(repr, resolved))}")
    _refuse_image_feature_names(path, resolved, images, options.split_column)
    one_reader = ("--csv-multiline" if from_csv and options.csv_multiline
                  else "quoted fields in its first rows hold line breaks" if line_breaks_in_cells
                  else "its lines end in a carriage return alone" if _cr_line_ends(path)
                  else None)
    return Schema(resolved, images, options.splits or tuple(sorted(splits)), header, one_reader,
                  sample_rows=options.schema_sample_rows, inferred=given is None)


def image_features(image_columns: Sequence[str]) -> dict[str, str]:
    """Feature name -> kind of what the images of a row write: ``image/encoded``... for
    one image column, ``<column>/encoded``... for each of several."""
    features = {}
    for column in image_columns:
        prefix = feature_keys.IMAGE_PREFIX if len(image_columns) == 1 else f"{column}/"
        features.update({prefix + key.removeprefix(feature_keys.IMAGE_PREFIX): kind for key, kind in IMAGE_KINDS.items()
                         if key != feature_keys.SOURCE_ID})
    return features


def _refuse_image_feature_names(path: str, types: dict[str, str], images: tuple[str, ...],
                                split_column: str | None) -> None:
    """Raise :class:`TableOptionError` for columns written under a name an image's own
    feature has (``image/height``): one would replace the other in the Example."""
    taken = image_features(images)
    clashes = [c for c in types if c in taken and c not in images and c != split_column]
    if clashes:
        named = ", ".join(map(repr, clashes))
        raise TableOptionError(
            f"{path}: the column{'s' if len(clashes) > 1 else ''} {named} would be written "
            "under the name of a feature the image writes itself (the image's bytes, format, "
            "size, file name and hash, under image/ or <image column>/); rename "
            f"{'them' if len(clashes) > 1 else 'it'} in the manifest")


def _cr_line_ends(path: str) -> bool:
    """Whether the manifest's first line ends in a carriage return alone (classic Mac line
    ends, as Excel's "CSV (Macintosh)" saves): its byte ranges, cut at ``\\n``, would hold
    one line, so one worker reads it, as the launcher's sample did."""
    with filesystems.open_read(path) as raw:
        first = raw.readline(1 << 15)  # a header's worth: a CSV's first line is its header
    return b"\r" in first.rstrip(b"\r\n")


def _breaks_line(cell: str) -> bool:
    return "\n" in cell or "\r" in cell


def _settle(kind: str | None) -> str:
    # A column that is always missing or always [] has no type of its own; bytes is the
    # loosest choice and writes empty values.
    return {None: "bytes", "list": "bytes_list"}.get(kind, kind)


def _note_split(path: str, line: int, row: dict, column: str, splits: dict[str, int]) -> None:
    value = row.get(column)
    name = str(value) if value not in (None, "") else ""
    if not _SPLIT_NAME.fullmatch(name):
        raise TableError(f"{path}:{line}: split column {column!r} holds {_short(value)}; split "
                         "names are letters, digits and underscores")
    splits.setdefault(name, line)
    if len(splits) > MAX_SPLITS:
        raise TableError(f"{path}: split column {column!r} has more than {MAX_SPLITS} distinct "
                         "values; is it really the split?")


def load_schema_file(path: str) -> dict[str, str]:
    """``{"column": "type"}`` from a JSON file (``{"columns": {...}}`` also accepted)."""
    try:
        data = json.loads(filesystems.read_bytes(path).decode("utf-8"))
    except UnicodeDecodeError:
        raise TableOptionError(f"{path}: cannot read the schema: it is not UTF-8 text; --schema "
                               'takes a JSON file {"column": "type", ...}') from None
    except (OSError, ValueError) as error:
        raise TableOptionError(f"{path}: cannot read the schema ({error}); --schema takes a "
                               'JSON file {"column": "type", ...}') from None
    columns = data.get("columns", data) if isinstance(data, dict) else None
    if not isinstance(columns, dict) or not columns:
        raise TableOptionError(f'{path}: a schema is a JSON object {{"column": "type", ...}}')
    out = {}
    for column, kind in columns.items():
        kind = _ALIASES.get(kind, kind) if isinstance(kind, str) else kind
        if kind not in TYPES:
            raise TableOptionError(f"{path}: column {column!r} has type {kind!r}; use one of "
                                   f"{', '.join(TYPES)}")
        out[column] = kind
    return out


def _short(value: Any) -> str:
    if isinstance(value, str):
        value = value[:41]  # a value may be a whole line of any length
    try:
        text = json.dumps(value, ensure_ascii=False)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= 40 else text[:37] + "..."


def convert_value(value: Any, kind: str, from_csv: bool) -> Any:
    """A cell as the Python value its type writes (None when missing).

    Raises:
        ValueError: the value does not fit the type (the message says why).
    """
    if value is None or (from_csv and value == ""):
        return None
    if kind in ("bytes", "image"):
        if isinstance(value, (dict, list)):
            raise ValueError(f"{_short(value)} is not text")
        return value if isinstance(value, str) else json.dumps(value)
    if kind.endswith("_list"):
        if from_csv and isinstance(value, str):
            try:
                value = json.loads(value)
            except (json.JSONDecodeError, RecursionError):
                raise ValueError(f"{_short(value)} is not a JSON list") from None
        if not isinstance(value, list):
            raise ValueError(f"{_short(value)} is not a list")
        return [convert_value(v, kind[: -len("_list")], False) for v in value]
    if from_csv and isinstance(value, str):
        try:
            value = (
                int(value) if kind == "int64" and _INT.fullmatch(value.strip()) else float(value)
            )
        except ValueError:
            raise ValueError(f"{_short(value)} is not a number") from None
    if kind == "int64":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise ValueError(f"{_short(value)} is not an integer")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{_short(value)} is not a number")
    return float(value)


def resolve_image_path(base_dir: str, value: str) -> str:
    """An image path from the manifest: URLs and absolute paths as they are, else
    relative to the manifest's folder."""
    if "://" in value or value.startswith("/"):
        return value
    return filesystems.join(base_dir, value)


def manifest_dir(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def split_by_fraction(key: str, fractions: Sequence[tuple[str, float]]) -> str:
    """The split ``key`` falls in, by a salted hash and cumulative fractions."""
    share = split_share(key)
    total = 0.0
    for name, fraction in fractions:
        total += fraction
        if share < total:
            return name
    return fractions[-1][0]


# --- pipeline ---------------------------------------------------------------------------


class ManifestRange(NamedTuple):
    """Bytes ``[start, end)`` of the manifest, read by one task: the lines that begin in
    them. ``end`` -1 reads to the end as one text stream (a CSV whose quoted fields hold
    line breaks cannot be cut: a range could begin inside a field)."""

    index: int
    start: int
    end: int


def range_count(size: int, range_bytes: int) -> int:
    """How many equal ranges a manifest of ``size`` bytes is cut into: none longer than
    ``range_bytes``, and up to :data:`MIN_RANGES` while each keeps :data:`MIN_RANGE_BYTES`."""
    return max(1, math.ceil(size / range_bytes), min(MIN_RANGES, size // MIN_RANGE_BYTES))


def plan_ranges(path: str, schema: Schema, range_bytes: int) -> list[ManifestRange]:
    """Cut the manifest into :func:`range_count` ranges, or one when it cannot be cut."""
    size = filesystems.size_of(path)
    reason = schema.one_reader_reason or (size is None and "its size is unknown")
    if reason:
        logging.info("%s: one worker reads the manifest (%s)", path, reason)
        return [ManifestRange(0, 0, -1)]
    count = range_count(size, range_bytes)
    return [ManifestRange(i, i * size // count, (i + 1) * size // count) for i in range(count)]


#: The longest line of a manifest read as a row (64 MiB); a longer one is a reject, read
#: past in pieces, never held: a manifest is a table of paths and values.
MAX_ROW_BYTES = 64 << 20
_SKIP_PIECE = 1 << 20


def bounded_lines(stream: Any, limit: int = MAX_ROW_BYTES) -> Iterator[Any]:
    """The lines of ``stream`` (bytes or text, with their line ends), each as it is, or,
    for a line longer than ``limit``, its length (an ``int``): its content is read past
    in pieces."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        newline = "\n" if isinstance(line, str) else b"\n"
        if len(line) <= limit or line.endswith(newline):
            yield line
            continue
        size = len(line)
        while not line.endswith(newline):
            line = stream.readline(_SKIP_PIECE)
            if not line:
                break
            size += len(line)
        yield size


def too_long(size: int, unit: str = "bytes") -> str:
    return (f"is {size:,} {unit} long, more than the {MAX_ROW_BYTES:,} a row may be (it was "
            "not read)")


def range_lines(raw: BinaryIO, start: int, end: int) -> Iterator[bytes | int]:
    """The lines (with their ``\\n``) that begin in ``[start, end)`` of ``raw``; the length
    of a line longer than :data:`MAX_ROW_BYTES` instead (see :func:`bounded_lines`).

    A range that starts mid-line leaves that line to the range before it, which reads
    on past its own end to finish it: every line is read exactly once.
    """
    if start > 0:
        raw.seek(start - 1)
        next(bounded_lines(raw), None)  # the line holding byte start-1 began before
    position = raw.tell()
    lines = bounded_lines(raw)
    while position < end:
        line = next(lines, None)
        if line is None:
            return
        yield line
        position += line if isinstance(line, int) else len(line)


class RangeRow(NamedTuple):
    """A row as a range reader found it, before its absolute line is known: the typed
    row (image paths resolved), or the reason and detail of its reject."""

    range_index: int
    local_line: int
    row: dict[str, Any] | None
    reason: str = ""
    detail: str = ""


def _bad_row(problem: str) -> tuple[None, str, str]:
    return None, "bad_row", f"row {problem}; fix or remove the line"


class _ReadRange(beam.DoFn):
    """Reads one :class:`ManifestRange` and checks every row against the schema: yields
    :class:`RangeRow`s, and ``(range index, lines read)`` to ``line_counts``."""

    def __init__(self, options: TableOptions, schema: Schema) -> None:
        self._options = options
        self._schema = schema

    def process(self, piece: ManifestRange):
        path = self._options.manifest
        from_csv = is_csv(path)
        # Read whole, the range starts at line 1: iter_rows' lines are the range's.
        rows = iter_rows(path) if piece.end < 0 else self._lines(path, piece, from_csv)
        lines = 0  # the last line number is the range's line count: blank lines are yielded
        for lines, row in rows:
            if row is not None:
                checked = _bad_row(row) if isinstance(row, str) else self._check(row, from_csv)
                yield RangeRow(piece.index, lines, *checked)
        yield TaggedOutput("line_counts", (piece.index, lines))

    def _lines(self, path: str, piece: ManifestRange,
               from_csv: bool) -> Iterator[tuple[int, dict | str | None]]:
        """``(line in the range, row or problem)`` for every line, None for blank ones."""
        header = self._schema.header
        delimiter = "\t" if path.lower().endswith(".tsv") else ","
        with filesystems.open_read(path) as raw:
            for line, data in enumerate(range_lines(raw, piece.start, piece.end), 1):
                at_top = piece.start == 0 and line == 1
                if isinstance(data, int):
                    yield line, too_long(data)
                    continue
                try:
                    text = data.decode("utf-8-sig" if at_top else "utf-8")
                except UnicodeDecodeError:
                    yield line, NOT_UTF8
                    continue
                if from_csv:
                    # Line 1 is the header, read (and checked) by the launcher.
                    yield line, None if at_top else _csv_line(text, header, delimiter)
                else:
                    yield line, _json_line(text)

    def _check(self, row: dict[str, Any], from_csv: bool) -> tuple[dict | None, str, str]:
        """The typed row (image paths resolved), or None and the reject's reason and detail."""
        schema, opts = self._schema, self._options
        typed = {}
        for column, kind in schema.types.items():
            try:
                typed[column] = convert_value(row.get(column), kind, from_csv)
            except ValueError as error:
                return _bad_row(f"column {column!r}: {error} but the column's type is {kind}"
                                f"{self._sample_hint()}")
        unknown = [c for c in row if c not in schema.types]
        if unknown:
            return _bad_row(f"has the column {unknown[0]!r}, which the schema lacks"
                            f"{self._sample_hint()}")
        missing_images = [c for c in schema.image_columns if typed[c] is None]
        if missing_images:
            return _bad_row(f"names no image in column {missing_images[0]!r}")
        if opts.split_column:
            split_problem = self._split_problem(typed.get(opts.split_column))
            if split_problem:
                return None, "unknown_split", split_problem
        unsafe = [(c, why) for c in schema.image_columns
                  if (why := filesystems.leaves_root(typed[c], urls_allowed=True))]
        if unsafe and not opts.allow_outside_root:
            column, why = unsafe[0]
            return None, "outside_root", (
                f"column {column!r}: {typed[column]!r} {why}; rows may name files below the "
                "manifest's folder or URLs (pass --allow-outside-root to read it anyway)")
        base = manifest_dir(opts.manifest)
        for column in schema.image_columns:
            typed[column] = resolve_image_path(base, typed[column])
        return typed, "", ""

    def _sample_hint(self) -> str:
        if not self._schema.inferred or not self._schema.sample_rows:
            return ""
        return (f" (types are inferred from the first {self._schema.sample_rows} rows; "
                "give every column's type with --schema FILE, or sample more with "
                "--schema-sample-rows)")

    def _split_problem(self, value: Any) -> str | None:
        column, splits = self._options.split_column, self._schema.splits
        name = str(value) if value not in (None, "") else ""
        if not _SPLIT_NAME.fullmatch(name):
            return (f"split column {column!r} holds {_short(value)}; split names are letters, "
                    "digits and underscores; fix or remove the line")
        if name in splits:
            return None
        learned = ("named by --splits" if self._options.splits
                   else f"found in the first {self._schema.sample_rows} rows")
        return (f"split {name!r} is not among the splits {learned} ({', '.join(splits)}); "
                f"name them all with --splits {','.join((*splits, name))}")


def _csv_line(text: str, header: Sequence[str], delimiter: str) -> dict[str, str] | str | None:
    """One physical CSV line as a row, a problem, or None (blank line)."""
    try:
        cells = next(csv.reader([text], delimiter=delimiter), [])
    except csv.Error as error:
        return f"not valid CSV ({error})"
    if any(_breaks_line(c) for c in cells):
        return ("has a quoted field that runs past the end of the line; if fields hold line "
                "breaks, pass --csv-multiline")
    return _csv_row(cells, header)


def _json_line(content: str) -> dict | str | None:
    """One JSON Lines line as a row, a problem, or None (blank line)."""
    if not content.strip():
        return None
    try:
        row = json.loads(content)
    except json.JSONDecodeError as error:
        return f"not valid JSON ({error.msg} at column {error.colno})"
    except RecursionError:
        return "nests arrays or objects too deeply to be read (a row is one object of values)"
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not an object with one key per column"
    if "\\u" in content and not is_text(json.dumps(row, ensure_ascii=False)):
        return ("holds a \\u escape of a lone surrogate (\\ud800 to \\udfff), which is no "
                "character: write the character itself, or a pair of escapes")
    return row


def first_lines(line_counts: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Range index -> the manifest line its first line is (ranges tile the file in order)."""
    out, line = {}, 1
    for index, count in sorted(line_counts):
        out[index] = line
        line += count
    return out


class _NumberRows(beam.DoFn):
    """:class:`RangeRow` -> ``(line, typed row)``, or its reject naming ``<manifest>:<line>``."""

    def __init__(self, manifest: str) -> None:
        self._manifest = manifest
        self._starts: dict[int, int] | None = None

    def process(self, found: RangeRow, line_counts: list[tuple[int, int]]):
        if self._starts is None:  # the side input is the same for every element
            self._starts = first_lines(line_counts)
        line = self._starts[found.range_index] + found.local_line - 1
        if found.row is None:
            yield TaggedOutput("rejects", Reject(
                "image", f"{self._manifest}:{line}", found.reason, found.detail))
        else:
            yield line, found.row


def _size_images(element):
    """path -> (its references, its listing) -> ``(line, (path, (size, modification
    time) or None))`` for each reference. (Beam callables here go without annotations:
    Beam would check the joins' elements against them.)"""
    path, grouped = element
    listed = list(grouped["files"])
    state = tuple(listed[0]) if listed else None
    if state is None:  # outside the manifest's folder: this one file's metadata
        found = filesystems.file_metadata(path)  # a bad URL is a missing image
        state = None if found is None else (found.size_in_bytes, listed_time(found))
    for line in grouped["refs"]:
        yield line, (path, state)


class BuiltRow(NamedTuple):
    """A manifest row with its images located: what becomes one example, or one step of
    a sequence (then it crosses the shuffle that groups rows as its fields).

    ``images`` holds ``(column, path, size)`` per image column; ``row`` the other columns;
    ``modified`` each image's listed modification time, in the order of ``images``.
    """

    split: str
    line: int
    row: dict[str, Any]
    images: tuple[tuple[str, str, int], ...]
    modified: tuple[float, ...] = ()


beam.coders.registry.register_coder(BuiltRow, NamedTupleCoder)
beam.coders.registry.register_coder(RangeRow, NamedTupleCoder)


def _build_row(element, opts, image_columns):
    """line -> (typed row, image sizes) -> :class:`BuiltRow`, or the reject of a row
    naming an image that is not there."""
    line, grouped = element
    rows, sizes = list(grouped["rows"]), dict(grouped["sizes"])
    if not rows:
        return
    row = dict(rows[0])  # inputs must not be mutated
    images, modified = [], []
    for column in image_columns:
        path = row.pop(column)
        state = sizes.get(path)
        if state is None:
            yield TaggedOutput("rejects", Reject(
                "image", path, "missing", f"{opts.manifest}:{line} names {path} (column "
                f"{column!r}), which does not exist; fix the path or remove the row",
                split=_row_split(row, path, opts)))
            return
        images.append((column, path, state[0]))
        modified.append(state[1])
    _column, first_path, _size = images[0]
    yield BuiltRow(_row_split(row, first_path, opts), line, row, tuple(images), tuple(modified))


def _row_split(row: dict, first_image: str, opts: TableOptions) -> str:
    if opts.split_column:
        return str(row[opts.split_column])
    if opts.group_by:
        return opts.split  # decided per group later
    if opts.split_fractions:
        return split_by_fraction(_relative(opts.manifest, first_image), opts.split_fractions)
    return opts.split


def _image_refs(typed_row: tuple[int, dict[str, Any]],
                image_columns: Sequence[str]) -> list[tuple[str, int]]:
    """``(path, line)`` of each image a typed row names."""
    line, values = typed_row
    return [(values[column], line) for column in image_columns]


def _relative(manifest: str, path: str) -> str:
    base = manifest_dir(manifest).rstrip("/") + "/"
    return path[len(base) :] if path.startswith(base) else path


def _row_record(built: BuiltRow, options: TableOptions) -> ImageRecord:
    split, line, row, images, modified = built
    if options.split_column:
        row = {k: v for k, v in row.items() if k != options.split_column}
    _column, first_path, _size = images[0]
    first = _relative(options.manifest, first_path)
    canonical = json.dumps([[c, _relative(options.manifest, p)] for c, p, _ in images] + [row],
                           sort_keys=True, ensure_ascii=False)
    return ImageRecord(
        identity=f"{first}\0{canonical}", path=first_path,
        size=sum(size for _column, _path, size in images), split=split,
        labels={"row": row, "images": images, "line": line}, modified=modified)


def varying_columns(group: tuple[str, Iterable[BuiltRow]]) -> set[str]:
    """Columns whose value is not the same in every row of a group."""
    _key, members = group
    head, *rest = [m.row for m in members]
    return {c for c in head if any(r.get(c) != head[c] for r in rest)}


def _group_record(element: tuple[str, Iterable[BuiltRow]], varying: set[str],
                  options: TableOptions, schema: Schema) -> ImageRecord:
    key, members = element
    members = sorted(members, key=lambda m: m.line)  # manifest order
    rows = [m.row for m in members]
    splits = sorted({m.split for m in members})
    split = splits[0]
    if options.split_fractions:
        split = split_by_fraction(f"group:{key}", options.split_fractions)
    written = [c for c in schema.types
               if c not in schema.image_columns and c != options.split_column]
    context = {c: rows[0].get(c) for c in written if c not in varying}
    steps = {c: [r.get(c) for r in rows] for c in written if c in varying}
    images = tuple(m.images for m in members)
    _column, first_path, _size = images[0][0]
    return ImageRecord(
        identity=f"group:{key}", path=first_path,
        size=sum(size for step in images for _column, _path, size in step), split=split,
        labels={"context": context, "steps": steps, "images": images,
                "lines": [m.line for m in members],
                "mixed_splits": splits if len(splits) > 1 else []},
        modified=tuple(seconds for m in members for seconds in m.modified))


class ReadTable(beam.PTransform):
    """Read a CSV/JSONL manifest into ``ImageRecord``s (one per row, or per group).

    Construction reads the first rows on the launcher (:func:`infer_schema`) and plans
    the byte ranges the workers read (:attr:`ranges`); :attr:`schema` and :attr:`splits`
    are then known. Returns a dict like ``ReadCoco``.
    ``skip_below``, a folder inside the manifest's folder (the output folder, when it was
    put there), is left out of the listing and the inputs fingerprint.
    """

    def __init__(self, options: TableOptions, schema: Schema | None = None,
                 skip_below: str | None = None) -> None:
        super().__init__()
        self._options = options
        self._skipped_prefix = skipped_prefix(manifest_dir(options.manifest), skip_below)
        self.input_roots = options.input_roots()
        self.schema = schema or infer_schema(options)
        #: The byte ranges the workers read, one task each.
        self.ranges = plan_ranges(options.manifest, self.schema, options.range_bytes)
        if options.split_column:
            self.splits: tuple[str, ...] = self.schema.splits or (options.split,)
        elif options.split_fractions:
            self.splits = tuple(name for name, _ in options.split_fractions)
        else:
            self.splits = (options.split,)

    def expand(self, pbegin):
        opts, schema = self._options, self.schema
        found = (
            pbegin
            | "ManifestRanges" >> beam.Create(self.ranges)
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRanges" >> beam.ParDo(_ReadRange(opts, schema)).with_output_types(RangeRow)
            .with_outputs("line_counts", main="rows")
        )
        read = found.rows | "NumberRows" >> beam.ParDo(  # line_counts: (range index, lines)
            _NumberRows(opts.manifest), AsList(found.line_counts)
        ).with_outputs("rejects", main="rows")
        image_columns = schema.image_columns
        refs = read.rows | "ImageRefs" >> beam.FlatMap(_image_refs, image_columns)  # (path, line)
        base = manifest_dir(opts.manifest).rstrip("/")
        listing = pbegin | "ListFolder" >> ListFilesBelow(base, self._skipped_prefix)
        files = listing | "KeyByPath" >> beam.Map(
            lambda m: (m.path, (m.size_in_bytes, listed_time(m))))
        sizes = (
            {"refs": refs, "files": files}
            | "JoinImages" >> beam.CoGroupByKey()
            | "ImageSizes" >> beam.FlatMap(_size_images).with_output_types(Any)
        )
        built = (
            {"rows": read.rows, "sizes": sizes}
            | "JoinRows" >> beam.CoGroupByKey()
            | "BuildRows" >> beam.FlatMap(_build_row, opts, schema.image_columns)
            .with_output_types(BuiltRow)
            .with_outputs("rejects", main="rows")
        )
        if opts.group_by:
            group = opts.group_by
            grouped = (
                built.rows
                | "KeyByGroup" >> beam.Map(lambda built: (json.dumps(built.row[group]), built))
                .with_output_types(tuple[str, BuiltRow])
                | "GroupRows" >> beam.GroupByKey()  # (group value as JSON, [BuiltRow])
            )
            varying = (  # the columns that vary within some group
                grouped
                | "VaryingColumns" >> beam.Map(varying_columns)
                | "AnyGroup" >> beam.CombineGlobally(lambda found: set().union(*found))
            )
            records = grouped | "BuildGroups" >> beam.Map(
                lambda g, v: _group_record(g, v, opts, schema), AsSingleton(varying)
            ).with_output_types(ImageRecord)
        else:
            records = built.rows | "BuildRecords" >> beam.Map(
                _row_record, opts).with_output_types(ImageRecord)
        manifest_file = pbegin | "ManifestFile" >> MatchFile(opts.manifest)
        terms = input_terms((listing, manifest_file) | "AllInputs" >> beam.Flatten())
        schema_json = {**schema.to_json(), "group_by": opts.group_by}
        task = "sequence" if opts.group_by else "table"
        metadata = pbegin | "Metadata" >> beam.Impulse() | "Schema" >> beam.Map(
            lambda _, t: {"task": task, "schema": schema_json, "inputs": inputs_entry(t)}, terms,
        ).with_output_types(Any)
        rejects = (read.rejects, built.rejects) | "TableRejects" >> beam.Flatten()
        counts = pbegin | "NoCounts" >> beam.Create([])
        return SourceRead(records, rejects, counts, metadata)


def _value(value: Any) -> Any:
    return [] if value is None else value


class TableEncoder(ImageExampleEncoder):
    """Writes manifest rows as Examples, or groups as SequenceExamples.

    Image columns: with one, the usual ``image/encoded``, ``image/format``,
    ``image/height``, ``image/width``, ``image/filename``, ``image/key/sha256``; with
    several, the same under ``<column>/``. Other columns are features named as the column.
    """

    def __init__(self, schema: Schema, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._schema = schema
        self._kinds = {**{c: FEATURE_KIND[t] for c, t in schema.types.items() if t in FEATURE_KIND},
                       **image_features(schema.image_columns)}
        self.list_features = frozenset(c for c, t in schema.types.items() if t.endswith("_list"))

    def _prefix(self, column: str) -> str:
        return feature_keys.IMAGE_PREFIX if len(self._schema.image_columns) == 1 else f"{column}/"

    def example_settings(self) -> dict[str, Any]:
        return {"schema": self._schema.to_json()}

    def input_labels(self, record: ImageRecord) -> Any:
        # Where a row sits in the manifest is not written: a row added above it leaves
        # its example as it is.
        return {k: v for k, v in record.labels.items() if k not in ("line", "lines")}

    def input_files(self, record: ImageRecord) -> tuple[str, ...]:
        images = record.labels["images"]
        steps = images if "steps" in record.labels else (images,)
        return tuple(path for step in steps for _column, path, _size in step)

    def _load_images(self, images: Iterable[tuple[str, str, int]],
                     counts: dict[str, int]) -> list[tuple[dict[str, Any], bytes]] | Reject:
        """Each image's features and digest, adding its counts to ``counts``; or the
        first image's reject."""
        out = []
        for column, path, size in images:
            name = path.rsplit("/", 1)[-1]
            loaded = self.load_image(path, size, name)
            if isinstance(loaded, Reject):
                return loaded
            prefix = self._prefix(column)
            features = {prefix + k: v for k, v in loaded.fields.items()}
            features[prefix + "filename"] = name
            for k, v in loaded.counts.items():
                counts[k] = counts.get(k, 0) + v
            out.append((features, loaded.digest))
        return out

    def image_digest(self, record: ImageRecord) -> bytes | None:
        """A row's one image's SHA-256; rows with several images, and groups, are not
        compared (None)."""
        images = record.labels.get("images", ())
        if "steps" in record.labels or len(images) != 1:
            return None
        _column, path, size = images[0]
        return self._digest_of(path, size)

    def encode(self, record: ImageRecord) -> Encoded:
        if "steps" in record.labels:
            return self._encode_group(record)
        counts: dict[str, int] = {}
        loaded = self._load_images(record.labels["images"], counts)
        if isinstance(loaded, Reject):
            return Encoded(rejects=(loaded,))
        features = {name: value for image, _digest in loaded for name, value in image.items()}
        features.update({column: _value(value) for column, value in record.labels["row"].items()})
        counts["images_written"] = 1
        return Encoded(
            features=features, kinds=self._kinds, counts=counts,
            image_digest=loaded[0][1] if len(loaded) == 1 else None,
        )

    def _encode_group(self, record: ImageRecord) -> Encoded:
        labels = record.labels
        lists: dict[str, list] = {c: [_value(v) for v in vs] for c, vs in labels["steps"].items()}
        counts: dict[str, int] = {}
        loaded = self._load_images([image for step in labels["images"] for image in step], counts)
        if isinstance(loaded, Reject):
            return Encoded(rejects=(loaded,))
        for image, _digest in loaded:
            for name, value in image.items():
                lists.setdefault(name, []).append(value)
        counts["images_written"] = len(labels["images"])
        counts["sequences_written"] = 1
        rejects = ()
        if labels["mixed_splits"]:
            rejects = (Reject("warning", f"group {record.identity[6:]}", "mixed_splits",
                              f"rows of this group name the splits {labels['mixed_splits']}; "
                              f"the group was written to {record.split}"),)
        context = {c: _value(v) for c, v in labels["context"].items()}
        return Encoded(sequence=(context, lists), kinds=self._kinds, counts=counts,
                       rejects=rejects)


#: Options of ``convert manifest`` added after its first release: recorded only when set,
#: so outputs made without them keep their manifests and fingerprints. ``range_bytes``
#: (how the reading is spread) never changes the output, so it is never recorded.
_LATER_TABLE_OPTIONS = {"schema_sample_rows": DEFAULT_SAMPLE_ROWS, "splits": (),
                        "csv_multiline": False}


def table_settings(table: TableOptions, shards: ShardOptions, checks: ImageChecks,
                   fixes: ImageFixes | None = None) -> dict[str, Any]:
    settings = settings_of("manifest", table, shards, checks, fixes)
    settings["manifest"] = {
        key: value for key, value in settings["manifest"].items()
        if key != "range_bytes" and _LATER_TABLE_OPTIONS.get(key, "always") != value}
    return settings


def to_tfrecord(p: beam.Pipeline, output_dir: str, table: TableOptions, shards: ShardOptions,
                checks: ImageChecks, fixes: ImageFixes | None = None) -> WriteShards:
    """Add the CSV/JSONL manifest conversion to ``p``; returns the sink.

    Reads the manifest's first rows here, on the launcher, to learn the column types
    (:func:`infer_schema`); raises ``TableError`` on a disagreement among them. The
    workers check the other rows.
    """
    read = ReadTable(table, skip_below=output_dir)
    layout.check_labels_agree(output_dir, read.splits, dict)  # tables have no label map
    encoder = TableEncoder(read.schema, checks, read.splits[0], fixes)
    return write_read(p, "ReadTable", read, output_dir, encoder, shards,
                      table_settings(table, shards, checks, fixes), read.splits)


def _names(text: str | None) -> tuple[str, ...]:
    """A comma-separated option's names, blanks left out."""
    return tuple(name.strip() for name in (text or "").split(",") if name.strip())


def prepare(request: Request) -> Conversion:
    """``convert manifest``: checks the manifest and the schema file, reads the first rows
    for the column types and the splits (a ``TableError`` names the line of a row that
    disagrees), and refuses a typed --split beside --split-column."""
    require_file(request.input, "--input", "file", "a .csv or .jsonl file with one row per "
                 "example")
    if request.schema:
        require_file(request.schema, "--schema", "file", 'a JSON file such as {"label": "int64"}')
    # --split is a split name, or fractions such as train=0.8,val=0.2 (split by hash).
    fractions = parse_split_fractions(request.split) if "=" in request.split else ()
    table = TableOptions(
        request.input, fractions[0][0] if fractions else request.split, request.schema,
        _names(request.image_columns), request.split_column, fractions, request.group_by,
        request.allow_outside_root, schema_sample_rows=request.schema_sample_rows,
        splits=_names(request.splits), csv_multiline=request.csv_multiline,
    )
    read = ReadTable(table)  # reads the first rows to learn the column types
    if request.split_column and not fractions:
        refuse_split(request, read.splits, f"the column {request.split_column!r} "
                     "(--split-column) names each row's split", accepted=False)
    # What --if-changed lists: the manifest twice, as ReadTable's fingerprint has it, in its
    # folder's listing and on its own (the file may lie anywhere, e.g. on another bucket).
    patterns = [filesystems.everything_below(manifest_dir(table.manifest)),
                filesystems.literal(table.manifest)]
    return Conversion(
        splits=read.splits, input_patterns=patterns,
        settings=lambda shards, checks, fixes: table_settings(table, shards, checks, fixes),
        build=lambda p, shards, checks, fixes: to_tfrecord(p, request.output, table, shards,
                                                            checks, fixes))
