"""CVAT for images (and for video) 1.1 XML input: ``annotations.xml`` (or ``<subset>.xml``)
+ ``images/``.

ROOT is the folder as CVAT or Datumaro exports it::

    ROOT/annotations.xml               CVAT's task or project export (subsets in <meta>
                                       and in each <image subset="...">)
    ROOT/<subset>.xml                  or one file per subset, as Datumaro's "cvat" export
    ROOT/images/<name>                 the images, by the <image name="..."> path
    ROOT/images/<subset>/<name>        (a project export puts each subset in a folder)

The launcher lists ``ROOT/*.xml`` and reads only each file's head, up to its first
``<image>``: the ``<meta>`` with the labels (the class list, labels 1..K in its order) and
the subsets (the splits). Each XML is then streamed on one worker (like COCO's JSON: this
pass is one worker's per file) with ``defusedxml``'s ``iterparse`` (no entity expansion,
no external entities), clearing every element once read, so memory stays flat at any
size. Plain Python over :mod:`recordbeam.sources.exports` (:class:`CvatExport`): each
``<image>`` becomes one ``ExportEntry``, joined on workers with the listing of the images
folder by its name.

Shapes: ``<box>`` (pixel corners; a ``rotation`` gives the box around the turned one),
``<polygon>`` (its box, and its mask with ``--include-masks``) and ``<mask>`` (CVAT's RLE:
run lengths alternating 0s and 1s, row-major inside ``left top width height``; its box is
that of its pixels). Shapes sharing a non-zero ``group_id`` are one object: box from the
``<box>``, mask from the polygon or mask. ``<polyline>``, ``<points>``, ``<skeleton>``,
``<ellipse>``, ``<cuboid>`` and ``<tag>`` are counted and skipped.

A video task's images are its frames, ``frame_<number>.<ext>``: they join by that name
without its extension (:func:`frame_key`). Its "CVAT for video" export holds ``<track>``s
instead of ``<image>``s: each shape of a track on a frame that is not ``outside`` the frame
is one of that frame's objects, with the track's label and its id
(``image/object/track_id``); its shapes are the export's ``Part``s of their frames.
"""

from __future__ import annotations

import math
import posixpath
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, BinaryIO, NamedTuple
from xml.etree.ElementTree import Element, ParseError

import apache_beam as beam
import numpy as np
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from recordbeam import feature_keys, filesystems
from recordbeam.dataset import layout
from recordbeam.dataset.class_names import check_class_list
from recordbeam.dataset.names import OutputFolderError, check_split_name
from recordbeam.errors import DataError, UsageError
from recordbeam.images.masks import too_many_vertices
from recordbeam.records import Reject
from recordbeam.sources.annotated_files import NamedObject
from recordbeam.sources.conversion import conversion
from recordbeam.sources.exports import (
    ExportEncoder,
    ExportEntry,
    ExportFormat,
    FieldsCoder,
    Part,
    ReadExport,
)
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import PASS_IMAGES, refuse_split, require_folder
from recordbeam.sources.text import as_number, as_whole

#: The per-object feature CVAT adds beside the boxes: its ``occluded`` flag.
CVAT_OBJECT_KINDS = {feature_keys.OCCLUDED: "int64"}
#: The per-object feature a "CVAT for video" export adds: the id of the object's track.
TRACK_KINDS = {feature_keys.TRACK_ID: "int64"}

#: Shapes that are objects; the other children of ``<image>`` are counted and skipped.
OBJECT_SHAPES = ("box", "polygon", "mask")

#: Count of ``<image>``s without a subset that ``--split`` placed, in an XML declaring
#: several subsets.
PLACED_BY_SPLIT_OPTION = "cvat_images_placed_by_split"

#: The subset CVAT names images that have none.
DEFAULT_SUBSET = "default"


class CvatError(DataError, ValueError):
    """A CVAT XML that cannot be used at all (unsafe, not well-formed, not CVAT's)."""


@dataclass(frozen=True)
class CvatOptions(filesystems.RootAndImagesInputs):
    """What to read.

    Attributes:
        root: the CVAT export folder (any Beam filesystem).
        images_dir: where the images are; None means ``ROOT/images``.
        split: the split of images no subset places (a task export without subsets).
        include_masks: keep polygons and masks for ``image/object/mask``.
        allow_outside_root: also read files that symbolic links lead outside ``root`` and
            ``images_dir``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    images_dir: str | None = None
    split: str = "train"
    include_masks: bool = False
    allow_outside_root: bool = False

    @property
    def image_folder(self) -> str:
        return self.images_dir or filesystems.join(self.root.rstrip("/"), "images")

    @property
    def xml_pattern(self) -> str:
        return filesystems.glob_below(self.root, "*.xml")

    @property
    def xml_files_shown(self) -> str:
        """What :attr:`xml_pattern` lists, for messages (unescaped)."""
        return filesystems.join(self.root.rstrip("/"), "*.xml")


def cvat_input_patterns(options: CvatOptions) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``)."""
    return [options.xml_pattern, filesystems.everything_below(options.image_folder)]


# --- what the launcher reads: the <meta> of each file ------------------------------------


class CvatMeta(NamedTuple):
    """The head of one CVAT XML: its labels in order, the subsets it declares, and whether
    its images are a video's frames (``frames``: a task in ``interpolation`` mode, whose
    images are ``frame_<number>``, or a "CVAT for video" export whose first element is a
    ``<track>``)."""

    labels: tuple[str, ...]
    subsets: tuple[str, ...]
    frames: bool = False
    tracks: bool = False  # its first element is a <track>: a "CVAT for video" export


def _unusable(path: str, error: Exception) -> CvatError:
    if isinstance(error, DefusedXmlException):
        return CvatError(
            f"{path}: the XML declares entities or refers to external files (a DOCTYPE); "
            "they are never expanded. Remove the DOCTYPE: CVAT exports need none")
    line, column = getattr(error, "position", (0, 0))
    return CvatError(f"{path}: not well-formed XML at line {line}, column {column + 1}; "
                     "fix or re-export the file")


def _events(path: str, f: Any) -> Iterator[tuple[str, Element]]:
    """``iterparse`` start/end events, whole-file problems raised as :class:`CvatError`."""
    try:
        yield from iterparse(f, events=("start", "end"))
    except (DefusedXmlException, ParseError) as error:
        raise _unusable(path, error) from None


def read_meta(path: str) -> CvatMeta:
    """The labels and subsets of ``path``, reading it only up to its first ``<image>``."""
    labels: list[str] = []
    subsets: list[str] = []
    frames = tracks = False
    depth = 0
    with filesystems.open_read(path) as f:
        for event, element in _events(path, f):
            if event == "start":
                depth += 1
                if depth == 1 and element.tag != "annotations":
                    raise CvatError(f"{path}: the root element is <{element.tag}>, not "
                                    "<annotations>; is this a CVAT for images 1.1 export?")
                if depth == 2 and element.tag in ("image", "track"):
                    tracks = element.tag == "track"
                    break
                continue
            depth -= 1
            if element.tag == "label" and element.find("parent") is None:
                name = (element.findtext("name") or "").strip()
                if name and name not in labels:
                    labels.append(name)
            elif element.tag == "subset" and (element.text or "").strip():
                subsets.append(element.text.strip())
            elif element.tag == "subsets":  # a project's: one name per line
                subsets.extend(s.strip() for s in (element.text or "").splitlines() if s.strip())
            elif element.tag == "mode" and (element.text or "").strip() == "interpolation":
                frames = True  # a video task: its images are its frames
    return CvatMeta(tuple(labels), tuple(dict.fromkeys(subsets)), frames or tracks, tracks)


def xml_files(options: CvatOptions) -> list[str]:
    """The CVAT XMLs of ROOT, sorted (a listing, no reads)."""
    return sorted(m.path for m in filesystems.iter_match(options.xml_pattern))


def file_subset(path: str) -> str | None:
    """The subset a file's name fixes (Datumaro's ``<subset>.xml``); None for CVAT's own
    ``annotations.xml``, whose images carry their subsets."""
    stem = posixpath.splitext(posixpath.basename(path))[0]
    return None if stem == "annotations" else stem


class CvatPlan(NamedTuple):
    """What the launcher learned: the files with their split rule, the splits, the classes,
    and whether the images are a video's frames (see :class:`CvatMeta`): then the
    ``<track>``s are read, and images join by their name without extension."""

    files: tuple[tuple[str, str | None], ...]  # (path, the split its name fixes)
    splits: tuple[str, ...]
    classes: list[str] | None
    frames: bool = False
    tracks: bool = False  # some XML is a "CVAT for video" export: objects carry track ids


def plan(options: CvatOptions) -> CvatPlan:
    """Read each XML's head: the splits (file names, then declared subsets, else
    ``options.split``) and the class list (the labels of ``<meta>``, which every file must
    agree on; None when no file declares labels)."""
    files = xml_files(options)
    if not files:
        raise CvatError(f"{options.xml_files_shown} matches no file; --input takes the folder "
                        "holding CVAT's annotations.xml (or <subset>.xml files)")
    splits: list[str] = []
    classes: list[str] | None = None
    first = None
    planned = []
    frames = tracks = False
    roots = options.input_roots()
    for path in files:
        filesystems.refuse_outside(roots, path, "CVAT XML")
        meta = read_meta(path)
        frames, tracks = frames or meta.frames, tracks or meta.tracks
        subset = file_subset(path)
        planned.append((path, subset))
        splits.extend(_checked_subsets(path, [subset] if subset else meta.subsets,
                                       named_by_file=subset is not None))
        if meta.labels:
            if classes is None:
                classes, first = list(meta.labels), path
                check_class_list(classes, [f"<meta> label {i + 1}"
                                           for i in range(len(classes))], path)
            elif list(meta.labels) != classes:
                raise CvatError(f"{path} declares the labels {list(meta.labels)}, but {first} "
                                f"declares {classes}; export every subset with the same labels")
    splits = list(dict.fromkeys(splits)) or [options.split]
    return CvatPlan(tuple(planned), tuple(splits), classes, frames, tracks)


def _checked_subsets(path: str, subsets: Sequence[str], named_by_file: bool) -> Sequence[str]:
    """``subsets``, each a name a split can have; else a ``UsageError`` naming ``path``,
    where the name comes from, and what to rename."""
    for subset in subsets:
        try:
            check_split_name(subset)
        except OutputFolderError as error:
            if named_by_file:
                where, fix = "its file name makes", "rename the file"
            else:
                where, fix = ("its <meta> declares", "rename the subset in CVAT and export "
                              "again, or in the XML's <meta> and the subset= of its <image>s")
            raise UsageError(f"{path}: {where} the subset {subset!r}, the split its images are "
                             f"written to; {error}: {fix}") from None
    return subsets


# --- one <image> -----------------------------------------------------------------------


class ParsedShapes(NamedTuple):
    objects: tuple[NamedObject, ...]
    rejects: tuple[Reject, ...]
    counts: dict[str, int]


def parse_points(text: str | None) -> list[float] | None:
    """``"x1,y1;x2,y2;..."`` -> ``[x1, y1, x2, y2, ...]``; None when malformed."""
    flat: list[float] = []
    for pair in (text or "").strip().split(";"):
        parts = pair.split(",")
        if len(parts) != 2:
            return None
        x, y = as_number(parts[0]), as_number(parts[1])
        if x is None or y is None:
            return None
        flat += (x, y)
    return flat


def cvat_mask(rle: str, left: int, top: int, width: int, height: int,
              image_width: int, image_height: int) -> dict[str, Any]:
    """CVAT's mask RLE as a box RLE (see :mod:`recordbeam.images.masks`): its runs
    alternate 0s and 1s (starting with 0s) over the ``width`` x ``height`` box at
    ``left, top``, row by row. Checked, never drawn: the pixels are made only when the
    mask is written, once the image's own size is known. Raises ``ValueError`` (its text
    says what is wrong)."""
    try:
        runs = [int(float(v)) for v in rle.replace(" ", "").split(",") if v != ""]
    except (ValueError, OverflowError):
        raise ValueError("rle holds something that is not a number") from None
    if not runs or any(r < 0 for r in runs):
        raise ValueError("rle must be comma-separated non-negative run lengths")
    if sum(runs) != width * height:
        raise ValueError(f"the runs cover {sum(runs)} pixels but the mask is "
                         f"{width}x{height} = {width * height}")
    if left < 0 or top < 0 or left + width > image_width or top + height > image_height:
        raise ValueError(f"the mask box ({left}, {top}) {width}x{height} lies outside the "
                         f"{image_width}x{image_height} image")
    return {"size": [image_height, image_width], "box": [left, top, width, height],
            "runs": runs}


def pixel_box(mask: dict[str, Any]) -> tuple[float, float, float, float] | None:
    """``(x, y, width, height)`` around the set pixels of a :func:`cvat_mask`, from its
    runs alone; None when no pixel is set."""
    runs = np.asarray(mask["runs"], dtype=np.int64)
    left, top, width, _height = mask["box"]
    ends = np.cumsum(runs)
    ones = (np.arange(len(runs)) % 2 == 1) & (runs > 0)
    first, last = (ends - runs)[ones], ends[ones] - 1  # each run of 1s, both ends included
    if not first.size:
        return None
    rows = (int(first.min() // width), int(last.max() // width))
    if ((first // width) != (last // width)).any():
        columns = (0, width - 1)  # a run over a row's end sets its last and the next's first
    else:
        columns = (int((first % width).min()), int((last % width).max()))
    return (float(left + columns[0]), float(top + rows[0]),
            float(columns[1] + 1 - columns[0]), float(rows[1] + 1 - rows[0]))


class _Shape(NamedTuple):
    where: str
    label: str
    box: tuple[float, float, float, float] | None  # x, y, width, height
    segmentation: Any  # polygons [[...]] or an RLE dict; None for a box
    occluded: int
    group: str
    kind: str


def _occluded(element: Element) -> int:
    return 1 if as_number(element.get("occluded")) else 0


def _shape(element: Element, where: str, width: int | None, height: int | None,
           keep_masks: bool, track: tuple[str, str] | None = None) -> _Shape | Reject:
    """One shape element; ``track`` gives the label and group of a ``<track>``'s shape
    (which carries neither)."""
    label, group = track or (element.get("label") or "", element.get("group_id") or "0")
    label, group = label.strip(), group.strip()
    group = "" if group in ("", "0") else group
    if not label:
        return Reject("annotation", where, "missing_field",
                      f"{where} has no label; the image was written without this object")
    if element.tag == "box":
        corners = [as_number(element.get(k)) for k in ("xtl", "ytl", "xbr", "ybr")]
        if None in corners:
            return Reject("annotation", where, "invalid_bbox", (
                f"{where} ({label!r}) needs numbers in xtl, ytl, xbr and ybr; the image was "
                "written without this object"))
        xtl, ytl, xbr, ybr = corners
        if xbr <= xtl or ybr <= ytl:
            return Reject("annotation", where, "degenerate_bbox", (
                f"{where} ({label!r}): box xtl={xtl:g} ytl={ytl:g} xbr={xbr:g} ybr={ybr:g} "
                "has no area (br must be right of and below tl); the image was written "
                "without this object"))
        angle = as_number(element.get("rotation")) or 0.0
        box = _rotated_box(xtl, ytl, xbr, ybr, angle)
        return _Shape(where, label, box, None, _occluded(element), group,
                      "rotated_box" if angle % 360 else "box")
    if element.tag == "polygon":
        text = element.get("points") or ""
        too_many = too_many_vertices(text.count(";") + 1)
        if too_many:
            return Reject("annotation", where, "malformed_points", (
                f"{where} ({label!r}): {too_many}; the image was written without this object"))
        points = parse_points(text)
        if points is None or len(points) < 6:
            return Reject("annotation", where, "malformed_points", (
                f"{where} ({label!r}): points must be at least 3 'x,y' pairs separated by "
                f"';' (got {(element.get('points') or '')[:60]!r}); the image was written "
                "without this object"))
        xs, ys = points[0::2], points[1::2]
        box = (min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys))
        return _Shape(where, label, box, [points] if keep_masks else None, _occluded(element),
                      group, "polygon")
    left, top = as_number(element.get("left")), as_number(element.get("top"))
    mask_width, mask_height = as_whole(element.get("width"), 1), as_whole(element.get("height"), 1)
    try:
        if width is None or height is None:
            raise ValueError("its <image> has no width and height, which place the mask")
        if None in (left, top, mask_width, mask_height):
            raise ValueError("left, top, width and height must be numbers")
        mask = cvat_mask(element.get("rle") or "", int(left), int(top), mask_width,
                         mask_height, width, height)
    except ValueError as bad:
        return Reject("annotation", where, "malformed_rle", (
            f"{where} ({label!r}): {bad}; the image was written without this object"))
    box = pixel_box(mask)
    if box is None:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({label!r}): the mask has no pixel set; the image was written without "
            "this object"))
    return _Shape(where, label, box, mask if keep_masks else None,
                  _occluded(element), group, "mask")


def _rotated_box(xtl: float, ytl: float, xbr: float, ybr: float,
                 degrees: float) -> tuple[float, float, float, float]:
    """The axis-aligned box around the box turned by ``degrees`` about its centre."""
    if not degrees % 360:
        return (xtl, ytl, xbr - xtl, ybr - ytl)
    cx, cy = (xtl + xbr) / 2, (ytl + ybr) / 2
    half_w, half_h = (xbr - xtl) / 2, (ybr - ytl) / 2
    cos, sin = abs(math.cos(math.radians(degrees))), abs(math.sin(math.radians(degrees)))
    extent_x, extent_y = half_w * cos + half_h * sin, half_w * sin + half_h * cos
    return (cx - extent_x, cy - extent_y, 2 * extent_x, 2 * extent_y)


def _merge(shapes: list[_Shape], where: str) -> NamedObject | Reject:
    """One object from the shapes of one group: box from its ``<box>``, else around its
    outlines; mask from its polygons, or its one ``<mask>``."""
    labels = sorted({s.label for s in shapes})
    if len(labels) > 1:
        return Reject("annotation", where, "group_label_conflict", (
            f"{where}: the shapes of this group have different labels ({', '.join(labels)}); "
            "give them one label or separate groups. The image was written without them"))
    boxes = [s.box for s in shapes if s.kind in ("box", "rotated_box")] or [
        s.box for s in shapes]
    x0 = min(b[0] for b in boxes)
    y0 = min(b[1] for b in boxes)
    x1 = max(b[0] + b[2] for b in boxes)
    y1 = max(b[1] + b[3] for b in boxes)
    polygons = [p for s in shapes if s.kind == "polygon" and s.segmentation
                for p in s.segmentation]
    masks = [s.segmentation for s in shapes if s.kind == "mask" and s.segmentation]
    segmentation = polygons or (masks[0] if len(masks) == 1 else None)
    if masks and (polygons or len(masks) > 1):
        segmentation = _union(polygons, masks)
    return NamedObject(where, labels[0], (x0, y0, x1 - x0, y1 - y0),
                       (max(s.occluded for s in shapes),), segmentation)


def _union(polygons: list, masks: list[dict]) -> dict[str, Any]:
    """Polygons and masks of one group as one segmentation: the union of their pixels,
    drawn when the mask is written (see :mod:`recordbeam.images.masks`)."""
    return {"size": masks[0]["size"], "union": [*([polygons] if polygons else []), *masks]}


def parse_image(element: Element, where: str, keep_masks: bool) -> ParsedShapes:
    """The objects of one ``<image>``: its shapes, grouped by ``group_id``."""
    width, height = as_whole(element.get("width"), 1), as_whole(element.get("height"), 1)
    rejects: list[Reject] = []
    counts: dict[str, int] = {}
    singles: list[tuple[int, _Shape]] = []
    groups: dict[str, list[tuple[int, _Shape]]] = {}
    seen: dict[str, int] = {}
    for order, child in enumerate(element):
        kind = child.tag
        index = seen[kind] = seen.get(kind, -1) + 1
        shape_where = f"{where} <{kind}>[{index}]"
        if kind not in OBJECT_SHAPES:
            counts[f"cvat_{kind}_skipped"] = counts.get(f"cvat_{kind}_skipped", 0) + 1
            continue
        shape = _shape(child, shape_where, width, height, keep_masks)
        if isinstance(shape, Reject):
            rejects.append(shape)
        elif shape.group:
            groups.setdefault(shape.group, []).append((order, shape))
        else:
            singles.append((order, shape))
        if not isinstance(shape, Reject) and shape.kind == "rotated_box":
            counts["cvat_rotated_boxes_enclosed"] = counts.get(
                "cvat_rotated_boxes_enclosed", 0) + 1
    objects = []
    for merged in _grouped(singles, groups, where, counts):
        (rejects if isinstance(merged, Reject) else objects).append(merged)
    return ParsedShapes(tuple(objects), tuple(rejects), counts)


def _grouped(singles: list[tuple[Any, _Shape]], groups: dict[str, list[tuple[Any, _Shape]]],
             where: str, counts: dict[str, int]) -> list[NamedObject | Reject]:
    """Objects in the order of their first shape (orders are sortable): each single shape,
    and each group's shapes merged into one (counted ``cvat_grouped_shapes_merged``)."""
    ordered: list[tuple[Any, NamedObject | Reject]] = [
        (order, _merge([shape], shape.where)) for order, shape in singles]
    for group, members in groups.items():
        where_group = f"{where} group_id={group}"
        ordered.append((members[0][0], _merge([s for _o, s in members], where_group)))
        if len(members) > 1:
            counts["cvat_grouped_shapes_merged"] = counts.get(
                "cvat_grouped_shapes_merged", 0) + len(members) - 1
    return [merged for _order, merged in sorted(ordered, key=lambda item: item[0])]


#: A video frame's image name, with or without its extension (``frame_000012.PNG``).
_FRAME_NAME = re.compile(r"frame_\d+(\.[A-Za-z0-9]+)?")


def frame_key(name: str) -> str:
    """The join key of an image of a video task: ``frame_<number>`` without the extension,
    which CVAT's own names of frames lack (``<image name="frame_000012">``, a ``<track>``'s
    ``frame="12"``); other names unchanged."""
    return name.rsplit(".", 1)[0] if _FRAME_NAME.fullmatch(name) else name


class CvatTrackShape(NamedTuple):
    """One shape of a ``<track>`` on one frame (not ``outside`` it), streamed on its XML's
    worker and joined with that frame's image (the value of a ``Part``). ``order`` (the
    track's place in its file) keeps a frame's objects in the tracks' order."""

    where: str
    split: str
    width: int | None  # the video's <original_size>
    height: int | None
    order: int
    track_id: int
    shape: _Shape
    xml: str


class CvatTrackShapeCoder(FieldsCoder):
    """A :class:`CvatTrackShape`, its shape as a plain tuple."""

    kind = CvatTrackShape

    def fields(self, value: CvatTrackShape) -> tuple:
        return (*value[:6], tuple(value.shape), value.xml)

    def of_fields(self, fields: Sequence[Any]) -> CvatTrackShape:
        *head, shape, xml = fields
        return CvatTrackShape(*head, _Shape(*shape), xml)


beam.coders.registry.register_coder(CvatTrackShape, CvatTrackShapeCoder)


class _OpenTrack(NamedTuple):
    """A ``<track>`` being streamed: what its start tag says (its shapes carry none of it)."""

    order: int
    track_id: int
    label: str
    group: str
    subset: str


def stream_images(path: str, data: Any, subset: str | None, splits: Sequence[str],
                  default_split: str, keep_masks: bool, frames: bool = False) -> Iterator[Any]:
    """Stream one CVAT XML (a binary file object), plain Python: an ``ExportEntry`` per
    ``<image>``, keyed by its name, and ``Reject``s and ``(counter, n)`` counts. Each
    top-level element is dropped once read, so memory does not grow with the file.

    With ``frames`` (the images are a video's frames, see :class:`CvatPlan`), ``<image>``
    names are keyed by :func:`frame_key`, and each shape of a ``<track>`` is a ``Part``
    (a :class:`CvatTrackShape`) keyed by its frame; each is dropped once read, so a long
    track weighs no more than one of its shapes. Without it, tracks are counted and skipped.
    """
    depth = 0
    root = None
    count = tracks = 0
    track: _OpenTrack | None = None
    track_element = None
    frame_size: tuple[int | None, int | None] = (None, None)
    for event, element in _events(path, data):
        if event == "start":
            depth += 1
            if depth == 1:
                root = element
            elif depth == 2 and element.tag == "track" and frames:
                track, track_element = _open_track(element, tracks), element
                tracks += 1
            continue
        depth -= 1
        if depth == 2 and track is not None:  # one shape of the open track, read
            yield from _track_shape(path, track, element, subset, splits, default_split,
                                    keep_masks, frame_size)
            track_element.clear()
            continue
        if depth != 1:
            continue
        if element.tag == "image":
            yield from _image(path, element, count, subset, splits, default_split, keep_masks,
                              frames)
            count += 1
        elif element.tag == "track" and track is None:
            yield ("cvat_tracks_skipped", 1)
        elif element.tag == "meta":
            size = element.find(".//original_size")
            if size is not None:
                frame_size = (as_whole(size.findtext("width"), 1), as_whole(size.findtext("height"), 1))
        track = track_element = None
        root.clear()


def _open_track(element: Element, order: int) -> _OpenTrack:
    number = as_number(element.get("id"))
    track_id = int(number) if number is not None and number == int(number) else order
    return _OpenTrack(order, track_id, element.get("label") or "",
                      element.get("group_id") or "0", (element.get("subset") or "").strip())


def _track_shape(path: str, track: _OpenTrack, element: Element, subset: str | None,
                 splits: Sequence[str], default_split: str, keep_masks: bool,
                 frame_size: tuple[int | None, int | None]) -> Iterator[Any]:
    """One child of a ``<track>``: a shape on a frame. Shapes ``outside`` the frame mark
    where the object left it: no object. A skeleton's own element tracks are read with it
    (counted as ``cvat_skeleton_skipped``)."""
    kind = element.tag
    if kind == "track" or as_number(element.get("outside")):
        return
    frame = as_number(element.get("frame"))
    where = f"{path}: <track id={track.track_id}> <{kind} frame={element.get('frame')!r}>"
    if kind not in OBJECT_SHAPES:
        yield (f"cvat_{kind}_skipped", 1)
        return
    split = yield from _placed_split(path, where, track.subset, subset, splits, default_split,
                                     "its <track>")
    if split is None:
        return
    if frame is None or frame != int(frame) or frame < 0:
        yield Reject("annotation", where, "missing_field", (
            f"{where} has no frame number, so no image can be found for it; the shape was "
            "not written. Fix or re-export the file"), split)
        return
    width, height = frame_size
    shape = _shape(element, where, width, height, keep_masks, (track.label, track.group))
    if isinstance(shape, Reject):
        yield replace(shape, split=split)
        return
    if shape.kind == "rotated_box":
        yield ("cvat_rotated_boxes_enclosed", 1)
    yield Part(f"frame_{int(frame):06d}", CvatTrackShape(
        where, split, width, height, track.order, track.track_id, shape, path))


def _placed_split(path: str, where: str, declared: str, subset: str | None,
                  splits: Sequence[str], default_split: str, what: str) -> Iterator[Any]:
    """The split of an element (a generator: its counts and rejects are yielded, the split
    returned; None when rejected): its file's subset, else the one ``declared`` on it,
    else the one split there is, else ``--split``."""
    split = subset or declared
    if not split:
        split = splits[0] if len(splits) == 1 else default_split
        if len(splits) > 1:  # placed by --split: the command says when none was
            yield (PLACED_BY_SPLIT_OPTION, 1)
    if split not in splits:
        yield Reject("image", where, "undeclared_subset", (
            f"{where} is in subset {split!r}, which the <meta> of {path} does not declare "
            f"(it declares {', '.join(splits)}); re-export the project, or pass --split with "
            f"one of those names for {what} without a subset"))
        return None
    return split


def _image(path: str, element: Element, index: int, subset: str | None,
           splits: Sequence[str], default_split: str, keep_masks: bool,
           frames: bool = False) -> Iterator[Any]:
    name = (element.get("name") or "").strip()
    where = f"{path}: <image name={name!r}>" if name else f"{path}: <image>[{index}]"
    split = yield from _placed_split(path, where, (element.get("subset") or "").strip(),
                                     subset, splits, default_split, "images")
    if split is None:
        return
    if not name:
        yield Reject("image", where, "missing_field", (
            f"{where} has no name attribute, so no image file can be found for it; fix or "
            "re-export the file"), split)
        return
    parsed = parse_image(element, where, keep_masks)
    for reject in parsed.rejects:
        yield replace(reject, split=split)
    yield from parsed.counts.items()
    yield ExportEntry(frame_key(name) if frames else name, where, split,
                      as_whole(element.get("width"), 1), as_whole(element.get("height"), 1),
                      parsed.objects, export=path)


# --- on the export plumbing ------------------------------------------------------------


class CvatExport(ExportFormat):
    """CVAT's XMLs and images folder, for :class:`~recordbeam.sources.exports.ReadExport`.
    Construction reads the head of each XML (:func:`plan`). Images join by their name (a
    video's frames by :func:`frame_key`), found in ``images/`` or ``images/<subset>/``;
    with ``frames``, the shapes of the ``<track>``s are the parts of their frames."""

    name, entry, class_list = "cvat", "<image>", "the labels of <meta>"
    split_folders = duplicated_image_written = True

    def __init__(self, options: CvatOptions) -> None:
        self.options, self.image_folder = options, options.image_folder
        planned = plan(options)
        self.splits, self.classes = planned.splits, planned.classes
        self.frames, self.tracks = planned.frames, planned.tracks
        self.part_type = CvatTrackShape if planned.frames else None
        self._files = [path for path, _subset in planned.files]

    def export_files(self) -> list[str]:
        return self._files

    def input_patterns(self) -> list[str]:
        return cvat_input_patterns(self.options)

    def parse(self, path: str, data: BinaryIO) -> Iterator[Any]:
        """:func:`stream_images`: an entry per ``<image>`` (with ``tracks``, its objects'
        track id -1), a part per shape of a track."""
        opts = self.options
        for item in stream_images(path, data, file_subset(path), self.splits, opts.split,
                                  opts.include_masks, self.frames):
            if self.tracks and isinstance(item, ExportEntry):  # objects of no track: -1
                item = _with_objects(item, tuple(_with_track_id(obj, -1) for obj in item.objects))
            yield item

    def assemble(self, key: str, entries: list[ExportEntry],
                 parts: Iterable[CvatTrackShape]) -> Iterator[Any]:
        """A frame's ``<image>``s and, per subset, the frame its tracks' shapes make: its
        objects follow those of the subset's one ``<image>``; with none or several, it is
        one more entry."""
        by_split: dict[str, list[ExportEntry]] = {}
        for entry in entries:
            by_split.setdefault(entry.split, []).append(entry)
        shapes_by_split: dict[str, list[CvatTrackShape]] = {}
        for shape in sorted(parts, key=lambda t: (t.xml, t.order, t.where)):
            shapes_by_split.setdefault(shape.split, []).append(shape)
        for split, shapes in shapes_by_split.items():
            frame = yield from _frame_of_tracks(key, split, shapes, self.tracks)
            images = by_split.setdefault(split, [])
            if len(images) == 1:
                images[0] = _with_objects(images[0], images[0].objects + frame.objects)
            else:
                images.append(frame)
        for images in by_split.values():
            yield from images

    def file_key(self, name: str) -> str:
        return frame_key(name) if self.frames else name

    def key_shown(self, key: str) -> str:
        return f"{key}.*" if self.frames and frame_key(key) == key else key

    def duplicated(self, key: str, split: str, entries: list[ExportEntry]) -> str:
        return (f"{len(entries)} <image> elements of subset {split!r} are named {key!r} "
                f"({', '.join(dict.fromkeys(str(e.export) for e in entries))}); keep one. "
                "None of them was written")

    def unnamed(self, key: str) -> str:
        return (f"no <image name={key!r}> in the XMLs; written with no objects (annotate it "
                "in CVAT, or remove the image if it should not be in the dataset)")

    def unnamed_written(self, key: str, path: str, split: str) -> Reject | tuple[str, int]:
        if self.tracks:  # a frame that no track's shape is on: nothing to see there
            return ("cvat_frames_without_shapes", 1)
        return super().unnamed_written(key, path, split)

    def unplaced(self, key: str) -> str:
        return (f"no <image name={key!r}> in the XMLs, and with several subsets "
                f"({', '.join(self.splits)}) its split is unknown; not written. Add it to an "
                "XML, or move it to images/<subset>/")


def _frame_of_tracks(name: str, split: str, shapes: list[CvatTrackShape],
                     track_ids: bool) -> Iterator[Any]:
    """The entry of one frame made of its tracks' shapes (a generator: its rejects and
    counts are yielded, the entry returned): shapes of tracks sharing a ``group_id``
    merged as an ``<image>``'s are; with ``track_ids``, each object's extras end with its
    track's id (a group's: its first track's)."""
    first = shapes[0]
    where = f"{first.xml}: frame {name}"
    singles: list[tuple[Any, _Shape]] = []
    groups: dict[str, list[tuple[Any, _Shape]]] = {}
    track_of: dict[str, int] = {}  # an object's source -> its track id
    for order, track_shape in enumerate(shapes):
        shape = track_shape.shape
        if shape.group:
            groups.setdefault(shape.group, []).append((order, shape))
            track_of.setdefault(f"{where} group_id={shape.group}", track_shape.track_id)
        else:
            singles.append((order, shape))
            track_of[shape.where] = track_shape.track_id
    counts: dict[str, int] = {}
    objects = []
    for merged in _grouped(singles, groups, where, counts):
        if isinstance(merged, Reject):
            yield replace(merged, split=split)
        else:
            objects.append(_with_track_id(merged, track_of[merged.source]) if track_ids
                           else merged)
    yield from counts.items()
    return ExportEntry(name, where, split, first.width, first.height, tuple(objects),
                       export=first.xml)


def _with_objects(entry: ExportEntry, objects: tuple[NamedObject, ...]) -> ExportEntry:
    return ExportEntry(entry.key, entry.where, entry.split, entry.width, entry.height, objects,
                       export=entry.export)


def _with_track_id(obj: NamedObject, track_id: int) -> NamedObject:
    """``obj`` with the id of its track after its other extras (CVAT's ``occluded``)."""
    return NamedObject(obj.source, obj.name, obj.bbox, (*obj.extra, track_id),
                       obj.segmentation, obj.normalized)


class ReadCvat(ReadExport):
    """Read a CVAT for images (or video) 1.1 export into ``ImageRecord``s for
    :class:`CvatEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`. Construction reads the head
    of each XML (:func:`plan`): ``splits``, ``classes`` and ``tracks`` (objects carry
    track ids) are known then. ``skip_below``, the output folder when it lies inside the
    images folder, is left out of the listing.
    """

    def __init__(self, options: CvatOptions, skip_below: str | None = None) -> None:
        fmt = CvatExport(options)
        super().__init__(fmt, skip_below, options.input_roots())
        self.tracks = fmt.tracks


class CvatEncoder(ExportEncoder):
    """The detection features plus ``image/object/occluded`` (CVAT's flag, 0 or 1), and
    with ``include_masks`` ``image/object/mask`` from the polygons and CVAT masks. With
    ``track_ids`` (a "CVAT for video" export), ``image/object/track_id``: the id of the
    ``<track>`` an object is a frame of (-1 for an ``<image>``'s shape)."""

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False, track_ids: bool = False) -> None:
        kinds = {**CVAT_OBJECT_KINDS, **(TRACK_KINDS if track_ids else {})}
        super().__init__(checks, split, fixes, extra_kinds=kinds, include_masks=include_masks)


def prepare(request: Request) -> Conversion:
    """``convert cvat``: checks for the XMLs and the images folder and reads each XML's
    ``<meta>`` before any job; a typed --split must name a subset where it places images
    (an ``annotations.xml`` declaring several subsets), else agree with the subsets."""
    cvat = CvatOptions(request.input, request.images, request.split, request.include_masks,
                       request.allow_outside_root)
    if not xml_files(cvat):
        raise UsageError(f"{cvat.xml_files_shown} matches no file; --input takes the CVAT export "
                         "folder holding annotations.xml (or <subset>.xml files) and images/")
    require_folder(cvat.image_folder, PASS_IMAGES)
    planned = plan(cvat)  # reads each XML's <meta>, up to its first <image>
    splits = planned.splits
    # An annotations.xml declaring several subsets puts its <image>s without a subset
    # attribute in --split: there it must name one of them. Elsewhere the subsets decide.
    places_images = len(splits) > 1 and any(subset is None for _path, subset in planned.files)
    refuse_split(request, splits, "the XMLs name the subsets",
                 accepted=request.split in splits if places_images else None)
    split_placing = places_images and request.split_given
    # ReadCvat reads the head (<meta>) of each XML again as the pipeline is built.
    return conversion(
        "cvat", cvat, splits, cvat_input_patterns(cvat), request.output,
        lambda: ReadCvat(cvat, skip_below=request.output),
        lambda read, checks, fixes: CvatEncoder(checks, read.splits[0], fixes,
                                                include_masks=cvat.include_masks,
                                                track_ids=read.tracks),
        after_run=partial(_warn_if_split_placed_nothing, split=request.split)
        if split_placing else None)


def _warn_if_split_placed_nothing(output: str, split: str) -> None:
    """Known only once the XML was read: every <image> had its own subset, so the typed
    --split placed none of them. Said, not silently ignored."""
    manifest = layout.read_manifest(output) or {}
    placed = sum(entry.get("counts", {}).get(PLACED_BY_SPLIT_OPTION, 0)
                 for entry in manifest.get("splits", {}).values())
    if manifest and not placed:
        print(f"warning: --split {split} placed no image: every <image> of the XMLs "
              "carries its own subset, which decides its split; drop --split", file=sys.stderr)
