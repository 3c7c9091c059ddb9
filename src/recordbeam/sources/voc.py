"""Pascal VOC input: ``Annotations/*.xml`` + ``JPEGImages/`` (+ split lists, label map).

ROOT is the folder as VOC itself or a labeling tool (CVAT, Datumaro, labelImg) exports it::

    ROOT/Annotations/<id>.xml          one XML per image
    ROOT/JPEGImages/<id>.jpg           the images (``--images`` points elsewhere)
    ROOT/ImageSets/Main/<split>.txt    optional: the ids of each split, one per line
    ROOT/labelmap.txt                  optional: the classes, one per line, in label order

The launcher only lists ``ImageSets/Main`` (the split names) and reads ``labelmap.txt``;
the annotation and image folders are listed, and each XML read (one small read per
image), on workers. XML is parsed with ``defusedxml``: a DOCTYPE declaring entities or
pointing at external files is refused (reject ``unsafe_xml``), never expanded.

Boxes: VOC's ``bndbox`` holds 1-based pixel corners; like the Object Detection API's
Pascal converter, ``xmin / width`` is written (the 1-pixel offset is not subtracted), so
our boxes equal the OD API's and a Datumaro round trip of COCO boxes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from math import isfinite
from typing import Any, NamedTuple
from xml.etree.ElementTree import Element, ParseError

import apache_beam as beam
import defusedxml.ElementTree as safe_xml
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsSingleton, TaggedOutput
from defusedxml import DefusedXmlException

from recordbeam import filesystems
from recordbeam.errors import DataError
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.coco import is_text, printable
from recordbeam.sources.detection import DetectionEncoder
from recordbeam.sources.fingerprint import FileTermsFn
from recordbeam.sources.record_coder import ImageRecordCoder  # noqa: F401 - registers it

#: The per-object features the OD API's Pascal converter writes beside the boxes.
VOC_OBJECT_KINDS = {
    "image/object/difficult": "int64",
    "image/object/truncated": "int64",
    "image/object/view": "bytes",
}

#: File name endings taken as images in the images folder (compared in lower case).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")

#: The class name VOC label maps (Datumaro's, CVAT's) list first for label 0; not a class
#: of the objects: labels 1..K go to the others, as in the OD API's label maps.
BACKGROUND = "background"


class VocError(DataError, ValueError):
    """The VOC folder cannot be used as given (no Annotations folder, a broken label map)."""


@dataclass(frozen=True)
class VocOptions:
    """What to read.

    Attributes:
        root: the VOC folder (any Beam filesystem).
        images_dir: where the images are; None means ``ROOT/JPEGImages``.
        split: the split of every image when ``ImageSets/Main`` has no split lists.
    """

    root: str
    images_dir: str | None = None
    split: str = "train"

    @property
    def annotations_dir(self) -> str:
        return filesystems.join(self.root.rstrip("/"), "Annotations")

    @property
    def image_folder(self) -> str:
        return self.images_dir or filesystems.join(self.root.rstrip("/"), "JPEGImages")

    @property
    def split_lists_dir(self) -> str:
        return filesystems.join(self.root.rstrip("/"), "ImageSets", "Main")

    @property
    def labelmap(self) -> str:
        return filesystems.join(self.root.rstrip("/"), "labelmap.txt")


# --- what the launcher reads: split names, the label map ------------------------------


def split_lists(options: VocOptions) -> dict[str, str]:
    """Split name -> path of its ``ImageSets/Main/<split>.txt`` (a listing, no reads).

    Per-class lists (``dog_train.txt``) are not splits. ``trainval`` is left out when
    ``train`` and ``val`` are there too: it is their union, and would write every image
    twice.
    """
    pattern = filesystems.join(options.split_lists_dir, "*.txt")
    found: dict[str, str] = {}
    for result in FileSystems.match([pattern]):
        for meta in result.metadata_list:
            name = posixpath.basename(meta.path)[: -len(".txt")]
            if name and "_" not in name:
                found[name] = meta.path
    if "train" in found and "val" in found:
        found.pop("trainval", None)
    return dict(sorted(found.items()))


def parse_labelmap(text: str, path: str) -> list[str]:
    """Class names from a ``labelmap.txt``: one per line, or ``name:color:parts:actions``
    as Datumaro and CVAT write it; ``#`` comments, blank lines and ``background`` skipped."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split(":", 1)[0].strip() if ":" in line else line
        if not name:
            raise VocError(f"{path}: line {number} has no class name before ':'; write one "
                           "class name per line (or name:color:parts:actions)")
        if name.lower() == BACKGROUND:
            continue
        if name in seen:
            raise VocError(f"{path}: class {name!r} on line {number} already appears on line "
                           f"{seen[name]}; list each class once")
        seen[name] = number
        names.append(name)
    if not names:
        raise VocError(f"{path} lists no classes; write one class name per line, or remove "
                       "it to take the class names found in the annotations")
    return names


def read_labelmap(options: VocOptions) -> list[str] | None:
    """The classes of ``ROOT/labelmap.txt`` in label order, or None when there is none."""
    if not filesystems.exists(options.labelmap):
        return None
    with filesystems.open_read(options.labelmap) as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise VocError(f"{options.labelmap} is not UTF-8 text; save it as UTF-8") from None
    return parse_labelmap(text, options.labelmap)


def voc_input_patterns(options: VocOptions) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``): the
    annotation and image folders, then the split lists and the label map."""
    return [filesystems.everything_below(options.annotations_dir),
            filesystems.everything_below(options.image_folder),
            filesystems.join(options.split_lists_dir, "*.txt"), options.labelmap]


# --- one XML ------------------------------------------------------------------------


class VocObject(NamedTuple):
    """An ``<object>`` of a VOC XML: class name, pixel corners and the OD API's flags."""

    index: int
    name: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    difficult: int
    truncated: int
    pose: str


class VocAnnotation(NamedTuple):
    """What a VOC XML says about its image."""

    filename: str | None
    width: int | None
    height: int | None
    objects: tuple[VocObject, ...]
    rejects: tuple[Reject, ...]  # objects that cannot be used, with their element


class VocXmlError(Exception):
    """An XML that cannot be used at all; ``reason`` is the reject code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def parse_voc_xml(data: bytes, path: str) -> VocAnnotation:
    """Parse one VOC annotation; raises :class:`VocXmlError` for a file that is not one.

    Objects that cannot be used (no name, a box that is no numbers or has no area) come
    back as annotation rejects naming the file and the ``object[i]`` element.
    """
    try:
        root = safe_xml.fromstring(data)
    except DefusedXmlException:
        raise VocXmlError("unsafe_xml", (
            f"{path}: the XML declares entities or refers to external files (a DOCTYPE); "
            "they are never expanded. Remove the DOCTYPE: VOC annotations need none")) from None
    except ParseError as error:
        raise VocXmlError("malformed_xml", (
            f"{path}: not well-formed XML ({error}); fix or re-export the file")) from None
    if root.tag != "annotation":
        raise VocXmlError("malformed_xml", (
            f"{path}: the root element is <{root.tag}>, not <annotation>; is this a Pascal "
            "VOC annotation?"))
    size = root.find("size")
    width = _whole(size.findtext("width")) if size is not None else None
    height = _whole(size.findtext("height")) if size is not None else None
    objects, rejects = [], []
    for index, element in enumerate(root.iter("object")):
        parsed = _parse_object(element, index, path)
        (rejects if isinstance(parsed, Reject) else objects).append(parsed)
    filename = (root.findtext("filename") or "").strip() or None
    return VocAnnotation(filename, width, height, tuple(objects), tuple(rejects))


def object_source(path: str, index: int) -> str:
    return f"{path}: object[{index}]"


def _parse_object(element: Element, index: int, path: str) -> VocObject | Reject:
    where = object_source(path, index)
    name = (element.findtext("name") or "").strip()
    if not name:
        return Reject("annotation", where, "missing_field",
                      f"{where} has no <name>; the image was written without this object")
    box = element.find("bndbox")
    corners = [_number(box.findtext(tag)) if box is not None else None
               for tag in ("xmin", "ymin", "xmax", "ymax")]
    if None in corners:
        return Reject("annotation", where, "invalid_bbox", (
            f"{where} ({name!r}) needs a <bndbox> with numbers in xmin, ymin, xmax and ymax; "
            "the image was written without this object"))
    xmin, ymin, xmax, ymax = corners
    if xmax <= xmin or ymax <= ymin:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({name!r}): box xmin={xmin:g} ymin={ymin:g} xmax={xmax:g} ymax={ymax:g} "
            "has no area (max must be above min); the image was written without this object"))
    return VocObject(index, name, xmin, ymin, xmax, ymax,
                     1 if _whole(element.findtext("difficult")) else 0,
                     1 if _whole(element.findtext("truncated")) else 0,
                     (element.findtext("pose") or "").strip() or "Unspecified")


def _number(text: str | None) -> float | None:
    try:
        value = float((text or "").strip())
    except ValueError:
        return None
    return value if isfinite(value) else None


def _whole(text: str | None) -> int | None:
    value = _number(text)
    return int(value) if value is not None and value == int(value) else None


# --- the pipeline ---------------------------------------------------------------------


class VocMessage:
    """What the join by image id groups: one of the three listings' findings below."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class AnnotationFile(VocMessage):
    """An XML of ``Annotations/``."""

    path: str


@dataclass(frozen=True, slots=True)
class ImageFile(VocMessage):
    """An image of the images folder, with its listed size."""

    path: str
    size: int


@dataclass(frozen=True, slots=True)
class SplitEntry(VocMessage):
    """A line of a split list: the split, and ``<list>.txt:<line>`` for rejects."""

    split: str
    where: str


class VocMessageCoder(beam.coders.Coder):
    """A :class:`VocMessage` as a kind byte and its fields (text length-prefixed as UTF-8
    with ``surrogatepass``, the size a varint): the join holds one per file."""

    def encode(self, value: VocMessage) -> bytes:
        out = create_OutputStream()
        if type(value) is AnnotationFile:
            out.write_byte(0)
            out.write(value.path.encode("utf-8", "surrogatepass"), True)
        elif type(value) is ImageFile:
            out.write_byte(1)
            out.write(value.path.encode("utf-8", "surrogatepass"), True)
            out.write_var_int64(value.size)
        else:
            out.write_byte(2)
            out.write(value.split.encode("utf-8", "surrogatepass"), True)
            out.write(value.where.encode("utf-8", "surrogatepass"), True)
        return out.get()

    def decode(self, encoded: bytes) -> VocMessage:
        stream = create_InputStream(encoded)
        kind = stream.read_byte()
        first = stream.read_all(True).decode("utf-8", "surrogatepass")
        if kind == 0:
            return AnnotationFile(first)
        if kind == 1:
            return ImageFile(first, stream.read_var_int64())
        return SplitEntry(first, stream.read_all(True).decode("utf-8", "surrogatepass"))

    def to_type_hint(self) -> type:
        return VocMessage


beam.coders.registry.register_coder(VocMessage, VocMessageCoder)


def _stem(folder: str, path: str) -> str:
    """The id of a file: its path below ``folder`` without the extension (VOC ids may
    hold folders, as ``2008/000123``)."""
    name = filesystems.relative_name(folder, path)
    return posixpath.splitext(name)[0]


class _ListVoc(beam.DoFn):
    """One listing task: the annotation XMLs, the image files, or one split list, each
    keyed by image id for the join; and the input files, for the fingerprint."""

    def __init__(self, options: VocOptions, skip_prefix: str | None) -> None:
        self._options = options
        self._skip = skip_prefix

    def process(self, task: tuple[str, Any]):
        kind, value = task
        # Every listed file also goes to the inputs fingerprint, from the one listing.
        if kind == "annotations":
            folder = self._options.annotations_dir
            for meta in self._listed(folder):
                yield TaggedOutput("inputs", _text_metadata(meta))
                if not is_text(meta.path):
                    yield TaggedOutput("rejects", _invalid_name(meta.path))
                elif meta.path.lower().endswith(".xml"):
                    yield _stem(folder, meta.path), AnnotationFile(meta.path)
                else:
                    yield TaggedOutput("counts", ("voc_non_xml_files_skipped", 1))
        elif kind == "images":
            folder = self._options.image_folder
            for meta in self._listed(folder):
                yield TaggedOutput("inputs", _text_metadata(meta))
                if not is_text(meta.path):
                    yield TaggedOutput("rejects", _invalid_name(meta.path))
                elif meta.path.lower().endswith(IMAGE_SUFFIXES):
                    yield _stem(folder, meta.path), ImageFile(meta.path, meta.size_in_bytes)
                else:
                    yield TaggedOutput("counts", ("voc_non_image_files_skipped", 1))
        elif kind == "split":
            split, path = value
            yield from self._split_ids(split, path)
        else:  # the small inputs: every list of ImageSets/Main, the label map
            for pattern in voc_input_patterns(self._options)[2:]:
                for meta in self._listed_pattern(pattern):
                    yield TaggedOutput("inputs", _text_metadata(meta))

    def _listed(self, folder: str):
        return self._listed_pattern(filesystems.everything_below(folder))

    def _listed_pattern(self, pattern: str):
        for meta in filesystems.iter_match(pattern):
            if not (self._skip and meta.path.startswith(self._skip)):
                yield meta

    def _split_ids(self, split: str, path: str):
        with filesystems.open_read(path) as f:
            text = f.read().decode("utf-8-sig", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            image_id = split_list_id(line)
            if image_id:
                yield image_id, SplitEntry(split, f"{path}:{number}")


def split_list_id(line: str) -> str:
    """The image id on one line of a split list: the whole line, stripped. Ids may hold
    spaces (labelImg keeps file names as they are); only per-class lists, which are not
    read, add a flag column."""
    return line.strip()


def _text_metadata(meta: FileMetadata) -> FileMetadata:
    """Beam encodes paths as UTF-8: a name that is not UTF-8 travels escaped."""
    if is_text(meta.path):
        return meta
    return FileMetadata(printable(meta.path), meta.size_in_bytes, meta.last_updated_in_seconds)


def _invalid_name(path: str) -> Reject:
    shown = printable(path)
    return Reject("image", shown, "invalid_file_name", (
        f"{shown}: the file name is not valid UTF-8 text, so it cannot be an id; rename the "
        "file (and its XML or image) with a UTF-8 name"))


class ParsedImage(NamedTuple):
    """An image joined with its XML, before class names become labels."""

    image_id: str
    split: str
    path: str
    size: int
    filename: str
    width: int | None
    height: int | None
    objects: tuple[VocObject, ...]
    xml: str | None


class _ParseAnnotations(beam.DoFn):
    """image id -> (its XML, image files, split entries) -> ParsedImage per split it is
    listed in, after reading and parsing the XML here, on the worker."""

    def __init__(self, options: VocOptions, has_split_lists: bool) -> None:
        self._options = options
        self._has_split_lists = has_split_lists

    def process(self, element):
        image_id, messages = element
        xmls = sorted(m.path for m in messages if type(m) is AnnotationFile)
        images = sorted((m.path, m.size) for m in messages if type(m) is ImageFile)
        listed = sorted({(m.split, m.where) for m in messages if type(m) is SplitEntry})
        splits = sorted({split for split, _where in listed})
        if self._has_split_lists and not splits:
            yield TaggedOutput("counts", ("voc_images_in_no_split_list", 1))
            return
        splits = splits or [self._options.split]
        if not xmls and not images:
            for split, where in listed:
                yield TaggedOutput("rejects", Reject(
                    "image", where, "missing",
                    f"{where} lists {image_id!r}, but there is no Annotations/{image_id}.xml "
                    f"and no image named {image_id}.* in {self._options.image_folder}", split))
            return
        xml = xmls[0] if xmls else None
        if len(xmls) > 1:
            yield TaggedOutput("rejects", Reject(
                "image", xmls[0], "duplicate_file_name",
                f"{len(xmls)} annotation files have the id {image_id!r} ({', '.join(xmls)}); "
                "keep one. None of them was read."))
            return
        annotation = None
        if xml is not None:
            try:
                annotation = parse_voc_xml(filesystems.read_bytes(xml), xml)
            except VocXmlError as bad:
                for split in splits:
                    yield TaggedOutput("rejects", Reject("image", xml, bad.reason, bad.detail, split))
                return
        image = self._choose_image(image_id, xml, annotation, images)
        if isinstance(image, Reject):
            for split in splits:
                yield TaggedOutput("rejects", replace(image, split=split))
            return
        path, size = image
        filename = posixpath.basename(path)
        if annotation is None:
            for split in splits:
                yield TaggedOutput("rejects", Reject(
                    "warning", path, "no_annotation_file",
                    f"no Annotations/{image_id}.xml for this image; written with no objects "
                    "(add the XML, or remove the image if it should not be in the dataset)", split))
            annotation = VocAnnotation(None, None, None, (), ())
        for split in splits:
            for reject in annotation.rejects:
                yield TaggedOutput("rejects", replace(reject, split=split))
            yield ParsedImage(image_id, split, path, size, filename, annotation.width,
                              annotation.height, annotation.objects, xml)

    def _choose_image(self, image_id: str, xml: str | None, annotation: VocAnnotation | None,
                      images: list[tuple[str, int]]) -> tuple[str, int] | Reject:
        named = annotation.filename if annotation else None
        if named is not None:
            matching = [image for image in images if posixpath.basename(image[0]) == named]
            if len(matching) == 1:
                return matching[0]
        if len(images) == 1:
            return images[0]
        if not images:
            wanted = repr(named) if named else f"{image_id}.*"
            return Reject("image", xml or image_id, "missing", (
                f"{xml} has no image: no {wanted} in {self._options.image_folder} (pass "
                "--images if the images are elsewhere)"))
        names = ", ".join(posixpath.basename(path) for path, _size in images)
        return Reject("image", images[0][0], "duplicate_file_name", (
            f"{len(images)} images have the id {image_id!r} ({names}) and "
            f"{xml or 'no annotation file'} names none of them in <filename>; keep one"))


class _NameSet(beam.CombineFn):
    """The sorted class names found in the annotations (when there is no labelmap.txt)."""

    def create_accumulator(self) -> set[str]:
        return set()

    def add_input(self, accumulator: set[str], names: Iterable[str]) -> set[str]:
        accumulator.update(names)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[set[str]]) -> set[str]:
        merged: set[str] = set()
        for accumulator in accumulators:
            merged |= accumulator
        return merged

    def extract_output(self, accumulator: set[str]) -> list[str]:
        return sorted(accumulator)


def _build_record(parsed: ParsedImage, classes: list[str]) -> Iterator[Any]:
    """ParsedImage -> ImageRecord whose objects carry labels 1..K; unknown classes rejected."""
    labels = {name: label for label, name in enumerate(classes, 1)}
    objects = []
    for obj in parsed.objects:
        source = object_source(parsed.xml or parsed.path, obj.index)
        label = labels.get(obj.name)
        if label is None:
            yield TaggedOutput("rejects", Reject(
                "annotation", source, "unknown_category",
                f"{source}: class {obj.name!r} is not in labelmap.txt; add it there, or fix the "
                "name. The image was written without this object", parsed.split))
            continue
        # Plain tuples (DetectionObject's fields): the record coder writes them compactly.
        objects.append((
            source, label, obj.name,
            (obj.xmin, obj.ymin, obj.xmax - obj.xmin, obj.ymax - obj.ymin),
            (obj.difficult, obj.truncated, obj.pose)))
    yield ImageRecord(
        identity=parsed.image_id, path=parsed.path, size=parsed.size, split=parsed.split,
        labels={"source_id": parsed.image_id, "filename": parsed.filename,
                "width": parsed.width, "height": parsed.height, "objects": tuple(objects)})


def _metadata(classes: list[str], terms: tuple[int, int]) -> dict:
    return {
        "task": "detection",
        "label_map": {str(label): name for label, name in enumerate(classes, 1)},
        "label_names": list(classes),
        "inputs": {"files": terms[1], "terms": f"{terms[0]:032x}"},
    }


def label_metadata(classes: list[str]) -> dict[str, Any]:
    """The ``label_map`` a run writes for these classes (labels 1..K, 0 left for background)."""
    return {"label_map": {str(label): name for label, name in enumerate(classes, 1)}}


class ReadVoc(beam.PTransform):
    """Read a Pascal VOC folder into ``ImageRecord``s for :class:`VocEncoder`.

    Returns a dict of PCollections, as :class:`recordbeam.sources.coco.ReadCoco`:
    ``records``, ``rejects``, ``counts``, ``metadata`` (label map, input terms) and
    ``sizes`` ((split, bytes) per image, to plan shards). ``splits`` (known on
    construction, from a listing of ``ImageSets/Main``) are the splits it writes.

    ``skip_below``, the output folder when it lies inside an input folder, is left out.
    """

    def __init__(self, options: VocOptions, skip_below: str | None = None) -> None:
        super().__init__()
        self._options = options
        self._skip_prefix = (filesystems.prefix_below(options.root, skip_below)
                             if skip_below else None)
        self._split_lists = split_lists(options)
        self.splits = tuple(self._split_lists) or (options.split,)
        self.classes = read_labelmap(options)

    def expand(self, pbegin):
        opts = self._options
        tasks = [("annotations", ""), ("images", ""), ("inputs", "")]
        tasks += [("split", (split, path)) for split, path in self._split_lists.items()]
        listed = (
            pbegin
            | "ListTasks" >> beam.Create(tasks)
            | "List" >> beam.ParDo(_ListVoc(opts, self._skip_prefix))
            .with_output_types(tuple[str, VocMessage])  # (image id, its file or list line)
            .with_outputs("counts", "inputs", "rejects", main="by_id")
        )
        parsed = (
            listed.by_id
            | "JoinById" >> beam.GroupByKey()  # (image id, [VocMessage])
            | "ParseXml" >> beam.ParDo(_ParseAnnotations(opts, bool(self._split_lists)))
            .with_outputs("rejects", "counts", main="parsed")
        )
        if self.classes is not None:
            classes = pbegin | "LabelMapClasses" >> beam.Create([self.classes])
        else:
            classes = (
                parsed.parsed
                | "ClassNames" >> beam.Map(lambda image: [obj.name for obj in image.objects])
                | "SortedClasses" >> beam.CombineGlobally(_NameSet())
            )
        built = parsed.parsed | "BuildRecords" >> beam.FlatMap(
            _build_record, AsSingleton(classes)).with_output_types(ImageRecord).with_outputs(
                "rejects", "counts", main="records")
        terms = listed.inputs | "InputTerms" >> beam.CombineGlobally(FileTermsFn())
        metadata = pbegin | "Metadata" >> beam.Create([None]) | "LabelMap" >> beam.Map(
            lambda _, found, t: _metadata(found, t), AsSingleton(classes), AsSingleton(terms))
        rejects = (listed.rejects, parsed.rejects, built.rejects) | "VocRejects" >> beam.Flatten()
        counts = (listed.counts, parsed.counts, built.counts) | "VocCounts" >> beam.Flatten()
        sizes = parsed.parsed | "PlannedSizes" >> beam.Map(lambda image: (image.split, image.size))
        return {"records": built.records, "rejects": rejects, "counts": counts,
                "metadata": metadata, "sizes": sizes}


class VocEncoder(DetectionEncoder):
    """The detection features plus the OD API Pascal converter's ``difficult``,
    ``truncated`` and ``view`` (the object's ``<pose>``)."""

    def __init__(self, checks=None, split: str = "train", fixes=None) -> None:
        super().__init__(checks, split, fixes, extra_kinds=VOC_OBJECT_KINDS)

    def object_counts(self, columns) -> dict[str, int]:
        """Images written with no object (no XML, no ``<object>``, or every object
        rejected), counted as they are written."""
        return {} if columns["image/object/class/label"] else {"images_without_objects": 1}
