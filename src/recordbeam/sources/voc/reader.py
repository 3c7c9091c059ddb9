"""Pascal VOC input: ``Annotations/*.xml`` + ``JPEGImages/`` (+ split lists, label map), or
a flat export with each XML beside its image.

ROOT is the folder as VOC itself or a labeling tool (CVAT, Datumaro) exports it::

    ROOT/Annotations/<id>.xml          one XML per image
    ROOT/JPEGImages/<id>.jpg           the images (``--images`` points elsewhere)
    ROOT/ImageSets/Main/<split>.txt    optional: the ids of each split, one per line
    ROOT/labelmap.txt                  optional: the classes, one per line, in label order

or, without ``Annotations/``, as Roboflow's VOC export and labelImg save it::

    ROOT/<split>/<id>.xml + <id>.jpg   train/, valid/, val/, test/: one split each
    ROOT/<id>.xml + <id>.jpg           no split folders: one split, ``--split``

The launcher only lists ``ImageSets/Main`` (the split names), reads ``labelmap.txt`` and,
without ``Annotations/``, looks for the first XML of each split folder; the annotation
and image folders are listed, and each XML read (one small read per image), on workers. XML is parsed with ``defusedxml``: a DOCTYPE declaring entities or
pointing at external files is refused (reject ``unsafe_xml``), never expanded.

Boxes: VOC's ``bndbox`` holds 1-based pixel corners; like the Object Detection API's
Pascal converter, ``xmin / width`` is written (the 1-pixel offset is not subtracted), so
our boxes equal the OD API's and a Datumaro round trip of COCO boxes.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as safe_xml
from defusedxml import DefusedXmlException

from recordbeam import feature_keys, filesystems
from recordbeam.dataset.class_names import check_class_list, class_file_lines
from recordbeam.errors import DataError, UsageError
from recordbeam.records import Reject
from recordbeam.sources.annotated_files import (
    IMAGE_SUFFIXES,  # noqa: F401 - re-exported: the suffixes VOC takes as images
    AnnotationFileError,
    AnnotationFormat,
    Listing,
    NamedObject,
    ParsedAnnotation,
    ReadFormat,
    SplitList,
)
from recordbeam.sources.conversion import conversion
from recordbeam.sources.detection import DetectionEncoder
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import (
    NO_OBJECTS,
    PASS_IMAGES,
    UNLABELED,
    refuse_split,
    require_folder,
    require_images_option,
)
from recordbeam.sources.text import as_number, as_whole

#: The per-object features the OD API's Pascal converter writes beside the boxes.
VOC_OBJECT_KINDS = {
    feature_keys.DIFFICULT: "int64",
    feature_keys.TRUNCATED: "int64",
    feature_keys.VIEW: "bytes",
}

#: The class name VOC label maps (Datumaro's, CVAT's) list first for label 0; not a class
#: of the objects: labels 1..K go to the others, as in the OD API's label maps.
BACKGROUND = "background"


#: Folders of a flat export (Roboflow's train/valid/test) that are splits, named as the
#: folder, when they hold XMLs.
FLAT_SPLIT_FOLDERS = ("train", "valid", "val", "test")


class VocError(DataError, ValueError):
    """The VOC folder cannot be used as given (no Annotations folder, a broken label map)."""


class NotAVocFolder(UsageError, VocError):  # UsageError first: its exit code
    """--input holds neither ``Annotations/`` nor XMLs beside images: a usage error."""


@dataclass(frozen=True)
class VocOptions(filesystems.RootAndImagesInputs):
    """What to read.

    Attributes:
        root: the VOC folder (any Beam filesystem).
        images_dir: where the images are; None means ``ROOT/JPEGImages``.
        split: the split of every image when ``ImageSets/Main`` has no split lists.
        allow_outside_root: also read files that symbolic links lead outside ``root`` and
            ``images_dir``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    images_dir: str | None = None
    split: str = "train"
    allow_outside_root: bool = False

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


@dataclass(frozen=True)
class VocLayout:
    """Where the XMLs are (what the launcher learned from a few listings).

    Attributes:
        flat: no ``Annotations/``: each XML lies beside its image.
        split_folders: of a flat export, the folders of ROOT that are splits (Roboflow's
            ``train``, ``valid``, ``test``); none: ROOT itself holds the XMLs.
    """

    flat: bool = False
    split_folders: tuple[str, ...] = ()
    images_folder: str | None = None  # Label Studio's ROOT/images, when JPEGImages/ is not


def read_layout(options: VocOptions) -> VocLayout:
    """``Annotations/`` when it holds files (its images in ``JPEGImages/``, or in
    ``images/`` as Label Studio exports them), else a flat export: XMLs in split folders of
    ROOT, or in ROOT itself. Each look is a listing stopped at its first file. Raises
    :class:`NotAVocFolder` when there is none of these."""
    if filesystems.has_files(options.annotations_dir):
        images = filesystems.join(options.root.rstrip("/"), "images")
        if (options.images_dir is None and not filesystems.has_files(options.image_folder)
                and filesystems.has_files(images)):
            return VocLayout(images_folder=images)  # Label Studio's VOC export
        return VocLayout()
    base = options.root.rstrip("/")
    folders = (*FLAT_SPLIT_FOLDERS, "")
    found = [folder for folder in folders if any(
        next(filesystems.iter_match(filesystems.glob_below(base, *filter(None, [folder]),
                                                           f"*{suffix}")), None) is not None
        for suffix in (".xml", ".XML"))]
    split_folders = tuple(folder for folder in found if folder)
    if split_folders or found or _labelimg_xml_below(base, options.images_dir is not None):
        return VocLayout(flat=True, split_folders=split_folders)
    raise NotAVocFolder(
        f"{base} has no Annotations/ folder with files, and no .xml file in it or in its "
        f"{', '.join(name + '/' for name in FLAT_SPLIT_FOLDERS)} folders; --input takes a "
        "Pascal VOC folder (Annotations/ and JPEGImages/) or a flat export with each "
        "<name>.xml beside its image (Roboflow's, labelImg's); with the XMLs in a folder "
        "of their own (annotations/ beside images/), pass --input that folder and --images "
        "the images' folder")


def _labelimg_xml_below(folder: str, images_apart: bool) -> bool:
    """Whether the first XML below ``folder`` is one of labelImg's, saved in subfolders (a
    folder per batch): beside an image of its name, or anywhere with ``images_apart``
    (``--images``, where the images lie as the XMLs do). A listing stopped at that XML,
    and one of its name's files. An XML without its image (``annotations/`` beside
    ``images/``) is no labelImg folder: the caller refuses it, saying what to pass."""
    for meta in filesystems.iter_match(filesystems.everything_below(folder)):
        if meta.path.lower().endswith(".xml"):
            stem = posixpath.splitext(meta.path)[0]
            return images_apart or any(
                other.path.lower().endswith(IMAGE_SUFFIXES)
                for other in filesystems.iter_match(filesystems.literal(stem) + ".*"))
    return False


# --- what the launcher reads: split names, the label map ------------------------------


def split_lists(options: VocOptions) -> dict[str, str]:
    """Split name -> path of its ``ImageSets/Main/<split>.txt`` (a listing, no reads).

    Per-class lists (``dog_train.txt``) are not splits. ``trainval`` is left out when
    ``train`` and ``val`` are there too: it is their union, and would write every image
    twice.
    """
    found: dict[str, str] = {}
    for meta in filesystems.iter_match(filesystems.glob_below(options.split_lists_dir, "*.txt")):
        name = posixpath.basename(meta.path)[: -len(".txt")]
        if name and "_" not in name:
            found[name] = meta.path
    if "train" in found and "val" in found:
        found.pop("trainval", None)
    roots = options.input_roots()
    for path in found.values():
        filesystems.refuse_outside(roots, path, "split list")
    return dict(sorted(found.items()))


def parse_labelmap(text: str, path: str) -> list[str]:
    """Class names from a ``labelmap.txt``: one per line, or ``name:color:parts:actions``
    as Datumaro and CVAT write it; ``#`` comments, blank lines and ``background`` skipped."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(class_file_lines(text), 1):
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
    check_class_list(names, [f"line {number}" for number in seen.values()], path)
    return names


def read_labelmap(options: VocOptions) -> list[str] | None:
    """The classes of ``ROOT/labelmap.txt`` in label order, or None when there is none."""
    if not filesystems.exists(options.labelmap):
        return None
    filesystems.refuse_outside(options.input_roots(), options.labelmap, "label map")
    with filesystems.open_read(options.labelmap) as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise VocError(f"{options.labelmap} is not UTF-8 text; save it as UTF-8") from None
    return parse_labelmap(text, options.labelmap)


def voc_input_patterns(options: VocOptions, layout: VocLayout = VocLayout()) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``): the
    folders :meth:`VocFormat.listings` lists, then its :meth:`VocFormat.small_inputs`
    (the pipeline sums the same files' terms)."""
    fmt = VocFormat(options, {}, None, layout)
    return [*(filesystems.everything_below(listing.folder) for listing in fmt.listings()),
            *fmt.small_inputs()]


# --- one XML ------------------------------------------------------------------------


def parse_voc_xml(data: bytes, path: str) -> ParsedAnnotation:
    """Parse one VOC annotation; raises :class:`AnnotationFileError` for a file that is
    not one.

    Each object's ``extra`` is ``(difficult, truncated, pose)``. Objects that cannot be
    used (no name, a box that is no numbers or has no area) come back as annotation
    rejects naming the file and the ``object[i]`` element.
    """
    try:
        root = safe_xml.fromstring(data)
    except DefusedXmlException:
        raise AnnotationFileError("unsafe_xml", (
            f"{path}: the XML declares entities or refers to external files (a DOCTYPE); "
            "they are never expanded. Remove the DOCTYPE: VOC annotations need none")) from None
    except ParseError as error:
        raise AnnotationFileError("malformed_xml", (
            f"{path}: not well-formed XML ({error}); fix or re-export the file")) from None
    if root.tag != "annotation":
        raise AnnotationFileError("malformed_xml", (
            f"{path}: the root element is <{root.tag}>, not <annotation>; is this a Pascal "
            "VOC annotation?"))
    size = root.find("size")
    width = as_whole(size.findtext("width")) if size is not None else None
    height = as_whole(size.findtext("height")) if size is not None else None
    objects, rejects = [], []
    for index, element in enumerate(root.iter("object")):
        parsed = _parse_object(element, index, path)
        (rejects if isinstance(parsed, Reject) else objects).append(parsed)
    filename = (root.findtext("filename") or "").strip() or None
    return ParsedAnnotation(filename, width, height, tuple(objects), tuple(rejects))


def object_source(path: str, index: int) -> str:
    return f"{path}: object[{index}]"


def _parse_object(element: Element, index: int, path: str) -> NamedObject | Reject:
    where = object_source(path, index)
    name = (element.findtext("name") or "").strip()
    if not name:
        return Reject("annotation", where, "missing_field",
                      f"{where} has no <name>; the image was written without this object")
    box = element.find("bndbox")
    corners = [as_number(box.findtext(tag)) if box is not None else None
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
    return NamedObject(where, name, (xmin, ymin, xmax - xmin, ymax - ymin), (
        _flag(element.findtext("difficult")), _flag(element.findtext("truncated")),
        (element.findtext("pose") or "").strip() or "Unspecified"))


def _flag(text: str | None) -> int:
    """A VOC flag (``<difficult>``, ``<truncated>``): 1 for a non-zero number or ``true``
    (any case), as tools writing booleans as words save it; else 0."""
    return 1 if as_whole(text) or (text or "").strip().lower() == "true" else 0


# --- the pipeline ---------------------------------------------------------------------


def split_list_id(line: str) -> str | None:
    """The image id on one line of a split list: the whole line, stripped; None for a
    comment (``# ...``), which Datumaro's and VOC's own readers skip too. Ids may hold
    spaces (labelImg keeps file names as they are); only per-class lists, which are not
    read, add a flag column."""
    image_id = line.strip()
    return None if image_id.startswith("#") else image_id


class VocFormat(AnnotationFormat):
    """Pascal VOC for :class:`~recordbeam.sources.annotated_files.ReadAnnotatedImages`."""

    name = "voc"
    class_list = "labelmap.txt"

    def __init__(self, options: VocOptions, split_lists: dict[str, str],
                 classes: list[str] | None, layout: VocLayout = VocLayout()) -> None:
        self._options = options
        self._split_lists = split_lists
        self._layout = layout
        self.classes = classes
        self.default_split = options.split
        self.image_folder = ((options.images_dir or options.root.rstrip("/")) if layout.flat
                             else layout.images_folder or options.image_folder)

    def listings(self) -> list[Listing]:
        if self._layout.flat:
            return self._flat_listings()
        return [
            Listing(self._options.annotations_dir, annotation_suffixes=(".xml",),
                    skipped="voc_non_xml_files_skipped"),
            Listing(self.image_folder, images=True, skipped="voc_non_image_files_skipped"),
        ]

    def _flat_listings(self) -> list[Listing]:
        """XMLs and images in one folder (each split folder, or ROOT); with ``--images``,
        the images below it, laid out as the XMLs below ROOT. A split folder's name scopes
        its ids (``valid/a``), so that ``train/a.jpg`` never pairs with ``valid/a.xml``."""
        root, images = self._options.root.rstrip("/"), self._options.images_dir
        listings = []
        for split in self._layout.split_folders or (None,):
            below = (split,) if split else ()
            scope = split or ""
            folder = filesystems.join(root, *below) if below else root
            listings.append(Listing(folder, (".xml",), images=images is None, split=split,
                                    scope=scope, skipped="voc_other_files_skipped"))
            if images is not None:
                listings.append(Listing(filesystems.join(images, *below) if below else images,
                                        images=True, split=split, scope=scope,
                                        skipped="voc_non_image_files_skipped"))
        return listings

    def split_lists(self) -> list[SplitList]:
        return [SplitList(split, path, split_list_id)
                for split, path in self._split_lists.items()]

    def small_inputs(self) -> list[str]:
        """The split lists and the label map, when no listing holds them (a flat export
        without split folders lists ROOT, label map included)."""
        labelmap = filesystems.literal(self._options.labelmap)
        if self._layout.flat:
            return [labelmap] if self._layout.split_folders else []
        return [filesystems.glob_below(self._options.split_lists_dir, "*.txt"), labelmap]

    def parse(self, data: bytes, path: str) -> ParsedAnnotation:
        return parse_voc_xml(data, path)

    def expected_annotation(self, image_id: str) -> str:
        return f"{image_id}.xml beside it" if self._layout.flat else f"Annotations/{image_id}.xml"


class ReadVoc(ReadFormat):
    """Read a Pascal VOC folder into ``ImageRecord``s for :class:`VocEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`. ``splits`` (known on
    construction, from a listing of ``ImageSets/Main`` or of a flat export's split
    folders) are the splits it writes; ``layout`` says where the XMLs are.
    """

    def __init__(self, options: VocOptions, skip_below: str | None = None) -> None:
        super().__init__(options, skip_below)
        self.layout = read_layout(options)
        self._split_lists = {} if self.layout.flat else split_lists(options)
        self.splits = (self.layout.split_folders or tuple(self._split_lists)
                       or (options.split,))
        self.classes = read_labelmap(options)

    def annotation_format(self) -> VocFormat:
        return VocFormat(self._options, self._split_lists, self.classes, self.layout)


class VocEncoder(DetectionEncoder):
    """The detection features plus the OD API Pascal converter's ``difficult``,
    ``truncated`` and ``view`` (the object's ``<pose>``)."""

    def __init__(self, checks=None, split: str = "train", fixes=None) -> None:
        super().__init__(checks, split, fixes, extra_kinds=VOC_OBJECT_KINDS)

    def object_counts(self, columns) -> dict[str, int]:
        """Images written with no object (no XML, no ``<object>``, or every object
        rejected), counted as they are written."""
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


def prepare(request: Request) -> Conversion:
    """``convert voc``: checks the folder before any job (a layout it can read, split lists
    or split folders that agree with a typed --split, an annotation file at least)."""
    voc = VocOptions(request.input, request.images, request.split, request.allow_outside_root)
    require_folder(voc.root, "; --input takes a Pascal VOC folder holding Annotations/ and "
                   "JPEGImages/, or a flat export with each <name>.xml beside its image")
    require_images_option(request)
    # Finds Annotations/ or the XMLs of a flat export, lists ImageSets/Main, reads labelmap.txt.
    read = ReadVoc(voc, skip_below=request.output)
    if not read.layout.flat:
        require_folder(read.annotation_format().image_folder, PASS_IMAGES)
    refuse_split(request, read.splits,
                 f"the split folders of {voc.root} name the splits" if read.layout.flat
                 else f"{voc.split_lists_dir} lists the splits")
    if not read.finds_annotation_file():
        raise UsageError(f"{voc.annotations_dir}: no .xml annotation file{NO_OBJECTS}--input "
                         f"takes a Pascal VOC folder holding Annotations/<id>.xml{UNLABELED}")
    return conversion("voc", voc, read.splits, voc_input_patterns(voc, read.layout),
                      request.output, lambda: ReadVoc(voc, skip_below=request.output),
                      lambda read, checks, fixes: VocEncoder(checks, read.splits[0], fixes))
