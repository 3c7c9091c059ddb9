"""KITTI object detection input: ``<split>/image_2/`` + ``<split>/label_2/``.

ROOT is the folder the KITTI archives unzip into (``data_object_image_2.zip`` and
``data_object_label_2.zip`` side by side), or a Datumaro ``kitti_detection`` export::

    ROOT/training/image_2/000123.png    the images of split "training"
    ROOT/training/label_2/000123.txt    one label file per image, one object per line
    ROOT/testing/image_2/000456.png     a split without label_2/ is written unlabeled

Each folder of ROOT holding ``image_2/`` (or ``label_2/``) is a split, named as the folder
(``training``, ``testing``, Datumaro's ``default``): the names KITTI users see, with no
renaming that could make two folders one split. A ROOT holding ``image_2/`` and
``label_2/`` itself is one split, named by ``--split``. ``--images DIR`` reads the images
from ``DIR/<split>/image_2/`` (the Object Detection API's layout keeps them in
``data_object_image_2/training/image_2``).

The launcher lists the ``image_2``/``label_2`` folders to learn the split names (a listing,
no reads); the folders are listed again, and each label file read and parsed, on workers.

A label line is ``type truncated occluded alpha left top right bottom height width length
x y z rotation_y [score]``, space separated. Boxes are pixel corners, written as
``left / width`` like the Object Detection API's KITTI converter, under its feature names
(``image/object/truncated``, ``alpha``, ``3d_bbox/*``) plus ``image/object/occluded``,
which that converter reads but does not write. The trailing score of result files and
Datumaro exports is not written: it is a detector's confidence, not an annotation.
``DontCare`` regions are not objects: they are skipped and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recordbeam import feature_keys, filesystems
from recordbeam.dataset.class_names import class_file_lines
from recordbeam.dataset.names import OutputFolderError, check_split_name
from recordbeam.errors import DataError, UsageError
from recordbeam.records import Reject
from recordbeam.sources.annotated_files import (
    AnnotationFileError,
    AnnotationFormat,
    Listing,
    NamedObject,
    ParsedAnnotation,
    ReadFormat,
)
from recordbeam.sources.conversion import conversion
from recordbeam.sources.detection import DetectionEncoder
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import (
    NO_OBJECTS,
    UNLABELED,
    refuse_file,
    refuse_split,
    require_images_option,
)
from recordbeam.sources.text import as_number

IMAGE_FOLDER = "image_2"
LABEL_FOLDER = "label_2"

#: KITTI's type for regions where objects were not labeled; never an object.
DONT_CARE = "dontcare"

#: The per-object features beside the boxes, as the OD API's KITTI converter names them
#: (``occluded`` is KITTI's 0..3 occlusion state, which that converter does not write).
KITTI_OBJECT_KINDS = {
    feature_keys.TRUNCATED: "float",
    feature_keys.OCCLUDED: "int64",
    feature_keys.ALPHA: "float",
    feature_keys.BOX_3D_HEIGHT: "float",
    feature_keys.BOX_3D_WIDTH: "float",
    feature_keys.BOX_3D_LENGTH: "float",
    feature_keys.BOX_3D_X: "float",
    feature_keys.BOX_3D_Y: "float",
    feature_keys.BOX_3D_Z: "float",
    feature_keys.BOX_3D_ROT_Y: "float",
}

#: Numbers after the type on a label line: truncated, occluded, alpha, 4 box corners,
#: 3 dimensions, 3 location coordinates, rotation_y; a 15th is the score.
NUMBERS = 14


class KittiError(DataError, ValueError):
    """The KITTI folder cannot be used as given (a split folder name that cannot be a
    split)."""


@dataclass(frozen=True)
class KittiOptions(filesystems.RootAndImagesInputs):
    """What to read.

    Attributes:
        root: the KITTI folder (any Beam filesystem).
        images_dir: the folder holding ``<split>/image_2/``; None means ``root``.
        split: the split's name when ROOT itself holds ``image_2/`` and ``label_2/``.
        allow_outside_root: also read files that symbolic links lead outside ``root`` and
            ``images_dir``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    images_dir: str | None = None
    split: str = "train"
    allow_outside_root: bool = False

    @property
    def images_root(self) -> str:
        return (self.images_dir or self.root).rstrip("/")

    @property
    def labels_root(self) -> str:
        return self.root.rstrip("/")


@dataclass(frozen=True)
class KittiSplit:
    """One split: its name, where its images and labels are (``labels`` None: it has no
    ``label_2/``, as KITTI's ``testing/``), and its folder as messages show it."""

    name: str
    images: str
    labels: str | None
    shown: str  # "training/" or "" when ROOT is the split


# --- what the launcher reads: the split folders ----------------------------------------


def _folders_holding(root: str, leaf: str) -> set[str]:
    """The names of ``root``'s folders that hold a non-empty ``leaf/`` folder."""
    found: set[str] = set()
    for meta in filesystems.iter_match(filesystems.glob_below(root, "*", leaf, "*")):
        parts = filesystems.relative_name(root, meta.path).split("/")
        if len(parts) >= 3 and parts[1] == leaf:
            found.add(parts[0])
    return found


def find_splits(options: KittiOptions) -> list[KittiSplit]:
    """The splits of a KITTI folder (see the module docstring), sorted by name; empty when
    it holds no ``image_2``/``label_2`` folder."""
    images_root, labels_root = options.images_root, options.labels_root
    flat_labels = filesystems.join(labels_root, LABEL_FOLDER)
    flat_images = filesystems.join(images_root, IMAGE_FOLDER)
    has_flat_labels = filesystems.has_files(flat_labels)
    if has_flat_labels or filesystems.has_files(flat_images):
        return [KittiSplit(options.split, flat_images,
                           flat_labels if has_flat_labels else None, "")]
    with_images = _folders_holding(images_root, IMAGE_FOLDER)
    with_labels = _folders_holding(labels_root, LABEL_FOLDER)
    splits = []
    for name in sorted(with_images | with_labels):
        try:
            check_split_name(name)
        except OutputFolderError:
            raise KittiError(
                f"{filesystems.join(labels_root, name)}: the folder name {name!r} becomes the "
                "split's name, which must be letters, digits and underscores (it is part of "
                "the shard file names); rename the folder") from None
        splits.append(KittiSplit(
            name, filesystems.join(images_root, name, IMAGE_FOLDER),
            filesystems.join(labels_root, name, LABEL_FOLDER) if name in with_labels else None,
            f"{name}/"))
    return splits


def kitti_input_patterns(splits: list[KittiSplit]) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``): the
    folders the workers list, and nothing else of ROOT."""
    patterns = []
    for split in splits:
        if split.labels is not None:
            patterns.append(filesystems.everything_below(split.labels))
        patterns.append(filesystems.everything_below(split.images))
    return patterns


# --- one label file ----------------------------------------------------------------------


def line_source(path: str, number: int) -> str:
    return f"{path}:{number}"


def parse_kitti_labels(data: bytes, path: str) -> ParsedAnnotation:
    """Parse one KITTI label file; raises :class:`AnnotationFileError` for one that is not
    text.

    Each object's ``extra`` holds the values of :data:`KITTI_OBJECT_KINDS` in order. Lines
    that cannot be used (wrong field count, not numbers, a box with no area) come back as
    annotation rejects naming ``file:line``; ``DontCare`` lines and an empty file are
    counted.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise AnnotationFileError("malformed_label_file", (
            f"{path}: not UTF-8 text (byte {error.start}); a KITTI label file is plain text, "
            "one object per line. Fix or re-export the file")) from None
    objects: list[NamedObject] = []
    rejects: list[Reject] = []
    dont_care = 0
    lines = 0
    # Lines end at \n (or \r), fields are split at spaces and tabs: any other line break
    # or white space stays in its field, so a type holding one is refused as a class name
    # instead of quietly becoming another.
    for number, line in enumerate(class_file_lines(text), 1):
        if not line.strip():
            continue
        lines += 1
        parsed = _parse_line(line, line_source(path, number))
        if parsed is None:
            dont_care += 1
        elif isinstance(parsed, Reject):
            rejects.append(parsed)
        else:
            objects.append(parsed)
    counts = []
    if not lines:
        counts.append(("kitti_empty_label_files", 1))
    if dont_care:
        counts.append(("kitti_dontcare_skipped", dont_care))
    return ParsedAnnotation(None, None, None, tuple(objects), tuple(rejects), tuple(counts))


def _split_type(tokens: list[str]) -> tuple[str, list[str]] | None:
    """``(type, numbers)`` of a line's tokens, or None when they are not a type and 14 or
    15 numbers. A type with spaces (Datumaro writes class names as they are) is the tokens
    before the numbers."""
    if len(tokens) in (NUMBERS + 1, NUMBERS + 2) and _isnumber(tokens[1]):
        return tokens[0], tokens[1:]
    trailing = 0
    for token in reversed(tokens):
        if not _isnumber(token):
            break
        trailing += 1
    if trailing in (NUMBERS, NUMBERS + 1) and trailing < len(tokens):
        return " ".join(tokens[:-trailing]), tokens[-trailing:]
    return None


_FIELD_SEPARATOR = re.compile(r"[ \t]+")


def _parse_line(line: str, where: str) -> NamedObject | Reject | None:
    """One label line: its object, a reject, or None for a ``DontCare`` region."""
    tokens = _FIELD_SEPARATOR.split(line.strip())
    split = _split_type(tokens)
    if split is None:
        return Reject("annotation", where, "malformed_line", (
            f"{where}: expected a type and {NUMBERS} numbers (truncated occluded alpha left "
            "top right bottom height width length x y z rotation_y, optionally a score), "
            f"found {len(tokens)} fields that do not read so: {line.strip()[:120]!r}. The "
            "image was written without this object; fix the line"))
    name, fields = split
    if name.lower() == DONT_CARE:
        return None
    values = [as_number(field) for field in fields]
    bad = [field for field, value in zip(fields, values, strict=True) if value is None]
    if bad:
        return Reject("annotation", where, "malformed_line", (
            f"{where} ({name!r}): {', '.join(repr(field) for field in bad)} "
            f"{'is not a finite number' if len(bad) == 1 else 'are not finite numbers'}; "
            "the image was written without this object; fix the line"))
    occluded = values[1]
    if occluded != int(occluded) or not -(2**63) <= occluded < 2**63:  # an int64 feature
        return Reject("annotation", where, "malformed_line", (
            f"{where} ({name!r}): occluded is {fields[1]!r}, not a whole number (0 fully "
            "visible, 1 partly occluded, 2 largely occluded, 3 unknown); the image was "
            "written without this object; fix the line"))
    truncated, _occluded, alpha, left, top, right, bottom = values[:7]
    height, width, length, x, y, z, rotation_y = values[7:NUMBERS]
    if right <= left or bottom <= top:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({name!r}): box left={left:g} top={top:g} right={right:g} "
            f"bottom={bottom:g} has no area (right must be above left, bottom above top); "
            "the image was written without this object"))
    return NamedObject(where, name, (left, top, right - left, bottom - top), (
        truncated, int(occluded), alpha, height, width, length, x, y, z, rotation_y))


def _isnumber(token: str) -> bool:
    return as_number(token) is not None


# --- the pipeline ------------------------------------------------------------------------


class KittiFormat(AnnotationFormat):
    """KITTI for :class:`~recordbeam.sources.annotated_files.ReadAnnotatedImages`: each
    split's folders listed with the split as the scope of their ids (``training/000123``)."""

    name = "kitti"
    class_list = "the types found in label_2"

    def __init__(self, options: KittiOptions, splits: list[KittiSplit]) -> None:
        self._splits = splits
        self._shown = {split.name: split.shown for split in splits}
        self._images = {split.name: split.images for split in splits}
        self.default_split = splits[0].name if splits else options.split
        self.unlabeled_splits = frozenset(s.name for s in splits if s.labels is None)
        self.image_folder = (splits[0].images if len(splits) == 1
                             else f"{options.images_root}/<split>/{IMAGE_FOLDER}")

    def listings(self) -> list[Listing]:
        listings = []
        for split in self._splits:
            if split.labels is not None:
                listings.append(Listing(split.labels, annotation_suffixes=(".txt",),
                                        split=split.name, scope=split.name,
                                        skipped="kitti_non_label_files_skipped"))
            listings.append(Listing(split.images, images=True, split=split.name,
                                    scope=split.name, skipped="kitti_non_image_files_skipped"))
        return listings

    def parse(self, data: bytes, path: str) -> ParsedAnnotation:
        return parse_kitti_labels(data, path)

    def expected_annotation(self, image_id: str) -> str:
        split, _, stem = image_id.partition("/")
        return f"{self._shown.get(split, '')}{LABEL_FOLDER}/{stem}.txt"

    def expected_image(self, image_id: str) -> str:
        split, _, stem = image_id.partition("/")
        return f"{stem}.* in {self._images.get(split, self.image_folder)}"


class ReadKitti(ReadFormat):
    """Read a KITTI folder into ``ImageRecord``s for :class:`KittiEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`; its label map holds the
    sorted types found, ``DontCare`` left out. ``splits`` (known on construction,
    from a listing of the split folders) are the splits it writes.
    """

    def __init__(self, options: KittiOptions, skip_below: str | None = None) -> None:
        super().__init__(options, skip_below)
        self.split_folders = find_splits(options)
        self.splits = tuple(split.name for split in self.split_folders) or (options.split,)

    def annotation_format(self) -> KittiFormat:
        return KittiFormat(self._options, self.split_folders)


class KittiEncoder(DetectionEncoder):
    """The detection features plus the OD API KITTI converter's truncation, alpha and 3-D
    box, and KITTI's occlusion state."""

    def __init__(self, checks=None, split: str = "train", fixes=None) -> None:
        super().__init__(checks, split, fixes, extra_kinds=KITTI_OBJECT_KINDS)

    def object_counts(self, columns) -> dict[str, int]:
        """Images written with no object (no label file, an empty one, only ``DontCare``,
        or every object rejected), counted as they are written."""
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


def prepare(request: Request) -> Conversion:
    """``convert kitti``: finds the split folders before any job (one with ``label_2/`` at
    least) and refuses a typed --split that the split folders' names would override."""
    kitti = KittiOptions(request.input, request.images, request.split,
                         request.allow_outside_root)
    refuse_file(request.input, "; --input takes a KITTI folder such as the one holding "
                "training/image_2/ and training/label_2/")
    require_images_option(request)
    splits = ReadKitti(kitti).split_folders  # lists the split folders
    if not splits:
        raise UsageError(f"{kitti.images_root}: no <split>/image_2/ or <split>/label_2/ folder "
                         "with files; --input takes a KITTI folder such as the one holding "
                         "training/image_2/ and training/label_2/ (--images if the images "
                         "are elsewhere)")
    if all(split.labels is None for split in splits):
        raise UsageError(f"{kitti.labels_root}: no label_2/ folder beside "
                         f"{', '.join(split.images for split in splits)}{NO_OBJECTS}--input "
                         f"takes the KITTI folder holding <split>/label_2/{UNLABELED}")
    names = [split.name for split in splits]
    # One split folder may take the name --split gives; several name themselves.
    refuse_split(request, names, "the split folders name the splits")
    return conversion("kitti", kitti, names, kitti_input_patterns(splits), request.output,
                      lambda: ReadKitti(kitti, skip_below=request.output),
                      lambda read, checks, fixes: KittiEncoder(checks, read.splits[0], fixes))
