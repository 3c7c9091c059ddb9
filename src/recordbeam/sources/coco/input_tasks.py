"""The first stage of a COCO read: one task per input (:class:`ReadInputs`). The
images pass stops where its list ends; the categories pass parses the file's end; the
listing task lists the image files; the captions task reads a captions file; the
annotations task streams a small file's annotations, or a large one's that the byte
ranges (:mod:`~recordbeam.sources.coco.annotation_ranges`, which read a large file's
annotations beside them) cannot follow. Both keep the loop over annotations here
(:func:`annotation_outputs`). Their outputs leave keyed for the joins
(:mod:`recordbeam.sources.coco.join`), each item checked on the way
(:mod:`recordbeam.sources.coco.checks`)."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import weakref
import zlib
from array import array
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import TaggedOutput

from recordbeam import filesystems
from recordbeam.records import Reject
from recordbeam.sources.annotated_files import text_metadata
from recordbeam.sources.coco.checks import (
    bad_item,
    check_annotation,
    check_caption,
    check_category,
    check_image,
    id_order,
    item_at,
)
from recordbeam.sources.coco.json_stream import (
    CocoFormatError,
    not_a_list,
    section_at_end,
    stream_section,
)
from recordbeam.sources.coco.options import CocoOptions
from recordbeam.sources.coco.records import (
    Annotation,
    AnnotationBatch,
    CaptionBatch,
    JoinKey,
    ListedFile,
    join_key,
    name_key,
    pack_annotations,
)
from recordbeam.sources.listing import is_skipped
from recordbeam.sources.text import is_text, printable

#: The task of :class:`ReadInputs` that lists the image files (the others read a section).
LIST_TASK = "list"
#: The task of :class:`ReadInputs` that reads the captions file's annotations.
CAPTIONS_TASK = "captions"
#: Counts of what the annotation file holds and the run does not write (the summary shows
#: each once, as a row).
KEYPOINTS_NOT_WRITTEN = "annotations_with_keypoints_not_written"
DENSEPOSE_NOT_WRITTEN = "annotations_with_densepose_not_written"

#: Annotations are grouped by image id in a bounded buffer before they are emitted:
#: one element per image instead of one per box cuts the shuffle's element count by the
#: average boxes per image (7 in COCO) while the worker's memory stays bounded.
ANNOTATION_BUFFER = 20_000


class ReadInputs(beam.DoFn):
    """One task of reading the inputs: stream one section of the annotation file (and
    check each item's required fields), or list the image files.

    Image entries and listed files leave on the main output keyed by file name
    (:class:`ImageEntry`, :class:`ListedFile`), so the join by name groups them with no
    Flatten stage between. Annotation batches ride the same output, keyed by image id
    (``JoinKey(..., by_image_id=True)``): the join by name hands them on beside the files
    it located, so the join by image id reads one stage's output. The local runner turns
    every Flatten of two stages' outputs into a stage of its own that only copies the data
    (0.5 s at 20k images, 1.2 s at 100k).
    """

    def __init__(self, options: CocoOptions, skipped_prefix: str | None = None) -> None:
        self._options = options
        self._skipped_prefix = skipped_prefix  # the output folder, when inside the images
        self._folders_held: dict[str, bool] = {}

    def _holds_folder(self, folder: str) -> bool:
        """Whether the images folder holds ``folder`` (an LVIS ``coco_url``'s train2017 or
        val2017): asked once per folder name."""
        if folder not in self._folders_held:
            self._folders_held[folder] = filesystems.has_files(
                filesystems.join(self._options.images_dir, folder))
        return self._folders_held[folder]

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
            yield TaggedOutput("inputs", text_metadata(meta))
        for path in (opts.annotations, opts.captions):
            meta = filesystems.file_metadata(path) if path else None
            if meta is not None:
                yield TaggedOutput("inputs", text_metadata(meta))

    def _read_captions(self, path: str):
        """The captions file's ``annotations``, one :class:`CaptionBatch` per image id
        (batched like the annotations), for the join by image id."""
        buffered: dict[Any, list[tuple[Any, str]]] = {}
        position = -1
        for position, item in enumerate(stream_section(path, "annotations")):
            checked = check_caption(item, path, position)
            if type(checked) is Reject:
                yield TaggedOutput("rejects", checked)
                continue
            image_id, caption_id, caption = checked
            buffered.setdefault(image_id, []).append((caption_id, caption))
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
                yield TaggedOutput("rejects", bad_item(
                    section, item_at(path, section, position), "is not a JSON object"))
            elif section == "images":
                yield from check_image(
                    item, item_at(path, section, position), self._options.allow_outside_root,
                    self._holds_folder)
            else:
                yield TaggedOutput("categories", check_category(
                    item, item_at(path, section, position), self._options.include_keypoints))
        if count == 0:
            held = not_a_list(path, section)
            if held:
                raise CocoFormatError(
                    f"{path}: '{section}' is {held}, not a list; a COCO instances file has a "
                    "list of objects there. Fix or re-export the annotation file.")
            if section == "categories":  # an image info file (image_info_test2017.json)
                return
            raise CocoFormatError(
                f"{path} has no '{section}' (the list is missing or empty); is it a COCO "
                "instances file?"
            )

    def _read_annotations(self, path: str):
        """The whole list on this worker, streamed: how a small file is read, and a large
        one the ranged read (:mod:`~recordbeam.sources.coco.annotation_ranges`) cannot
        cut, so its error, or its odd but valid shape, is the same whatever its size."""
        tally = IdTally()
        position = -1
        for position, output in annotation_outputs(  # noqa: B007 - read after the loop
                enumerate(stream_section(path, "annotations")), path, self._options, tally):
            yield output
        for duplicate in tally.repeated():
            yield TaggedOutput("duplicate_annotation_ids", duplicate)
        if position < 0:  # no annotations: fine when there are none, not when they are no list
            held = not_a_list(path, "annotations")
            if held:
                raise annotations_not_a_list(path, held)


def annotations_not_a_list(path: str, held: str) -> CocoFormatError:
    return CocoFormatError(
        f"{path}: 'annotations' is {held}, not a list; a COCO instances file has "
        "a list of objects there (or no 'annotations' at all). Fix or re-export "
        "the annotation file.")


def annotation_reject(item: Any, path: str, position: int, options: CocoOptions) -> Reject | None:
    """The reject of the annotation at ``position``, or None when it has none."""
    if not isinstance(item, dict):
        return bad_item("annotations", item_at(path, "annotations", position),
                        "is not a JSON object")
    checked = check_annotation(item, path, position, options.include_masks,
                               options.include_keypoints)
    return checked if type(checked) is Reject else None


def annotation_outputs(items: Iterable[tuple[int, Any]], path: str, options: CocoOptions,
                       tally: IdTally):
    """The outputs of ``(position, annotation)`` pairs, as ``(last position, output)``:
    batches by image id, rejects, and the counts of what is not written; their ids go to
    ``tally``.

    This loop runs once per annotation (860k in train2017), so what it calls per item is
    bound to local names and the common case (integer ids, as in every COCO file) takes
    the short paths."""
    buffered: dict[Any, list[Annotation]] = {}
    pending = 0
    include_masks = options.include_masks
    include_keypoints = options.include_keypoints
    keypoints_not_written = densepose = 0
    count_id = tally.add
    check = check_annotation
    position = -1
    for position, item in items:
        if not isinstance(item, dict):
            yield position, TaggedOutput("rejects", annotation_reject(
                item, path, position, options))
            continue
        checked = check(item, path, position, include_masks, include_keypoints)
        if "keypoints" in item and not include_keypoints:
            keypoints_not_written += 1
        if "dp_masks" in item or "dp_I" in item:
            densepose += 1
        if type(checked) is Reject:
            yield position, TaggedOutput("rejects", checked)
            continue
        image_id, annotation = checked
        count_id(annotation[0])
        batch = buffered.get(image_id)
        if batch is None:
            buffered[image_id] = [annotation]
        else:
            batch.append(annotation)
        pending += 1
        if pending >= ANNOTATION_BUFFER:
            for output in _flush_annotations(buffered):
                yield position, output
            pending = 0
            tally.spill_if_full()
    for output in _flush_annotations(buffered):
        yield position, output
    for name, count_of in ((KEYPOINTS_NOT_WRITTEN, keypoints_not_written),
                           (DENSEPOSE_NOT_WRITTEN, densepose)):
        if count_of:
            yield position, TaggedOutput("counts", (name, count_of))


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


#: Integer ids an :class:`IdTally` holds before it deals them out to files (8 MB; a file
#: as long as COCO's train2017 never spills).
SPILL_IDS = 1_000_000
ID_BUCKETS = 64
_BUCKET_BITS = 6
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: sequential ids spread evenly


class IdTally:
    """The annotation ids seen in one pass, to find those given more than once.

    Integer ids (all of COCO's) are kept as 8-byte values in an array, not as Python
    objects in a set: 7 MB instead of about 50 for train2017's 860k annotations. Past
    ``spill_ids`` of them (:meth:`spill_if_full`, called between items), they are dealt by
    a hash of their value into :data:`ID_BUCKETS` files in a temporary folder, and each
    file is sorted alone at the end: the tally holds about ``spill_ids`` ids whatever the
    file's length (70M annotations would otherwise be 560 MB, twice over while sorted).
    """

    def __init__(self, spill_ids: int | None = None) -> None:
        self._integers = array("q")
        self._others: list[Any] = []
        self._spill_ids = SPILL_IDS if spill_ids is None else spill_ids
        self._folder: str | None = None

    def add(self, value: Any) -> None:
        if type(value) is int:
            try:
                self._integers.append(value)
                return
            except OverflowError:  # beyond 64 bits
                pass
        self._others.append(value)

    def spill_if_full(self) -> None:
        if len(self._integers) >= self._spill_ids:
            self._spill()

    def _spill(self) -> None:
        if not self._integers:
            return
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="recordbeam-annotation-ids-")
            weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        values = np.frombuffer(self._integers, dtype=np.int64)
        buckets = ((values.view(np.uint64) * _MIX) >> np.uint64(64 - _BUCKET_BITS)).astype(np.intp)
        order = np.argsort(buckets, kind="stable")
        dealt = values[order]
        start = 0
        for bucket, count in enumerate(np.bincount(buckets, minlength=ID_BUCKETS).tolist()):
            if count:
                with open(os.path.join(self._folder, str(bucket)), "ab") as f:
                    f.write(dealt[start:start + count].tobytes())
            start += count
        del values, dealt
        self._integers = array("q")

    def parts(self, buckets: int) -> Iterable[tuple[int, tuple[bytes, list[Any]]]]:
        """The ids split into ``buckets`` by value (an id always lands in the same bucket,
        whichever tally holds it), as ``(bucket, (int64 bytes, other ids))``; empty
        buckets are left out. Tallies of parts of a list, merged bucket by bucket
        (:meth:`merged`), find the ids repeated across the whole list."""
        if self._folder is not None:
            raise RuntimeError("a tally that spilled its ids to files has no parts")
        integers = np.frombuffer(self._integers, dtype=np.int64)
        of_integer = integers % buckets
        others: dict[int, list[Any]] = {}
        for value in self._others:
            others.setdefault(_bucket_of(value, buckets), []).append(value)
        for bucket in range(buckets):
            chosen = integers[of_integer == bucket]
            if chosen.size or bucket in others:
                yield bucket, (chosen.tobytes(), others.get(bucket, []))

    @classmethod
    def merged(cls, parts: Iterable[tuple[bytes, list[Any]]]) -> IdTally:
        tally = cls()
        for integers, others in parts:
            tally.add_part(integers, others)
        return tally

    def add_part(self, integers: bytes, others: list[Any]) -> None:
        """Adds a part of another tally (:meth:`parts`): its int64 bytes and other ids."""
        self._integers.frombytes(integers)
        self._others.extend(others)

    def repeated(self) -> list[Any]:
        """Every id added more than once (ids are equal when value and type are)."""
        found: list[Any] = []
        if self._folder is None:
            if self._integers:
                found = _repeated_integers(np.frombuffer(self._integers, dtype=np.int64))
        else:
            self._spill()
            for name in sorted(os.listdir(self._folder), key=int):
                found += _repeated_integers(np.fromfile(os.path.join(self._folder, name),
                                                        dtype=np.int64))
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        seen: set[tuple[type, Any]] = set()
        for value in self._others:
            key = (type(value), value)
            if key in seen:
                found.append(value)
            seen.add(key)
        return sorted(set(found), key=id_order)


def _repeated_integers(integers: np.ndarray) -> list[int]:
    ordered = np.sort(integers)
    return np.unique(ordered[1:][ordered[1:] == ordered[:-1]]).tolist()


def _bucket_of(value: Any, buckets: int) -> int:
    """The bucket of an id that is no 64-bit integer, the same in every process (Python's
    ``hash`` of text is not)."""
    if type(value) is int:
        return value % buckets
    return zlib.crc32(f"{type(value).__name__}:{value}".encode("utf-8", "surrogatepass")) % buckets


def _file_key(images_dir: str, path: str, size: int,
              modified: float = 0.0) -> tuple[str, ListedFile]:
    name = filesystems.relative_name(images_dir, path)
    if not is_text(name):
        # A name that is not UTF-8 on disk: Beam cannot encode it as a key, and no JSON
        # entry can name it (lone surrogates are rejected there). The NUL, which no real
        # file name holds, keeps the escaped form from meeting a genuine name.
        return "\0" + printable(name), ListedFile(printable(path), size, modified)
    return name_key(name), ListedFile(path, size, modified)
