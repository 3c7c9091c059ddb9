"""COCO input: an instances (detection), person keypoints or LVIS JSON, and/or a
captions JSON, + a folder of images.

Everything is read inside the pipeline, on workers: the job graph holds two paths, not
the dataset, whatever its size. The annotation file is streamed with ``ijson`` one
section at a time (the annotations pass beside the images and categories passes), so a
448 MB train2017 file never sits in memory.

Stages: one stage streams the three sections (and the captions file's annotations) and
lists the image files (two groups of tasks on the workers) -> join files and image
entries by file name -> join images, annotations, captions and LVIS category lists by
image id -> ``ImageRecord``s for the sink.
"""

from __future__ import annotations

import gc
import io
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple

import apache_beam as beam
import ijson
import numpy as np
from apache_beam.io.filesystem import FileMetadata
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsList, TaggedOutput

from recordbeam import filesystems
from recordbeam.dataset.class_names import (
    DUPLICATE_CLASS_NAME,
    check_class_list,
    name_problem,
    repeated_name_warnings,
    shown,
)
from recordbeam.errors import DataError
from recordbeam.images.boxes import InvalidBox
from recordbeam.images.checks import ImageInfo
from recordbeam.images.masks import (
    InvalidMask,
    mask_png,
    segmentation_to_mask,
    too_many_vertices,
)
from recordbeam.images.transcode import orient_point
from recordbeam.records import (
    COUNTER_NAMESPACE,
    LOST_WITH_IMAGE,
    ImageRecord,
    Reject,
)
from recordbeam.sources.coco_records import (
    Annotation,
    AnnotationBatch,
    CaptionBatch,
    Category,
    ImageCategoryLists,
    ImageEntry,
    ImageNotLocated,
    JoinKey,
    JoinMessage,
    Keypoints,
    ListedFile,
    LocatedImage,
    NamedKeypoints,
    ObjectLabel,
    new_record,
    pack_annotations,
    unpack_annotations,
    unpack_objects,
)
from recordbeam.sources.detection import DetectionEncoder, Geometry
from recordbeam.sources.fingerprint import FileTermsFn, inputs_entry
from recordbeam.sources.json_depth import DepthLimitedReader, JsonTooDeep
from recordbeam.sources.listing import is_skipped, skipped_prefix
from recordbeam.sources.record_coder import ImageRecordCoder  # noqa: F401 - registers it
from recordbeam.write.image_encoder import warn_size_mismatch

SECTIONS = ("images", "annotations", "categories")
#: The task of :class:`_ReadInputs` that lists the image files (the others read a section).
LIST_TASK = "list"
#: The task of :class:`_ReadInputs` that reads the captions file's annotations.
CAPTIONS_TASK = "captions"

OBJECT_KINDS = {
    "image/object/bbox/xmin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64",
    "image/object/class/text": "bytes",
    "image/object/is_crowd": "int64",
    "image/object/area": "float",
}
#: Per-object keypoint features as the Object Detection API's create_coco_tf_record.py
#: writes them: ``num`` one per object; the others flat, one value per keypoint name of
#: the object's category (the manifest's ``keypoints`` names split them again).
KEYPOINT_NUM_KIND = {"image/object/keypoint/num": "int64"}
KEYPOINT_FLAT_KINDS = {
    "image/object/keypoint/x": "float",
    "image/object/keypoint/y": "float",
    "image/object/keypoint/visibility": "int64",
    "image/object/keypoint/text": "bytes",
}
CAPTION_FEATURE = "image/caption"
#: LVIS's image-level category lists, named as TensorFlow Datasets' ``lvis`` builder names
#: them (under ``image/``, as they describe the image): the written labels of the
#: categories.
LVIS_LIST_FEATURES = {"neg_category_ids": "image/neg_category_ids",
                      "not_exhaustive_category_ids": "image/not_exhaustive_category_ids"}
#: Image-level labels: annotations with a ``category_id`` and no ``bbox`` (COCO's "labels"
#: files, as Datumaro writes them), written as Open Images' are.
IMAGE_LABEL_KINDS = {"image/class/label": "int64", "image/class/text": "bytes"}
#: The record label holding them: ``(annotation id, label, name)`` in annotation-id order.
IMAGE_LABELS = "image_labels"
#: The per-object features: one value per object, so lists even when an image holds one
#: (and the image-level lists, which may hold one value or none).
OBJECT_FEATURES = frozenset({*OBJECT_KINDS, "image/object/mask", *KEYPOINT_NUM_KIND,
                             *KEYPOINT_FLAT_KINDS, CAPTION_FEATURE,
                             *LVIS_LIST_FEATURES.values(), *IMAGE_LABEL_KINDS})
#: Counts of what the annotation file holds and the run does not write (the summary shows
#: each once, as a row).
KEYPOINTS_NOT_WRITTEN = "annotations_with_keypoints_not_written"
#: Objects written with label 0 (a category id 0, without --contiguous-labels).
LABEL_0_OBJECTS = "objects_with_label_0"
DENSEPOSE_NOT_WRITTEN = "annotations_with_densepose_not_written"


class CocoFormatError(DataError, ValueError):
    """The annotation file cannot be used at all (malformed JSON, no images...)."""


@dataclass(frozen=True)
class CocoOptions:
    """What to read and how to label it.

    Attributes:
        images_dir: folder holding the images named by ``file_name`` (any Beam filesystem).
        annotations: path of the COCO instances (or person keypoints, or LVIS) JSON; None
            with ``captions`` alone, whose images are then the captions file's.
        split: split name of the output.
        contiguous_labels: write labels 1..K in category-id order instead of COCO's ids.
        allow_outside_root: read files outside ``images_dir`` too: ``file_name``s with
            ``..`` or absolute paths, and symbolic links leading out of the folder. Off by
            default so a crafted annotation file cannot make the job read arbitrary files.
        include_masks: also write ``image/object/mask`` (one 0/1 PNG per object) from the
            polygons or RLEs in ``segmentation``; segmentations are dropped otherwise.
        include_keypoints: also write ``image/object/keypoint/*`` from the annotations'
            ``keypoints`` and the categories' keypoint names; without it, annotations that
            hold keypoints are counted as not written.
        captions: path of a COCO captions JSON (``captions_*.json``) whose captions are
            joined by image id into ``image/caption``.
    """

    images_dir: str
    annotations: str | None
    split: str = "train"
    contiguous_labels: bool = False
    allow_outside_root: bool = False
    include_masks: bool = False
    include_keypoints: bool = False
    captions: str | None = None

    def input_roots(self) -> filesystems.InputRoots | None:
        """The folders this run reads (see :class:`recordbeam.filesystems.InputRoots`)."""
        return filesystems.input_roots((self.images_dir,), self.allow_outside_root)

    def __post_init__(self) -> None:
        if not self.annotations and not self.captions:
            raise ValueError("CocoOptions needs an annotations file, a captions file or both")

    @property
    def images_file(self) -> str:
        """The file whose ``images`` and ``categories`` are read: the annotations, else
        the captions."""
        return self.annotations or self.captions  # type: ignore[return-value]


class _NeedsPythonBackend(Exception):
    """The C parser met valid JSON it cannot represent; the Python parser can."""


def stream_section(path: str, section: str, stop_early: bool = False) -> Iterator[Any]:
    """Yield the items of one top-level list of a COCO file, streaming.

    ijson's fast C backend refuses integers beyond 64 bits and ``\\udcxx`` escapes (how
    Python's ``json`` writes file names that are not UTF-8). Both are valid JSON, so on
    them the section is read again with ijson's pure Python backend, skipping the items
    already yielded: one odd value costs a slower read, and becomes a reject downstream
    instead of failing the run.

    ``stop_early`` stops reading where the section's list ends (see
    :func:`_events_to_section_end`); the file's syntax after that point is left to the
    pass that reads the whole file (the annotations').
    """
    done = 0
    try:
        for item in _section_items(path, section, ijson, True, stop_early):
            yield item
            done += 1
    except _NeedsPythonBackend:
        python = ijson.get_backend("python")
        items = _section_items(path, section, python, False, stop_early)
        for position, item in enumerate(items):
            if position >= done:
                yield item


_BOM = b"\xef\xbb\xbf"


def _open_json(path: str) -> DepthLimitedReader:
    """The file, open for ijson after the UTF-8 byte order mark some Windows tools write
    (JSON readers may ignore it, RFC 8259; ijson's C parser refuses it), its nesting
    bounded (see :mod:`recordbeam.sources.json_depth`)."""
    f = filesystems.open_read(path)
    if f.read(len(_BOM)) != _BOM:
        f.seek(0)
    return DepthLimitedReader(f)


def _section_items(path: str, section: str, backend: Any, fallback: bool,
                   stop_early: bool) -> Iterator[Any]:
    f = _open_json(path)
    try:
        if stop_early:
            try:
                yield from backend.items(_events_to_section_end(f, section, backend),
                                         f"{section}.item")
                return
            except _SectionNotNearStart:  # nothing was yielded: read the whole file
                f.close()
                f = _open_json(path)
        yield from backend.items(f, f"{section}.item", use_float=True)
    except JsonTooDeep as error:
        raise CocoFormatError(f"{path}: {error}, while reading '{section}'; a COCO file nests "
                              "5 levels deep. Fix or re-export the annotation file.") from None
    except (ijson.JSONError, UnicodeDecodeError) as error:
        if fallback and (
            isinstance(error, UnicodeDecodeError) or "integer overflow" in str(error)
        ):
            raise _NeedsPythonBackend() from None
        position = _tell(f)
        raise CocoFormatError(
            f"{path}: malformed JSON while reading '{section}' (in the 64 KiB before byte "
            f"{position}): {error}. Fix or re-export the annotation file."
        ) from None
    finally:
        f.close()


#: How many parser events :func:`_events_to_section_end` reads looking for the start of its
#: section before it gives up (about 0.1 s; COCO's own files start with their images).
SECTION_SEARCH_EVENTS = 1_000_000


class _SectionNotNearStart(Exception):
    """The section did not begin within :data:`SECTION_SEARCH_EVENTS` events."""


def _events_to_section_end(f: Any, section: str, backend: Any) -> Iterator[tuple]:
    """The parser's events up to the end of the top-level list ``section``.

    A JSON object's members do not interleave, so nothing of the section comes after
    that: in COCO's own files the images list comes first, and reading it this way takes
    a tenth of the time of a pass over the whole file (0.07 against 0.5 s at 20k images).
    Every event passes through Python here, so when the section does not begin near
    the start of the file this gives up (:class:`_SectionNotNearStart`) before any item.
    """
    started = False
    for count, event in enumerate(backend.parse(f, use_float=True)):
        yield event
        if event[0] == section:
            if event[1] == "end_array":
                return
            started = True
        elif not started and count >= SECTION_SEARCH_EVENTS:
            raise _SectionNotNearStart()


#: How much of the file's end :func:`section_at_end` keeps, looking for its section there
#: (COCO's 80 categories take 8 KB, LVIS's 1203 about 0.5 MB).
TAIL_BYTES = 4 << 20
#: The size of the reads of :func:`section_at_end`.
READ_BYTES = 1 << 20


def section_at_end(path: str, section: str) -> list[Any] | None:
    """The items of the top-level list ``section``, parsed from the end of the file
    alone when that is certain to give what a pass over the whole file gives; else None.

    COCO's categories come last, after the annotations: parsing the whole file for them
    costs as much as the annotations pass (0.85 s of CPU at 20k images). Here the file
    is read, not parsed: the bytes ``"categories"`` are counted and the last
    :data:`TAIL_BYTES` kept. When the key appears once in the whole file, inside that
    tail and not after a backslash, and ``{`` followed by the tail from the key on is a
    whole JSON object, then the key is the top-level one (only a member of the
    outermost object is closed by the file's last ``}``), and that object's ``section``
    list is the file's. Anything else (the key also named elsewhere, early in a large
    file, spelled with escapes) returns None and the caller parses the whole file.
    Whether the bytes before the key are valid JSON is left to the annotations pass,
    which parses all of them.
    """
    key = f'"{section}"'.encode()
    chunks: list[bytes] = []
    kept = mentions = 0
    overlap = b""  # a key split between two reads is counted once, in the later one
    f = filesystems.open_read(path)
    try:
        while chunk := f.read(READ_BYTES):
            mentions += (overlap + chunk).count(key)
            if mentions > 1:
                return None
            overlap = chunk[-(len(key) - 1):]
            chunks.append(chunk)
            kept += len(chunk)
            while kept - len(chunks[0]) >= TAIL_BYTES:
                kept -= len(chunks.pop(0))
    finally:
        f.close()
    tail = b"".join(chunks)
    start = tail.find(key)
    if mentions != 1 or start < 1 or tail[start - 1:start] == b"\\":
        return None
    try:
        return list(ijson.items(DepthLimitedReader(io.BytesIO(b"{" + tail[start:])),
                                f"{section}.item", use_float=True))
    except (ijson.JSONError, ValueError):  # not a whole object, or an odd value: parse all
        return None


def _tell(f: Any) -> str:
    try:
        return str(f.tell())
    except (OSError, AttributeError, ValueError):
        return "?"


def _is_id(value: Any) -> bool:
    if type(value) is int:  # the common case, checked once per annotation id field
        return True
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and value != "" and is_text(value)
    )


def is_text(value: str) -> bool:
    """False for strings holding lone surrogates (JSON ``\\udcff`` escapes, or file names
    that are not UTF-8 on disk): they cannot be written as UTF-8 anywhere downstream."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(value: str) -> str:
    """``value`` with lone surrogates shown as ``\\udcff``, safe in UTF-8 reports."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # integers beyond a double's range
        return None


def _id_order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int) else (1, str(value))


def _is_absolute(name: str) -> bool:
    return name.startswith(("/", "\\")) or "://" in name or (len(name) > 1 and name[1] == ":")


#: Annotations are grouped by image id in a bounded buffer before they are emitted:
#: one element per image instead of one per box cuts the shuffle's element count by the
#: average boxes per image (7 in COCO) while the worker's memory stays bounded.
ANNOTATION_BUFFER = 20_000


class _ReadInputs(beam.DoFn):
    """One task of reading the inputs: stream one section of the annotation file (and
    check each item's required fields), or list the image files.

    Image entries and listed files leave on the main output keyed by file name
    (:class:`ImageEntry`, :class:`ListedFile`), so the join by name groups them with no
    Flatten stage between. Annotation batches ride the same output, keyed by image id
    (``JoinKey(..., by_image_id=True)``): the join by name hands them on beside the files
    it located, so the join by image id reads one stage's output. The local runner turns every Flatten of two stages' outputs into
    a stage of its own that only copies the data (0.5 s at 20k images, 1.2 s at 100k).
    """

    def __init__(self, options: CocoOptions, skipped_prefix: str | None = None) -> None:
        self._options = options
        self._skipped_prefix = skipped_prefix  # the output folder, when inside the images

    def process(self, task: str):
        """``task``: :data:`LIST_TASK`, or the name of the section to read."""
        if task == LIST_TASK:
            yield from self._list_files()
            return
        if task == CAPTIONS_TASK:
            yield from self._read_captions(self._options.captions)
            return
        section = task
        # The parser builds millions of small objects that stay alive a while (annotations
        # are buffered per image); Python's cycle collector would walk them again and again
        # though none of them forms a cycle. Paused while one section is read: 20-40% of
        # the section's time in our measurements.
        paused = gc.isenabled()
        gc.disable()
        try:
            yield from self._read_section(self._options.images_file, section,
                                          stop_early=section == "images")
        finally:
            if paused:
                gc.enable()

    def _list_files(self):
        opts = self._options
        skipped = self._skipped_prefix
        for meta in filesystems.list_files(opts.images_dir):
            if is_skipped(meta.path, skipped):
                continue
            name, file = _file_key(opts.images_dir, meta.path, meta.size_in_bytes,
                                   float(meta.last_updated_in_seconds or 0.0))
            yield JoinKey(name), file
            yield TaggedOutput("inputs", _text_metadata(meta))
        for path in (opts.annotations, opts.captions):
            meta = filesystems.file_metadata(path) if path else None
            if meta is not None:
                yield TaggedOutput("inputs", _text_metadata(meta))

    def _read_captions(self, path: str):
        """The captions file's ``annotations``, one :class:`CaptionBatch` per image id
        (batched like the annotations), for the join by image id."""
        buffered: dict[Any, list[tuple[Any, str]]] = {}
        position = -1
        for position, item in enumerate(stream_section(path, "annotations")):
            where = _where(path, "annotations", position)
            caption = item.get("caption") if isinstance(item, dict) else None
            if not (isinstance(item, dict) and _is_id(item.get("id"))
                    and _is_id(item.get("image_id")) and isinstance(caption, str)
                    and is_text(caption)):
                yield TaggedOutput("rejects", _bad_item(
                    "annotations", where, "needs an 'id', an 'image_id' (number or string) "
                    "and a 'caption' (text)"))
                continue
            buffered.setdefault(item["image_id"], []).append((item["id"], caption))
            if len(buffered) >= ANNOTATION_BUFFER:
                yield from _flush_captions(buffered)
        yield from _flush_captions(buffered)
        if position < 0:  # no image would get a caption: the wrong file, most likely
            raise CocoFormatError(
                f"{path} holds no captions (its 'annotations' list is missing or empty); "
                "--captions takes a COCO captions file such as captions_train2017.json")

    def _read_section(self, path: str, section: str, stop_early: bool = False):
        if section == "annotations":
            yield from self._read_annotations(path)
            return
        items = section_at_end(path, section) if section == "categories" else None
        if items is None:
            items = stream_section(path, section, stop_early)
        count = 0
        for position, item in enumerate(items):
            count += 1
            if not isinstance(item, dict):
                yield TaggedOutput("rejects", _bad_item(
                    section, _where(path, section, position), "is not a JSON object"))
            elif section == "images":
                yield from _check_image(
                    item, _where(path, section, position), self._options.allow_outside_root)
            else:
                yield TaggedOutput("categories", _check_category(
                    item, _where(path, section, position), self._options.include_keypoints))
        if count == 0:
            kind = _section_value_kind(path, section)
            if kind not in (None, "start_array"):
                raise CocoFormatError(
                    f"{path}: '{section}' is {_JSON_KINDS.get(kind, kind)}, not a list; a COCO "
                    "instances file has a list of objects there. Fix or re-export the "
                    "annotation file.")
            if section == "categories":  # an image info file (image_info_test2017.json)
                return
            raise CocoFormatError(
                f"{path} has no '{section}' (the list is missing or empty); is it a COCO "
                "instances file?"
            )

    def _read_annotations(self, path: str):
        """The long list (860k items in train2017): this loop runs once per annotation,
        so what it calls per item is bound to local names and the common case (integer
        ids, as in every COCO file) takes the short paths."""
        buffered: dict[Any, list[Annotation]] = {}
        pending = 0
        include_masks = self._options.include_masks
        include_keypoints = self._options.include_keypoints
        keypoints_not_written = densepose = 0
        annotation_ids = _IdTally()
        count_id = annotation_ids.add
        check = _check_annotation
        position = -1
        for position, item in enumerate(stream_section(path, "annotations")):
            if not isinstance(item, dict):
                yield TaggedOutput("rejects", _bad_item(
                    "annotations", _where(path, "annotations", position),
                    "is not a JSON object"))
                continue
            checked = check(item, path, position, include_masks, include_keypoints)
            if "keypoints" in item and not include_keypoints:
                keypoints_not_written += 1
            if "dp_masks" in item or "dp_I" in item:
                densepose += 1
            if type(checked) is Reject:
                yield TaggedOutput("rejects", checked)
                continue
            image_id, annotation = checked
            ann_id = annotation[0]
            count_id(ann_id)
            batch = buffered.get(image_id)
            if batch is None:
                buffered[image_id] = [annotation]
            else:
                batch.append(annotation)
            pending += 1
            if pending >= ANNOTATION_BUFFER:
                yield from _flush_annotations(buffered)
                pending = 0
        yield from _flush_annotations(buffered)
        for name, count_of in ((KEYPOINTS_NOT_WRITTEN, keypoints_not_written),
                               (DENSEPOSE_NOT_WRITTEN, densepose)):
            if count_of:
                yield TaggedOutput("counts", (name, count_of))
        for duplicate in annotation_ids.repeated():
            yield TaggedOutput("duplicate_annotation_ids", duplicate)
        if position < 0:  # no annotations: fine when there are none, not when they are no list
            kind = _section_value_kind(path, "annotations")
            if kind not in (None, "start_array"):
                raise CocoFormatError(
                    f"{path}: 'annotations' is {_JSON_KINDS.get(kind, kind)}, not a list; a "
                    "COCO instances file has a list of objects there (or no 'annotations' at "
                    "all). Fix or re-export the annotation file."
                )


def _tasks_of_group(group: tuple[int, Iterable[str]]) -> Iterable[str]:
    _worker_group, tasks = group
    return tasks


def _where(path: str, section: str, position: int) -> str:
    return f"{path}: {section}[{position}]"


def join_key(image_id: Any) -> str:
    """The key images and annotations meet under: the id as ``image/source_id`` writes it.
    Ids that read the same as text (``1`` and ``"1"``) meet, so the join can tell a
    duplicate id or an ``image_id`` of the wrong type from an unknown image."""
    return str(image_id)


def _flush_annotations(buffered: dict[Any, list[Annotation]]):
    for image_id, batch in buffered.items():
        yield JoinKey(join_key(image_id), by_image_id=True), AnnotationBatch(
            image_id, pack_annotations(batch))
    buffered.clear()


def _flush_captions(buffered: dict[Any, list[tuple[Any, str]]]):
    for image_id, captions in buffered.items():
        yield JoinKey(join_key(image_id), by_image_id=True), CaptionBatch(
            image_id, tuple(captions))
    buffered.clear()


class _IdTally:
    """The annotation ids seen in one pass, to find those given more than once.

    Integer ids (all of COCO's) are kept as 8-byte values in an array, not as Python
    objects in a set: 7 MB instead of about 50 for train2017's 860k annotations.
    """

    def __init__(self) -> None:
        self._integers = array("q")
        self._others: list[Any] = []

    def add(self, value: Any) -> None:
        if type(value) is int:
            try:
                self._integers.append(value)
                return
            except OverflowError:  # beyond 64 bits
                pass
        self._others.append(value)

    def repeated(self) -> list[Any]:
        """Every id added more than once (ids are equal when value and type are)."""
        integers = np.frombuffer(self._integers, dtype=np.int64) if self._integers else None
        found: list[Any] = []
        if integers is not None:
            ordered = np.sort(integers)
            found = np.unique(ordered[1:][ordered[1:] == ordered[:-1]]).tolist()
        seen: set[tuple[type, Any]] = set()
        for value in self._others:
            key = (type(value), value)
            if key in seen:
                found.append(value)
            seen.add(key)
        return sorted(set(found), key=_id_order)


#: How the parser names the value a section holds, in words for messages.
_JSON_KINDS = {"null": "null", "string": "a string", "number": "a number",
               "boolean": "true or false", "start_map": "an object"}


def _section_value_kind(path: str, section: str) -> str | None:
    """The parser event that starts the top-level ``section``'s value (``start_array``,
    ``null``, ``start_map``...), or None when the file has no such key. Runs only after a
    pass found the section empty, so its cost does not matter."""
    for backend in (ijson, ijson.get_backend("python")):
        f = _open_json(path)
        try:
            for prefix, event, _value in backend.parse(f):
                if prefix == section and event != "map_key":
                    return event
            return None
        except (ijson.JSONError, UnicodeDecodeError):
            continue  # the C parser refused valid JSON (see stream_section): try Python's
        finally:
            f.close()
    return None


def _bad_item(section: str, where: str, problem: str) -> Reject:
    kind = "image" if section == "images" else "annotation"
    return Reject(kind, where, "missing_field", f"{where} {problem}; fix the annotation file")


def _image_rejected(image_id: Any, reason: str):
    """Tells the join by id that the entry with this id was rejected before any file was
    looked for, so its annotations are rejected as ``image_rejected``, not as annotations
    of an unknown image. Rides the join by name like an annotation batch."""
    return JoinKey(join_key(image_id), by_image_id=True), ImageNotLocated(reason)


def _file_name_of(item: dict) -> Any:
    """``file_name``, or (LVIS, whose images have none) the last part of ``coco_url``."""
    if "file_name" in item:
        return item["file_name"]
    url = item.get("coco_url")
    return url.rstrip("/").rsplit("/", 1)[-1] if isinstance(url, str) else None


def _category_lists(item: dict) -> ImageCategoryLists | None | str:
    """An LVIS entry's category lists; None when it has neither; a problem (text) when
    one is not a list of ids."""
    negative, not_exhaustive = (item.get(key) for key in LVIS_LIST_FEATURES)
    if negative is None and not_exhaustive is None:
        return None
    lists = []
    for key, value in zip(LVIS_LIST_FEATURES, (negative, not_exhaustive), strict=True):
        value = [] if value is None else value
        if not isinstance(value, list) or not all(_is_id(v) for v in value):
            return f"has a '{key}' that is not a list of category ids"
        lists.append(tuple(value))
    return ImageCategoryLists(*lists)


def _check_image(item: dict, where: str, allow_outside_root: bool = False):
    image_id, file_name = item.get("id"), _file_name_of(item)
    if not _is_id(image_id) or not isinstance(file_name, str) or not file_name:
        yield TaggedOutput("rejects", _bad_item(
            "images", where, "needs an 'id' (number or string) and a non-empty 'file_name' "
            "(or, as in LVIS, a 'coco_url')"))
        if _is_id(image_id):
            yield _image_rejected(image_id, "missing_field")
        return
    lists = _category_lists(item)
    if isinstance(lists, str):
        yield TaggedOutput("rejects", _bad_item("images", where, lists))
        yield _image_rejected(image_id, "missing_field")
        return
    if lists is not None:
        yield JoinKey(join_key(image_id), by_image_id=True), lists
    if not is_text(file_name):
        yield TaggedOutput("rejects", Reject(
            "image", printable(file_name), "invalid_file_name",
            f"{where}: file_name '{printable(file_name)}' is not valid Unicode text (a lone "
            "surrogate escape, as written for names that are not UTF-8); rename the file "
            "and its entry",
        ))
        yield _image_rejected(image_id, "invalid_file_name")
        return
    width, height = item.get("width"), item.get("height")
    sizes = (width, height) if all(isinstance(v, int) for v in (width, height)) else (None, None)
    unsafe = filesystems.leaves_root(file_name)
    if unsafe and allow_outside_root:
        yield TaggedOutput("outside", ImageEntry(image_id, file_name, *sizes))
        return
    if unsafe:
        yield TaggedOutput("rejects", Reject(
            "image", file_name, "outside_root",
            f"{where}: file_name {file_name!r} {unsafe}; only files inside the images folder "
            "are read (pass --allow-outside-root if this is intended)",
        ))
        yield _image_rejected(image_id, "outside_root")
        return
    yield JoinKey(file_name), ImageEntry(image_id, file_name, *sizes)


_ANNOTATION_KEYS = ("id", "image_id", "category_id", "bbox")


def _check_annotation(item: dict, path: str, position: int, include_masks: bool = False,
                      include_keypoints: bool = False) -> Reject | tuple[Any, Annotation]:
    """``(image_id, annotation)``, or a reject.

    The segmentation (polygons or RLE, possibly large) is kept only with ``include_masks``,
    the keypoints only with ``include_keypoints``.
    Runs once per annotation (860k in COCO train2017): plain floats take the short path.
    """
    try:
        ann_id, image_id, category_id, bbox = (
            item["id"], item["image_id"], item["category_id"], item["bbox"])
    except KeyError:
        if "segments_info" in item:
            raise CocoFormatError(
                f"{_where(path, 'annotations', position)} has 'segments_info' and no 'bbox': "
                "this is a COCO panoptic file (panoptic_*.json). recordbeam reads COCO "
                "instances (detection) files such as instances_train2017.json; convert the "
                "panoptic segments to instances first."
            ) from None
        if "caption" in item and "category_id" not in item:
            raise CocoFormatError(
                f"{_where(path, 'annotations', position)} has a 'caption' and no "
                "'category_id': this is a COCO captions file (captions_*.json); pass it as "
                "--captions") from None
        missing = [k for k in _ANNOTATION_KEYS if k not in item]
        if missing != ["bbox"] or item.get("segmentation"):
            return _bad_item("annotations", _where(path, "annotations", position),
                             f"lacks {', '.join(missing)}")
        ann_id, image_id, category_id, bbox = (
            item["id"], item["image_id"], item["category_id"], None)
    if bbox is None or bbox == []:
        # No box: an image-level label (bbox None, as COCO's "labels" files hold them),
        # unless it outlines a region: then an object whose box is rejected.
        bbox = [] if item.get("segmentation") else None
    if not (_is_id(ann_id) and _is_id(image_id) and _is_id(category_id)):
        return _bad_item("annotations", _where(path, "annotations", position),
                         "has an invalid 'id', 'image_id' or 'category_id' (need a number or string)")
    keypoints = None
    if include_keypoints and "keypoints" in item:
        keypoints = _check_keypoints(item)
        if isinstance(keypoints, str):
            where = _where(path, "annotations", position)
            return Reject("annotation", f"annotation {ann_id}", "invalid_keypoints",
                          f"{where} (annotation {ann_id}): {keypoints}; fix the annotation "
                          "file (the image was written without this object)")
    segmentation = item.get("segmentation") if include_masks else None
    if type(segmentation) is list:
        too_many = too_many_vertices(sum(len(p) // 2 for p in segmentation if type(p) is list))
        if too_many:
            return Reject("annotation", f"annotation {ann_id}", "invalid_mask",
                          f"{_where(path, 'annotations', position)} (annotation {ann_id}): "
                          f"{too_many}; the image was written without this object")
    area = item.get("area")
    if type(area) is not float:
        area = _as_float(area)
        if area is None:
            area = _box_area(bbox)
    return image_id, new_record(Annotation, (
        ann_id, category_id, tuple(bbox) if type(bbox) is list else bbox,
        area, 1 if item.get("iscrowd", 0) else 0,
        segmentation, keypoints,
    ))


#: COCO's keypoint visibility flags: 0 not labeled, 1 labeled but not visible, 2 visible.
VISIBILITIES = (0, 1, 2)


def _check_keypoints(item: dict) -> Keypoints | str:
    """An annotation's ``keypoints`` (``x, y, v`` triples) and ``num_keypoints``, or what
    is wrong with them. Their count against the category's names is checked in the join."""
    values = item["keypoints"]
    if not isinstance(values, list) or len(values) % 3:
        return ("'keypoints' must be a list of x, y, visibility triples (its length a "
                "multiple of 3)")
    numbers = [_as_float(v) for v in values]
    if any(v is None or not np.isfinite(v) for v in numbers):
        return "'keypoints' holds values that are not finite numbers"
    if any(v not in VISIBILITIES for v in numbers[2::3]):
        return "a keypoint visibility (every third value) is not 0, 1 or 2"
    labeled = sum(1 for v in numbers[2::3] if v > 0)
    num = item.get("num_keypoints", labeled)
    if isinstance(num, bool) or not isinstance(num, int) or not 0 <= num <= len(numbers) // 3:
        return (f"'num_keypoints' is {str(num)[:30]}, not a count of its "
                f"{len(numbers) // 3} keypoints")
    return Keypoints(tuple(numbers), num)


def _box_area(bbox: Any) -> float:
    try:
        return float(bbox[2]) * float(bbox[3])
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0.0


def _check_category(item: dict, where: str, include_keypoints: bool = False) -> Category:
    name = item.get("name")
    if not _is_id(item.get("id")) or not isinstance(name, str) or not is_text(name):
        raise CocoFormatError(f"{where} needs an 'id' and a 'name'; fix the annotation file")
    problem = name_problem(name)
    if problem:
        raise CocoFormatError(f"{where} (category {item['id']!r}): the name {shown(name)} "
                              f"{problem}; a class name is written as one line of labels.txt. "
                              "Fix the annotation file")
    if not include_keypoints:
        return Category(item["id"], item["name"])
    names, skeleton = item.get("keypoints", []), item.get("skeleton", [])
    if not isinstance(names, list) or not all(
            isinstance(n, str) and is_text(n) for n in names):
        raise CocoFormatError(f"{where}: 'keypoints' must be a list of keypoint names; fix "
                              "the annotation file")
    if not names:  # a category without keypoints (in a keypoints file): no skeleton to join
        return Category(item["id"], name)
    if not isinstance(skeleton, list) or not all(
            isinstance(pair, list) and len(pair) == 2
            and all(type(i) is int and 1 <= i <= len(names) for i in pair)
            for pair in skeleton):
        raise CocoFormatError(
            f"{where}: 'skeleton' must be a list of [a, b] pairs of keypoint numbers from 1 "
            f"to {len(names)} (the category's keypoint names); fix the annotation file")
    return Category(item["id"], name, tuple(names), tuple(tuple(p) for p in skeleton))


def category_name_warnings(categories: list[Category], path: str) -> list[Reject]:
    """``duplicate_class_name`` warnings for categories sharing a name (or names that
    differ only in Unicode normalisation): legal COCO, their ids keep them apart, but a
    class text then stands for two labels."""
    ordered = sorted(categories, key=lambda c: _id_order(c.id))
    names = [c.name for c in ordered]
    places = [f"category {c.id!r}" for c in ordered]
    repeats = check_class_list(names, places, path, repeats_allowed=True)
    return [Reject("warning", f"{path}: categories", DUPLICATE_CLASS_NAME, detail)
            for detail in repeated_name_warnings(names, places, repeats)]


class CategoryLabel(NamedTuple):
    """What a category is written as."""

    label: int
    name: str


def label_map(categories: list[tuple[Any, str]], contiguous: bool) -> dict[Any, CategoryLabel]:
    """Category id -> (label written, name), from ``(id, name)`` pairs such as
    :class:`Category`. Duplicate ids are a broken file."""
    pairs = [Category(*pair) for pair in categories]
    ids = [c.id for c in pairs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}, key=_id_order)
    if duplicates:
        raise CocoFormatError(f"category ids {duplicates} appear more than once; fix the annotation file")
    ordered = sorted(pairs, key=lambda c: _id_order(c.id))
    if not contiguous and not all(isinstance(c.id, int) for c in ordered):
        raise CocoFormatError("category ids must be integers (or use --contiguous-labels)")
    if not contiguous and not all(-(2**63) <= c.id < 2**63 for c in ordered):
        raise CocoFormatError(
            "category ids must fit in a 64-bit integer, the label's type (or use "
            "--contiguous-labels)")
    return {
        category.id: CategoryLabel((rank + 1) if contiguous else category.id, category.name)
        for rank, category in enumerate(ordered)
    }


def _file_key(images_dir: str, path: str, size: int,
              modified: float = 0.0) -> tuple[str, ListedFile]:
    name = filesystems.relative_name(images_dir, path)
    if not is_text(name):
        # A name that is not UTF-8 on disk: Beam cannot encode it as a key, and no JSON
        # entry can name it (lone surrogates are rejected there). The NUL, which no real
        # file name holds, keeps the escaped form from meeting a genuine name.
        return "\0" + printable(name), ListedFile(printable(path), size, modified)
    return name, ListedFile(path, size, modified)


def _text_metadata(meta: FileMetadata) -> FileMetadata:
    """Beam encodes paths as UTF-8: a name that is not UTF-8 travels escaped."""
    if is_text(meta.path):
        return meta
    return FileMetadata(printable(meta.path), meta.size_in_bytes, meta.last_updated_in_seconds)


class _JoinFiles(beam.DoFn):
    """file name -> (image entries from JSON, files on disk) -> the located file, keyed by
    :func:`join_key` of the image id. Messages keyed by image id (annotation batches,
    entries rejected earlier) pass through."""

    def __init__(self, images_dir: str = "") -> None:
        self._unlisted = Metrics.counter(COUNTER_NAMESPACE, "unlisted_files")
        self._images_dir = images_dir
        parent, _, folder_name = images_dir.rstrip("/").rpartition("/")
        self._folder_prefix = f"{folder_name}/" if folder_name else None
        self._parent = parent or "."

    def process(self, element: tuple[JoinKey, Iterable[JoinMessage]]):
        key, messages = element
        if key.by_image_id:  # passed on to the join by id
            for message in messages:
                yield key.text, message
            return
        file_name = key.text
        entries = [m for m in messages if type(m) is ImageEntry]
        files = [m for m in messages if type(m) is ListedFile]
        if not entries:
            self._unlisted.inc()
            yield TaggedOutput("counts", ("unlisted_files", 1))
            return
        if len(entries) > 1:
            for entry in entries:
                yield TaggedOutput("rejects", Reject(
                    "image", f"{file_name} (image id {entry.image_id})", "duplicate_file_name",
                    f"{len(entries)} image entries name the file {file_name!r}; each file must be "
                    "listed once. All of them were rejected.",
                ))
                yield join_key(entry.image_id), ImageNotLocated("duplicate_file_name")
            return
        entry = entries[0]
        image_id, name = entry.image_id, entry.file_name
        if not files:
            yield from self._missing(image_id, name)
            return
        # A file that links lead out of the images folder is refused where images are read
        # (ImageExampleEncoder.refuse_outside), as for every format.
        path, size = files[0].path, files[0].size
        yield join_key(image_id), LocatedImage(image_id, name, path, size, entry.width,
                                               entry.height, files[0].modified)

    def _missing(self, image_id: Any, name: str):
        detail = (f"image id {image_id} names {name!r}, which is not in the images folder "
                  f"{self._images_dir}")
        if self._folder_prefix and name.startswith(self._folder_prefix):
            # The commonest wrong path: --images train2017/ for names like train2017/x.jpg.
            detail += (
                f"; the name starts with {self._folder_prefix!r}, the name of the images folder "
                f"itself: if the file_names are relative to the folder above, pass --images "
                f"{self._parent}"
            )
            yield TaggedOutput("counts", (MISSING_UNDER_FOLDER_NAME, 1))
        yield TaggedOutput("rejects", Reject("image", name, "missing", detail))
        yield join_key(image_id), ImageNotLocated("missing")


#: Count of missing images whose ``file_name`` starts with the images folder's own name
#: (``train2017/x.jpg`` looked for in ``train2017/``): the summary then says so.
MISSING_UNDER_FOLDER_NAME = "missing_named_under_images_folder"


def _planned_size(located: tuple[str, JoinMessage], split: str) -> list[tuple[str, int]]:
    """``(split, bytes)`` of a file that joined its image entry, for shard planning."""
    _key, message = located
    return [(split, message.size)] if type(message) is LocatedImage else []


class _LocateOutside(beam.DoFn):
    """With ``allow_outside_root``: find the files that ``..`` or absolute names point at
    (they are not in the images folder's listing)."""

    def __init__(self, images_dir: str) -> None:
        self._images_dir = images_dir

    def process(self, entry: ImageEntry):
        image_id, name = entry.image_id, entry.file_name
        path = name if _is_absolute(name) else filesystems.join(self._images_dir, name)
        found = filesystems.file_metadata(path)
        if found is None:
            yield TaggedOutput("rejects", Reject(
                "image", path, "missing",
                f"image id {image_id} names {name!r}, which does not exist",
            ))
            yield join_key(image_id), ImageNotLocated("missing")
            return
        yield join_key(image_id), LocatedImage(
            image_id, name, path, found.size_in_bytes, entry.width, entry.height,
            float(found.last_updated_in_seconds or 0.0))


def _annotations_in_id_order(batches: list[AnnotationBatch]) -> list[tuple[Annotation, Any]]:
    """``(annotation, image id as its file spelled it)`` of every batch, ordered by
    annotation id, then image id (ids ordered as by :func:`_id_order`)."""
    if len(batches) == 1:
        batch = batches[0]
        annotations = unpack_annotations(batch.packed)
        if all(type(a[0]) is int for a in annotations):
            # One batch has one image id, and integers order as _id_order orders them.
            image_id = batch.image_id
            return [(a, image_id) for a in sorted(annotations, key=_first)]
    return sorted(
        ((a, m.image_id) for m in batches for a in unpack_annotations(m.packed)),
        key=lambda pair: (_id_order(pair[0].id), _id_order(pair[1])),
    )


_first = itemgetter(0)


def _kind_of_id(value: Any) -> str:
    return "text" if isinstance(value, str) else "a number"


def lost_annotation_reason(image_reason: str) -> str:
    """The reason an annotation is rejected with when its image was: ``image_missing`` for
    a missing file, ``image_rejected`` for any other image reject (named in the detail)."""
    missing, rejected = LOST_WITH_IMAGE
    return missing if image_reason == "missing" else rejected


class _JoinAnnotations(beam.DoFn):
    """image id -> (its file, its annotations) -> ImageRecord.

    Annotations whose ``image_id`` reads as the image's id but has another type (``"1"``
    for ``1``) are rejected as ``image_id_type_mismatch``; annotations sharing an id with
    another (``duplicate_annotation_ids``, a side input, usually empty) are all rejected
    as ``duplicate_annotation_id``.

    With ``include_keypoints`` each object gets its category's keypoint names and its
    keypoints (zeros, not labeled, when it has none); with ``captions`` the image gets
    its captions in caption-id order. LVIS category lists are written as labels.
    """

    def __init__(self, split: str, contiguous: bool, include_keypoints: bool = False,
                 captions: bool = False) -> None:
        self._split = split
        self._contiguous = contiguous
        self._include_keypoints = include_keypoints
        self._captions = captions
        self._labels: dict[Any, CategoryLabel] | None = None
        self._keypoint_names: dict[Any, tuple[str, ...]] = {}
        self._duplicates: set[tuple[type, Any]] | None = None

    def process(self, element, categories, duplicate_annotation_ids):
        if self._labels is None:
            categories = list(categories)
            self._labels = label_map(categories, self._contiguous)
            self._keypoint_names = {c.id: c.keypoints for c in categories}
            self._duplicates = {(type(i), i) for i in duplicate_annotation_ids}
        key, messages = element
        images: list[JoinMessage] = []
        batches: list[AnnotationBatch] = []
        caption_batches: list[CaptionBatch] = []
        lists: list[ImageCategoryLists] = []
        for message in messages:  # one pass: the grouped values may be read lazily
            kind = type(message)
            if kind is AnnotationBatch:
                batches.append(message)
            elif kind is LocatedImage or kind is ImageNotLocated:
                images.append(message)
            elif kind is CaptionBatch:
                caption_batches.append(message)
            elif kind is ImageCategoryLists:
                lists.append(message)
        annotations = _annotations_in_id_order(batches)
        captions = sorted(
            ((caption_id, text, m.image_id) for m in caption_batches
             for caption_id, text in m.captions),
            key=lambda caption: (_id_order(caption[0]), _id_order(caption[2]), caption[1]),
        )
        if len(images) != 1 or type(images[0]) is not LocatedImage:
            yield from self._image_not_written(key, images, annotations)
            yield from self._captions_not_written(images, captions)
            return
        image = images[0]
        image_id = image.image_id
        labels = {"source_id": key, "filename": image.name, "width": image.width,
                  "height": image.height}
        objects = []
        image_labels = []
        written_labels, problem_of = self._labels, self._problem
        for annotation, ann_image_id in annotations:
            ann_id, category_id = annotation[0], annotation[1]
            problem = problem_of(ann_id, ann_image_id, image_id, category_id)
            if problem is not None:
                reason, detail = problem
                yield TaggedOutput("rejects", Reject(
                    "annotation", f"annotation {ann_id}", reason,
                    f"{detail}; the image was written without this object",
                ))
                continue
            if annotation.bbox is None:  # no box: a label of the whole image
                label = written_labels[category_id]
                image_labels.append((ann_id, label.label, label.name))
                continue
            keypoints = None
            if self._include_keypoints:
                keypoints = self._named_keypoints(annotation)
                if isinstance(keypoints, Reject):
                    yield TaggedOutput("rejects", keypoints)
                    continue
            label = written_labels[category_id]
            objects.append(new_record(ObjectLabel, (
                ann_id, label.label, label.name, annotation.bbox, annotation.area,
                annotation.iscrowd, annotation.segmentation, keypoints)))
        labels["objects"] = pack_annotations(objects)
        if image_labels:  # only then: other images keep the labels they always had
            labels[IMAGE_LABELS] = tuple(image_labels)
        if self._captions:
            labels["captions"] = tuple(
                (yield from self._written_captions(captions, image.image_id)))
        if lists:
            labels.update((yield from self._category_lists(lists[0], image.image_id)))
        yield ImageRecord(identity=key, path=image.path, size=image.size, split=self._split,
                          labels=labels, modified=(image.modified,))

    def _named_keypoints(self, annotation: Annotation) -> NamedKeypoints | None | Reject:
        """The annotation's keypoints with its category's names (None: the category has
        none and neither has the annotation), or a reject when their counts differ."""
        names = self._keypoint_names.get(annotation.category_id, ())
        found = annotation.keypoints
        if found is None or (not found.values and names):  # none given: none labeled
            return NamedKeypoints((0.0,) * (3 * len(names)), 0, names) if names else None
        if len(found.values) != 3 * len(names):
            ann_id = annotation.id
            return Reject(
                "annotation", f"annotation {ann_id}", "invalid_keypoints",
                f"annotation {ann_id} has {len(found.values) // 3} keypoints but its category "
                f"{annotation.category_id!r} names {len(names)}; the image was written "
                "without this object")
        return NamedKeypoints(found.values, found.num, names)

    def _written_captions(self, captions: list[tuple[Any, str, Any]], image_id: Any):
        """Yields rejects for captions whose image id has another type; returns the
        ``(caption id, text)`` of the others (the ids name them if the image is lost)."""
        texts = []
        for caption_id, text, caption_image_id in captions:
            if type(caption_image_id) is not type(image_id):
                yield TaggedOutput("rejects", Reject(
                    "annotation", f"caption {caption_id}", "image_id_type_mismatch",
                    f"caption {caption_id} has image_id {caption_image_id!r} "
                    f"({_kind_of_id(caption_image_id)}) but the image's id is {image_id!r} "
                    f"({_kind_of_id(image_id)}); ids of one kind must have one type: fix "
                    "the captions file"))
                continue
            texts.append((caption_id, text))
        return texts

    def _category_lists(self, lists: ImageCategoryLists, image_id: Any):
        """Yields a reject per category id of the lists that is not in ``categories``;
        returns the lists as labels written."""
        written = {}
        for key, ids in zip(LVIS_LIST_FEATURES, (lists.negative, lists.not_exhaustive),
                            strict=True):
            known = []
            for category_id in ids:
                if category_id in self._labels:
                    known.append(self._labels[category_id].label)
                    continue
                yield TaggedOutput("rejects", Reject(
                    "annotation", f"image {image_id} {key}", "unknown_category",
                    f"image id {image_id} lists category_id {category_id!r} in '{key}', "
                    "which is not in 'categories'; the image was written without it there"))
            written[key] = tuple(known)
        return written

    def _captions_not_written(self, images: list[JoinMessage],
                              captions: list[tuple[Any, str, Any]]):
        """Rejects for the captions of an id that is no single located file."""
        if not images:
            reason, why = "unknown_image", "is not the id of any image"
        elif len(images) > 1:
            reason, why = "image_rejected", f"was rejected ({len(images)} image entries have this id)"
        else:
            image_reason = images[0].reason
            reason = lost_annotation_reason(image_reason)
            why = f"was rejected ({image_reason}; see its image's reject)"
        for caption_id, _text, image_id in captions:
            yield TaggedOutput("rejects", Reject(
                "annotation", f"caption {caption_id}", reason,
                f"caption {caption_id} belongs to image id {image_id!r}, which {why}"))

    def _problem(self, ann_id: Any, ann_image_id: Any, image_id: Any,
                 category_id: Any) -> tuple[str, str] | None:
        """``(reason, detail)`` when the annotation cannot be written with its image."""
        if self._duplicates and (type(ann_id), ann_id) in self._duplicates:
            return "duplicate_annotation_id", (
                f"annotation {ann_id} (image id {image_id}) shares its id with another "
                "annotation; ids must be unique, and all of them were rejected")
        if type(ann_image_id) is not type(image_id):
            return "image_id_type_mismatch", (
                f"annotation {ann_id} has image_id {ann_image_id!r} ({_kind_of_id(ann_image_id)}) "
                f"but the image's id is {image_id!r} ({_kind_of_id(image_id)}); ids of one kind "
                "must have one type: fix the annotation file")
        if category_id not in self._labels:
            return "unknown_category", (
                f"annotation {ann_id} has category_id {category_id!r}, which is not in "
                "'categories'")
        return None

    def _image_not_written(self, key: str, images: list[JoinMessage],
                           annotations: list[tuple[Annotation, Any]]):
        """Rejects for an id that is no single located file: duplicates, rejected or unknown."""
        files = [image for image in images if type(image) is LocatedImage]
        if len(images) > 1:
            ids = sorted({repr(image.image_id) for image in files})
            same_text = f" ({' and '.join(ids)} are the same id as text, image/source_id)" \
                if len(ids) > 1 else ""
            for image in files:
                yield TaggedOutput("rejects", Reject(
                    "image", image.name, "duplicate_image_id",
                    f"{len(images)} image entries have id {key}{same_text}; ids must be unique. "
                    "All of them were rejected.",
                ))
        if not images:
            reason, why = "unknown_image", "is not the id of any image in the annotation file's images"
        elif len(images) > 1:
            reason, why = "image_rejected", f"was rejected ({len(images)} image entries have this id)"
        else:
            image_reason = images[0].reason
            reason = lost_annotation_reason(image_reason)
            why = f"was rejected ({image_reason}; see its image's reject)"
        for annotation, ann_image_id in annotations:
            ann_id = annotation.id
            yield TaggedOutput("rejects", Reject(
                "annotation", f"annotation {ann_id}", reason,
                f"annotation {ann_id} belongs to image id {ann_image_id!r}, which {why}",
            ))


def _metadata(categories: list[Category], contiguous: bool, terms: tuple[int, int],
              include_keypoints: bool = False, task: str = "detection") -> dict:
    labels = label_map(categories, contiguous)
    ordered = sorted(labels.items(), key=lambda kv: _id_order(kv[0]))
    metadata = {
        "task": task,
        "label_map": {str(written.label): written.name for _cid, written in ordered},
        "category_ids": {str(cid): written.label for cid, written in ordered},
        "label_names": [written.name for _cid, written in ordered],
        "inputs": inputs_entry(terms),
    }
    if include_keypoints:
        metadata["keypoints"] = keypoints_metadata(categories, labels)
    return metadata


def keypoints_metadata(categories: list[Category],
                       labels: dict[Any, CategoryLabel]) -> dict[str, dict[str, list]]:
    """The manifest's ``keypoints``: per written label (as text) of a category with
    keypoint names, its ``names`` and its 1-based ``skeleton`` pairs, as COCO gives them."""
    with_names = sorted((c for c in categories if c.keypoints), key=lambda c: _id_order(c.id))
    return {str(labels[c.id].label): {"names": list(c.keypoints),
                                      "skeleton": [list(pair) for pair in c.skeleton]}
            for c in with_names}


class ReadCoco(beam.PTransform):
    """Read a COCO dataset (instances, person keypoints, LVIS, captions: see
    :class:`CocoOptions`) into ``ImageRecord``s.

    Returns a dict of PCollections: ``records`` (ImageRecord), ``rejects`` (Reject),
    ``counts`` ((name, n) pairs), ``metadata`` (one dict: label map, input terms) and
    ``sizes`` ((split, bytes) of every file that joined an image entry, to plan shards).

    ``skip_below``, a folder inside the images folder (the output folder, when it was put
    there), is left out of the listing and the inputs fingerprint.
    """

    def __init__(self, options: CocoOptions, skip_below: str | None = None) -> None:
        super().__init__()
        self._options = options
        self._skipped_prefix = skipped_prefix(options.images_dir, skip_below)
        self.input_roots = options.input_roots()

    def expand(self, pbegin):
        opts = self._options
        # The images (and categories) are the annotation file's, or the captions file's
        # when it comes alone.
        # One stage reads everything, in two groups of tasks: the annotations (the one
        # pass that parses the whole file), and the images pass (which stops where its
        # list ends) and the categories pass (which parses the file's end, where COCO puts
        # them: see section_at_end) with the listing. A shuffle on the group spreads
        # them (Create's own shuffle uses random keys, and one run in three put the
        # annotations and images passes on one worker: 0.4 s more at 20k images, 2 s at
        # 100k); the local runner deals keys to its workers in turn.
        tasks = [(1, "images"), (1, LIST_TASK)]
        if opts.annotations:  # a captions file has no categories
            tasks[1:1] = [(1, "categories")]
            tasks.insert(0, (0, "annotations"))
        if opts.captions:  # beside the annotations pass: both read a whole file
            tasks.append((1 if opts.annotations else 0, CAPTIONS_TASK))
        # Main outputs carry their types, so their shuffles use the compact coders of
        # coco_records (Beam types tagged outputs only from 2.72 on).
        inputs = (
            pbegin
            | "InputTasks" >> beam.Create(tasks, reshuffle=False)  # (worker group, task)
            | "SpreadTasks" >> beam.GroupByKey()  # (worker group, [task])
            | "Task" >> beam.FlatMap(_tasks_of_group)  # task
            | "ReadInputs" >> beam.ParDo(_ReadInputs(opts, self._skipped_prefix))
            .with_output_types(tuple[JoinKey, JoinMessage])
            .with_outputs("categories", "rejects", "outside", "inputs", "counts",
                          "duplicate_annotation_ids", main="by_name")
        )
        images_dir = opts.images_dir
        joined = (
            inputs.by_name
            | "JoinFilesByName" >> beam.GroupByKey()  # (JoinKey, [ImageEntry | ListedFile...])
            | "MatchFiles" >> beam.ParDo(_JoinFiles(images_dir))
            .with_output_types(tuple[str, JoinMessage])  # (image id key, LocatedImage...)
            .with_outputs("rejects", "counts", main="images")
        )
        located, rejects = joined.images, [inputs.rejects, joined.rejects]
        if opts.allow_outside_root:  # only then can entries name files outside the listing
            outside = inputs.outside | "LocateOutside" >> beam.ParDo(  # ImageEntry
                _LocateOutside(images_dir)).with_output_types(tuple[str, JoinMessage]
            ).with_outputs("rejects", main="images")
            located = (located, outside.images) | "AllImageFiles" >> beam.Flatten()
            rejects.append(outside.rejects)
        categories = inputs.categories  # Category
        records = (
            located
            # (image id key, [LocatedImage | ImageNotLocated | AnnotationBatch])
            | "JoinAnnotationsById" >> beam.GroupByKey()
            | "BuildRecords" >> beam.ParDo(
                _JoinAnnotations(opts.split, opts.contiguous_labels, opts.include_keypoints,
                                 opts.captions is not None), AsList(categories),
                AsList(inputs.duplicate_annotation_ids),
            ).with_output_types(ImageRecord).with_outputs("rejects", main="records")
        )
        terms = inputs.inputs | "InputTerms" >> beam.CombineGlobally(FileTermsFn())
        contiguous, keypoints = opts.contiguous_labels, opts.include_keypoints
        task = "detection" if opts.annotations else "captioning"
        metadata = pbegin | "Metadata" >> beam.Create([None]) | "LabelMap" >> beam.Map(
            lambda _, cats, t: _metadata(list(cats), contiguous, t, keypoints, task),
            AsList(categories), beam.pvalue.AsSingleton(terms),
        )
        if opts.annotations:
            rejects.append(pbegin | "ClassNames" >> beam.Create([opts.annotations])
                           | "RepeatedNames" >> beam.FlatMap(
                               lambda path, cats: category_name_warnings(list(cats), path),
                               AsList(categories)))
        all_rejects = (*rejects, records.rejects) | "CocoRejects" >> beam.Flatten()
        planned = located | "PlannedSizes" >> beam.FlatMap(_planned_size, opts.split)
        counts = (joined.counts, inputs.counts) | "CocoCounts" >> beam.Flatten()
        return {"records": records.records, "rejects": all_rejects, "counts": counts,
                "metadata": metadata, "sizes": planned}


def _box_masks_written(objects: tuple[ObjectLabel, ...], rejects: list[Reject]) -> int:
    """How many of the objects written have ``segmentation: []``: their masks are boxes."""
    rejected = {r.source for r in rejects if r.kind == "annotation"}
    return sum(1 for obj in objects if _no_outline(obj)
               and f"annotation {obj.annotation_id}" not in rejected)


def _no_outline(obj: ObjectLabel) -> bool:
    """``segmentation: []``: a box without an outline (not an absent segmentation, which
    ``--include-masks`` refuses as a file without any)."""
    return isinstance(obj.segmentation, (list, tuple)) and not obj.segmentation


class CocoEncoder(DetectionEncoder):
    """Adds the detection features Model Garden's and the OD API's decoders read.

    With image fixes (``recordbeam.images.transcode.ImageFixes``): boxes are normalized, so a
    ``max_side`` resize leaves them valid (``area`` is scaled to the written pixels). With
    ``apply_exif`` the boxes move with the pixels, unless the annotation's ``width`` /
    ``height`` say the tool showed the rotated image (see
    :meth:`~recordbeam.sources.detection.DetectionEncoder.geometry`).

    ``include_masks`` adds ``image/object/mask``: one 0/1 PNG per written object, of the
    written image's size, aligned with the other object features.

    ``include_keypoints`` adds the Object Detection API's keypoint features: per object
    ``keypoint/num`` (COCO's ``num_keypoints``), and flat over the objects, one value per
    keypoint name of the object's category, ``keypoint/x`` and ``/y`` (normalized and
    moved with the pixels as the boxes are; points not labeled stay at 0, 0 as COCO
    stores them), ``/visibility`` (0, 1, 2) and ``/text`` (the names).

    ``captions`` adds ``image/caption`` (one value per caption, maybe none);
    ``write_objects=False`` (a captions file alone) leaves the object features out. LVIS
    category lists are written when the record has them.
    """

    #: Objects assumed per image when planning shards before the annotations are joined
    #: (COCO's average is about 7).
    TYPICAL_OBJECTS = 7

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False, include_keypoints: bool = False,
                 captions: bool = False, write_objects: bool = True) -> None:
        extra = {"image/object/is_crowd": "int64", "image/object/area": "float"}
        if include_masks:
            extra["image/object/mask"] = "bytes"
        if include_keypoints:
            extra.update(KEYPOINT_NUM_KIND)
        super().__init__(checks, split, fixes, extra_kinds=extra,
                         flat_kinds=KEYPOINT_FLAT_KINDS if include_keypoints else None)
        self.include_masks = include_masks
        self.include_keypoints = include_keypoints
        self.captions = captions
        self.write_objects = write_objects
        self.list_features = OBJECT_FEATURES

    def label_features(self, record: ImageRecord, info: ImageInfo):
        if self.write_objects:
            columns, kinds, rejects, counts = super().label_features(record, info)
            if self.include_masks:
                counts["masks_from_boxes"] = _box_masks_written(self.objects(record), rejects)
            # Category id 0 (Label Studio numbers its categories from 0) is written as
            # label 0, which detection trainers read as background: counted, and said.
            counts[LABEL_0_OBJECTS] = columns["image/object/class/label"].count(0)
        else:
            warning = warn_size_mismatch(record, info, record.labels)
            columns, kinds, rejects, counts = {}, {}, [warning] if warning else [], {}
        if self.captions:
            texts = [text for _caption_id, text in record.labels.get("captions", ())]
            columns[CAPTION_FEATURE], kinds[CAPTION_FEATURE] = texts, "bytes"
            counts["captions_written"] = len(texts)
        for key, feature in LVIS_LIST_FEATURES.items():
            if key in record.labels:
                columns[feature], kinds[feature] = list(record.labels[key]), "int64"
        image_labels = record.labels.get(IMAGE_LABELS)
        if image_labels:
            columns["image/class/label"] = [label for _id, label, _text in image_labels]
            columns["image/class/text"] = [text for _id, _label, text in image_labels]
            kinds.update(IMAGE_LABEL_KINDS)
            counts["image_labels_written"] = len(image_labels)
        return columns, kinds, rejects, counts

    def objects(self, record: ImageRecord) -> tuple[ObjectLabel, ...]:
        return unpack_objects(record.labels["objects"])

    def input_labels(self, record: ImageRecord) -> Any:
        labels = dict(record.labels)
        if "objects" in labels:  # pickled: compared by what they hold, not by their bytes
            labels["objects"] = self.objects(record)
        return labels

    def lost_with(self, record: ImageRecord, reject: Reject) -> tuple[Reject, ...]:
        """The objects and captions of an image rejected while writing, as annotation
        rejects."""
        reason = lost_annotation_reason(reject.reason)
        captions = tuple(
            Reject("annotation", f"caption {caption_id}", reason,
                   f"caption {caption_id} belongs to image {record.path}, which was rejected "
                   f"({reject.reason}; see its image's reject)", reject.split)
            for caption_id, _text in record.labels.get("captions", ()))
        image_labels = tuple(
            Reject("annotation", f"annotation {ann_id}", reason,
                   f"annotation {ann_id} (a label of the whole image) belongs to image "
                   f"{record.path}, which was rejected ({reject.reason}; see its image's "
                   "reject)", reject.split)
            for ann_id, _label, _text in record.labels.get(IMAGE_LABELS, ()))
        return super().lost_with(record, reject) + captions + image_labels

    def object_source(self, obj: ObjectLabel) -> str:
        return f"annotation {obj.annotation_id}"

    def size_kinds(self) -> dict[str, str]:
        """Masks, whose size depends on the pixels, are not counted (nor keypoints, whose
        count per object depends on the category)."""
        return OBJECT_KINDS if self.write_objects else {}

    def extra_values(self, obj: ObjectLabel, geometry: Geometry) -> tuple:
        """``is_crowd``, ``area`` scaled to the written pixels and, with masks, the mask
        (raises ``InvalidMask``)."""
        written, displayed = geometry.written, geometry.displayed
        area = obj.area * ((written[0] * written[1]) / (displayed[0] * displayed[1]))
        values: tuple = (obj.iscrowd, area)
        if self.include_masks:
            values += (self.object_mask(obj, geometry) if _no_outline(obj) else mask_png(
                segmentation_to_mask(obj.segmentation, *geometry.frame), geometry.move,
                written),)
        if self.include_keypoints:
            values += (obj.keypoints.num if obj.keypoints else 0,)
        return values

    def flat_values(self, obj: ObjectLabel, geometry: Geometry) -> tuple[list, ...]:
        """x, y, visibility and names of the object's keypoints (empty lists without)."""
        xs: list[float] = []
        ys: list[float] = []
        keypoints = obj.keypoints
        if keypoints is None:
            return xs, ys, [], []
        width, height = geometry.frame
        values = keypoints.values
        visibility = [int(v) for v in values[2::3]]
        for x, y, v in zip(values[0::3], values[1::3], visibility, strict=True):
            point = orient_point(x / width, y / height, geometry.move) if v else (0.0, 0.0)
            xs.append(point[0])
            ys.append(point[1])
        return xs, ys, visibility, list(keypoints.names)

    def object_reject(self, obj: ObjectLabel, bad: InvalidBox | InvalidMask,
                      record: ImageRecord, geometry: Geometry) -> Reject:
        return Reject(
            "annotation", f"annotation {obj.annotation_id}", bad.reason,
            f"{bad.detail} (image {record.path}); the image was written without this object",
        )

    def object_mask(self, obj: ObjectLabel, geometry: Geometry) -> bytes:
        """The mask of an object whose ``segmentation`` is ``[]`` (as CVAT's and Datumaro's
        COCO exports write boxes): its box's."""
        box = ObjectLabel(obj.annotation_id, obj.label, obj.text, obj.bbox, obj.area,
                          obj.iscrowd)  # no segmentation: the box is the mask
        return super().object_mask(box, geometry)

    def object_counts(self, columns: dict[str, list]) -> dict[str, int]:
        return {"masks_written": len(columns["image/object/mask"])} if self.include_masks else {}
