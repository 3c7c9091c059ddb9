"""Formats that ship one or a few export files describing many images, beside a folder of
the images (Label Studio's JSON, CVAT's XML; the shape of COCO-like JSON).

A format describes itself with an :class:`ExportFormat`: its export files, its images
folder, its splits and classes, and ``parse``, plain Python that streams one export file
into :class:`ExportEntry`s (one per image it describes), ``Reject``s and ``(counter, n)``
counts, and :class:`Part`s where the export spreads an image over other elements (a
video's tracks). :class:`ReadExport` does the rest the same way for every such format:

* each export file is streamed on one worker (``parse``), the images folder listed on
  another, and the two joined on workers by the image's key: its path below the folder;
* the parts of one key are merged into its entries (``assemble``); an entry and one file
  make a ``ParsedImage``; an entry without file is rejected ``missing``; two entries of
  one split naming one image are rejected ``duplicate_file_name``, neither written; an
  image file no entry names is written with no objects, with a warning;
* class names become labels as for formats with one annotation file per image
  (:func:`~recordbeam.sources.annotated_files.class_names`,
  :func:`~recordbeam.sources.annotated_files.build_record`).

What such a format's plain Python shares besides: :class:`Unusable`, raised for what
becomes a reject; :func:`key_below`, the key of an image an export names by a path or
URL (refused outside the images folder); and :func:`export_conversion`, its conversion
once its inputs are checked. Its read transform subclasses :class:`ReadExport` naming the
format, its encoder :class:`ExportEncoder`.

A format whose export is one JSON array (``array_export``) parses one element at a time
(``parse_item``); an export file from ``byte_ranges.RANGED_FROM_BYTES`` on is then read in
byte ranges by all workers at once (:class:`ReadArrayRanges`), each element numbered as
in the whole array, so what is written is what the streamed read writes.
"""

from __future__ import annotations

import io
import os
import pickle
import posixpath
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple

import apache_beam as beam
import ijson
from apache_beam.pvalue import TaggedOutput

from recordbeam import feature_keys, filesystems
from recordbeam.errors import DataError
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources import byte_ranges
from recordbeam.sources.annotated_files import (
    ImageFile,
    JoinMessage,
    NamedObject,
    ParsedImage,
    build_record,
    class_names,
    detection_metadata,
    listed_images,
    listed_time,
    text_metadata,
)
from recordbeam.sources.classes_file import read_classes_file
from recordbeam.sources.conversion import conversion
from recordbeam.sources.detection import DetectionEncoder
from recordbeam.sources.fingerprint import input_terms
from recordbeam.sources.format import Conversion
from recordbeam.sources.json_depth import (
    BOM,
    JsonTooDeep,
    bounded,
    items_of_either_parser,
    refused_by_c_parser,
)
from recordbeam.sources.result import SourceRead


class ExportError(DataError, ValueError):
    """An export file that cannot be read at all: the run stops, naming it."""


def json_array_items(path: str, data: BinaryIO, what: str) -> Iterator[Any]:
    """The items of a JSON export holding one array (``data``, seekable), streamed
    (:mod:`.json_depth`). Raises :class:`ExportError` for a file that is no such array
    (``what`` says what is expected)."""

    def read(parser: Any) -> Iterator[Any]:
        data.seek(0)
        reader = bounded(data)
        try:
            yield from parser.items(reader, "item", use_float=True)
        except JsonTooDeep as error:
            raise ExportError(f"{path}: {error}; fix or export it again") from None
        except (ijson.JSONError, UnicodeDecodeError) as error:
            if refused_by_c_parser(parser, error):
                raise
            raise ExportError(f"{path}: malformed JSON (in the 64 KiB before byte "
                              f"{reader.tell()}): {error}; fix or export it again") from None

    found = False
    for item in items_of_either_parser(read):
        found = True
        yield item
    if not found:  # an empty array, or another document, whose "item"s are none
        data.seek(0)
        events = ijson.parse(io.BytesIO(data.read(1 << 16).removeprefix(BOM)))
        try:
            first = next(events, ("", ""))[1]
        except (ijson.JSONError, UnicodeDecodeError):  # a long string, a \udcxx escape
            first = None
        if first != "start_array":
            raise ExportError(f"{path} holds no JSON array; {what}")


class ExportEntry(NamedTuple):
    """One image as an export file describes it.

    Attributes:
        key: the image's path below the images folder, which its file is joined by.
        where: the export file and the element, for messages (``export.json: task 12``).
        split: the split it is written to.
        width, height: its size as the export says, or None.
        objects: its objects.
        image_labels: classes of the whole image, as ``(name, where)``.
        skipped: a counter: the image is not written, only counted (a task nobody
            annotated); its file is no image without entry either.
        source_id: the ``image/source_id`` written (a task's id); None: ``key``.
        export: the export file it was read from, where the format's messages name it.
    """

    key: str
    where: str
    split: str
    width: int | None = None
    height: int | None = None
    objects: tuple[NamedObject, ...] = ()
    image_labels: tuple[tuple[str, str], ...] = ()
    skipped: str | None = None
    source_id: str | None = None
    export: str | None = None


class Part(NamedTuple):
    """A piece of the image of ``key`` that an export keeps apart from its entry (a video
    track's shape on one frame): joined by ``key`` with the entries and the file, and
    merged into them by :meth:`ExportFormat.assemble`. ``value`` is of the format's
    ``part_type``."""

    key: str
    value: Any


class FieldsCoder(beam.coders.Coder):
    """A record that crosses a join as Beam's primitive values (its nested records as
    plain tuples: :meth:`fields`, :meth:`of_fields`); pickled when some text is not UTF-8
    (surrogate escapes), which Beam writes strictly. Subclasses name the ``kind``."""

    _primitives = beam.coders.FastPrimitivesCoder()
    kind: type = tuple

    def fields(self, value: Any) -> tuple:
        raise NotImplementedError

    def of_fields(self, fields: Sequence[Any]) -> Any:
        raise NotImplementedError

    def encode(self, value: Any) -> bytes:
        fields = self.fields(value)
        try:
            return b"\0" + self._primitives.encode(fields)
        except UnicodeEncodeError:
            return b"\1" + pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> Any:
        fields = (self._primitives.decode(encoded[1:]) if encoded[:1] == b"\0"
                  else pickle.loads(encoded[1:]))  # noqa: S301 - written by encode
        return self.of_fields(fields)

    def is_deterministic(self) -> bool:
        return False  # a value, never a key

    def to_type_hint(self) -> type:
        return self.kind


class ExportEntryCoder(FieldsCoder):
    """An :class:`ExportEntry`, its objects as plain tuples."""

    kind = ExportEntry

    def fields(self, value: ExportEntry) -> tuple:
        return (*value[:5], tuple(tuple(obj) for obj in value.objects), *value[6:])

    def of_fields(self, fields: Sequence[Any]) -> ExportEntry:
        objects = tuple(NamedObject(*obj) for obj in fields[5])
        labels = tuple(tuple(label) for label in fields[6])
        return ExportEntry(*fields[:5], objects, labels, *fields[7:])


beam.coders.registry.register_coder(ExportEntry, ExportEntryCoder)

#: The sides of the join, by the ``side`` of a :class:`Joined`.
_SIDES = ("entries", "files", "parts")


class Joined(NamedTuple):
    """What crosses the join for an image: an entry, a file or a part (``side``: an index
    of ``_SIDES``), ``encoded`` by the coder registered for its type."""

    side: int
    encoded: bytes


class JoinedCoder(beam.coders.Coder):
    """A :class:`Joined` as its side's byte and the value's bytes."""

    def encode(self, value: Joined) -> bytes:
        return bytes((value.side,)) + value.encoded

    def decode(self, encoded: bytes) -> Joined:
        return Joined(encoded[0], encoded[1:])

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return Joined


beam.coders.registry.register_coder(Joined, JoinedCoder)


class _Joining(beam.DoFn):
    """(key, value) of one side -> (key, :class:`Joined`)."""

    def __init__(self, side: int, coder: beam.coders.Coder) -> None:
        self._side, self._coder = side, coder

    def process(self, keyed):
        yield keyed[0], Joined(self._side, self._coder.encode(keyed[1]))


class Unusable(Exception):
    """Something an export describes that cannot be used (an image reference, a shape):
    its reject's ``reason``, and what the reject says of it (``detail``, the exception's
    text)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def folder_prefixes(folder: str) -> tuple[str, ...]:
    """``folder`` as given and, when local, absolute, each ending in ``/``: how the paths
    (or bucket URLs) of the files below it begin."""
    local = filesystems.local_path(folder)
    absolute = [os.path.abspath(local) + "/"] if local is not None else []
    return (folder.rstrip("/") + "/", *absolute)


def key_below(path: str, reference: str, prefixes: Sequence[str], absolute: bool,
              fallback: str | None = None) -> str:
    """The key of the image an export names by ``reference`` (as said in messages) at
    ``path``: ``path`` itself when relative, below the images folder; when ``absolute`` (a
    path from ``/``, a bucket URL), what follows the first of ``prefixes``
    (:func:`folder_prefixes`) it begins with, else ``fallback``. Normalized; raises
    :class:`Unusable` (``outside_root``) when it lies or leads outside the folder."""
    if absolute:
        below = next((path[len(p):] for p in prefixes if path.startswith(p)), fallback)
        if below is None:
            raise Unusable("outside_root", (
                f"{reference} does not lie below --images {prefixes[0].rstrip('/')}; pass as "
                "--images the folder (or bucket folder) holding the images"))
        path = below
    key = posixpath.normpath(path)
    if key in (".", "..") or key.startswith(("../", "/")):
        raise Unusable("outside_root", f"{reference} leads outside --images; not read")
    return key


class ExportFormat:
    """What :class:`ReadExport` needs to know about a format; subclass it (an instance
    travels to the workers).

    Attributes:
        name: the format's name, the prefix of its counters.
        options: the options it is made from (a dataclass, the conversion's settings).
        image_folder: the folder the images are listed in.
        splits: the splits written.
        classes: the class names in label order, or None for the sorted names found.
        classes_file: a ``--classes`` file giving them (read on the launcher), or None.
        class_list: where ``classes`` come from, named in unknown-class rejects.
        entry: what describes one image in the export (``task``), for messages.
        split_folders: a first folder named like a split (``images/val/``) holds that
            split's images: it is left out of their keys.
        unnamed_reason: the reason of the warning about an image no entry names.
        duplicated_image_written: the image of entries rejected ``duplicate_file_name`` is
            written as one no entry names (else not at all).
        unnamed_images_written: an image file no entry names is written with no objects
            (the folder is the dataset's); else only counted,
            ``<name>_files_named_by_no_<entry>`` (a folder shared with other datasets).
        part_type: the type of the values of the :class:`Part`s ``parse`` yields (with a
            registered coder), or None when it yields none.
    """

    name = "export"
    options: Any
    image_folder: str
    splits: tuple[str, ...] = ("train",)
    classes: Sequence[str] | None = None
    classes_file: str | None = None
    class_list = "the class list"
    entry = "entry"
    split_folders = False
    unnamed_reason = "no_annotation_element"
    duplicated_image_written = False
    unnamed_images_written = True
    part_type: type | None = None
    #: Each export file is one JSON array, whose elements :meth:`parse_item` parses;
    #: ``array_hint`` says what the file should be, when it is no array.
    array_export = False
    array_hint = ""

    def export_files(self) -> list[str]:
        """The export files, each streamed on one worker."""
        raise NotImplementedError

    def small_inputs(self) -> list[str]:
        """Patterns of the other files a run reads, for the inputs fingerprint: the
        classes file; a file's own name escaped (``filesystems.literal``)."""
        return [filesystems.literal(self.classes_file)] if self.classes_file else []

    def input_patterns(self) -> list[str]:
        """The files a conversion reads, for its inputs fingerprint (``--if-changed``)."""
        return [*map(filesystems.literal, self.export_files()),
                filesystems.everything_below(self.image_folder), *self.small_inputs()]

    def parse(self, path: str, data: BinaryIO) -> Iterator[ExportEntry | Reject | tuple[str, int]
                                                            | Part]:
        """Stream one export file (``data``, opened for reading): an entry per image, a
        reject per element that cannot be used, a count per thing skipped on purpose, a
        :class:`Part` per piece of an image kept apart from its entry. A file that cannot
        be read at all raises a ``DataError`` naming it. An ``array_export``'s: each
        element's :meth:`parse_item`."""
        if not self.array_export:
            raise NotImplementedError
        for index, item in enumerate(json_array_items(path, data, self.array_hint)):
            yield from self.parse_item(path, index, item)

    def parse_item(self, path: str, index: int, item: Any) -> Iterator[ExportEntry | Reject
                                                                          | tuple[str, int] | Part]:
        """The ``index``-th element of an ``array_export``'s array, as :meth:`parse`
        yields."""
        raise NotImplementedError

    def assemble(self, key: str, entries: list[ExportEntry],
                 parts: Iterable[Any]) -> Iterator[ExportEntry | Reject | tuple[str, int]]:
        """The entries of ``key`` (sorted by split, then ``where``) with the values of its
        parts merged in, and the rejects and counts of merging them."""
        yield from entries

    def file_key(self, name: str) -> str:
        """The key of an image file at ``name`` below the folder (less its split folder)."""
        return name

    def key_shown(self, key: str) -> str:
        """The file ``key`` names, as a message about a missing image says it."""
        return key

    def missing_hint(self, key: str) -> str:
        """What to do about an entry whose image is not in the folder."""
        return "pass --images if the images are elsewhere"

    def duplicated(self, key: str, split: str, entries: list[ExportEntry]) -> str:
        """The ``duplicate_file_name`` reject's detail: ``entries``, of one split, name
        one image; none of them is written."""
        return (f"{len(entries)} entries name the image {key!r} "
                f"({'; '.join(e.where for e in entries)}); keep one. None of them was written")

    def filename(self, key: str, path: str) -> str:
        """The ``image/filename`` written for the image of ``key`` found at ``path``."""
        return posixpath.basename(path)

    def unnamed(self, key: str) -> str:
        """The warning about an image file no entry names (it is written without objects)."""
        return (f"no {self.entry} of {', '.join(self.export_files())} names {key!r}; written "
                "with no objects (annotate it and export again, or remove it from the folder)")

    def unnamed_written(self, key: str, path: str, split: str) -> Reject | tuple[str, int]:
        """What is said of the image file at ``path`` that no entry names, written with no
        objects in ``split``: a warning, or a count."""
        return Reject("warning", path, self.unnamed_reason, self.unnamed(key), split)

    def unplaced(self, key: str) -> str:
        """Why an image file no entry names, outside the splits' folders, was not written
        when there are several splits."""
        return (f"{self.unnamed(key)}; with several splits ({', '.join(self.splits)}) its "
                "split is unknown, so it was not written")


def _tagged(item: Reject | tuple[str, int]) -> TaggedOutput:
    return TaggedOutput("rejects" if isinstance(item, Reject) else "counts", item)


class _StreamExport(beam.DoFn):
    """One export file -> (key, :class:`ExportEntry`) per image it describes, tagged
    ``parts`` (key, value) per :class:`Part`; its counts summed per file."""

    def __init__(self, fmt: ExportFormat) -> None:
        self._format = fmt

    def process(self, path: str):
        yield from _inputs(path)
        with filesystems.open_read(path) as f:
            yield from _routed(self._format.parse(path, f))


def _inputs(path: str) -> Iterator[TaggedOutput]:
    """The export file's metadata, for the inputs' fingerprint."""
    meta = filesystems.file_metadata(path)
    if meta is not None:
        yield TaggedOutput("inputs", text_metadata(meta))


def _routed(items: Iterable[ExportEntry | Reject | Part | tuple[str, int]]) -> Iterator[Any]:
    """What ``parse`` yields, as :class:`_StreamExport`'s outputs; its counts summed."""
    counts: Counter[str] = Counter()
    for item in items:
        if isinstance(item, ExportEntry):
            yield item.key, item
        elif isinstance(item, Reject):
            yield TaggedOutput("rejects", item)
        elif isinstance(item, Part):
            yield TaggedOutput("parts", tuple(item))
        else:
            counts[item[0]] += item[1]
    for counter, n in sorted(counts.items()):
        if n:
            yield TaggedOutput("counts", (counter, n))


class _ParseArrayRange(byte_ranges.ParseRanges):
    """The elements of an array export that begin in one range, each parsed by the
    format's ``parse_item`` with its index in the whole array; without a plan, the file
    streamed by the first range's worker."""

    output_type = tuple[str, ExportEntry]
    main = "entries"
    outputs = ("rejects", "counts", "inputs", "parts")

    def __init__(self, fmt: ExportFormat, path: str) -> None:
        super().__init__(path)
        self._format = fmt

    def process(self, rng: byte_ranges.ByteRange, plan: Any):
        if rng.index == 0 and plan is not None:
            yield from _inputs(self.path)
        yield from super().process(rng, plan)

    def streamed(self) -> Iterator[Any]:
        return _StreamExport(self._format).process(self.path)

    def elements(self, rng: byte_ranges.ByteRange, span: tuple[int, int], first: int,
                 items: list[Any]) -> Iterator[Any]:
        return _routed(item for index, element in enumerate(items, first)
                       for item in self._format.parse_item(self.path, index, element))

    def fail_as_streamed(self, where: int) -> None:
        with filesystems.open_read(self.path) as f:
            for _item in self._format.parse(self.path, f):
                pass
        raise ExportError(f"{self.path}: malformed JSON (the element at byte {where} is not "
                          "plain JSON: NaN, bytes that are not UTF-8 or a control character "
                          "in a string); fix or export it again")


class ReadArrayRanges(byte_ranges.ReadJsonArray):
    """An array export file of ``fmt`` read in byte ranges (:mod:`.byte_ranges`): the
    tagged outputs :class:`_StreamExport` gives for one file."""

    def __init__(self, fmt: ExportFormat, path: str) -> None:
        super().__init__(_ParseArrayRange(fmt, path))


class _ListImages(beam.DoFn):
    """The images folder -> (key, ``ImageFile``); the small inputs -> their metadata."""

    def __init__(self, fmt: ExportFormat, skip_prefix: str | None) -> None:
        self._format = fmt
        self._skip = skip_prefix

    def process(self, _, small_inputs: Sequence[str]):
        fmt = self._format
        for pattern in small_inputs:
            for meta in filesystems.iter_match(pattern):
                yield TaggedOutput("inputs", text_metadata(meta))
        folder = fmt.image_folder
        for meta in listed_images(folder, self._skip, f"{fmt.name}_non_image_files_skipped"):
            if isinstance(meta, TaggedOutput):
                yield meta
                continue
            key, split = filesystems.relative_name(folder, meta.path), ""
            first, _, rest = key.partition("/")
            if fmt.split_folders and rest and first in fmt.splits:
                key, split = rest, first
            yield fmt.file_key(key), ImageFile(meta.path, meta.size_in_bytes, split,
                                               listed_time(meta))


class _Pair(beam.DoFn):
    """(key, [:class:`Joined`]) -> a ``ParsedImage`` per entry that finds its file
    (the one in its split's folder, else the one in the folder itself); files no entry
    names are written with no objects, with a warning (or only counted, as the format
    says)."""

    def __init__(self, fmt: ExportFormat, coders: Sequence[beam.coders.Coder]) -> None:
        self._format, self._coders = fmt, coders

    def process(self, element):
        key, joined = element
        fmt = self._format
        grouped: dict[str, list[Any]] = {side: [] for side in _SIDES}
        for value in joined:
            grouped[_SIDES[value.side]].append(self._coders[value.side].decode(value.encoded))
        files: dict[str, ImageFile] = {}
        for file in sorted(grouped["files"], key=lambda f: f.path):
            kept = files.setdefault(file.split, file)
            if kept is not file:  # a.jpg and a.png of a video's frame a, one split
                yield TaggedOutput("rejects", Reject("image", file.path, "duplicate_file_name", (
                    f"{file.path} and {kept.path} are both the image "
                    f"{fmt.key_shown(key)!r}; {file.path} was not written (keep one)"),
                    file.split or None))
        by_split: dict[str, list[ExportEntry]] = {}
        entries = sorted(grouped["entries"], key=lambda e: (e.split, e.where))
        for item in fmt.assemble(key, entries, grouped["parts"]):
            if isinstance(item, ExportEntry):
                by_split.setdefault(item.split, []).append(item)
            else:
                yield _tagged(item)
        used: set[str] = set()
        for split, entries in by_split.items():
            kept = [e for e in entries if not e.skipped]
            if kept and len(kept) < len(entries):  # an entry written, beside some skipped
                for skipped in entries:
                    if skipped.skipped:
                        yield TaggedOutput("counts", (skipped.skipped, 1))
                entries = kept
            file = files.get(split) or files.get("")
            if file is not None and (len(entries) == 1 or not fmt.duplicated_image_written):
                used.add(file.split)
            if len(entries) > 1:
                yield TaggedOutput("rejects", Reject("image", entries[0].where,
                                                     "duplicate_file_name",
                                                     fmt.duplicated(key, split, entries), split))
            elif entries[0].skipped:
                yield TaggedOutput("counts", (entries[0].skipped, 1))
            elif file is None:
                entry = entries[0]
                yield TaggedOutput("rejects", Reject("image", entry.where, "missing", (
                    f"{entry.where} has no image: no {fmt.key_shown(key)} in "
                    f"{fmt.image_folder}"
                    f"{f' (nor in its {split}/ folder)' if fmt.split_folders else ''}; "
                    f"{fmt.missing_hint(key)}"), split))
            else:
                yield _parsed(fmt, key, file, entries[0])
        for folder_split, file in sorted(files.items()):
            if folder_split in used:
                continue
            if not fmt.unnamed_images_written:
                yield TaggedOutput("counts", (f"{fmt.name}_files_named_by_no_{fmt.entry}", 1))
                continue
            split = folder_split or (fmt.splits[0] if len(fmt.splits) == 1 else None)
            if split is None:
                yield TaggedOutput("rejects", Reject("image", file.path, fmt.unnamed_reason,
                                                     fmt.unplaced(key)))
                continue
            yield _tagged(fmt.unnamed_written(key, file.path, split))
            yield _parsed(fmt, key, file, ExportEntry(key, "", split))


def _parsed(fmt: ExportFormat, key: str, file: ImageFile, entry: ExportEntry) -> ParsedImage:
    return ParsedImage(key, entry.split, file.path, file.size, fmt.filename(key, file.path),
                       entry.width, entry.height, entry.objects, entry.where or None,
                       modified=file.modified, image_labels=entry.image_labels,
                       source_id=entry.source_id)


class _Outputs(NamedTuple):
    entries: Any
    rejects: Any
    counts: Any
    inputs: Any
    parts: Any


class ReadExport(beam.PTransform):
    """Read a format of export files and an images folder into ``ImageRecord``s for a
    :class:`~recordbeam.sources.detection.DetectionEncoder` (image labels in their
    ``image_labels``).

    A format's read transform subclasses it, naming its :attr:`export_format`, and is made
    from the format's options: ``ReadCvat(options)`` reads ``CvatExport(options)``.
    Returns a :class:`~recordbeam.sources.result.SourceRead`. ``skip_below``, the output
    folder when it lies inside the images folder, is left out of the listing; the
    options' ``input_roots()`` are the folders the encoder may read images from.
    """

    #: The format read, made from the options the transform is given.
    export_format: type[ExportFormat]

    def __init__(self, options: Any, skip_below: str | None = None) -> None:
        super().__init__()
        fmt = self._format = self.export_format(options)
        self._skip_prefix = (filesystems.prefix_below(fmt.image_folder, skip_below)
                             if skip_below else None)
        self.input_roots = options.input_roots()
        self.splits = tuple(fmt.splits)
        classes = fmt.classes
        if classes is None and fmt.classes_file:
            classes = read_classes_file(fmt.classes_file)
        self.classes = list(classes) if classes is not None else None
        self._class_list = fmt.classes_file or fmt.class_list

    def expand(self, pbegin):
        fmt = self._format
        files = fmt.export_files()
        ranged = [path for path in files if fmt.array_export and byte_ranges.read_in_ranges(
            path, byte_ranges.RANGED_FROM_BYTES)]
        streamed = (
            pbegin
            | "ExportFiles" >> beam.Create([path for path in files if path not in ranged])
            | "StreamExports" >> beam.ParDo(_StreamExport(fmt))
            .with_output_types(tuple[str, ExportEntry])
            .with_outputs("rejects", "counts", "inputs", "parts", main="entries")
        )  # (key, ExportEntry); parts: (key, part_type)
        if ranged:
            reads = [streamed, *(pbegin | f"ReadRanges{i}" >> ReadArrayRanges(fmt, path)
                                 for i, path in enumerate(ranged))]
            streamed = _Outputs(**{name: [read[name] for read in reads]
                                   | f"Streamed{name.title()}" >> beam.Flatten()
                                   for name in ("entries", "rejects", "counts", "inputs",
                                                "parts")})
        listed = (
            pbegin
            | "ImageFolder" >> beam.Impulse()
            | "ListImages" >> beam.ParDo(_ListImages(fmt, self._skip_prefix), fmt.small_inputs())
            .with_output_types(tuple[str, JoinMessage])
            .with_outputs("rejects", "counts", "inputs", main="files")
        )  # (key, ImageFile)
        # One typed join: each side's values in their registered coders (parts: the
        # format's part_type's), keyed by the image.
        sides = [(streamed.entries, ExportEntry), (listed.files, JoinMessage)]
        if fmt.part_type is not None:
            sides.append((streamed.parts, fmt.part_type))
        coders = [beam.coders.registry.get_coder(kind) for _side, kind in sides]
        paired = (
            [side | f"Join{_SIDES[i].title()}" >> beam.ParDo(_Joining(i, coders[i]))
             .with_output_types(tuple[str, Joined]) for i, (side, _kind) in enumerate(sides)]
            | "Sides" >> beam.Flatten()
            | "JoinByKey" >> beam.GroupByKey()  # (key, [Joined])
            | "Pair" >> beam.ParDo(_Pair(fmt, coders))
            .with_output_types(Any).with_outputs("rejects", "counts", main="parsed")
        )
        classes = class_names(paired.parsed, self.classes)
        built = paired.parsed | "BuildRecords" >> beam.FlatMap(
            build_record, classes, self._class_list,
        ).with_output_types(ImageRecord).with_outputs("rejects", "counts", main="records")
        terms = input_terms((streamed.inputs, listed.inputs) | "Inputs" >> beam.Flatten())
        metadata = detection_metadata(pbegin, classes, terms)
        outputs = (streamed, listed, paired, built)
        rejects = tuple(o.rejects for o in outputs) | "Rejects" >> beam.Flatten()
        counts = tuple(o.counts for o in outputs) | "Counts" >> beam.Flatten()
        sizes = paired.parsed | "PlannedSizes" >> beam.Map(lambda image: (image.split, image.size))
        return SourceRead(built.records, rejects, counts, metadata, sizes)


class ExportEncoder(DetectionEncoder):
    """The detection features of an export's images (with ``include_masks``, masks; a
    format's ``extra_kinds``; with the class attribute ``image_labels``, the classes of the
    whole image); an image written with no object is counted
    (``images_without_objects``), as it is written."""

    image_labels = False

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False, extra_kinds: dict[str, str] | None = None) -> None:
        super().__init__(checks, split, fixes, extra_kinds, include_masks,
                         image_labels=self.image_labels)

    def object_counts(self, columns) -> dict[str, int]:
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


def export_conversion(fmt: ExportFormat, read: type[ReadExport], encoder: type[ExportEncoder],
                      output: str, after_run: Callable[[str], None] | None = None,
                      **encoder_options: Any) -> Conversion:
    """The :class:`~recordbeam.sources.format.Conversion` of ``fmt`` (made from the
    options ``fmt.options``, its settings, when the inputs were checked): its splits and
    input patterns, the read transform ``read(options)`` and the ``encoder`` of its first
    split, with the options' ``include_masks`` and ``encoder_options``."""
    options = fmt.options
    return conversion(
        fmt.name, options, fmt.splits, fmt.input_patterns(), output,
        lambda: read(options, skip_below=output),
        lambda _read, checks, fixes: encoder(checks, fmt.splits[0], fixes,
                                             include_masks=options.include_masks,
                                             **encoder_options),
        after_run)
