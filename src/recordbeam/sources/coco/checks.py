"""What each item of a COCO file must hold: an image entry, an annotation (with its
keypoints), a category, a caption. A bad item becomes a reject naming the file and its
place (``file: section[position]``), the run goes on; a file that cannot be used at all
(a panoptic or captions file given as instances, a category without a usable name)
raises ``CocoFormatError``. These run once per item on the workers that read the file:
the common case (integer ids, plain floats) takes the short paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apache_beam.pvalue import TaggedOutput

from recordbeam import filesystems
from recordbeam.dataset.class_names import name_problem, shown
from recordbeam.images.masks import too_many_vertices
from recordbeam.records import Reject
from recordbeam.sources.coco.json_stream import CocoFormatError
from recordbeam.sources.coco.records import (
    LVIS_LISTS,
    Annotation,
    Category,
    ImageCategoryLists,
    ImageEntry,
    ImageNotLocated,
    JoinKey,
    Keypoints,
    join_key,
    name_key,
    new_record,
)
from recordbeam.sources.text import as_number, is_text, json_number, printable


def is_id(value: Any) -> bool:
    """An id as COCO's files give them: an integer, or text that is not empty."""
    if type(value) is int:  # the common case, checked once per annotation id field
        return True
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and value != "" and is_text(value)
    )


def id_order(value: Any) -> tuple[int, Any]:
    """Ids in order: integers by value, then text ids."""
    return (0, value) if isinstance(value, int) else (1, str(value))


def item_at(path: str, section: str, position: int) -> str:
    """Where an item is, as rejects and errors name it: ``file: section[position]``."""
    return f"{path}: {section}[{position}]"


def bad_item(section: str, where: str, problem: str) -> Reject:
    """The reject of an item of ``section`` that lacks what it needs (``problem``)."""
    kind = "image" if section == "images" else "annotation"
    return Reject(kind, where, "missing_field", f"{where} {problem}; fix the annotation file")


def check_caption(item: Any, path: str, position: int) -> tuple[Any, Any, str] | Reject:
    """``(image id, caption id, text)`` of an item of a captions file's ``annotations``, or
    its reject."""
    caption = item.get("caption") if isinstance(item, dict) else None
    if not (isinstance(item, dict) and is_id(item.get("id"))
            and is_id(item.get("image_id")) and isinstance(caption, str)
            and is_text(caption)):
        return bad_item("annotations", item_at(path, "annotations", position),
                        "needs an 'id', an 'image_id' (number or string) and a 'caption' "
                        "(text)")
    return item["image_id"], item["id"], caption


def _image_rejected(image_id: Any, reason: str):
    """Tells the join by id that the entry with this id was rejected before any file was
    looked for, so its annotations are rejected as ``image_rejected``, not as annotations
    of an unknown image. Rides the join by name like an annotation batch."""
    return JoinKey(join_key(image_id), by_image_id=True), ImageNotLocated(reason)


def _file_name_of(item: dict, url_folder_kept: Callable[[str], bool] | None = None) -> Any:
    """``file_name``, or (LVIS, whose images have none) the last part of ``coco_url``; with
    its folder (``val2017/x.jpg``) when ``url_folder_kept(folder)`` says the images folder
    holds that folder: LVIS v1 names images of COCO's train2017 and val2017 in one file,
    and its readers (Detectron2's) look for them below the COCO root. A leading ``./`` is
    dropped: COCO readers join the name to the images folder, where ``./a.jpg`` is
    ``a.jpg``."""
    if "file_name" in item:
        name = item["file_name"]
        while isinstance(name, str) and name.startswith("./") and len(name) > 2:
            name = name[2:].lstrip("/")
        return name
    url = item.get("coco_url")
    if not isinstance(url, str):
        return None
    parts = url.rstrip("/").rsplit("/", 2)
    folder = parts[-2] if len(parts) == 3 else ""
    if (url_folder_kept and folder and folder not in (".", "..") and "\\" not in folder
            and url_folder_kept(folder)):
        return f"{folder}/{parts[-1]}"
    return parts[-1]


def _category_lists(item: dict) -> ImageCategoryLists | None | str:
    """An LVIS entry's category lists; None when it has neither; a problem (text) when
    one is not a list of ids."""
    negative, not_exhaustive = (item.get(key) for key in LVIS_LISTS)
    if negative is None and not_exhaustive is None:
        return None
    lists = []
    for key, value in zip(LVIS_LISTS, (negative, not_exhaustive), strict=True):
        value = [] if value is None else value
        if not isinstance(value, list) or not all(is_id(v) for v in value):
            return f"has a '{key}' that is not a list of category ids"
        lists.append(tuple(value))
    return ImageCategoryLists(*lists)


def check_image(item: dict, where: str, allow_outside_root: bool = False,
                url_folder_kept: Callable[[str], bool] | None = None):
    """An item of ``images`` as the join by file name takes it: its :class:`ImageEntry`
    keyed by file name (tagged ``outside`` when it names a file outside the images folder
    and ``allow_outside_root`` lets it), and its LVIS category lists keyed by image id; or
    its reject, and an :class:`ImageNotLocated` that takes its annotations down with it.
    ``url_folder_kept``: see :func:`_file_name_of`."""
    image_id, file_name = item.get("id"), _file_name_of(item, url_folder_kept)
    if not is_id(image_id) or not isinstance(file_name, str) or not file_name:
        yield TaggedOutput("rejects", bad_item(
            "images", where, "needs an 'id' (number or string) and a non-empty 'file_name' "
            "(or, as in LVIS, a 'coco_url')"))
        if is_id(image_id):
            yield _image_rejected(image_id, "missing_field")
        return
    lists = _category_lists(item)
    if isinstance(lists, str):
        yield TaggedOutput("rejects", bad_item("images", where, lists))
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
            f"{where}: file_name {file_name!r} {unsafe}; file_names are read relative to the "
            "images folder, and only files inside it are read (pass --allow-outside-root to "
            "read the paths as they are)",
        ))
        yield _image_rejected(image_id, "outside_root")
        return
    yield JoinKey(name_key(file_name)), ImageEntry(image_id, file_name, *sizes)


_ANNOTATION_KEYS = ("id", "image_id", "category_id", "bbox")


def check_annotation(item: dict, path: str, position: int, include_masks: bool = False,
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
                f"{item_at(path, 'annotations', position)} has 'segments_info' and no 'bbox': "
                "this is a COCO panoptic file (panoptic_*.json). recordbeam reads COCO "
                "instances (detection) files such as instances_train2017.json; convert the "
                "panoptic segments to instances first."
            ) from None
        if "caption" in item and "category_id" not in item:
            raise CocoFormatError(
                f"{item_at(path, 'annotations', position)} has a 'caption' and no "
                "'category_id': this is a COCO captions file (captions_*.json); pass it as "
                "--captions") from None
        missing = [k for k in _ANNOTATION_KEYS if k not in item]
        if missing != ["bbox"] or item.get("segmentation"):
            return bad_item("annotations", item_at(path, "annotations", position),
                            f"lacks {', '.join(missing)}")
        ann_id, image_id, category_id, bbox = (
            item["id"], item["image_id"], item["category_id"], None)
    if bbox is None or bbox == []:
        # No box: an image-level label (bbox None, as COCO's "labels" files hold them),
        # unless it outlines a region: then an object whose box is rejected.
        bbox = [] if item.get("segmentation") else None
    if not (is_id(ann_id) and is_id(image_id) and is_id(category_id)):
        return bad_item("annotations", item_at(path, "annotations", position),
                        "has an invalid 'id', 'image_id' or 'category_id' (need a number or string)")
    keypoints = None
    if include_keypoints and "keypoints" in item:
        keypoints = _check_keypoints(item)
        if isinstance(keypoints, str):
            where = item_at(path, "annotations", position)
            return Reject("annotation", f"annotation {ann_id}", "invalid_keypoints",
                          f"{where} (annotation {ann_id}): {keypoints}; fix the annotation "
                          "file (the image was written without this object)")
    segmentation = item.get("segmentation") if include_masks else None
    if type(segmentation) is list:
        too_many = too_many_vertices(sum(len(p) // 2 for p in segmentation if type(p) is list))
        if too_many:
            return Reject("annotation", f"annotation {ann_id}", "invalid_mask",
                          f"{item_at(path, 'annotations', position)} (annotation {ann_id}): "
                          f"{too_many}; the image was written without this object")
    area = item.get("area")
    if type(area) is not float:
        area = json_number(area)
        if area is None:
            area = _box_area(bbox)
    return image_id, new_record(Annotation, (
        ann_id, category_id, tuple(bbox) if type(bbox) is list else bbox,
        area, _crowd(item.get("iscrowd", 0)),
        segmentation, keypoints,
    ))


def _crowd(value: Any) -> int:
    """``iscrowd`` as 0 or 1: a number written as text (``"0"``) is that number, as
    pycocotools' ``int(iscrowd)`` reads it, not a non-empty (true) string."""
    if type(value) is str and as_number(value) is not None:
        value = as_number(value)
    return 1 if value else 0


#: COCO's keypoint visibility flags: 0 not labeled, 1 labeled but not visible, 2 visible.
VISIBILITIES = (0, 1, 2)


def _check_keypoints(item: dict) -> Keypoints | str:
    """An annotation's ``keypoints`` (``x, y, v`` triples) and ``num_keypoints``, or what
    is wrong with them. Their count against the category's names is checked in the join."""
    values = item["keypoints"]
    if not isinstance(values, list) or len(values) % 3:
        return ("'keypoints' must be a list of x, y, visibility triples (its length a "
                "multiple of 3)")
    numbers = [json_number(v) for v in values]
    if None in numbers:
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


def check_category(item: dict, where: str, include_keypoints: bool = False) -> Category:
    """An item of ``categories``, with its keypoint names and skeleton when keypoints are
    written. A category that cannot be used fails the run (``CocoFormatError``): every
    annotation of it would be lost."""
    name = item.get("name")
    if not is_id(item.get("id")) or not isinstance(name, str):
        raise CocoFormatError(f"{where} needs an 'id' and a 'name'; fix the annotation file")
    if not is_text(name):
        raise CocoFormatError(f"{where} (category {item['id']!r}): the name {shown(name)} "
                              "holds a lone surrogate (a JSON \\udcxx escape), which is no "
                              "character and UTF-8 cannot write; fix the annotation file")
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
