"""The two joins of a COCO read. By file name (:class:`JoinFiles`): each image entry
of the JSON meets its file in the listing (or, with ``--allow-outside-root``, is looked
up by :class:`LocateOutside`). By image id (:class:`JoinAnnotations`): each located
image meets its annotations, captions and LVIS category lists, and becomes an
``ImageRecord``; what cannot join (an unknown image, a rejected one, a duplicate id, an
unknown category) becomes a reject that says why."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from recordbeam import filesystems
from recordbeam.records import COUNTER_NAMESPACE, LOST_WITH_IMAGE, ImageRecord, Reject
from recordbeam.sources.coco.checks import id_order
from recordbeam.sources.coco.labels import CategoryLabel, label_map
from recordbeam.sources.coco.records import (
    IMAGE_LABELS,
    LVIS_LISTS,
    Annotation,
    AnnotationBatch,
    CaptionBatch,
    ImageCategoryLists,
    ImageEntry,
    ImageNotLocated,
    JoinKey,
    JoinMessage,
    ListedFile,
    LocatedImage,
    NamedKeypoints,
    ObjectLabel,
    join_key,
    new_record,
    pack_annotations,
    unpack_annotations,
)

#: Count of missing images whose ``file_name`` starts with the images folder's own name
#: (``train2017/x.jpg`` looked for in ``train2017/``): the summary then says so.
MISSING_UNDER_FOLDER_NAME = "missing_named_under_images_folder"


class JoinFiles(beam.DoFn):
    """file name -> (image entries from JSON, files on disk) -> the located file, keyed by
    :func:`join_key` of the image id. Messages keyed by image id (annotation batches,
    entries rejected earlier) pass through.

    Entries and files meet under the :func:`name_key` of their names, so a group holds
    the few names that differ only in letter case or Unicode normalisation: an entry
    takes the file of exactly its name, and a ``missing`` one names the files of the
    group no entry takes."""

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
        entries: dict[str, list[ImageEntry]] = {}
        files: dict[str, ListedFile] = {}
        for message in messages:
            if type(message) is ImageEntry:
                entries.setdefault(message.file_name, []).append(message)
            elif type(message) is ListedFile:
                files[self._listed_name(key.text, message.path)] = message
        unlisted = sorted(files.keys() - entries.keys())
        for _name in unlisted:
            self._unlisted.inc()
            yield TaggedOutput("counts", ("unlisted_files", 1))
        for file_name, named in sorted(entries.items()):
            if len(named) > 1:
                yield from _duplicate_file_name(file_name, named)
            elif file_name in files:
                # A file that links lead out of the images folder is refused where images
                # are read (ImageExampleEncoder.refuse_outside), as for every format.
                entry, file = named[0], files[file_name]
                yield join_key(entry.image_id), LocatedImage(
                    entry.image_id, file_name, file.path, file.size, entry.width, entry.height,
                    file.modified)
            else:
                yield from self._missing(named[0].image_id, file_name, unlisted)

    def _listed_name(self, key: str, path: str) -> str:
        """A listed file's name as entries spell it; a name that is not UTF-8 on disk
        keeps its key's NUL, which no entry's name holds (input_tasks._file_key)."""
        name = filesystems.relative_name(self._images_dir, path)
        return "\0" + name if key.startswith("\0") else name

    def _missing(self, image_id: Any, name: str, unlisted: list[str]):
        detail = (f"image id {image_id} names {name!r}, which is not in the images folder "
                  f"{self._images_dir}")
        if unlisted:
            detail += "; " + _near_names(name, unlisted)
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


def _duplicate_file_name(file_name: str, entries: list[ImageEntry]):
    for entry in entries:
        yield TaggedOutput("rejects", Reject(
            "image", f"{file_name} (image id {entry.image_id})", "duplicate_file_name",
            f"{len(entries)} image entries name the file {file_name!r}; each file must be "
            "listed once. All of them were rejected.",
        ))
        yield join_key(entry.image_id), ImageNotLocated("duplicate_file_name")


#: Files named in a missing image's reject as near matches of its file_name.
_NEAR_NAMES_SHOWN = 3


def _near_names(wanted: str, on_disk: list[str]) -> str:
    """What a ``missing`` reject says of the files ``on_disk`` whose names differ from
    ``wanted`` only in letter case or Unicode normalisation: the join matches names
    exactly, as Linux filesystems and object stores do."""
    shown = [f"{name!r} differs {_difference(wanted, name)}"
             for name in on_disk[:_NEAR_NAMES_SHOWN]]
    more = len(on_disk) - len(shown)
    return (f"on disk: {', '.join(shown)}{f' (and {more} more)' if more else ''}; names "
            "match exactly: fix the file_name or rename the file")


def _difference(wanted: str, on_disk: str) -> str:
    if unicodedata.normalize("NFC", wanted) == unicodedata.normalize("NFC", on_disk):
        # The two look alike when printed; their escapes show the code points.
        return (f"only in Unicode normalisation ({ascii(on_disk)} on disk, {ascii(wanted)} "
                "in the file_name)")
    if wanted.casefold() == on_disk.casefold():
        return "only in letter case"
    return "in letter case and Unicode normalisation"


def planned_size(located: tuple[str, JoinMessage], split: str) -> list[tuple[str, int]]:
    """``(split, bytes)`` of a file that joined its image entry, for shard planning."""
    _key, message = located
    return [(split, message.size)] if type(message) is LocatedImage else []


class LocateOutside(beam.DoFn):
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


def _is_absolute(name: str) -> bool:
    return name.startswith(("/", "\\")) or "://" in name or (len(name) > 1 and name[1] == ":")


def annotations_in_id_order(batches: list[AnnotationBatch]) -> list[tuple[Annotation, Any]]:
    """``(annotation, image id as its file spelled it)`` of every batch, ordered by
    annotation id, then image id (ids ordered as by :func:`id_order`)."""
    if len(batches) == 1:
        batch = batches[0]
        annotations = unpack_annotations(batch.packed)
        if all(type(a[0]) is int for a in annotations):
            # One batch has one image id, and integers order as id_order orders them.
            image_id = batch.image_id
            return [(a, image_id) for a in sorted(annotations, key=_first)]
    return sorted(
        ((a, m.image_id) for m in batches for a in unpack_annotations(m.packed)),
        key=lambda pair: (id_order(pair[0].id), id_order(pair[1])),
    )


_first = itemgetter(0)


def _kind_of_id(value: Any) -> str:
    return "text" if isinstance(value, str) else "a number"


def lost_annotation_reason(image_reason: str) -> str:
    """The reason an annotation is rejected with when its image was: ``image_missing`` for
    a missing file, ``image_rejected`` for any other image reject (named in the detail)."""
    missing, rejected = LOST_WITH_IMAGE
    return missing if image_reason == "missing" else rejected


class JoinAnnotations(beam.DoFn):
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
        annotations = annotations_in_id_order(batches)
        captions = sorted(
            ((caption_id, text, m.image_id) for m in caption_batches
             for caption_id, text in m.captions),
            key=lambda caption: (id_order(caption[0]), id_order(caption[2]), caption[1]),
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
        for key, ids in zip(LVIS_LISTS, (lists.negative, lists.not_exhaustive),
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
        reason, why = _why_lost(images, "is not the id of any image")
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
        reason, why = _why_lost(
            images, "is not the id of any image in the annotation file's images")
        for annotation, ann_image_id in annotations:
            ann_id = annotation.id
            yield TaggedOutput("rejects", Reject(
                "annotation", f"annotation {ann_id}", reason,
                f"annotation {ann_id} belongs to image id {ann_image_id!r}, which {why}",
            ))


def _why_lost(images: list[JoinMessage], unknown: str) -> tuple[str, str]:
    """The reason and the words of the rejects of what belongs to an image id that is no
    single located file: none has it (``unknown``), several, or its one was rejected."""
    if not images:
        return "unknown_image", unknown
    if len(images) > 1:
        return "image_rejected", f"was rejected ({len(images)} image entries have this id)"
    image_reason = images[0].reason
    return lost_annotation_reason(image_reason), f"was rejected ({image_reason}; see its image's reject)"
