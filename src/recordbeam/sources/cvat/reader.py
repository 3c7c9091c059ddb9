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
the subsets (the splits). Each XML is then streamed on one worker with ``defusedxml``'s
``iterparse`` (no entity expansion, no external entities), clearing every element once
read, so memory stays flat at any size. Plain Python over
:mod:`recordbeam.sources.exports` (:class:`CvatExport`): each ``<image>`` becomes one
``ExportEntry``, joined on workers with the listing of the images folder by its name.

Shapes: ``<box>`` (pixel corners; a ``rotation`` gives the box around the turned one),
``<polygon>`` (its box, and its mask with ``--include-masks``) and ``<mask>`` (CVAT's RLE:
run lengths alternating 0s and 1s, row-major inside ``left top width height``; its box is
that of its pixels). Shapes sharing a non-zero ``group_id`` are one object: box from the
``<box>``, mask from the polygons and masks. ``<polyline>``, ``<points>``, ``<skeleton>``,
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
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
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
from recordbeam.sources import exports
from recordbeam.sources.annotated_files import NamedObject
from recordbeam.sources.detection import box_around, union_of
from recordbeam.sources.exports import ExportEntry, Part, Unusable
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import PASS_IMAGES, refuse_split, require_folder
from recordbeam.sources.text import as_number, as_whole

#: Count of ``<image>``s without a subset that ``--split`` placed, in an XML declaring
#: several subsets.
PLACED_BY_SPLIT_OPTION = "cvat_images_placed_by_split"


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
            ``images_dir`` (refused by default: rejected ``outside_root``, never opened).
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


# --- what the launcher reads: the <meta> of each file ------------------------------------


class CvatMeta(NamedTuple):
    """The head of one CVAT XML: its labels in order, the subsets it declares, whether its
    images are a video's frames (a task in ``interpolation`` mode, or a "CVAT for video"
    export) and whether its first element is a ``<track>`` (a "CVAT for video" export)."""

    labels: tuple[str, ...]
    subsets: tuple[str, ...]
    frames: bool = False
    tracks: bool = False


def _events(path: str, f: Any) -> Iterator[tuple[str, Element]]:
    """``iterparse`` start/end events, whole-file problems raised as :class:`CvatError`."""
    try:
        yield from iterparse(f, events=("start", "end"))
    except DefusedXmlException:
        raise CvatError(
            f"{path}: the XML declares entities or refers to external files (a DOCTYPE); "
            "they are never expanded. Remove the DOCTYPE: CVAT exports need none") from None
    except ParseError as error:
        line, column = getattr(error, "position", (0, 0))
        raise CvatError(f"{path}: not well-formed XML at line {line}, column {column + 1}; "
                        "fix or re-export the file") from None


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
            text = (element.text or "").strip()
            if element.tag == "label" and element.find("parent") is None:
                name = (element.findtext("name") or "").strip()
                if name and name not in labels:
                    labels.append(name)
            elif element.tag == "subset" and text:
                subsets.append(text)
            elif element.tag == "subsets":  # a project's: one name per line
                subsets.extend(s.strip() for s in text.splitlines() if s.strip())
            elif element.tag == "mode" and text == "interpolation":
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
    """What the launcher learned: the XMLs, the splits, the classes, and whether the
    images are a video's frames and some XML a "CVAT for video" export (see
    :class:`CvatMeta`)."""

    files: list[str]
    splits: tuple[str, ...]
    classes: list[str] | None
    frames: bool = False
    tracks: bool = False


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
    frames = tracks = False
    roots = options.input_roots()
    for path in files:
        filesystems.refuse_outside(roots, path, "CVAT XML")
        meta = read_meta(path)
        frames, tracks = frames or meta.frames, tracks or meta.tracks
        subset = file_subset(path)
        for name in [subset] if subset else meta.subsets:
            _check_subset(path, name, named_by_file=subset is not None)
            splits.append(name)
        if meta.labels and classes is None:
            classes, first = list(meta.labels), path
            check_class_list(classes, [f"<meta> label {i + 1}" for i in range(len(classes))],
                             path)
        elif meta.labels and list(meta.labels) != classes:
            raise CvatError(f"{path} declares the labels {list(meta.labels)}, but {first} "
                            f"declares {classes}; export every subset with the same labels")
    splits = list(dict.fromkeys(splits)) or [options.split]
    return CvatPlan(files, tuple(splits), classes, frames, tracks)


def _check_subset(path: str, subset: str, named_by_file: bool) -> None:
    """A ``UsageError`` naming ``path``, where the name comes from and what to rename,
    unless ``subset`` is a name a split can have."""
    try:
        check_split_name(subset)
    except OutputFolderError as error:
        where, fix = ("its file name makes", "rename the file") if named_by_file else (
            "its <meta> declares", "rename the subset in CVAT and export again, or in the "
            "XML's <meta> and the subset= of its <image>s")
        raise UsageError(f"{path}: {where} the subset {subset!r}, the split its images are "
                         f"written to; {error}: {fix}") from None


# --- the shapes ----------------------------------------------------------------------------


def parse_points(text: str | None) -> list[float] | None:
    """``"x1,y1;x2,y2;..."`` -> ``[x1, y1, x2, y2, ...]``; None when malformed."""
    pairs = [pair.split(",") for pair in (text or "").strip().split(";")]
    flat = [as_number(value) for pair in pairs for value in pair]
    return None if None in flat or any(len(pair) != 2 for pair in pairs) else flat


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
    box: tuple[float, float, float, float]  # x, y, width, height
    segmentation: Any  # polygons [[...]] or a box RLE dict; None for a box, or no masks
    occluded: int
    group: str  # its non-zero group_id, else ""
    kind: str  # box, rotated_box, polygon or mask


def _box(element: Element, _width: int | None, _height: int | None) -> tuple[str, Any, None]:
    corners = [as_number(element.get(k)) for k in ("xtl", "ytl", "xbr", "ybr")]
    if None in corners:
        raise Unusable("invalid_bbox", " needs numbers in xtl, ytl, xbr and ybr")
    xtl, ytl, xbr, ybr = corners
    if xbr <= xtl or ybr <= ytl:
        raise Unusable("degenerate_bbox", f": box xtl={xtl:g} ytl={ytl:g} xbr={xbr:g} "
                        f"ybr={ybr:g} has no area (br must be right of and below tl)")
    angle = as_number(element.get("rotation")) or 0.0
    if not angle % 360:
        return "box", (xtl, ytl, xbr - xtl, ybr - ytl), None
    # the axis-aligned box around the box turned by ``angle`` degrees about its centre
    cos, sin = abs(math.cos(math.radians(angle))), abs(math.sin(math.radians(angle)))
    half_w, half_h = (xbr - xtl) / 2, (ybr - ytl) / 2
    extent_x, extent_y = half_w * cos + half_h * sin, half_w * sin + half_h * cos
    cx, cy = (xtl + xbr) / 2, (ytl + ybr) / 2
    return "rotated_box", (cx - extent_x, cy - extent_y, 2 * extent_x, 2 * extent_y), None


def _polygon(element: Element, _width: int | None, _height: int | None) -> tuple[str, Any, Any]:
    text = element.get("points") or ""
    too_many = too_many_vertices(text.count(";") + 1)
    if too_many:
        raise Unusable("malformed_points", f": {too_many}")
    points = parse_points(text)
    if points is None or len(points) < 6:
        raise Unusable("malformed_points", ": points must be at least 3 'x,y' pairs "
                        f"separated by ';' (got {text[:60]!r})")
    return "polygon", box_around(points), [points]


def _mask(element: Element, width: int | None, height: int | None) -> tuple[str, Any, Any]:
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
        raise Unusable("malformed_rle", f": {bad}") from None
    box = pixel_box(mask)
    if box is None:
        raise Unusable("degenerate_bbox", ": the mask has no pixel set")
    return "mask", box, mask


#: The shapes that are objects, by tag: each gives its kind, box and segmentation.
#: Other children of an ``<image>`` or a ``<track>`` are counted and skipped.
_GEOMETRY = {"box": _box, "polygon": _polygon, "mask": _mask}


def _shape(element: Element, where: str, split: str, width: int | None, height: int | None,
           keep_masks: bool, track: tuple[str, str] | None = None) -> Iterator[Any]:
    """One shape element of ``split`` (a generator: its reject or count is yielded, the
    shape returned; None when rejected). ``track`` gives the label and group of a
    ``<track>``'s shape (which carries neither)."""
    label, group = track or (element.get("label") or "", element.get("group_id") or "0")
    label, group = label.strip(), group.strip()
    if not label:
        yield Reject("annotation", where, "missing_field",
                     f"{where} has no label; the image was written without this object", split)
        return None
    try:
        kind, box, segmentation = _GEOMETRY[element.tag](element, width, height)
    except Unusable as bad:
        yield Reject("annotation", where, bad.reason, f"{where} ({label!r}){bad}; the image "
                     "was written without this object", split)
        return None
    if kind == "rotated_box":
        yield ("cvat_rotated_boxes_enclosed", 1)
    return _Shape(where, label, box, segmentation if keep_masks else None,
                  1 if as_number(element.get("occluded")) else 0,
                  "" if group == "0" else group, kind)


def _objects(shapes: list[_Shape], where: str, split: str,
             track_ids: Sequence[int] | None = None) -> Iterator[Any]:
    """The objects of ``shapes`` (a generator: rejects and counts are yielded, the objects
    returned): each shape without group, and the shapes of each group merged into one
    (counted ``cvat_grouped_shapes_merged``), in the order of their first shapes. With
    ``track_ids`` (one per shape), each object's extras end with its first shape's."""
    members: dict[str | int, list[int]] = {}
    for index, shape in enumerate(shapes):
        members.setdefault(shape.group or index, []).append(index)
    objects = []
    for key, indices in members.items():
        group = [shapes[i] for i in indices]
        merged = _merge(group, group[0].where if isinstance(key, int)
                        else f"{where} group_id={key}", split,
                        None if track_ids is None else track_ids[indices[0]])
        if isinstance(merged, Reject):
            yield merged
        else:
            objects.append(merged)
        if len(indices) > 1:
            yield ("cvat_grouped_shapes_merged", len(indices) - 1)
    return tuple(objects)


def _merge(shapes: list[_Shape], where: str, split: str,
           track_id: int | None) -> NamedObject | Reject:
    """One object from the shapes of one group: box from its ``<box>``, else around its
    outlines; mask from its polygons, or its one ``<mask>``, or the union of their pixels
    (drawn when the mask is written, see :mod:`recordbeam.images.masks`). Its extras: its
    occluded flag, and its ``track_id`` unless None."""
    labels = sorted({s.label for s in shapes})
    if len(labels) > 1:
        return Reject("annotation", where, "group_label_conflict", (
            f"{where}: the shapes of this group have different labels ({', '.join(labels)}); "
            "give them one label or separate groups. The image was written without them"),
            split)
    boxes = [s.box for s in shapes if s.kind in ("box", "rotated_box")] or [
        s.box for s in shapes]
    box = box_around([v for x, y, w, h in boxes for v in (x, y, x + w, y + h)])
    polygons = [p for s in shapes if s.kind == "polygon" and s.segmentation
                for p in s.segmentation]
    masks = [s.segmentation for s in shapes if s.kind == "mask" and s.segmentation]
    occluded = max(s.occluded for s in shapes)
    extra = (occluded,) if track_id is None else (occluded, track_id)
    return NamedObject(where, labels[0], box, extra, union_of(polygons, masks))


# --- one XML, streamed -------------------------------------------------------------------


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

    split: str
    width: int | None  # the video's <original_size>
    height: int | None
    order: int
    track_id: int
    shape: _Shape
    xml: str


class CvatTrackShapeCoder(exports.FieldsCoder):
    """A :class:`CvatTrackShape`, its shape as a plain tuple."""

    kind = CvatTrackShape

    def fields(self, value: CvatTrackShape) -> tuple:
        return (*value[:5], tuple(value.shape), value.xml)

    def of_fields(self, fields: Sequence[Any]) -> CvatTrackShape:
        *head, shape, xml = fields
        return CvatTrackShape(*head, _Shape(*shape), xml)


beam.coders.registry.register_coder(CvatTrackShape, CvatTrackShapeCoder)


class _OpenTrack(NamedTuple):
    """A ``<track>`` being streamed: what its start tag says (its shapes carry none of it)."""

    element: Element
    order: int
    track_id: int
    label: str
    group: str
    subset: str


def stream_images(path: str, data: Any, subset: str | None, splits: Sequence[str],
                  default_split: str, keep_masks: bool, frames: bool = False,
                  tracks: bool = False) -> Iterator[Any]:
    """Stream one CVAT XML (a binary file object), plain Python: an ``ExportEntry`` per
    ``<image>``, keyed by its name, and ``Reject``s and ``(counter, n)`` counts. Each
    top-level element is dropped once read, so memory does not grow with the file.

    With ``frames`` (the images are a video's frames, see :class:`CvatMeta`), ``<image>``
    names are keyed by :func:`frame_key`, and each shape of a ``<track>`` is a ``Part``
    (a :class:`CvatTrackShape`) keyed by its frame; each is dropped once read, so a long
    track weighs no more than one of its shapes. Without it, tracks are counted and skipped.
    With ``tracks`` (a "CVAT for video" export), the objects of ``<image>``s carry the
    track id -1.
    """
    depth = images = opened = 0
    root = track = None
    frame_size: tuple[int | None, int | None] = (None, None)
    placed = partial(_placed_split, path, subset=subset, splits=splits,
                     default_split=default_split)
    for event, element in _events(path, data):
        if event == "start":
            depth += 1
            if depth == 1:
                root = element
            elif depth == 2 and element.tag == "track" and frames:
                number = as_whole(element.get("id"))
                track = _OpenTrack(element, opened, opened if number is None else number,
                                   element.get("label") or "", element.get("group_id") or "0",
                                   (element.get("subset") or "").strip())
                opened += 1
            continue
        depth -= 1
        if depth == 2 and track is not None:  # one shape of the open track, read
            yield from _track_shape(path, track, element, placed, keep_masks, frame_size)
            track.element.clear()
            continue
        if depth != 1:
            continue
        if element.tag == "image":
            yield from _image(path, element, images, placed, keep_masks, frames, tracks)
            images += 1
        elif element.tag == "track" and not frames:
            yield ("cvat_tracks_skipped", 1)
        elif element.tag == "meta":
            size = element.find(".//original_size")
            if size is not None:
                frame_size = (as_whole(size.findtext("width"), 1),
                              as_whole(size.findtext("height"), 1))
        track = None
        root.clear()


def _placed_split(path: str, where: str, declared: str, what: str, *, subset: str | None,
                  splits: Sequence[str], default_split: str) -> Iterator[Any]:
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


def _track_shape(path: str, track: _OpenTrack, element: Element, placed: Any,
                 keep_masks: bool, frame_size: tuple[int | None, int | None]) -> Iterator[Any]:
    """One child of a ``<track>``: a shape on a frame. Shapes ``outside`` the frame mark
    where the object left it: no object. A skeleton's own element tracks are read with it
    (counted as ``cvat_skeleton_skipped``)."""
    kind = element.tag
    if kind == "track" or as_number(element.get("outside")):
        return
    where = f"{path}: <track id={track.track_id}> <{kind} frame={element.get('frame')!r}>"
    if kind not in _GEOMETRY:
        yield (f"cvat_{kind}_skipped", 1)
        return
    split = yield from placed(where, track.subset, "its <track>")
    if split is None:
        return
    frame = as_whole(element.get("frame"), 0)
    if frame is None:
        yield Reject("annotation", where, "missing_field", (
            f"{where} has no frame number, so no image can be found for it; the shape was "
            "not written. Fix or re-export the file"), split)
        return
    shape = yield from _shape(element, where, split, *frame_size, keep_masks,
                              (track.label, track.group))
    if shape is not None:
        yield Part(f"frame_{frame:06d}", CvatTrackShape(
            split, *frame_size, track.order, track.track_id, shape, path))


def _image(path: str, element: Element, index: int, placed: Any, keep_masks: bool,
           frames: bool, tracks: bool) -> Iterator[Any]:
    """One ``<image>``: the rejects and counts of its shapes, and its entry, whose objects
    are its shapes grouped by ``group_id`` (with ``tracks``, of track id -1)."""
    name = (element.get("name") or "").strip()
    where = f"{path}: <image name={name!r}>" if name else f"{path}: <image>[{index}]"
    split = yield from placed(where, (element.get("subset") or "").strip(), "images")
    if split is None:
        return
    if not name:
        yield Reject("image", where, "missing_field", (
            f"{where} has no name attribute, so no image file can be found for it; fix or "
            "re-export the file"), split)
        return
    width, height = as_whole(element.get("width"), 1), as_whole(element.get("height"), 1)
    seen: Counter[str] = Counter()  # the shapes of each kind before this one
    shapes = []
    for child in element:
        kind = child.tag
        if kind not in _GEOMETRY:
            yield (f"cvat_{kind}_skipped", 1)
            continue
        shape = yield from _shape(child, f"{where} <{kind}>[{seen[kind]}]", split, width,
                                  height, keep_masks)
        seen[kind] += 1
        if shape is not None:
            shapes.append(shape)
    objects = yield from _objects(shapes, where, split, [-1] * len(shapes) if tracks else None)
    yield ExportEntry(frame_key(name) if frames else name, where, split, width, height,
                      objects, export=path)


# --- on the export plumbing ------------------------------------------------------------


class CvatExport(exports.ExportFormat):
    """CVAT's XMLs and images folder, for :class:`~recordbeam.sources.exports.ReadExport`.
    Construction reads the head of each XML (:func:`plan`). Images join by their name (a
    video's frames by :func:`frame_key`), found in ``images/`` or ``images/<subset>/``;
    with ``frames``, the shapes of the ``<track>``s are the parts of their frames."""

    name, entry, class_list = "cvat", "<image>", "the labels of <meta>"
    split_folders = duplicated_image_written = True

    def __init__(self, options: CvatOptions) -> None:
        self.options, self.image_folder = options, options.image_folder
        self._files, self.splits, self.classes, self.frames, self.tracks = plan(options)
        self.part_type = CvatTrackShape if self.frames else None

    def export_files(self) -> list[str]:
        return self._files

    def input_patterns(self) -> list[str]:
        return [self.options.xml_pattern, filesystems.everything_below(self.image_folder)]

    def parse(self, path: str, data: BinaryIO) -> Iterator[Any]:
        """:func:`stream_images`: an entry per ``<image>`` (with ``tracks``, its objects'
        track id -1), a part per shape of a track."""
        return stream_images(path, data, file_subset(path), self.splits, self.options.split,
                             self.options.include_masks, self.frames, self.tracks)

    def assemble(self, key: str, entries: list[ExportEntry],
                 parts: Iterable[CvatTrackShape]) -> Iterator[Any]:
        """A frame's ``<image>``s and, per subset, the frame its tracks' shapes make (shapes
        of tracks sharing a ``group_id`` merged as an ``<image>``'s are; with ``tracks``,
        each object's extras end with its track's id, a group's first track's): its objects
        follow those of the subset's one ``<image>``; with none or several, it is one more
        entry."""
        by_split: dict[str, list[ExportEntry]] = {}
        for entry in entries:
            by_split.setdefault(entry.split, []).append(entry)
        shapes_by_split: dict[str, list[CvatTrackShape]] = {}
        for shape in sorted(parts, key=lambda t: (t.xml, t.order, t.shape.where)):
            shapes_by_split.setdefault(shape.split, []).append(shape)
        for split, shapes in shapes_by_split.items():
            first, where = shapes[0], f"{shapes[0].xml}: frame {key}"
            objects = yield from _objects([s.shape for s in shapes], where, split,
                                          [s.track_id for s in shapes] if self.tracks else None)
            images = by_split.setdefault(split, [])
            if len(images) == 1:
                images[0] = images[0]._replace(objects=images[0].objects + objects)
            else:
                images.append(ExportEntry(key, where, split, first.width, first.height,
                                          objects, export=first.xml))
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


class ReadCvat(exports.ReadExport):
    """Read a CVAT for images (or video) 1.1 export into ``ImageRecord``s for
    :class:`CvatEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`. Construction reads the head
    of each XML (:func:`plan`): ``splits``, ``classes`` and ``tracks`` (objects carry
    track ids) are known then. ``skip_below``, the output folder when it lies inside the
    images folder, is left out of the listing.
    """

    export_format = CvatExport

    def __init__(self, options: CvatOptions, skip_below: str | None = None) -> None:
        super().__init__(options, skip_below)
        self.tracks = self._format.tracks


class CvatEncoder(exports.ExportEncoder):
    """The detection features plus ``image/object/occluded`` (CVAT's flag, 0 or 1), and
    with ``include_masks`` ``image/object/mask`` from the polygons and CVAT masks. With
    ``track_ids`` (a "CVAT for video" export), ``image/object/track_id``: the id of the
    ``<track>`` an object is a frame of (-1 for an ``<image>``'s shape)."""

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False, track_ids: bool = False) -> None:
        kinds = {feature_keys.OCCLUDED: "int64"}
        if track_ids:
            kinds[feature_keys.TRACK_ID] = "int64"
        super().__init__(checks, split, fixes, include_masks, kinds)


def prepare(request: Request) -> Conversion:
    """``convert cvat``: checks for the XMLs and the images folder and reads each XML's
    ``<meta>`` before any job; a typed --split must name a subset where it places images
    (an ``annotations.xml`` declaring several subsets), else agree with the subsets."""
    cvat = CvatOptions(request.input, request.images, request.split, request.include_masks,
                       request.allow_outside_root)
    takes = ("--input takes the CVAT export folder holding annotations.xml (or <subset>.xml "
             "files) and images/")
    require_folder(cvat.root, f"; {takes}")
    if not xml_files(cvat):
        raise UsageError(f"{cvat.xml_files_shown} matches no file; {takes}")
    require_folder(cvat.image_folder, PASS_IMAGES)
    export = CvatExport(cvat)  # reads each XML's <meta>; ReadCvat reads them again
    splits = export.splits
    # An annotations.xml declaring several subsets puts its <image>s without a subset
    # attribute in --split: there it must name one of them. Elsewhere the subsets decide.
    places_images = len(splits) > 1 and any(file_subset(p) is None for p in export.export_files())
    refuse_split(request, splits, "the XMLs name the subsets",
                 accepted=request.split in splits if places_images else None)
    warn = places_images and request.split_given
    return exports.export_conversion(
        export, ReadCvat, CvatEncoder, request.output,
        partial(_warn_if_split_placed_nothing, split=request.split) if warn else None,
        track_ids=export.tracks)


def _warn_if_split_placed_nothing(output: str, split: str) -> None:
    """Known only once the XML was read: every <image> had its own subset, so the typed
    --split placed none of them. Said, not silently ignored."""
    manifest = layout.read_manifest(output) or {}
    placed = sum(entry.get("counts", {}).get(PLACED_BY_SPLIT_OPTION, 0)
                 for entry in manifest.get("splits", {}).values())
    if manifest and not placed:
        print(f"warning: --split {split} placed no image: every <image> of the XMLs "
              "carries its own subset, which decides its split; drop --split", file=sys.stderr)
