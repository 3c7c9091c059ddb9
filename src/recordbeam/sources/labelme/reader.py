"""labelme input: one labelme JSON per image, the image usually beside it.

ROOT is the folder labelme saved into (any depth below it)::

    ROOT/<name>.json         {"version", "shapes": [...], "imagePath", "imageData",
                              "imageHeight", "imageWidth"}
    ROOT/<name>.jpg          the image, where ``imagePath`` (relative to the JSON) points:
                             beside it, or elsewhere below ROOT (``../images/<name>.jpg``)

Each JSON is read and parsed on a worker, before the join: it joins the image its
``imagePath`` names, not the file with its own name. With ``--images DIR`` the images are
looked for below DIR, laid out as the JSONs are below ROOT (``ROOT/sub/a.json`` naming
``a.jpg`` is joined with ``DIR/sub/a.jpg``). When no image file is there but the JSON
embeds the image (``imageData``, base64), the embedded bytes are written (counted
``labelme_embedded_images_used``): the writer reads them from the JSON, so no image bytes
cross the shuffle.

Shapes: ``rectangle`` (two opposite corners, any order, or its four corners as
X-AnyLabeling writes them), ``polygon`` (its bounds; with
``--include-masks`` its mask), ``circle`` (centre and a point on the rim; its mask a
64-sided polygon), ``oriented_rectangle`` (its four corners, as a polygon) and ``mask``
(labelme 5: a base64 PNG of the region from its first point; its box that of its pixels)
are objects. ``point``, ``points``, ``line`` and ``linestrip`` mark no
area: they are counted (``labelme_<type>_shapes_skipped``) and skipped, as are shapes
labelled ``__ignore__`` or ``_background_`` (labelme's reserved names, which its
``labels.txt`` lists first). Shapes sharing a label and a non-null ``group_id`` are one
object (labelme's own converters key an instance by both): the union of their boxes and
of their masks.
Coordinates are pixels of the image (0-based, continuous), normalized by the header's size.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from recordbeam import feature_keys, filesystems
from recordbeam.errors import DataError, UsageError
from recordbeam.images.checks import DEFAULT_MAX_PIXELS
from recordbeam.images.masks import (
    InvalidMask,
    decode_mask_png,
    patch_to_box_rle,
    too_many_vertices,
)
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.annotated_files import (
    IMAGE_IN_ANNOTATION,
    AnnotationFileError,
    AnnotationFormat,
    Listing,
    NamedObject,
    ParsedAnnotation,
    ReadFormat,
)
from recordbeam.sources.classes_file import read_classes_file
from recordbeam.sources.conversion import conversion
from recordbeam.sources.detection import DetectionEncoder, union_of
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import (
    NO_OBJECTS,
    UNLABELED,
    require_classes_file,
    require_folder,
    require_images_option,
)
from recordbeam.sources.text import json_points

#: Shape types that mark no area: counted and skipped.
SKIPPED_SHAPES = ("point", "points", "line", "linestrip")

#: Names labelme's own ``labels.txt`` lists first (``labelme2voc.py``); not classes. A
#: shape labelled with one marks no object (labelme2coco drops ``__ignore__`` shapes, and
#: ``_background_`` is label 0): it is counted under its counter and skipped.
RESERVED_CLASS_NAMES = ("__ignore__", "_background_")
RESERVED_SHAPE_COUNTERS = {"__ignore__": "labelme_ignore_shapes_skipped",
                           "_background_": "labelme_background_shapes_skipped"}

#: Sides of the polygon a circle's mask is drawn as.
CIRCLE_SIDES = 64


class LabelmeError(DataError, ValueError):
    """The labelme folder or the classes file cannot be used as given."""


@dataclass(frozen=True)
class LabelmeOptions(filesystems.RootAndImagesInputs):
    """What to read.

    Attributes:
        root: the folder of labelme JSONs (any Beam filesystem).
        images_dir: where the images are, laid out as the JSONs below ``root``; None: where
            each JSON's ``imagePath`` points.
        split: the split of every image.
        classes_file: one class name per line, in label order (labels 1..K); None: the
            sorted names found.
        include_masks: write ``image/object/mask`` (polygons, circles; rectangles' boxes).
        allow_outside_root: also read files that symbolic links lead outside ``root`` and
            ``images_dir``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    images_dir: str | None = None
    split: str = "train"
    classes_file: str | None = None
    include_masks: bool = False
    allow_outside_root: bool = False

    @property
    def image_folder(self) -> str:
        return self.images_dir or self.root


def read_classes(options: LabelmeOptions) -> list[str] | None:
    """The classes of ``--classes`` in label order (labelme's ``__ignore__`` and
    ``_background_`` lines left out), or None without one."""
    if options.classes_file is None:
        return None
    try:
        names = [name for name in read_classes_file(options.classes_file)
                 if name not in RESERVED_CLASS_NAMES]
    except UnicodeDecodeError:
        raise LabelmeError(f"{options.classes_file} is not UTF-8 text; save it as UTF-8") from None
    if not names:
        raise LabelmeError(f"{options.classes_file} lists no classes besides "
                           f"{' and '.join(RESERVED_CLASS_NAMES)}; write one class per line")
    return names


def labelme_input_patterns(options: LabelmeOptions) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``): the
    JSON folder, the images folder when apart, the classes file."""
    patterns = [filesystems.everything_below(options.root)]
    if options.images_dir:
        patterns.append(filesystems.everything_below(options.images_dir))
    return patterns + ([filesystems.literal(options.classes_file)] if options.classes_file else [])


# --- one JSON -------------------------------------------------------------------------


def parse_labelme_json(data: bytes, path: str, relative_path: str,
                       images_apart: bool = False, outlines: bool = True) -> ParsedAnnotation:
    """Parse one labelme JSON; raises :class:`AnnotationFileError` for a file that is not
    one, or names no image.

    Args:
        data: the file's bytes (UTF-8, a BOM allowed).
        path: the file, for messages.
        relative_path: its path below ROOT (``sub/a.json``), from which the id of the
            image ``imagePath`` names is found.
        images_apart: the images lie below ``--images`` as the JSONs below ROOT (only the
            file name of ``imagePath`` counts), not where ``imagePath`` points.
        outlines: keep the objects' polygons (for masks); without masks they would only
            weigh on the shuffle.
    """
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise AnnotationFileError("malformed_json", (
            f"{path}: not UTF-8 text; labelme writes UTF-8 JSON, re-save the file")) from None
    except ValueError as error:
        raise AnnotationFileError("malformed_json", (
            f"{path}: not valid JSON ({error}); fix or re-save the file in labelme")) from None
    except RecursionError:
        raise AnnotationFileError("malformed_json", (
            f"{path}: its arrays or objects nest too deeply to be read (a labelme file nests "
            "4 levels); fix or re-save the file in labelme")) from None
    if not isinstance(document, dict) or not isinstance(document.get("shapes"), list):
        raise AnnotationFileError("malformed_json", (
            f"{path}: not a labelme annotation (a JSON object with a \"shapes\" list); "
            "remove it from ROOT or fix it"))
    image_path = document.get("imagePath")
    if not isinstance(image_path, str) or not image_path.strip():
        raise AnnotationFileError("missing_field", (
            f"{path}: no imagePath, so its image is unknown; write the image's path "
            "relative to the JSON there, as labelme does"))
    image_path = image_path.strip().replace("\\", "/")  # saved on Windows
    image_size = (_whole(document.get("imageWidth")), _whole(document.get("imageHeight")))
    objects, rejects, counts = _objects(document["shapes"], path, image_size, outlines)
    if not outlines:
        objects = tuple(NamedObject(obj.source, obj.name, obj.bbox, obj.extra) for obj in objects)
    embedded_size, warning = _embedded_image_size(document.get("imageData"), path)
    return ParsedAnnotation(
        posixpath.basename(image_path), *image_size, objects, (*rejects, *warning),
        tuple(sorted(counts.items())), embedded_size,
        named_image_id(relative_path, image_path, images_apart))


def named_image_id(relative_path: str, image_path: str, images_apart: bool) -> str | None:
    """The id of the image a JSON at ``relative_path`` (below ROOT) names by ``image_path``:
    its path below the images folder without extension, or None when it leads outside
    ROOT or is absolute (then the JSON keeps its own id: an image beside it of the same
    name is still found)."""
    folder = posixpath.dirname(relative_path)
    if images_apart:
        image_path = posixpath.basename(image_path)
    elif image_path.startswith("/") or (len(image_path) > 1 and image_path[1] == ":"):
        return None
    joined = posixpath.normpath(posixpath.join(folder, image_path))
    if joined == ".." or joined.startswith("../"):
        return None
    return posixpath.splitext(joined)[0]


def _embedded_image_size(image_data: Any, path: str) -> tuple[int | None, tuple[Reject, ...]]:
    """The decoded size of ``imageData`` (None when absent), checked here so that a broken
    one is said once, as a warning: it only matters when the image file is missing."""
    if image_data is None or image_data == "":
        return None, ()
    try:
        if not isinstance(image_data, str):
            raise ValueError
        return len(base64.b64decode(image_data, validate=True)), ()
    except (ValueError, binascii.Error):
        return None, (Reject("warning", path, "invalid_image_data", (
            f"{path}: imageData is not base64 text, so it cannot stand in for a missing "
            "image file; re-save the JSON in labelme, or set imageData to null")),)


class _Piece(NamedTuple):
    """One usable shape: its label, corners and outline (None: a rectangle, its box), or
    for a ``mask`` shape its pixels as a box RLE in the image (kept only for masks)."""

    index: int
    label: str
    corners: tuple[float, float, float, float]
    outline: list[float] | None
    mask: dict[str, Any] | None = None


def _objects(shapes: list, path: str, image_size: tuple[int | None, int | None] = (None, None),
             keep_masks: bool = True) -> tuple[tuple[NamedObject, ...], list[Reject], dict]:
    """The objects of a shapes list: single shapes, and groups merged (by label and
    ``group_id``, as labelme's ``shapes_to_label`` keys its instances).
    ``image_size`` (the JSON's ``imageWidth``, ``imageHeight``) places ``mask`` shapes,
    whose pixels are kept only with ``keep_masks``."""
    rejects: list[Reject] = []
    counts: dict[str, int] = {}
    groups: dict[str, list[_Piece]] = {}  # in the order of their first shapes
    for index, shape in enumerate(shapes):
        piece = _piece(shape, index, path, image_size, keep_masks)
        if isinstance(piece, Reject):
            rejects.append(piece)
            continue
        if isinstance(piece, str):
            counts[piece] = counts.get(piece, 0) + 1
            continue
        group_id = shape.get("group_id")
        key = (f"shape {index}" if group_id is None
               else json.dumps([piece.label, group_id], sort_keys=True))
        groups.setdefault(key, []).append(piece)
    objects = [_merge(pieces, path) for pieces in groups.values()]
    return tuple(objects), rejects, counts


def shape_source(path: str, indices: Sequence[int]) -> str:
    return f"{path}: shapes[{', '.join(map(str, indices))}]"


#: What each shape kind that becomes an object needs, said in its reject.
_POINTS_NEEDED = {"rectangle": "2 points (opposite corners) or its 4 corners, axis-aligned",
                  "circle": "exactly 2 points (the centre, then a point on the rim)",
                  "mask": "exactly 2 points (the corners of its PNG)",
                  "oriented_rectangle": "exactly 4 points (its corners)",
                  "polygon": "at least 3 points"}


def _piece(shape: Any, index: int, path: str,
           image_size: tuple[int | None, int | None] = (None, None),
           keep_masks: bool = True) -> _Piece | Reject | str:
    """A shape as a piece of an object, a reject, or the counter of a skipped shape."""
    where = shape_source(path, [index])
    if not isinstance(shape, dict):
        return Reject("annotation", where, "invalid_shape",
                      f"{where} is not a JSON object; the image was written without it")
    label = shape.get("label")
    label = label.strip() if isinstance(label, str) else ""
    if not label:
        return Reject("annotation", where, "missing_field",
                      f"{where} has no label; the image was written without this shape")
    if label in RESERVED_SHAPE_COUNTERS:
        return RESERVED_SHAPE_COUNTERS[label]
    kind = shape.get("shape_type") or "polygon"  # labelme before 3.x wrote polygons only
    if kind in SKIPPED_SHAPES:
        return f"labelme_{kind}_shapes_skipped"
    raw = shape.get("points")
    too_many = too_many_vertices(len(raw)) if isinstance(raw, list) else None
    if too_many:
        return Reject("annotation", where, "invalid_shape", (
            f"{where} ({label!r}): {too_many}; the image was written without this shape"))
    points = json_points(raw)
    needed = _POINTS_NEEDED.get(kind)
    if needed is None:
        return Reject("annotation", where, "unsupported_shape", (
            f"{where} ({label!r}) is a {kind!r} shape; only rectangle, oriented_rectangle, "
            "polygon, circle and mask become objects (point and line shapes are counted and "
            "skipped). The image was written without this shape"))
    count_ok = points is not None and (
        len(points) >= 3 if kind == "polygon"
        else len(points) == 4 if kind == "oriented_rectangle"
        else len(points) == 2 or (kind == "rectangle" and _axis_aligned_corners(points)))
    if not count_ok:
        got = "points that are not [x, y] numbers" if points is None else f"{len(points)} points"
        return Reject("annotation", where, "invalid_shape", (
            f"{where} ({label!r}): a {kind} needs {needed}, it has {got}; the image was "
            "written without this shape"))
    if kind == "mask":
        return _mask_piece(shape, index, label, points, where, image_size, keep_masks)
    outline: list[float] | None
    if kind == "rectangle":  # two opposite corners, or all four (X-AnyLabeling's)
        xs, ys = [x for x, _y in points], [y for _x, y in points]
        corners, outline = (min(xs), min(ys), max(xs), max(ys)), None
    elif kind == "circle":
        (cx, cy), (px, py) = points
        radius = math.hypot(px - cx, py - cy)
        corners = (cx - radius, cy - radius, cx + radius, cy + radius)
        outline = [value for step in range(CIRCLE_SIDES)
                   for value in (cx + radius * math.cos(2 * math.pi * step / CIRCLE_SIDES),
                                 cy + radius * math.sin(2 * math.pi * step / CIRCLE_SIDES))]
    else:
        xs, ys = [x for x, _y in points], [y for _x, y in points]
        corners = (min(xs), min(ys), max(xs), max(ys))
        outline = [value for point in points for value in point]
    xmin, ymin, xmax, ymax = corners
    if xmax <= xmin or ymax <= ymin:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({label!r}, {kind}): its box from ({xmin:g}, {ymin:g}) to "
            f"({xmax:g}, {ymax:g}) has no area; the image was written without this shape"))
    return _Piece(index, label, corners, outline)


def _axis_aligned_corners(points: list[tuple[float, float]]) -> bool:
    """Whether 4 points are the corners of an upright rectangle, as X-AnyLabeling writes
    a ``rectangle`` (top-left, top-right, bottom-right, bottom-left): each corner of the
    box they span once, so that box is exactly the rectangle."""
    return (len(set(points)) == 4 and len({x for x, _y in points}) == 2
            and len({y for _x, y in points}) == 2)


def _mask_piece(shape: dict, index: int, label: str, points: list[tuple[float, float]],
                where: str, image_size: tuple[int | None, int | None],
                keep: bool) -> _Piece | Reject:
    """A ``mask`` shape (labelme 5): a base64 PNG whose top-left pixel lies at its first
    point, cut (for whole-number points, as labelme reads it) to the box the two points
    span; the object's box is that of its set pixels."""
    width, height = image_size
    lost = "; the image was written without this shape"
    if width is None or height is None:
        return Reject("annotation", where, "missing_field", (
            f"{where} ({label!r}): a mask shape is placed in the image by the JSON's "
            f"imageWidth and imageHeight, which it lacks{lost}"))
    try:
        encoded = shape.get("mask")
        if not isinstance(encoded, str):
            raise InvalidMask("invalid_mask", "it has no mask (a base64 PNG)")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (ValueError, binascii.Error):
            raise InvalidMask("invalid_mask", "its mask is not base64 text") from None
        patch = decode_mask_png(data, min(width * height, DEFAULT_MAX_PIXELS))
    except InvalidMask as bad:
        return Reject("annotation", where, bad.reason, f"{where} ({label!r}): {bad.detail}{lost}")
    corners = np.round(np.asarray(points))
    (x0, y0), (x1, y1) = corners.min(axis=0).astype(int), corners.max(axis=0).astype(int)
    if all(float(value).is_integer() for point in points for value in point):
        patch = patch[:y1 - y0 + 1, :x1 - x0 + 1]
    rows, columns = np.flatnonzero(patch.any(axis=1)), np.flatnonzero(patch.any(axis=0))
    if rows.size == 0:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({label!r}): the mask has no pixel set{lost}"))
    box = (float(x0 + columns[0]), float(y0 + rows[0]), float(x0 + columns[-1] + 1),
           float(y0 + rows[-1] + 1))
    # The pixels stay in their patch (cut to the image, as labelme draws it) until the
    # mask is written: the JSON's image size is checked against the image's first.
    return _Piece(index, label, box, None,
                  patch_to_box_rle(patch, int(x0), int(y0), width, height) if keep else None)


def _merge(pieces: list[_Piece], path: str) -> NamedObject:
    """The pieces of one group as one object: the union of boxes and outlines."""
    if len(pieces) == 1:  # most shapes are no group: the piece itself
        piece = pieces[0]
        xmin, ymin, xmax, ymax = piece.corners
        segmentation = (piece.mask if piece.mask is not None
                        else None if piece.outline is None else [piece.outline])
        return NamedObject(shape_source(path, [piece.index]), piece.label,
                           (xmin, ymin, xmax - xmin, ymax - ymin), segmentation=segmentation)
    where = shape_source(path, [piece.index for piece in pieces])
    xmin = min(piece.corners[0] for piece in pieces)
    ymin = min(piece.corners[1] for piece in pieces)
    xmax = max(piece.corners[2] for piece in pieces)
    ymax = max(piece.corners[3] for piece in pieces)
    outlines = [piece.outline or _rectangle(piece) for piece in pieces if piece.mask is None]
    masks = [piece.mask for piece in pieces if piece.mask is not None]
    # Two pieces or more: outlines, or with mask shapes the union of every piece's pixels.
    return NamedObject(where, pieces[0].label, (xmin, ymin, xmax - xmin, ymax - ymin),
                       segmentation=union_of(outlines, masks))


def _rectangle(piece: _Piece) -> list[float]:
    x0, y0, x1, y1 = piece.corners
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# --- the pipeline -----------------------------------------------------------------------


class LabelmeFormat(AnnotationFormat):
    """labelme for :class:`~recordbeam.sources.annotated_files.ReadAnnotatedImages`."""

    name = "labelme"
    class_list = "the --classes file"
    names_its_image = True
    missing_image_hint = ("and the JSON embeds no imageData; pass --images if the images "
                          "are elsewhere")

    def __init__(self, options: LabelmeOptions, classes: list[str] | None) -> None:
        self._options = options
        self.classes = classes
        self.default_split = options.split
        self.image_folder = options.image_folder

    def listings(self) -> list[Listing]:
        images = self._options.images_dir
        return [Listing(self._options.root, annotation_suffixes=(".json",), images=images is None,
                        skipped="labelme_other_files_skipped"),
                *([Listing(images, images=True, skipped="labelme_non_image_files_skipped")]
                  if images else [])]

    def small_inputs(self) -> list[str]:
        return labelme_input_patterns(self._options)[1 + bool(self._options.images_dir):]

    def parse(self, data: bytes, path: str) -> ParsedAnnotation:
        relative = filesystems.relative_name(self._options.root, path)
        return parse_labelme_json(data, path, relative, self._options.images_dir is not None,
                                  outlines=self._options.include_masks)

    def expected_annotation(self, image_id: str) -> str:
        return f"labelme JSON naming {image_id!r}"


class ReadLabelme(ReadFormat):
    """Read a folder of labelme JSONs into ``ImageRecord``s for :class:`LabelmeEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`. ``splits`` is the one split it writes; ``classes`` those of ``--classes``
    (None: the sorted names found, known once the JSONs are read).
    """

    def __init__(self, options: LabelmeOptions, skip_below: str | None = None) -> None:
        super().__init__(options, skip_below)
        self.splits = (options.split,)
        self.classes = read_classes(options)

    def annotation_format(self) -> LabelmeFormat:
        return LabelmeFormat(self._options, self.classes)


class LabelmeEncoder(DetectionEncoder):
    """The detection features (and masks with ``include_masks``) of labelme objects; an
    image missing beside its JSON is read from the JSON's ``imageData``."""

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False) -> None:
        super().__init__(checks, split, fixes, include_masks=include_masks)

    def embedded_image(self, record: ImageRecord) -> bytes | Reject | None:
        if not record.labels.get(IMAGE_IN_ANNOTATION):
            return None
        if record.size > self.checks.max_bytes:
            return None  # read_image rejects it by its size, without reading the JSON
        try:
            document = json.loads(filesystems.read_bytes(record.path).decode("utf-8-sig"))
            return base64.b64decode(document["imageData"], validate=True)
        except Exception:  # noqa: BLE001 - the file changed after it was parsed, any way
            return Reject("image", record.path, "missing", (
                "the image file is missing and the imageData embedded in this JSON could no "
                "longer be read (the file changed during the run); rerun when it is stable"))

    def label_features(self, record: ImageRecord, info):
        features, kinds, rejects, counts = super().label_features(record, info)
        if record.labels.get(IMAGE_IN_ANNOTATION):
            counts["labelme_embedded_images_used"] = 1
        return features, kinds, rejects, counts

    def object_counts(self, columns) -> dict[str, int]:
        """Images written with no object (no JSON, no shapes, or every shape skipped or
        rejected), counted as they are written."""
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


# --- the conversion ---------------------------------------------------------------------

#: What --input takes, said when it does not hold that.
_INPUT_TAKES = "--input takes the folder labelme saved its JSONs into"


def prepare(request: Request) -> Conversion:
    """``convert labelme``: checks the inputs before any job (the folders are there, the
    classes file reads, a JSON at least below --input)."""
    require_folder(request.input, f"; {_INPUT_TAKES}")
    require_images_option(request)
    require_classes_file(request.classes)
    labelme = LabelmeOptions(request.input, request.images, request.split, request.classes,
                             request.include_masks, request.allow_outside_root)
    read = ReadLabelme(labelme, skip_below=request.output)  # a broken classes file is said here
    if not read.finds_annotation_file():
        raise UsageError(f"{request.input}: no .json file below it{NO_OBJECTS}{_INPUT_TAKES}"
                         f"{UNLABELED}")
    return conversion(
        "labelme", labelme, [labelme.split], labelme_input_patterns(labelme), request.output,
        lambda: ReadLabelme(labelme, skip_below=request.output),
        lambda read, checks, fixes: LabelmeEncoder(checks, labelme.split, fixes,
                                                   labelme.include_masks))
