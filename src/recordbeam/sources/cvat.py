"""CVAT for images 1.1 XML input: ``annotations.xml`` (or ``<subset>.xml``) + ``images/``.

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
size; each ``<image>`` becomes one record, joined on workers with the listing of the
images folder.

Shapes: ``<box>`` (pixel corners; a ``rotation`` gives the box around the turned one),
``<polygon>`` (its box, and its mask with ``--include-masks``) and ``<mask>`` (CVAT's RLE:
run lengths alternating 0s and 1s, row-major inside ``left top width height``; its box is
that of its pixels). Shapes sharing a non-zero ``group_id`` are one object: box from the
``<box>``, mask from the polygon or mask. ``<polyline>``, ``<points>``, ``<skeleton>``,
``<ellipse>``, ``<cuboid>``, ``<tag>`` and ``<track>`` are counted and skipped.
"""

from __future__ import annotations

import math
import pickle
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from xml.etree.ElementTree import Element, ParseError

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import AsSingleton, TaggedOutput
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from recordbeam import filesystems
from recordbeam.errors import DataError
from recordbeam.images.masks import mask_to_coco_rle
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.annotated_files import (
    ImageFile,
    JoinMessage,
    NamedObject,
    ParsedImage,
    SortedNames,
    build_record,
    detection_metadata,
    listed_images,
    text_metadata,
)
from recordbeam.sources.detection import DetectionEncoder
from recordbeam.sources.fingerprint import FileTermsFn

#: The per-object feature CVAT adds beside the boxes: its ``occluded`` flag.
CVAT_OBJECT_KINDS = {"image/object/occluded": "int64"}

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
class CvatOptions:
    """What to read.

    Attributes:
        root: the CVAT export folder (any Beam filesystem).
        images_dir: where the images are; None means ``ROOT/images``.
        split: the split of images no subset places (a task export without subsets).
        include_masks: keep polygons and masks for ``image/object/mask``.
    """

    root: str
    images_dir: str | None = None
    split: str = "train"
    include_masks: bool = False

    @property
    def image_folder(self) -> str:
        return self.images_dir or filesystems.join(self.root.rstrip("/"), "images")

    @property
    def xml_pattern(self) -> str:
        return filesystems.join(self.root.rstrip("/"), "*.xml")


def cvat_input_patterns(options: CvatOptions) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``)."""
    return [options.xml_pattern, filesystems.everything_below(options.image_folder)]


# --- what the launcher reads: the <meta> of each file ------------------------------------


class CvatMeta(NamedTuple):
    """The head of one CVAT XML: its labels in order and the subsets it declares."""

    labels: tuple[str, ...]
    subsets: tuple[str, ...]


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
    depth = 0
    with filesystems.open_read(path) as f:
        for event, element in _events(path, f):
            if event == "start":
                depth += 1
                if depth == 1 and element.tag != "annotations":
                    raise CvatError(f"{path}: the root element is <{element.tag}>, not "
                                    "<annotations>; is this a CVAT for images 1.1 export?")
                if depth == 2 and element.tag in ("image", "track"):
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
            elif element.tag == "meta":
                break
    return CvatMeta(tuple(labels), tuple(dict.fromkeys(subsets)))


def xml_files(options: CvatOptions) -> list[str]:
    """The CVAT XMLs of ROOT, sorted (a listing, no reads)."""
    return sorted(m.path for m in filesystems.iter_match(options.xml_pattern))


def file_subset(path: str) -> str | None:
    """The subset a file's name fixes (Datumaro's ``<subset>.xml``); None for CVAT's own
    ``annotations.xml``, whose images carry their subsets."""
    stem = posixpath.splitext(posixpath.basename(path))[0]
    return None if stem == "annotations" else stem


class CvatPlan(NamedTuple):
    """What the launcher learned: the files with their split rule, the splits, the classes."""

    files: tuple[tuple[str, str | None], ...]  # (path, the split its name fixes)
    splits: tuple[str, ...]
    classes: list[str] | None


def plan(options: CvatOptions) -> CvatPlan:
    """Read each XML's head: the splits (file names, then declared subsets, else
    ``options.split``) and the class list (the labels of ``<meta>``, which every file must
    agree on; None when no file declares labels)."""
    files = xml_files(options)
    if not files:
        raise CvatError(f"{options.xml_pattern} matches no file; --input takes the folder "
                        "holding CVAT's annotations.xml (or <subset>.xml files)")
    splits: list[str] = []
    classes: list[str] | None = None
    first = None
    planned = []
    for path in files:
        meta = read_meta(path)
        subset = file_subset(path)
        planned.append((path, subset))
        splits.extend([subset] if subset else meta.subsets)
        if meta.labels:
            if classes is None:
                classes, first = list(meta.labels), path
            elif list(meta.labels) != classes:
                raise CvatError(f"{path} declares the labels {list(meta.labels)}, but {first} "
                                f"declares {classes}; export every subset with the same labels")
    splits = list(dict.fromkeys(splits)) or [options.split]
    return CvatPlan(tuple(planned), tuple(splits), classes)


# --- one <image> -----------------------------------------------------------------------


class CvatImage(NamedTuple):
    """One ``<image>`` element, parsed on the worker that streams its file."""

    where: str  # "<file>: <image name='a.jpg'>", for messages
    name: str
    split: str
    width: int | None
    height: int | None
    objects: tuple[NamedObject, ...]
    xml: str


class CvatImageCoder(beam.coders.Coder):
    """A :class:`CvatImage` as Beam's primitive values (its objects as plain tuples), the
    join holds one per ``<image>``; pickled only when a path is not UTF-8 text."""

    _primitives = beam.coders.FastPrimitivesCoder()

    def encode(self, value: CvatImage) -> bytes:
        fields = (*value[:5], tuple(tuple(obj) for obj in value.objects), value.xml)
        try:
            return b"\0" + self._primitives.encode(fields)
        except UnicodeEncodeError:  # a file name that is not UTF-8 (surrogate escapes)
            return b"\1" + pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> CvatImage:
        if encoded[:1] == b"\1":
            fields = pickle.loads(encoded[1:])  # noqa: S301 - written by encode, in this pipeline
        else:
            fields = self._primitives.decode(encoded[1:])
        *head, objects, xml = fields
        return CvatImage(*head, tuple(NamedObject(*obj) for obj in objects), xml)

    def is_deterministic(self) -> bool:
        return False  # a value, never a key

    def to_type_hint(self) -> type:
        return CvatImage


beam.coders.registry.register_coder(CvatImage, CvatImageCoder)


class ParsedShapes(NamedTuple):
    objects: tuple[NamedObject, ...]
    rejects: tuple[Reject, ...]
    counts: dict[str, int]


def _number(text: str | None) -> float | None:
    try:
        value = float((text or "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _whole(text: str | None) -> int | None:
    value = _number(text)
    return int(value) if value is not None and value == int(value) and value > 0 else None


def parse_points(text: str | None) -> list[float] | None:
    """``"x1,y1;x2,y2;..."`` -> ``[x1, y1, x2, y2, ...]``; None when malformed."""
    flat: list[float] = []
    for pair in (text or "").strip().split(";"):
        parts = pair.split(",")
        if len(parts) != 2:
            return None
        x, y = _number(parts[0]), _number(parts[1])
        if x is None or y is None:
            return None
        flat += (x, y)
    return flat


def decode_cvat_rle(rle: str, left: int, top: int, width: int, height: int,
                    image_width: int, image_height: int) -> np.ndarray:
    """CVAT's mask RLE -> the ``(image_height, image_width)`` 0/1 mask.

    The runs alternate 0s and 1s (starting with 0s) over the ``width`` x ``height`` box
    at ``left, top``, row by row. Raises ``ValueError`` (its text says what is wrong).
    """
    try:
        runs = [int(float(v)) for v in rle.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ValueError("rle holds something that is not a number") from None
    if not runs or any(r < 0 for r in runs):
        raise ValueError("rle must be comma-separated non-negative run lengths")
    if sum(runs) != width * height:
        raise ValueError(f"the runs cover {sum(runs)} pixels but the mask is "
                         f"{width}x{height} = {width * height}")
    if left < 0 or top < 0 or left + width > image_width or top + height > image_height:
        raise ValueError(f"the mask box ({left}, {top}) {width}x{height} lies outside the "
                         f"{image_width}x{image_height} image")
    values = np.zeros(len(runs), dtype=np.uint8)
    values[1::2] = 1
    box = np.repeat(values, runs).reshape(height, width)
    mask = np.zeros((image_height, image_width), dtype=np.uint8)
    mask[top:top + height, left:left + width] = box
    return mask


class _Shape(NamedTuple):
    where: str
    label: str
    box: tuple[float, float, float, float] | None  # x, y, width, height
    segmentation: Any  # polygons [[...]] or an RLE dict; None for a box
    occluded: int
    group: str
    kind: str


def _occluded(element: Element) -> int:
    return 1 if _number(element.get("occluded")) else 0


def _shape(element: Element, where: str, width: int | None, height: int | None,
           keep_masks: bool) -> _Shape | Reject:
    label = (element.get("label") or "").strip()
    group = (element.get("group_id") or "0").strip()
    group = "" if group in ("", "0") else group
    if not label:
        return Reject("annotation", where, "missing_field",
                      f"{where} has no label; the image was written without this object")
    if element.tag == "box":
        corners = [_number(element.get(k)) for k in ("xtl", "ytl", "xbr", "ybr")]
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
        angle = _number(element.get("rotation")) or 0.0
        box = _rotated_box(xtl, ytl, xbr, ybr, angle)
        return _Shape(where, label, box, None, _occluded(element), group,
                      "rotated_box" if angle % 360 else "box")
    if element.tag == "polygon":
        points = parse_points(element.get("points"))
        if points is None or len(points) < 6:
            return Reject("annotation", where, "malformed_points", (
                f"{where} ({label!r}): points must be at least 3 'x,y' pairs separated by "
                f"';' (got {(element.get('points') or '')[:60]!r}); the image was written "
                "without this object"))
        xs, ys = points[0::2], points[1::2]
        box = (min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys))
        return _Shape(where, label, box, [points] if keep_masks else None, _occluded(element),
                      group, "polygon")
    left, top = _number(element.get("left")), _number(element.get("top"))
    mask_width, mask_height = _whole(element.get("width")), _whole(element.get("height"))
    try:
        if width is None or height is None:
            raise ValueError("its <image> has no width and height, which place the mask")
        if None in (left, top, mask_width, mask_height):
            raise ValueError("left, top, width and height must be numbers")
        mask = decode_cvat_rle(element.get("rle") or "", int(left), int(top), mask_width,
                               mask_height, width, height)
    except ValueError as bad:
        return Reject("annotation", where, "malformed_rle", (
            f"{where} ({label!r}): {bad}; the image was written without this object"))
    rows, columns = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return Reject("annotation", where, "degenerate_bbox", (
            f"{where} ({label!r}): the mask has no pixel set; the image was written without "
            "this object"))
    box = (float(columns[0]), float(rows[0]), float(columns[-1] + 1 - columns[0]),
           float(rows[-1] + 1 - rows[0]))
    return _Shape(where, label, box, mask_to_coco_rle(mask) if keep_masks else None,
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
    """Polygons and masks of one group as one RLE (the union of their pixels)."""
    from recordbeam.images.masks import segmentation_to_mask

    height, width = masks[0]["size"]
    union = np.zeros((height, width), dtype=np.uint8)
    for part in [polygons] if polygons else []:
        union |= segmentation_to_mask(part, width, height)
    for mask in masks:
        union |= segmentation_to_mask(mask, width, height)
    return mask_to_coco_rle(union)


def parse_image(element: Element, where: str, keep_masks: bool) -> ParsedShapes:
    """The objects of one ``<image>``: its shapes, grouped by ``group_id``."""
    width, height = _whole(element.get("width")), _whole(element.get("height"))
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
    ordered: list[tuple[int, NamedObject | Reject]] = [
        (order, _merge([shape], shape.where)) for order, shape in singles]
    for group, members in groups.items():
        where_group = f"{where} group_id={group}"
        ordered.append((members[0][0], _merge([s for _o, s in members], where_group)))
        if len(members) > 1:
            counts["cvat_grouped_shapes_merged"] = counts.get(
                "cvat_grouped_shapes_merged", 0) + len(members) - 1
    objects = []
    for _order, merged in sorted(ordered, key=lambda item: item[0]):
        (rejects if isinstance(merged, Reject) else objects).append(merged)
    return ParsedShapes(tuple(objects), tuple(rejects), counts)


def stream_images(path: str, data: Any, subset: str | None, splits: Sequence[str],
                  default_split: str, keep_masks: bool) -> Iterator[Any]:
    """Stream one CVAT XML (a binary file object): a :class:`CvatImage` per ``<image>``,
    and tagged ``rejects`` and ``counts``. Each top-level element is dropped once read, so
    memory does not grow with the file."""
    depth = 0
    root = None
    count = 0
    for event, element in _events(path, data):
        if event == "start":
            depth += 1
            if depth == 1:
                root = element
            continue
        depth -= 1
        if depth != 1:
            continue
        if element.tag == "image":
            yield from _image(path, element, count, subset, splits, default_split, keep_masks)
            count += 1
        elif element.tag == "track":
            yield TaggedOutput("counts", ("cvat_tracks_skipped", 1))
        root.clear()


def _image(path: str, element: Element, index: int, subset: str | None,
           splits: Sequence[str], default_split: str, keep_masks: bool) -> Iterator[Any]:
    name = (element.get("name") or "").strip()
    where = f"{path}: <image name={name!r}>" if name else f"{path}: <image>[{index}]"
    split = subset or (element.get("subset") or "").strip()
    if not split:
        split = splits[0] if len(splits) == 1 else default_split
        if len(splits) > 1:  # placed by --split: the command says when none was
            yield TaggedOutput("counts", (PLACED_BY_SPLIT_OPTION, 1))
    if split not in splits:
        yield TaggedOutput("rejects", Reject("image", where, "undeclared_subset", (
            f"{where} is in subset {split!r}, which the <meta> of {path} does not declare "
            f"(it declares {', '.join(splits)}); re-export the project, or pass --split with "
            "one of those names for images without a subset")))
        return
    if not name:
        yield TaggedOutput("rejects", Reject("image", where, "missing_field", (
            f"{where} has no name attribute, so no image file can be found for it; fix or "
            "re-export the file"), split))
        return
    parsed = parse_image(element, where, keep_masks)
    for reject in parsed.rejects:
        yield TaggedOutput("rejects", Reject(reject.kind, reject.source, reject.reason,
                                             reject.detail, split))
    for counter, n in parsed.counts.items():
        yield TaggedOutput("counts", (counter, n))
    yield name, CvatImage(where, name, split, _whole(element.get("width")),
                          _whole(element.get("height")), parsed.objects, path)


# --- the pipeline ----------------------------------------------------------------------


class _StreamXml(beam.DoFn):
    """One XML file -> (image name, :class:`CvatImage`) per ``<image>``, on this worker."""

    def __init__(self, options: CvatOptions, splits: Sequence[str]) -> None:
        self._options = options
        self._splits = tuple(splits)

    def process(self, task: tuple[str, str | None]):
        path, subset = task
        for meta in filesystems.iter_match(path):
            yield TaggedOutput("inputs", text_metadata(meta))
        with filesystems.open_read(path) as f:
            yield from stream_images(path, f, subset, self._splits, self._options.split,
                                     self._options.include_masks)


class _ListImages(beam.DoFn):
    """The images folder -> (name, :class:`ImageFile`): the name is the path below the
    folder, less a first folder named like a split (``images/<subset>/``), which becomes
    the file's split."""

    def __init__(self, splits: Sequence[str], skip_prefix: str | None) -> None:
        self._splits = frozenset(splits)
        self._skip = skip_prefix

    def process(self, folder: str):
        for meta in listed_images(folder, self._skip, "cvat_non_image_files_skipped"):
            if isinstance(meta, TaggedOutput):
                yield meta
                continue
            name = filesystems.relative_name(folder, meta.path)
            first, _, rest = name.partition("/")
            split = first if rest and first in self._splits else ""
            yield (rest if split else name), ImageFile(meta.path, meta.size_in_bytes, split)


class _Pair(beam.DoFn):
    """(name, {elements, files}) -> a :class:`ParsedImage` per element that finds its
    file (the one in its subset's folder, else the one in the images folder itself);
    files no element names are written with no objects, with a warning."""

    def __init__(self, splits: Sequence[str], image_folder: str) -> None:
        self._splits = tuple(splits)
        self._image_folder = image_folder

    def process(self, element):
        name, grouped = element
        elements = sorted(grouped["elements"], key=lambda e: (e.split, e.where))
        files = {f.split: f for f in sorted(grouped["files"], key=lambda f: f.path)}
        used: set[str] = set()
        by_split: dict[str, list[CvatImage]] = {}
        for image in elements:
            by_split.setdefault(image.split, []).append(image)
        for split, images in by_split.items():
            if len(images) > 1:
                yield TaggedOutput("rejects", Reject("image", images[0].where,
                                                     "duplicate_file_name", (
                    f"{len(images)} <image> elements of subset {split!r} are named {name!r} "
                    f"({images[0].xml}); keep one. None of them was written"), split))
                continue
            image = images[0]
            file = files.get(split) or files.get("")
            if file is None:
                yield TaggedOutput("rejects", Reject("image", image.where, "missing", (
                    f"{image.where} has no image: no {name} in {self._image_folder} (nor in "
                    f"its {split}/ folder); pass --images if the images are elsewhere"), split))
                continue
            used.add(file.split)
            yield self._parsed(name, split, file, image)
        for folder_split, file in sorted(files.items()):
            if folder_split in used:
                continue
            split = folder_split or (self._splits[0] if len(self._splits) == 1 else None)
            if split is None:
                yield TaggedOutput("rejects", Reject("image", file.path, "no_annotation_element", (
                    f"no <image name={name!r}> in the XMLs, and with several subsets "
                    f"({', '.join(self._splits)}) its split is unknown; not written. Add it to "
                    "an XML, or move it to images/<subset>/")))
                continue
            yield TaggedOutput("rejects", Reject("warning", file.path, "no_annotation_element", (
                f"no <image name={name!r}> in the XMLs; written with no objects (annotate it "
                "in CVAT, or remove the image if it should not be in the dataset)"), split))
            yield self._parsed(name, split, file, None)

    @staticmethod
    def _parsed(name: str, split: str, file: ImageFile, image: CvatImage | None) -> ParsedImage:
        # The name as CVAT shows it (with its extension: a.jpg and a.png may both be there).
        return ParsedImage(name, split, file.path, file.size, posixpath.basename(file.path),
                           image.width if image else None, image.height if image else None,
                           image.objects if image else (), image.xml if image else None)


class ReadCvat(beam.PTransform):
    """Read a CVAT for images 1.1 export into ``ImageRecord``s for :class:`CvatEncoder`.

    Returns a dict of PCollections, as every source (see :mod:`recordbeam.sources`):
    ``records``, ``rejects``, ``counts``, ``metadata`` (label map, input terms) and
    ``sizes``. Construction reads the head of each XML (:func:`plan`): ``splits`` and
    ``classes`` are known then. ``skip_below``, the output folder when it lies inside the
    images folder, is left out of the listing.
    """

    def __init__(self, options: CvatOptions, skip_below: str | None = None) -> None:
        super().__init__()
        self._options = options
        self._skip_prefix = (filesystems.prefix_below(options.image_folder, skip_below)
                             if skip_below else None)
        self._plan = plan(options)
        self.splits = self._plan.splits
        self.classes = self._plan.classes

    def expand(self, pbegin):
        options, splits = self._options, self.splits
        streamed = (
            pbegin
            | "XmlFiles" >> beam.Create(list(self._plan.files))
            | "StreamXml" >> beam.ParDo(_StreamXml(options, splits))
            .with_output_types(tuple[str, CvatImage])
            .with_outputs("rejects", "counts", "inputs", main="elements")
        )  # (image name, CvatImage)
        listed = (
            pbegin
            | "ImageFolder" >> beam.Create([options.image_folder])
            | "ListImages" >> beam.ParDo(_ListImages(splits, self._skip_prefix))
            .with_output_types(tuple[str, JoinMessage])
            .with_outputs("rejects", "counts", "inputs", main="files")
        )  # (image name, ImageFile)
        paired = (
            {"elements": streamed.elements, "files": listed.files}
            | "JoinByName" >> beam.CoGroupByKey()  # (name, {elements: [...], files: [...]})
            | "Pair" >> beam.ParDo(_Pair(splits, options.image_folder))
            .with_outputs("rejects", main="parsed")
        )
        if self.classes is not None:
            classes = pbegin | "ClassList" >> beam.Create([self.classes])
        else:
            classes = (
                paired.parsed
                | "ClassNames" >> beam.Map(lambda image: [obj.name for obj in image.objects])
                | "SortedClasses" >> beam.CombineGlobally(SortedNames())
            )
        built = paired.parsed | "BuildRecords" >> beam.FlatMap(
            build_record, AsSingleton(classes), "the labels of <meta>",
        ).with_output_types(ImageRecord).with_outputs("rejects", "counts", main="records")
        inputs = (streamed.inputs, listed.inputs) | "Inputs" >> beam.Flatten()
        terms = inputs | "InputTerms" >> beam.CombineGlobally(FileTermsFn())
        metadata = pbegin | "Metadata" >> beam.Create([None]) | "LabelMap" >> beam.Map(
            lambda _, found, t: detection_metadata(found, t),
            AsSingleton(classes), AsSingleton(terms))
        rejects = ((streamed.rejects, listed.rejects, paired.rejects, built.rejects)
                   | "Rejects" >> beam.Flatten())
        counts = (streamed.counts, listed.counts, built.counts) | "Counts" >> beam.Flatten()
        sizes = paired.parsed | "PlannedSizes" >> beam.Map(
            lambda image: (image.split, image.size))
        return {"records": built.records, "rejects": rejects, "counts": counts,
                "metadata": metadata, "sizes": sizes}


class CvatEncoder(DetectionEncoder):
    """The detection features plus ``image/object/occluded`` (CVAT's flag, 0 or 1), and
    with ``include_masks`` ``image/object/mask`` from the polygons and CVAT masks."""

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False) -> None:
        super().__init__(checks, split, fixes, extra_kinds=CVAT_OBJECT_KINDS,
                         include_masks=include_masks)

    def object_counts(self, columns) -> dict[str, int]:
        """Images written with no object, counted as they are written."""
        return {} if columns["image/object/class/label"] else {"images_without_objects": 1}
