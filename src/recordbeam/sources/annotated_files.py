"""Formats with one annotation file per image (VOC, YOLO, labelme, KITTI): listing, the join
of each image with its annotation file, the parse on workers, and class names to labels.

A format describes itself with an :class:`AnnotationFormat`: which folders to list
(:class:`Listing`), which split lists name the images of each split (:class:`SplitList`),
and how to parse one annotation file (``parse``, run on the worker that joins it with its
image: one small read per image). :class:`ReadAnnotatedImages` does the rest the same way
for every format:

* the listings run on workers, each file keyed by its id: its path below the listed
  folder without the extension (``2008/000123``), so ``labels/a.txt`` meets ``images/a.jpg``;
* the join by id rejects what cannot pair (an annotation without image, two images of one
  id, a split list naming neither), keeps an image without annotation file (no objects,
  warned), and parses the annotation;
* class names become labels 1..K from the format's class list, or from the sorted names
  found (a combine over the parsed objects, never a launcher pass); an unknown class is an
  annotation reject naming its file and element.
"""

from __future__ import annotations

import pickle
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.io.filesystem import FileMetadata
from apache_beam.pvalue import AsSingleton, TaggedOutput

from recordbeam import filesystems
from recordbeam.dataset.class_names import (
    INVALID_CLASS_NAME,
    ClassNameError,
    name_problem,
    normalisation_twins,
    shown,
    twins_message,
)
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.detection import DetectionObject, object_fields
from recordbeam.sources.fingerprint import input_terms, inputs_entry
from recordbeam.sources.listing import skipped_prefix
from recordbeam.sources.record_coder import ImageRecordCoder  # noqa: F401 - registers it
from recordbeam.sources.result import SourceRead
from recordbeam.sources.text import is_text, printable

#: File name endings taken as images (compared in lower case; ``.jfif``: a JPEG as Windows
#: saves one downloaded from the web).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".jfif")

#: The label of a record whose ``path`` is its annotation file, holding the image inside
#: (labelme's ``imageData``): the format's encoder reads the image from there.
IMAGE_IN_ANNOTATION = "image_in_annotation"


# --- what a format declares -------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """One folder to list on a worker.

    Attributes:
        folder: listed with everything below it.
        annotation_suffixes: endings (lower case) of the annotation files found here.
        images: whether image files found here are the dataset's images.
        split: the split of every file here (``images/val/``); None: decided by split lists
            or the run's ``--split``.
        scope: joined into the ids of the files here, so files of two folders with the same
            relative names (``images/train/a.jpg``, ``images/val/a.jpg``) never pair across.
        skipped: the counter of files here that are neither (``voc_non_xml_files_skipped``).
        ids: turns a file's path below ``folder`` (with its extension) into its id, for
            formats whose annotation files do not sit at the image's relative path (YOLO's
            ``labels/`` beside ``images/``); None (the default) gives :func:`file_id`. It
            may return None for a file that is not one of the dataset's (counted as
            ``skipped``); a module-level function or a ``functools.partial`` of one.
    """

    folder: str
    annotation_suffixes: tuple[str, ...] = ()
    images: bool = False
    split: str | None = None
    scope: str = ""
    skipped: str = "other_files_skipped"
    ids: Callable[[str], str | None] | None = None


@dataclass(frozen=True)
class SplitList:
    """A text file naming the images of one split, one per line.

    Attributes:
        split: the split.
        path: the file.
        image_id: turns one line into the id of its image (``None``: the line names none,
            as a blank line); a module-level function, so it travels to workers. It raises
            :class:`SplitLineError` for a line that names a file it cannot use (a reject
            naming ``<list>:<line>``).
    """

    split: str
    path: str
    image_id: Callable[[str], str | None]


#: What no line of a split list holds: bytes that were not UTF-8 (decoded as U+FFFD) and
#: control characters other than tab.
_NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffd]")


class SplitLineError(Exception):
    """A split list line that cannot name an image of the dataset; ``reason`` is the reject
    code, ``detail`` says what is wrong with the line (its ``<list>:<line>`` is added)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class NamedObject(NamedTuple):
    """An object as a format's parser reads it, before its class name becomes a label.

    Attributes:
        source: where it was read, for rejects (``Annotations/a.xml: object[2]``, ``a.txt:3``).
        name: its class name.
        bbox: ``(x, y, width, height)`` in pixels (fractions of the image when ``normalized``).
        extra: the values of the format's per-object features, in the encoder's order.
        segmentation: COCO-style polygons or RLE, for ``--include-masks``; None: none.
        normalized: ``bbox`` and polygons are fractions of the image's size.
    """

    source: str
    name: str
    bbox: tuple[float, float, float, float]
    extra: tuple[Any, ...] = ()
    segmentation: Any = None
    normalized: bool = False


class ParsedAnnotation(NamedTuple):
    """What one annotation file says about its image."""

    filename: str | None  # the image file it names, if it names one
    width: int | None
    height: int | None
    objects: tuple[NamedObject, ...]
    rejects: tuple[Reject, ...] = ()  # parts that cannot be used, with their element
    counts: tuple[tuple[str, int], ...] = ()  # what was skipped on purpose, counted
    # The bytes of an image embedded in the annotation file (labelme's imageData), when it
    # holds one: used when no image file pairs with it (the writer then reads the image
    # from the annotation file, see ``ImageExampleEncoder.embedded_image``).
    embedded_image_size: int | None = None
    # With ``names_its_image``: the id (as the image listing gives it) of the image it names;
    # None: its own id (it names none that can be listed).
    image_id: str | None = None


class AnnotationFileError(Exception):
    """An annotation file that cannot be used at all; ``reason`` is the reject code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class AnnotationFormat:
    """What :class:`ReadAnnotatedImages` needs to know about a format; subclass it.

    Attributes:
        name: the format's name, the prefix of its counters (``voc_non_xml_files_skipped``).
        classes: the class names in label order (labels 1..K), or None to take the sorted
            names found in the annotations.
        class_list: where ``classes`` come from, named in unknown-class rejects.
        default_split: the split of images no split list or split folder places.
        image_folder: named in messages about missing images.
        unlabeled_splits: splits the format ships without annotations (KITTI's
            ``testing/``): their images are written with no objects and counted as
            ``<name>_unlabeled_images``, not warned about one by one.
        missing_image_hint: what to do about an annotation file without image (the end of
            its ``missing`` reject).
        annotations_need_images: an annotation file without image is rejected (``missing``)
            even when split lists are given and none names it (VOC counts such an XML with
            the images in no list instead).
    """

    name = "annotations"
    classes: list[str] | None = None
    class_list = "the class list"
    default_split = "train"
    image_folder = "the images folder"
    unlabeled_splits: frozenset[str] = frozenset()
    #: Said after an annotation's missing image (what else was looked at, what to do).
    missing_image_hint = "pass --images if the images are elsewhere"
    #: The annotation names its image by a path of its own (labelme's ``imagePath``), so it
    #: joins the image it names (``ParsedAnnotation.image_id``), not the image of its own id:
    #: annotations are then spread over workers and parsed before the join, not after.
    names_its_image = False
    annotations_need_images = False

    def listings(self) -> list[Listing]:
        raise NotImplementedError

    def split_lists(self) -> list[SplitList]:
        """The split lists (none by default)."""
        return []

    def small_inputs(self) -> list[str]:
        """Patterns of the other files a run reads (label maps, split lists), for the
        inputs fingerprint; a file's own name escaped (``filesystems.literal``)."""
        return []

    def parse(self, data: bytes, path: str) -> ParsedAnnotation:
        """Parse one annotation file; raises :class:`AnnotationFileError` for one that
        cannot be used at all."""
        raise NotImplementedError

    def expected_annotation(self, image_id: str) -> str:
        """How the annotation file of ``image_id`` would be named, for messages."""
        return f"an annotation file for {image_id!r}"

    def expected_image(self, image_id: str) -> str:
        """Where the image of ``image_id`` was looked for, for messages (a format whose ids
        carry a scope names the scope's folder)."""
        return f"{image_id}.* in {self.image_folder}"


# --- the listings -------------------------------------------------------------------------


class JoinMessage:
    """What the join by image id groups: one file or split-list line found by a listing."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class AnnotationFile(JoinMessage):
    path: str
    split: str = ""  # the listing's split, "" when it has none
    modified: float = 0.0  # as listed: an image embedded in it changes with it


@dataclass(frozen=True, slots=True)
class ImageFile(JoinMessage):
    path: str
    size: int
    split: str = ""
    modified: float = 0.0  # as listed


@dataclass(frozen=True, slots=True)
class ParsedAnnotationFile(JoinMessage):
    """An annotation file parsed before the join (``names_its_image``): what it says, or
    why it cannot be used (``failure``: the reject reason and detail)."""

    path: str
    split: str = ""
    annotation: ParsedAnnotation | None = None
    failure: tuple[str, str] | None = None
    modified: float = 0.0

    def parsed(self) -> ParsedAnnotation:
        """The annotation; raises :class:`AnnotationFileError` for one that failed."""
        if self.failure is not None:
            raise AnnotationFileError(*self.failure)
        assert self.annotation is not None
        return self.annotation


@dataclass(frozen=True, slots=True)
class SplitEntry(JoinMessage):
    """A line of a split list: the split, and ``<list>:<line>`` for rejects."""

    split: str
    where: str


def _write_text(out, text: str) -> None:
    out.write(text.encode("utf-8", "surrogatepass"), True)


def _read_text(stream) -> str:
    return stream.read_all(True).decode("utf-8", "surrogatepass")


class JoinMessageCoder(beam.coders.Coder):
    """A :class:`JoinMessage` as a kind byte and its fields (text length-prefixed,
    ``surrogatepass``; the size a varint, a modification time a double): the join holds
    one per file."""

    def encode(self, value: JoinMessage) -> bytes:
        out = create_OutputStream()
        if type(value) is AnnotationFile:
            out.write_byte(0)
            _write_text(out, value.path)
            _write_text(out, value.split)
            out.write_bigendian_double(value.modified)
        elif type(value) is ImageFile:
            out.write_byte(1)
            _write_text(out, value.path)
            out.write_var_int64(value.size)
            _write_text(out, value.split)
            out.write_bigendian_double(value.modified)
        elif type(value) is SplitEntry:
            out.write_byte(2)
            _write_text(out, value.split)
            _write_text(out, value.where)
        else:
            out.write_byte(3)
            _write_text(out, value.path)
            _write_text(out, value.split)
            out.write_bigendian_double(value.modified)
            out.write(_parsed_annotation_bytes(value.annotation, value.failure), True)
        return out.get()

    def decode(self, encoded: bytes) -> JoinMessage:
        stream = create_InputStream(encoded)
        kind = stream.read_byte()
        if kind == 0:
            return AnnotationFile(_read_text(stream), _read_text(stream),
                                  stream.read_bigendian_double())
        if kind == 1:
            return ImageFile(_read_text(stream), stream.read_var_int64(), _read_text(stream),
                             stream.read_bigendian_double())
        if kind == 2:
            return SplitEntry(_read_text(stream), _read_text(stream))
        path, split, modified = _read_text(stream), _read_text(stream), stream.read_bigendian_double()
        return ParsedAnnotationFile(path, split, *_parsed_annotation_of(stream.read_all(True)),
                                    modified=modified)

    def to_type_hint(self) -> type:
        return JoinMessage


beam.coders.registry.register_coder(JoinMessage, JoinMessageCoder)

_PRIMITIVES = beam.coders.FastPrimitivesCoder()


def _parsed_annotation_bytes(annotation: ParsedAnnotation | None,
                             failure: tuple[str, str] | None) -> bytes:
    """A parsed annotation (or its failure) as Beam primitives: plain tuples of its fields;
    pickled when some text is not UTF-8 (Beam's coder writes text strictly)."""
    plain = (failure, None if annotation is None else (
        *annotation[:3], tuple(tuple(obj) for obj in annotation.objects),
        tuple((r.kind, r.source, r.reason, r.detail, r.split) for r in annotation.rejects),
        *annotation[5:]))
    try:
        return b"\0" + _PRIMITIVES.encode(plain)
    except UnicodeEncodeError:
        return b"\1" + pickle.dumps(plain, protocol=pickle.HIGHEST_PROTOCOL)


def _parsed_annotation_of(data: bytes) -> tuple[ParsedAnnotation | None, tuple[str, str] | None]:
    plain = (_PRIMITIVES.decode(data[1:]) if data[:1] == b"\0"
             else pickle.loads(data[1:]))  # noqa: S301 - written by this pipeline's coder
    failure, fields = plain
    if fields is None:
        return None, tuple(failure)
    filename, width, height, objects, rejects, counts, *rest = fields
    return ParsedAnnotation(
        filename, width, height, tuple(NamedObject(*obj) for obj in objects),
        tuple(Reject(*reject) for reject in rejects),
        tuple(tuple(count) for count in counts), *rest), None


def file_id(folder: str, path: str, scope: str = "") -> str:
    """The id of a file: its path below ``folder`` without the extension, after ``scope``."""
    stem = posixpath.splitext(filesystems.relative_name(folder, path))[0]
    return f"{scope}/{stem}" if scope else stem


def is_hidden(folder: str, path: str) -> bool:
    """Whether a name of ``path`` below ``folder`` starts with ``.``: macOS's ``._a.jpg``
    beside each file copied from a Mac, ``.ipynb_checkpoints/`` copies. Such a file named
    like an image or annotation is none of the dataset's: skipped and counted."""
    return any(part.startswith(".")
               for part in filesystems.relative_name(folder, path).split("/"))


def listed_time(meta: FileMetadata) -> float:
    """A listed file's modification time in seconds (0.0 where the filesystem gives none)."""
    return float(meta.last_updated_in_seconds or 0.0)


def text_metadata(meta: FileMetadata) -> FileMetadata:
    """Beam encodes paths as UTF-8: a name that is not UTF-8 travels escaped."""
    if is_text(meta.path):
        return meta
    return FileMetadata(printable(meta.path), meta.size_in_bytes, meta.last_updated_in_seconds)


def invalid_name(path: str) -> Reject:
    shown = printable(path)
    return Reject("image", shown, "invalid_file_name", (
        f"{shown}: the file name is not valid UTF-8 text, so it cannot be an id; rename the "
        "file (and its annotation or image) with a UTF-8 name"))


def listed_images(folder: str, skip_prefix: str | None,
                  skipped: str | Callable[[str], Any] | None = None,
                  not_counted: str | None = None) -> Iterator[Any]:
    """List ``folder`` (everything below it, less ``skip_prefix``) for a DoFn: yields what
    every image listing owes as ``TaggedOutput``s (each file to the ``inputs``
    fingerprint, a name that is not UTF-8 as a reject, a file that is no image counted as
    ``skipped`` when given, unless its name is ``not_counted``: a table kept beside the
    images) and, for each image, its ``FileMetadata`` for the caller. A hidden file named
    like an image (:func:`is_hidden`: macOS's ``._a.jpg``) is no image. ``skipped`` may be
    a function of the file's path giving the count's key (a split's count)."""
    for meta in filesystems.iter_match(filesystems.everything_below(folder)):
        if skip_prefix and meta.path.startswith(skip_prefix):
            continue
        yield TaggedOutput("inputs", text_metadata(meta))
        if not is_text(meta.path):
            yield TaggedOutput("rejects", invalid_name(meta.path))
        elif meta.path.lower().endswith(IMAGE_SUFFIXES) and not is_hidden(folder, meta.path):
            yield meta
        elif skipped and posixpath.basename(meta.path) != not_counted:
            yield TaggedOutput("counts", (skipped(meta.path) if callable(skipped) else skipped, 1))


def annotation_folders(fmt: AnnotationFormat) -> list[str]:
    """The folders where ``fmt`` looks for annotation files, for messages."""
    return list(dict.fromkeys(listing.folder for listing in fmt.listings()
                              if listing.annotation_suffixes))


def find_annotation_file(fmt: AnnotationFormat, skip_prefix: str | None = None) -> str | None:
    """The first annotation file ``fmt``'s listings would pair by id, or None when there is
    none, so that every image would be written without objects: a launcher check made
    before the job. It stops at the first file found (a short listing for a labelled
    dataset); a folder without any is listed whole, once, to say so."""
    for listing in fmt.listings():
        if not listing.annotation_suffixes:
            continue
        for meta in filesystems.iter_match(filesystems.everything_below(listing.folder)):
            path = meta.path
            if ((skip_prefix and path.startswith(skip_prefix)) or not is_text(path)
                    or not path.lower().endswith(listing.annotation_suffixes)
                    or is_hidden(listing.folder, path)):
                continue
            if listing.ids is None or listing.ids(
                    filesystems.relative_name(listing.folder, path)) is not None:
                return path
    return None


class _List(beam.DoFn):
    """One listing task: a :class:`Listing`, a :class:`SplitList`, or the small inputs;
    files keyed by image id for the join, and every file read to the fingerprint."""

    def __init__(self, fmt: AnnotationFormat, skip_prefix: str | None) -> None:
        self._format = fmt
        self._skip = skip_prefix

    def process(self, task: Listing | SplitList | str):
        if isinstance(task, Listing):
            yield from self._list_folder(task)
        elif isinstance(task, SplitList):
            yield from self._split_ids(task)
        else:
            for meta in self._listed(task):
                yield TaggedOutput("inputs", text_metadata(meta))

    def _list_folder(self, listing: Listing):
        split = listing.split or ""
        for meta in self._listed(filesystems.everything_below(listing.folder)):
            yield TaggedOutput("inputs", text_metadata(meta))
            lower = meta.path.lower()
            is_annotation = bool(listing.annotation_suffixes) and lower.endswith(
                listing.annotation_suffixes)
            is_image = listing.images and lower.endswith(IMAGE_SUFFIXES)
            if not is_text(meta.path):
                yield TaggedOutput("rejects", invalid_name(meta.path))
            elif not (is_annotation or is_image):
                yield TaggedOutput("counts", (listing.skipped, 1))
            elif is_hidden(listing.folder, meta.path):
                yield TaggedOutput("counts", ("skipped_hidden_files", 1))
            else:
                key = (file_id(listing.folder, meta.path, listing.scope) if listing.ids is None
                       else listing.ids(filesystems.relative_name(listing.folder, meta.path)))
                if key is None:
                    yield TaggedOutput("counts", (listing.skipped, 1))
                elif is_annotation:
                    yield key, AnnotationFile(meta.path, split, listed_time(meta))
                else:
                    yield key, ImageFile(meta.path, meta.size_in_bytes, split, listed_time(meta))

    def _listed(self, pattern: str):
        for meta in filesystems.iter_match(pattern):
            if not (self._skip and meta.path.startswith(self._skip)):
                yield meta

    def _split_ids(self, split_list: SplitList):
        with filesystems.open_read(split_list.path) as f:
            data = f.read()
        if b"\x00" in data:
            yield TaggedOutput("rejects", Reject(
                "image", split_list.path, "malformed_line",
                f"{split_list.path} is not a text file (it holds NUL bytes), so none of its "
                "lines names an image of this split; replace it with the list of image ids, "
                "one per line", split_list.split))
            return
        text = data.decode("utf-8-sig", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{split_list.path}:{number}"
            if _NOT_TEXT.search(line):
                yield TaggedOutput("rejects", Reject(
                    "image", where, "malformed_line",
                    f"{where}: the line is not text (bytes that are not UTF-8, or control "
                    "characters); fix the split list", split_list.split))
                continue
            try:
                image_id = split_list.image_id(line)
            except SplitLineError as bad:
                yield TaggedOutput("rejects", Reject(
                    "image", where, bad.reason, f"{where}: {bad.detail}", split_list.split))
                continue
            if image_id:
                yield image_id, SplitEntry(split_list.split, where)


# --- the join and the parse -----------------------------------------------------------


class ParsedImage(NamedTuple):
    """An image joined with its parsed annotation, before class names become labels."""

    image_id: str
    split: str
    path: str
    size: int
    filename: str
    width: int | None
    height: int | None
    objects: tuple[NamedObject, ...]
    annotation: str | None  # the annotation file's path
    embedded: bool = False  # ``path`` is the annotation file, whose embedded image is written
    modified: float = 0.0  # of the file at ``path``, as listed
    #: Classes of the whole image (Label Studio's choices), as ``(name, where)``.
    image_labels: tuple[tuple[str, str], ...] = ()
    source_id: str | None = None  # ``image/source_id`` when not ``image_id`` (a task's id)


class _JoinAndParse(beam.DoFn):
    """image id -> (its annotation file, image files, split entries) -> a
    :class:`ParsedImage` per split it belongs to, reading and parsing the annotation here,
    on the worker."""

    def __init__(self, fmt: AnnotationFormat, has_split_lists: bool,
                 roots: filesystems.InputRoots | None = None) -> None:
        self._format = fmt
        self._has_split_lists = has_split_lists
        self._roots = roots

    def process(self, element):
        image_id, messages = element
        fmt = self._format
        # One file found by the listings of two splits' folders (a data.yaml whose val is
        # its train folder) is one file, of both splits.
        annotations = sorted({(m.path, "") for m in messages
                              if type(m) in (AnnotationFile, ParsedAnnotationFile)})
        parsed_before = {m.path: m for m in messages if type(m) is ParsedAnnotationFile}
        annotation_times = {m.path: m.modified for m in messages
                            if type(m) in (AnnotationFile, ParsedAnnotationFile)}
        images = sorted({(m.path, m.size, m.modified) for m in messages if type(m) is ImageFile})
        listed = sorted({(m.split, m.where) for m in messages if type(m) is SplitEntry})
        splits = sorted({split for split, _where in listed})
        orphan = fmt.annotations_need_images and annotations and not images
        if self._has_split_lists and not splits and not orphan:
            yield TaggedOutput("counts", (f"{fmt.name}_images_in_no_split_list", 1))
            return
        folder_splits = sorted({m.split for m in messages if type(m) in (
            AnnotationFile, ParsedAnnotationFile, ImageFile) and m.split})
        splits = splits or folder_splits or [fmt.default_split]
        if not annotations and not images:
            for split, where in listed:
                yield TaggedOutput("rejects", Reject(
                    "image", where, "missing",
                    f"{where} lists {image_id!r}, but there is no "
                    f"{fmt.expected_annotation(image_id)} and no image named "
                    f"{fmt.expected_image(image_id)}", split))
            return
        if len(annotations) > 1:
            paths = [path for path, _split in annotations]
            shared = (f"name the image {image_id!r}" if fmt.names_its_image
                      else f"have the id {image_id!r}")
            yield TaggedOutput("rejects", Reject(
                "image", paths[0], "duplicate_file_name",
                f"{len(paths)} annotation files {shared} ({', '.join(paths)}); keep one. "
                f"None of them was {'used' if fmt.names_its_image else 'read'}."))
            return
        annotation_path = annotations[0][0] if annotations else None
        annotation = None
        if annotation_path is not None:
            try:
                before = parsed_before.get(annotation_path)
                annotation = before.parsed() if before is not None else fmt.parse(
                    read_annotation(annotation_path, self._roots), annotation_path)
            except AnnotationFileError as bad:
                for split in splits:
                    yield TaggedOutput("rejects", Reject(
                        "image", annotation_path, bad.reason, bad.detail, split))
                return
        image = self._choose_image(image_id, annotation_path, annotation, images)
        embedded = (not images and annotation is not None
                    and annotation.embedded_image_size is not None)
        if embedded:  # no image file: the one inside the annotation file is written
            image = (annotation_path, annotation.embedded_image_size,
                     annotation_times[annotation_path])
        if isinstance(image, Reject):
            # The objects go with the image; warnings about the file itself still hold.
            warnings = [r for r in annotation.rejects if r.kind == "warning"] if annotation else []
            for split in splits:
                for reject in (image, *warnings):
                    yield TaggedOutput("rejects", replace(reject, split=split))
            return
        path, size, modified = image
        if annotation is None:
            for split in splits:
                if split in fmt.unlabeled_splits:
                    yield TaggedOutput("counts", (f"{fmt.name}_unlabeled_images", 1))
                    continue
                yield TaggedOutput("rejects", Reject(
                    "warning", path, "no_annotation_file",
                    f"no {fmt.expected_annotation(image_id)} for this image; written with no "
                    "objects (add the annotation file, or remove the image if it should not "
                    "be in the dataset)", split))
            annotation = ParsedAnnotation(None, None, None, ())
        for name, n in annotation.counts:
            yield TaggedOutput("counts", (name, n * len(splits)))
        for split in splits:
            for reject in annotation.rejects:
                yield TaggedOutput("rejects", replace(reject, split=split))
            filename = posixpath.basename(annotation.filename if embedded else path)
            yield ParsedImage(image_id, split, path, size, filename, annotation.width,
                              annotation.height, annotation.objects, annotation_path, embedded,
                              modified)

    def _choose_image(self, image_id: str, annotation_path: str | None,
                      annotation: ParsedAnnotation | None,
                      images: list[tuple[str, int, float]]) -> tuple[str, int, float] | Reject:
        named = annotation.filename if annotation else None
        if named is not None:
            matching = [image for image in images if posixpath.basename(image[0]) == named]
            if len(matching) == 1:
                return matching[0]
        if len(images) == 1:
            return images[0]
        if not images:
            wanted = (f"{named!r} in {self._format.image_folder}" if named
                      else self._format.expected_image(image_id))
            return Reject("image", annotation_path or image_id, "missing", (
                f"{annotation_path} has no image: no {wanted} "
                f"({self._format.missing_image_hint})"))
        names = ", ".join(posixpath.basename(path) for path, _size, _modified in images)
        return Reject("image", images[0][0], "duplicate_file_name", (
            f"{len(images)} images have the id {image_id!r} ({names}) and "
            f"{annotation_path or 'no annotation file'} names none of them; keep one"))


def read_annotation(path: str, roots: filesystems.InputRoots | None) -> bytes:
    """The bytes of one annotation file; raises :class:`AnnotationFileError`
    (``outside_root``), without opening it, for a file that links lead out of ``roots``."""
    target = roots.outside(path) if roots is not None else None
    if target is not None:
        raise AnnotationFileError("outside_root", (
            f"{path}: symbolic links lead this annotation file to {target!r}, outside "
            f"{roots.describe()}; it was not read, nor its image written (pass "
            "--allow-outside-root to read files links lead elsewhere)"))
    return filesystems.read_bytes(path)


class _AnnotationsApart(beam.DoFn):
    """Annotation files to the ``annotations`` output, every other message to the main one."""

    def process(self, element):
        if type(element[1]) is AnnotationFile:
            yield TaggedOutput("annotations", element)
        else:
            yield element


class _ParseNamingImage(beam.DoFn):
    """(own id, annotation file) -> (id of the image it names, the parsed annotation),
    for formats whose annotations name their image; other messages pass unchanged. An
    annotation that cannot be parsed, or names no usable image, keeps its own id."""

    def __init__(self, fmt: AnnotationFormat, roots: filesystems.InputRoots | None = None) -> None:
        self._format = fmt
        self._roots = roots

    def process(self, element):
        own_id, message = element
        if type(message) is not AnnotationFile:
            yield element
            return
        try:
            annotation = self._format.parse(read_annotation(message.path, self._roots),
                                            message.path)
        except AnnotationFileError as bad:
            yield own_id, ParsedAnnotationFile(message.path, message.split,
                                               failure=(bad.reason, bad.detail),
                                               modified=message.modified)
            return
        yield (annotation.image_id or own_id,
               ParsedAnnotationFile(message.path, message.split, annotation,
                                    modified=message.modified))


@beam.typehints.with_output_types(Any)
class SortedNames(beam.CombineFn):
    """The sorted class names found in the annotations (when no class list is given),
    from ``(name, where)`` pairs (:func:`names_found`): two that differ only in Unicode
    normalisation fail the run (:class:`~recordbeam.dataset.class_names.ClassNameError`),
    naming where each was found first."""

    def create_accumulator(self) -> dict[str, str]:
        return {}

    def add_input(self, accumulator: dict[str, str],
                  found: Iterable[tuple[str, str]]) -> dict[str, str]:
        for name, where in found:
            known = accumulator.get(name)
            if known is None or where < known:
                accumulator[name] = where
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict[str, str]]) -> dict[str, str]:
        merged: dict[str, str] = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator.items())
        return merged

    def extract_output(self, accumulator: dict[str, str]) -> list[str]:
        names = sorted(accumulator)
        twins = normalisation_twins(names)
        if twins:
            first, other = twins[0]
            raise ClassNameError(twins_message(first, other, accumulator[first],
                                               accumulator[other]))
        return names


def names_found(image: ParsedImage) -> list[tuple[str, str]]:
    """``(name, where)`` of an image's objects and image labels, for :class:`SortedNames`:
    only names that can be class names (the others' objects are rejected
    ``invalid_class_name`` when the record is built), ``where`` with any lone surrogate (a
    file name that is not UTF-8) escaped, as Beam's coder takes text."""
    found = [*((obj.name, obj.source) for obj in image.objects), *image.image_labels]
    return [(name, printable(where)) for name, where in found if name_problem(name) is None]


def class_names(parsed: beam.PCollection, given: Sequence[str] | None) -> Any:
    """The class names of ``ParsedImage``s, for :func:`build_record` and the metadata:
    ``given`` as it is, else the side input of the sorted names of their objects (see
    :class:`SortedNames`), ``[]`` when there is none. The combine leaves out Beam's
    default element; the side input's default stands in for it."""
    if given is not None:
        return given
    names = (
        parsed
        | "ClassNames" >> beam.Map(names_found)
        | "SortedClasses" >> beam.CombineGlobally(SortedNames()).without_defaults()
    )
    return AsSingleton(names, default_value=[])


def build_record(parsed: ParsedImage, classes: Sequence[str],
                 class_list: str = "the class list") -> Iterator[Any]:
    """ParsedImage -> ImageRecord whose objects (and image labels) carry labels 1..K;
    unknown classes are annotation rejects naming ``class_list``."""
    labels = {name: label for label, name in enumerate(classes, 1)}
    objects = []
    for obj in parsed.objects:
        label = yield from _label(obj.name, obj.source, labels, class_list, parsed.split,
                                  "this object")
        if label is not None:
            objects.append(object_fields(DetectionObject(
                obj.source, label, obj.name, obj.bbox, obj.extra, obj.segmentation,
                obj.normalized)))
    image_labels: dict[str, int] = {}
    for name, source in parsed.image_labels:
        label = yield from _label(name, source, labels, class_list, parsed.split, "this label")
        if label is not None:
            image_labels.setdefault(name, label)
    fields = {"source_id": parsed.source_id or parsed.image_id, "filename": parsed.filename,
              "width": parsed.width, "height": parsed.height, "objects": tuple(objects)}
    if parsed.embedded:  # only then: every other record keeps the labels it always had
        fields[IMAGE_IN_ANNOTATION] = True
    if image_labels:
        fields["image_labels"] = tuple((label, name) for name, label in image_labels.items())
    yield ImageRecord(identity=parsed.image_id, path=parsed.path, size=parsed.size,
                      split=parsed.split, labels=fields, modified=(parsed.modified,))


def _label(name: str, source: str, labels: dict[str, int], class_list: str, split: str,
           what: str) -> Iterator[Any]:
    """The label of class ``name`` (a generator: its reject is yielded, None returned)."""
    label = labels.get(name)
    if label is None and name_problem(name):
        yield TaggedOutput("rejects", Reject(
            "annotation", source, INVALID_CLASS_NAME,
            f"{source}: the class name {shown(name)} {name_problem(name)}; a class name is "
            f"written as one line of labels.txt. Fix the name. The image was written without "
            f"{what}", split))
    elif label is None:
        yield TaggedOutput("rejects", Reject(
            "annotation", source, "unknown_category",
            f"{source}: class {name!r} is not in {class_list}; add it there, or fix the name. "
            f"The image was written without {what}", split))
    return label


def label_metadata(classes: Sequence[str]) -> dict[str, Any]:
    """The ``label_map`` a run writes for these classes (labels 1..K, 0 left for background)."""
    return {"label_map": {str(label): name for label, name in enumerate(classes, 1)}}


def detection_metadata(pbegin: beam.pvalue.PBegin, classes: Any, terms: Any) -> beam.PCollection:
    """A detection source's ``metadata``, once: task, label map and the inputs' terms.
    ``classes``: the class names or their side input (:func:`class_names`); ``terms``:
    the side input of :func:`.fingerprint.input_terms`."""
    return pbegin | "Metadata" >> beam.Impulse() | "LabelMap" >> beam.Map(
        lambda _, found, t: {"task": "detection", **label_metadata(found),
                             "label_names": list(found), "inputs": inputs_entry(t)},
        classes, terms)


class ReadAnnotatedImages(beam.PTransform):
    """Read a format with one annotation file per image into ``ImageRecord``s for a
    :class:`~recordbeam.sources.detection.DetectionEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`. ``skip_prefix``
    (the output folder's path, when it lies inside the input) is left out of the listings;
    an annotation file that links lead out of ``roots`` is not read (its image is rejected
    ``outside_root``).
    """

    def __init__(self, fmt: AnnotationFormat, skip_prefix: str | None = None,
                 roots: filesystems.InputRoots | None = None) -> None:
        super().__init__()
        self._format = fmt
        self._skip_prefix = skip_prefix
        self._roots = roots

    def expand(self, pbegin):
        fmt = self._format
        split_lists = fmt.split_lists()
        tasks: list[Any] = [*fmt.listings(), *split_lists, *fmt.small_inputs()]
        listed = (
            pbegin
            | "ListTasks" >> beam.Create(tasks)
            | "List" >> beam.ParDo(_List(fmt, self._skip_prefix))
            .with_output_types(tuple[str, JoinMessage])  # (image id, its file or list line)
            .with_outputs("counts", "inputs", "rejects", main="by_id")
        )
        by_id = listed.by_id
        if fmt.names_its_image:
            # Only the annotation files are spread (a listing is one task's output) and
            # parsed before the join; the images' messages go to the join as they are.
            apart = by_id | "AnnotationsApart" >> beam.ParDo(_AnnotationsApart()).with_output_types(
                tuple[str, JoinMessage]).with_outputs("annotations", main="others")
            named = (
                apart.annotations
                | "SpreadAnnotations" >> beam.Reshuffle()
                | "ParseBeforeJoin" >> beam.ParDo(_ParseNamingImage(fmt, self._roots))
                .with_output_types(tuple[str, JoinMessage])  # (named image's id, message)
            )
            by_id = (named, apart.others) | "WithImages" >> beam.Flatten()
        parsed = (
            by_id
            | "JoinById" >> beam.GroupByKey()  # (image id, [JoinMessage])
            | "Parse" >> beam.ParDo(_JoinAndParse(fmt, bool(split_lists), self._roots))
            .with_output_types(Any).with_outputs("rejects", "counts", main="parsed")
        )
        classes = class_names(parsed.parsed, fmt.classes)
        built = parsed.parsed | "BuildRecords" >> beam.FlatMap(
            build_record, classes, fmt.class_list,
        ).with_output_types(ImageRecord).with_outputs("rejects", "counts", main="records")
        terms = input_terms(listed.inputs)
        metadata = detection_metadata(pbegin, classes, terms)
        rejects = (listed.rejects, parsed.rejects, built.rejects) | "Rejects" >> beam.Flatten()
        counts = (listed.counts, parsed.counts, built.counts) | "Counts" >> beam.Flatten()
        sizes = parsed.parsed | "PlannedSizes" >> beam.Map(lambda image: (image.split, image.size))
        return SourceRead(built.records, rejects, counts, metadata, sizes)


class ReadFormat(beam.PTransform):
    """The read transform of a format with one annotation file per image: a subclass gives
    its :meth:`annotation_format`; the reading is :class:`ReadAnnotatedImages`'.

    Args:
        options: the format's options, with ``root`` and ``input_roots()``.
        skip_below: the output folder, left out of the listings when it lies inside ROOT.
    """

    _skip_prefix: str | None = None
    #: The class names in label order when known before the run, else None (the names
    #: found in the annotations, sorted).
    classes: Sequence[str] | None = None
    #: The folders named on the command line (:class:`filesystems.InputRoots`); None with
    #: ``allow_outside_root``. Each subclass sets it: a format that forgot fails loudly.
    input_roots: filesystems.InputRoots | None

    def __init__(self, options: Any = None, skip_below: str | None = None) -> None:
        super().__init__()
        if options is not None:
            self._options = options
            self._skip_prefix = skipped_prefix(options.root, skip_below)
            self.input_roots = options.input_roots()

    def annotation_format(self) -> AnnotationFormat:
        raise NotImplementedError

    def finds_annotation_file(self) -> bool:
        """Whether any annotation file is there (a listing that stops at the first one;
        see :func:`find_annotation_file`)."""
        return find_annotation_file(self.annotation_format(), self._skip_prefix) is not None

    def expand(self, pbegin):
        return pbegin | ReadAnnotatedImages(self.annotation_format(), self._skip_prefix,
                                            self.input_roots)
