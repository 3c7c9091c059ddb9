"""Label Studio's JSON export: an array of tasks, each naming its image in
``data.<image key>``, with its ``annotations`` (and ``predictions``) whose ``result``
items are regions and choices in percent of the image.

Plain Python over :mod:`recordbeam.sources.exports`: each task becomes one
``ExportEntry`` keyed by its image's path below ``--images`` (:func:`image_key`).
Rectangles (turned by ``rotation`` about their top-left corner, as Label Studio draws
them: the upright box around the turned one is written) and polygons are objects, in
fractions of the image; choices are classes of the whole image; other results
(keypoints, brushes, text...) are counted and skipped.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from recordbeam import filesystems
from recordbeam.dataset.class_names import INVALID_CLASS_NAME, name_problem, shown
from recordbeam.images.masks import too_many_vertices
from recordbeam.records import Reject
from recordbeam.sources import exports, input_checks
from recordbeam.sources.annotated_files import NamedObject
from recordbeam.sources.detection import box_around
from recordbeam.sources.exports import Unusable
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.text import is_text, json_number, json_points, printable

#: What --input takes, for messages.
EXPORT = ("Label Studio's JSON export (Export > JSON: an array of tasks; a COCO export goes "
          "to convert coco)")
#: An upload as Label Studio stores it: 8 hex digits of a uuid4, a dash, the name uploaded.
_UPLOADED = re.compile(r"[0-9a-f]{8}-(.+)", re.S)
_SHAPES = {"rectanglelabels": "box", "rectangle": "box", "polygonlabels": "polygon",
           "polygon": "polygon", "choices": "choices"}


@dataclass(frozen=True)
class LabelStudioOptions:
    """What ``convert labelstudio`` reads (its options; ``export`` is --input,
    ``images_dir`` --images)."""

    export: str
    images_dir: str
    split: str = "train"
    image_key: str = "image"
    annotation: str = "ground-truth"  # or latest, first
    use_predictions: bool = False
    classes_file: str | None = None
    include_masks: bool = False
    allow_outside_root: bool = False

    def input_roots(self) -> filesystems.InputRoots | None:
        return filesystems.input_roots((self.images_dir,), self.allow_outside_root)


def image_key(reference: str, roots: tuple[str, ...]) -> str:
    """A task's image reference -> its path below --images (``roots``: --images spelled
    as given and, when local, absolute, each ending in ``/``). Uploads
    (``/data/upload/<project>/<file>``) lie below the media folder, local files
    (``/data/local-files/?d=<path>``, read as Label Studio's server reads it) below the
    document root, or an absolute one below --images; bucket URLs and absolute paths
    must lie below --images itself."""
    try:
        parts = urlsplit(reference)
    except ValueError as error:  # a host part opening [ without closing it
        raise Unusable("unsupported_url", f"{reference} is no URL ({error}); name the image "
                        "by its upload, local-files or bucket URL") from None
    served = parts.scheme.lower() in ("", "http", "https")
    local = (parse_qs(parts.query).get("d") or [""])[0] if parts.path.rstrip("/") in (
        "/data", "/data/local-files") else ""
    if served and parts.path.startswith("/data/upload/"):
        key = unquote(parts.path.removeprefix("/data/"))
    elif served and local:
        key = local
    elif parts.scheme.lower() in ("http", "https"):
        raise Unusable("unsupported_url", f"{reference} is a web address: images are not "
                        "downloaded. Keep them in a folder or bucket Label Studio's storage "
                        "reads (local files, S3, GCS) and export again")
    else:
        key = reference.removeprefix("file://")
    # Label Studio's server reads ?d= below its document root, leading / dropped.
    fallback = posixpath.normpath(local).lstrip("/") if served and local else None
    absolute = key.startswith("/") or not (served or parts.scheme == "file")
    return exports.key_below(key, reference, roots, absolute, fallback)


def written_name(key: str) -> str:
    """An image's name as its user knows it: an upload's without its ``<8 hex>-``."""
    name = posixpath.basename(key)
    uploaded = _UPLOADED.fullmatch(name) if key.startswith("upload/") else None
    return uploaded.group(1) if uploaded else name


def chosen(task: dict, which: str, use_predictions: bool, counts: Counter) -> dict | None:
    """The annotation of ``task`` written (``which``: ground-truth, latest, first; never
    a cancelled one), else with ``use_predictions`` its latest prediction, else None.
    What is not written is counted."""
    found = [a for a in _list(task.get("annotations", task.get("completions")))
             if isinstance(a, dict)]
    kept = [a for a in found if not (a.get("was_cancelled") or a.get("skipped"))]
    predictions = [p for p in _list(task.get("predictions")) if isinstance(p, dict)]
    pool = [a for a in kept if a.get("ground_truth")] if which == "ground-truth" else []
    pool = pool or kept or (predictions if use_predictions else [])
    counts["labelstudio_cancelled_annotations_skipped"] += len(found) - len(kept)
    counts["labelstudio_annotations_not_written"] += max(len(kept) - 1, 0)
    predicted = bool(pool) and pool is predictions
    counts["labelstudio_predictions_not_written"] += len(predictions) - predicted
    counts["labelstudio_predictions_written"] += predicted
    field = "created_at" if which == "first" and pool is kept else "updated_at"
    order = sorted(range(len(pool)), key=lambda i: (
        str(pool[i].get(field) or pool[i].get("created_at") or ""), i))
    return pool[order[0] if field == "created_at" else order[-1]] if pool else None


def _region(result: dict) -> str | int | None:
    """The id a result shares with the other results of its region (None: none usable)."""
    region = result.get("id")
    return region if isinstance(region, str | int) and not isinstance(region, bool) else None


def _on_image(result: dict) -> bool:
    """Whether ``result`` is a region of an image: a rectangle or polygon, or a <Labels>
    tag's result with one's geometry."""
    return _SHAPES.get(result.get("type"), "") in ("box", "polygon") or bool(
        _geometry(result, "labels"))


def _image_tag(results: list[dict], image_key: str) -> str | set | None:
    """The ``to_name`` of the task's image: the one its regions name, else its choices'
    (None: none). Where they name several, the one named as the image's field (Label
    Studio's templates name ``<Image name="image" value="$image">`` alike), else the set
    of them: for regions, which image they lie on is unknown."""
    def named(on_image: bool) -> set:
        return {r["to_name"] for r in results if isinstance(r.get("to_name"), str)
                and (_on_image(r) if on_image else r.get("type") == "choices")}

    regions = named(True)
    tags = regions or named(False)
    if len(tags) < 2:
        return next(iter(tags), None)
    return image_key if image_key in tags else tags if regions else None


def _geometry(result: dict, kind: str) -> str | None:
    """The shape of a ``kind`` result holding a region's geometry in its value (a <Labels>
    tag's beside a <Rectangle> or <Polygon>, a per-region <Choices>'), else None (a text
    span's, a whole image's)."""
    value = result.get("value")
    if result.get("type") != kind or not isinstance(value, dict):
        return None
    return "polygon" if "points" in value else "box" if "x" in value else None


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _percent(value: float) -> bool:
    return -1e-6 <= value <= 100 + 1e-6  # float rounding at the edges


def parse_result(result: dict, where: str, masks: bool, counts: Counter) -> list:
    """One ``result`` item -> its objects (one per label of a region) or the image labels
    ``(name, where)`` of its choices; none for a result counted and skipped. Raises
    :class:`~recordbeam.sources.exports.Unusable` for one that cannot be used."""
    kind, value = result.get("type"), result.get("value")
    if (kind in _SHAPES or kind == "labels") and not isinstance(value, dict):
        raise Unusable("missing_field", "has no value")
    # A <Labels> tag beside a <Rectangle> or <Polygon>: its shape's; of text spans, none.
    shape = _SHAPES.get(kind) or _geometry(result, "labels")
    if shape is None:
        name = kind if isinstance(kind, str) and re.fullmatch("[a-z]+", kind) else "unknown"
        counts[f"labelstudio_{name}_results_skipped"] += 1
        return []
    names = value.get(kind)
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise Unusable("missing_field", f"holds no labels in value.{kind}")
    # A JSON \udcxx escape: no later step could carry the name (UTF-8 refuses it).
    untext = next((name for name in names if not is_text(name)), None)
    if untext is not None:
        raise Unusable(INVALID_CLASS_NAME, f"has the class name {shown(untext)}, which "
                       f"{name_problem(untext)}; a class name is written as one line of "
                       "labels.txt. Fix the name")
    if shape == "choices":
        return [(name, where) for name in names]
    geometry = _box(result, masks, counts) if shape == "box" else _polygon(value, masks)
    return [NamedObject(where, name, *geometry, True) for name in dict.fromkeys(names)]


def _box(result: dict, masks: bool, counts: Counter) -> tuple:
    value = result["value"]
    numbers = [json_number(value.get(k)) for k in ("x", "y", "width", "height")]
    turn = json_number(value.get("rotation") or 0)
    if None in numbers or turn is None:
        raise Unusable("invalid_bbox", "needs numbers in x, y, width, height, rotation")
    x, y, w, h = numbers
    if not w or not h:
        raise Unusable("degenerate_bbox", f"has no area (width {w:g}, height {h:g})")
    if not all(map(_percent, (x, y, abs(w), abs(h)))):
        raise Unusable("invalid_bbox", f"lies outside the image: x={x:g} y={y:g} width={w:g} "
                       f"height={h:g} are percentages of it, 0 to 100")
    width = height = 100.0  # unturned, any scale gives the same corners
    if turn % 360:
        width, height = (json_number(result.get(k)) for k in ("original_width", "original_height"))
        if not (width and height and width > 0 and height > 0):
            raise Unusable("missing_field", "is turned but has no original_width and "
                           "original_height, which its corners depend on")
        counts["labelstudio_rotated_boxes_enclosed"] += 1
    # Turned about the top-left corner in pixels: a turn keeps distances there only.
    cos, sin = math.cos(math.radians(turn)), math.sin(math.radians(turn))
    w, h = w / 100 * width, h / 100 * height
    outline = [v for dx, dy in ((0, 0), (w, 0), (w, h), (0, h))
               for v in (x / 100 + (dx * cos - dy * sin) / width,
                         y / 100 + (dx * sin + dy * cos) / height)]
    return box_around(outline), (), [outline] if masks and turn % 360 else None


def _polygon(value: dict, masks: bool) -> tuple:
    points = _list(value.get("points"))
    too_many = too_many_vertices(len(points))
    if too_many:
        raise Unusable("malformed_points", f"is refused: {too_many}")
    points = json_points(points)
    if points is None or len(points) < 3:
        raise Unusable("malformed_points", "needs points: 3 or more [x, y] numbers")
    if not all(_percent(v) for point in points for v in point):
        raise Unusable("malformed_points", "has points outside the image (percentages of it, "
                       "0 to 100)")
    outline = [v / 100 for point in points for v in point]
    box = box_around(outline)
    if not box[2] or not box[3]:
        raise Unusable("degenerate_bbox", "has no area")
    return box, (), [outline] if masks else None


class LabelStudioExport(exports.ExportFormat):
    """Label Studio's JSON export, for :class:`~recordbeam.sources.exports.ReadExport`."""

    name, entry = "labelstudio", "task"
    array_export, array_hint = True, f"--input takes {EXPORT}"
    #: Label Studio's media folder and document root hold other projects' files too.
    unnamed_images_written = False

    def __init__(self, options: LabelStudioOptions) -> None:
        self.options, self.classes_file = options, options.classes_file
        self.image_folder, self.splits = options.images_dir, (options.split,)
        self.roots = exports.folder_prefixes(options.images_dir)

    def export_files(self) -> list[str]:
        return [self.options.export]

    def parse_item(self, path: str, index: int, task: Any) -> Iterator[Any]:
        """One task -> its entry, or its image's reject; its objects' rejects, and
        ``(counter, n)`` counts."""
        task = task if isinstance(task, dict) else {}
        # Printable: JSON's \udcxx escapes reach here as lone surrogates, which UTF-8 refuses.
        where = printable(f"{path}: task {task['id']}" if "id" in task else f"{path}: task [{index}]")
        counts: Counter[str] = Counter()
        try:
            yield from self._task(task, where, counts)
        except Unusable as bad:
            yield Reject("image", where, bad.reason, bad.detail, self.options.split)
        yield from (+counts).items()  # those above 0

    def _task(self, task: dict, where: str, counts: Counter) -> Iterator[Any]:
        opts = self.options
        data = task.get("data")
        reference = data.get(opts.image_key) if isinstance(data, dict) else None
        if not isinstance(reference, str) or not reference.strip():
            raise Unusable("missing_field", (
                f"{where} has no data.{opts.image_key} naming its image; pass --image-key with "
                "the $name of the labeling config's <Image value=\"$name\"> (a JSON-MIN export "
                "has no data: export as JSON)"))
        try:
            key = image_key(reference.strip(), self.roots)
        except Unusable as bad:
            raise Unusable(bad.reason, printable(f"{where}: {bad.detail}")) from None
        if not is_text(key):
            raise Unusable("invalid_file_name", (
                f"{where}: {printable(reference)} names a file whose name is not valid "
                "Unicode text (a lone surrogate escape); rename the file and its task"))
        annotation = chosen(task, opts.annotation, opts.use_predictions, counts)
        # A result of no type, or of one that is no text, is one of an unknown type.
        results = [r if isinstance(r, dict) and isinstance(r.get("type", ""), str)
                   else {**(r if isinstance(r, dict) else {}), "type": None}
                   for r in _list((annotation or {}).get("result"))]
        # A <Labels> tag beside a <Rectangle> or <Polygon> gives the region a second result,
        # a per-region <Choices> one more (sharing its id, or holding its geometry).
        labelled = {_region(r) for r in results if r.get("type") == "labels"} - {None}
        regions = {_region(r) for r in results if _on_image(r)} - {None}
        tag = _image_tag(results, opts.image_key)
        if isinstance(tag, set):
            raise Unusable("several_images", (
                f"{where} has regions for several tags ({', '.join(sorted(tag))}), none "
                f"named {opts.image_key!r}, and the export does not say which one shows "
                f"data.{opts.image_key}; recordbeam writes one image per task: label one "
                "<Image> per task, or name its tag as its field"))
        found: list[Any] = []
        for number, result in enumerate(results):
            kind, region = result.get("type"), _region(result)
            if region in labelled and kind in ("rectangle", "polygon"):
                continue
            if kind == "choices" and (region in regions or _geometry(result, kind)):
                counts["labelstudio_region_choices_skipped"] += 1
            elif (kind == "choices" or _on_image(result)) and isinstance(
                    result.get("to_name"), str) and result["to_name"] != tag:
                # Another <Image>'s, a <Text>'s; or, the image's tag unknown, any.
                counts[f"labelstudio_{'choices' if kind == 'choices' else 'regions'}"
                       "_of_other_tags_skipped"] += 1
            else:
                said = printable(f"{where} result {result['id']}" if "id" in result
                                 else f"{where} result [{number}]")
                try:
                    found += parse_result(result, said, opts.include_masks, counts)
                except Unusable as bad:
                    yield Reject("annotation", said, bad.reason, f"{said} {bad.detail}; the "
                                 "image was written without it", opts.split)
        sizes = ((r.get("original_width"), r.get("original_height")) for r in results)
        size = next((s for s in sizes if all(isinstance(v, int) and v > 0 for v in s)),
                    (None, None))
        yield exports.ExportEntry(
            key, where, opts.split, *size, tuple(o for o in found if isinstance(o, NamedObject)),
            tuple(o for o in found if not isinstance(o, NamedObject)),
            None if annotation is not None else "labelstudio_tasks_not_annotated",
            printable(str(task["id"])) if "id" in task else None)

    def filename(self, key: str, path: str) -> str:
        return written_name(key)

    def missing_hint(self, key: str) -> str:
        if key.startswith("upload/"):
            return "for uploads, --images takes Label Studio's media folder (holding upload/)"
        return ("pass as --images the folder the task's path is relative to (for local "
                "files, Label Studio's LOCAL_FILES_DOCUMENT_ROOT)")


class ReadLabelStudio(exports.ReadExport):
    """Read a Label Studio JSON export into ``ImageRecord``s for
    :class:`LabelStudioEncoder` (a ``SourceRead``); a classes file is read here.
    ``ReadLabelStudio(options, skip_below=None)``: a :class:`LabelStudioOptions`, and the
    output folder when it lies inside the images folder (left out of the listing)."""

    export_format = LabelStudioExport


class LabelStudioEncoder(exports.ExportEncoder):
    """The detection features (masks with ``include_masks``), and the choices as classes
    of the whole image: ``image/class/label`` and ``image/class/text``."""

    image_labels = True


def prepare(request: Request) -> Conversion:
    """``convert labelstudio``: the export is a JSON array, the images folder and the
    classes file are there, before any job."""
    input_checks.require_file(request.input, "--input", "Label Studio export", EXPORT)
    input_checks.require_json_object(request.input, "--input", EXPORT, opening=b"[")
    images = request.images or posixpath.dirname(request.input) or "."
    input_checks.require_folder(images, " (check --images)")
    input_checks.require_classes_file(request.classes)
    options = LabelStudioOptions(
        request.input, images, request.split, request.image_key, request.annotation,
        request.use_predictions, request.classes, request.include_masks,
        request.allow_outside_root)
    return exports.export_conversion(LabelStudioExport(options), ReadLabelStudio,
                                     LabelStudioEncoder, request.output)
