"""YOLO input: darknet (``obj.data``, ``obj.names``) and Ultralytics (``data.yaml``) folders,
and folders of images and labels with a class names file.

ROOT is the folder as darknet users, Ultralytics, Roboflow, CVAT or Datumaro export it;
the layout is recognized from what ROOT holds::

    darknet                                   Ultralytics (or Roboflow's train/images shape)
    ROOT/obj.data    classes=, train=, valid=  ROOT/data.yaml   path:, train/val/test, names, nc
    ROOT/obj.names   one class name per line   ROOT/images/<split>/<id>.jpg
    ROOT/train.txt   image paths, one a line   ROOT/labels/<split>/<id>.txt
    ROOT/obj_train_data/<id>.jpg + <id>.txt

Without ``obj.data`` or ``data.yaml`` (labelImg's YOLO saves, Label Studio's export,
Roboflow's "YOLO Darknet"), the class names are ``--classes`` or a ``classes.txt``,
``obj.names`` or ``_darknet.labels`` found in ROOT, ``labels/`` or the split folders, and
the splits are the split folders (``train``, ``valid``, ``val``, ``test``, below
``images/`` or ROOT), else one split: ``images/`` + ``labels/``, or ROOT's images with
their labels beside them.

An image's label file is found as Ultralytics (and darknet) find it: the image's path with
its last ``images`` folder replaced by ``labels`` and the extension by ``.txt``; without an
``images`` folder, the label lies beside the image. Every file is keyed by that label
path below ROOT without ``.txt`` (``labels/train/a``, ``obj_train_data/a``), which is the
``image/source_id`` written.

Each label line is ``cls cx cy w h`` (normalized centre and size) or a segment ``cls x1 y1
x2 y2 ...`` (a normalized polygon: its bounds are the box, and with ``--include-masks``
its outline the mask). Labels are ``cls + 1`` (0 stays background), class texts the names.
Coordinates are fractions of the image as Ultralytics loads it, with its EXIF orientation
applied (see :class:`YoloEncoder`); the size comes from the image header.

The launcher reads only ``obj.data``/``obj.names``, ``data.yaml`` or the names file and
checks that the folders and lists they name exist; the folders are listed, the split lists
read and every label file parsed on workers.
"""

from __future__ import annotations

import datetime
import posixpath
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

import apache_beam as beam
import yaml

from recordbeam import feature_keys, filesystems
from recordbeam.dataset.class_names import check_class_list, class_file_lines
from recordbeam.errors import DataError, UsageError
from recordbeam.images.checks import ImageInfo
from recordbeam.images.masks import too_many_vertices
from recordbeam.images.transcode import ImageFixes
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.annotated_files import (
    IMAGE_SUFFIXES,
    AnnotationFormat,
    Listing,
    NamedObject,
    ParsedAnnotation,
    ReadFormat,
    SplitLineError,
    SplitList,
    annotation_folders,
)
from recordbeam.sources.conversion import classes_known, settings_of, write_format
from recordbeam.sources.detection import DetectionEncoder, Geometry
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import (
    NO_OBJECTS,
    UNLABELED,
    refuse_split,
    require_file,
    require_folder,
)
from recordbeam.sources.result import SourceRead
from recordbeam.sources.text import as_number, as_whole
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

DARKNET_DATA = "obj.data"
DARKNET_NAMES = "obj.names"
ULTRALYTICS_YAMLS = ("data.yaml", "data.yml")
#: Class names files of folders without ``obj.data`` or ``data.yaml``: labelImg's and Label
#: Studio's ``classes.txt``, darknet's ``obj.names``, Roboflow's "YOLO Darknet"
#: ``_darknet.labels`` (one per split folder).
NAMES_FILES = ("classes.txt", DARKNET_NAMES, "_darknet.labels")
#: Folders that are splits, named as the folder, in a folder without a description file.
SPLIT_FOLDERS = ("train", "valid", "val", "test")
#: obj.data keys that name split lists, and the split each one is written to.
DARKNET_SPLIT_KEYS = {"train": "train", "valid": "val", "val": "val", "test": "test"}
ULTRALYTICS_SPLIT_KEYS = ("train", "val", "test")
#: The EXIF orientation that undoes each one (rotations by 90 degrees undo each other).
UNDO_ORIENTATION = {2: 2, 3: 3, 4: 4, 5: 5, 6: 8, 7: 7, 8: 6}


class YoloError(DataError, ValueError):
    """The YOLO folder cannot be used as given (no class names, a split that is not there)."""


class SplitEntryNotFound(YoloError):
    """A ``data.yaml`` split entry naming no folder nor list file."""


class NotAYoloFolder(UsageError, YoloError):  # UsageError first: its exit code
    """--input is not a YOLO folder at all: a usage error (exit 2), as for the other formats."""


@dataclass(frozen=True)
class YoloOptions:
    """What to read.

    Attributes:
        root: the YOLO folder (any Beam filesystem), holding ``obj.data`` or ``data.yaml``,
            or images and labels with a class names file.
        split: the split of every image when the folder names no splits.
        classes_file: the class names, one per line, class 0 first, for a folder without
            ``obj.data`` or ``data.yaml`` (in place of a names file found there).
        allow_outside_root: also read files that symbolic links lead outside ``root``, and
            ``data.yaml`` entries naming folders or lists outside ``root``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    split: str = "train"
    classes_file: str | None = None
    allow_outside_root: bool = False

    def input_roots(self) -> filesystems.InputRoots | None:
        """The folders this run reads (see :class:`recordbeam.filesystems.InputRoots`)."""
        return filesystems.input_roots((self.root,), self.allow_outside_root)

    @property
    def folder(self) -> str:
        return self.root.rstrip("/")

    def path(self, *parts: str) -> str:
        return filesystems.join(self.folder, *parts)


@dataclass(frozen=True)
class YoloLayout:
    """What the launcher learned from ``obj.data`` / ``data.yaml``.

    Attributes:
        kind: ``darknet``, ``ultralytics`` or ``folders`` (no description file: images
            and labels with a class names file).
        description: the file describing the dataset (``ROOT/obj.data``...; the class
            names file of ``folders``).
        classes: class names in class-id order.
        folders: split -> image folders (Ultralytics splits given as folders).
        lists: split -> list files naming images (darknet, or Ultralytics ``*.txt``).
        keypoint_values: values a pose line holds after its box (``data.yaml``'s
            ``kpt_shape``, e.g. 17 x 3 = 51); 0 for detection and segment datasets.
        strip_data: list lines spell ROOT's ``x`` as ``data/x``, as darknet runs from its
            working folder (darknet's, when ROOT has no ``data/`` folder of its own).
        splits_not_found: ``data.yaml``'s ``test`` entries naming nothing, as ``(entry,
            why)``: Roboflow writes ``test: ../test/images`` for exports without a test
            split, and Ultralytics needs only train and val. Not written; said as warnings.
    """

    kind: str
    description: str
    classes: tuple[str, ...]
    folders: tuple[tuple[str, tuple[str, ...]], ...] = ()
    lists: tuple[tuple[str, tuple[str, ...]], ...] = ()
    keypoint_values: int = 0
    strip_data: bool = False
    splits_not_found: tuple[tuple[str, str], ...] = ()

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(split for split, _paths in (*self.folders, *self.lists))


# --- paths as the lists and the description files spell them ---------------------------


def clean_line(line: str) -> str:
    """One line as Windows and Unix tools write it: BOM, CR, blanks and backslashes gone."""
    return line.strip().lstrip("\ufeff").strip().replace("\\", "/")


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or bool(re.match(r"^[A-Za-z]:/", path)) or "://" in path


def relative_to_root(path: str, root: str | tuple[str, ...], base: str = "",
                     strip_data: bool = True) -> str | None:
    """``path`` (a cleaned line) as a path below ``root`` (a folder, or its spellings:
    see :func:`root_spellings`), or None when it lies outside.

    ``./x`` is relative to ``base`` (the list's folder below ``root``, as Ultralytics
    reads list files); ``data/x`` is darknet's working-folder spelling of ``root``'s ``x``
    (when ``strip_data``: ROOT has no ``data/`` folder of its own); an absolute path is
    taken below ``root`` when it lies there, else below its last ``data/`` folder.
    """
    if _is_absolute(path):
        prefixes = [spelling.rstrip("/") + "/"
                    for spelling in ((root,) if isinstance(root, str) else root)]
        below = [prefix for prefix in prefixes if path.startswith(prefix)]
        if below:
            path = path[len(below[0]):]
        elif "/data/" in path:
            path = path.rsplit("/data/", 1)[1]
        else:
            return None
    elif path.startswith("./"):
        path = posixpath.join(base, path[2:])
    elif strip_data and path.startswith("data/"):
        path = path[len("data/"):]
    normal = posixpath.normpath(path)
    if normal in (".", "..") or normal.startswith("../"):
        return None
    return normal


def _rename_last_folder(path: str, old: str, new: str) -> str:
    """``path`` with its last folder named ``old`` (not its file name) named ``new``."""
    parts = path.split("/")
    found = [i for i, folder in enumerate(parts[:-1]) if folder == old]
    if found:
        parts[found[-1]] = new
    return "/".join(parts)


def label_key(relative: str) -> str:
    """The key of a file below ROOT: its label file's path without the extension (an
    image's last ``images`` folder becomes ``labels``, as Ultralytics and darknet look for
    labels)."""
    stem = posixpath.splitext(relative)[0]
    if relative.lower().endswith(IMAGE_SUFFIXES):
        return _rename_last_folder(stem, "images", "labels")
    return stem


def listed_key(prefix: str, relative: str, names_files: bool = False,
               lists: frozenset[str] = frozenset()) -> str | None:
    """The key of a file found ``relative`` below a listed folder that is ``prefix``
    below ROOT. None for a file that is no label nor image: the split ``lists`` (paths
    below ROOT); with ``names_files`` (a folder of labelImg's, labels beside their images)
    the class names files, else the ``.txt`` files directly in ROOT (darknet's lists).
    Hidden files never come here: the listing skips them, as Ultralytics' glob does."""
    path = f"{prefix}/{relative}" if prefix else relative
    if path in lists:
        return None
    if names_files:
        if posixpath.basename(relative) in NAMES_FILES:
            return None
    elif "/" not in path and path.lower().endswith(".txt"):
        return None
    return label_key(path)


def root_spellings(folder: str) -> tuple[str, ...]:
    """``folder`` as given, and for a local folder as an absolute path with and without
    its links resolved: how absolute list lines written on this machine may spell it."""
    real = filesystems.local_real_path(folder)
    if real is None:
        return (folder,)
    absolute = posixpath.abspath(folder.removeprefix("file://"))
    return tuple(dict.fromkeys((folder, absolute, real)))


def line_key(root: str | tuple[str, ...], base: str, strip_data: bool,
             line: str) -> str | None:
    """The key of the image one split list line names (None for a blank line); raises
    :class:`SplitLineError` for a line naming no file of ROOT (``root``: its spellings)."""
    path = clean_line(line)
    if not path:
        return None
    relative = relative_to_root(path, root, base, strip_data)
    if relative is None:
        shown = root if isinstance(root, str) else root[0]
        raise SplitLineError("outside_root", (
            f"{path!r} is not below {shown}; write the image paths relative to ROOT (or "
            "as darknet does, data/<folder>/<image>)"))
    if not relative.lower().endswith(IMAGE_SUFFIXES):
        raise SplitLineError("malformed_line", (
            f"{path!r} names no image file (images end in "
            f"{', '.join(IMAGE_SUFFIXES)}); list one image path per line"))
    return label_key(relative)


# --- what the launcher reads ----------------------------------------------------------


def _read_text(path: str, roots: filesystems.InputRoots | None = None) -> str:
    """A small text file; one found in ROOT (``roots`` given) is refused unread when links
    lead it out of ROOT."""
    filesystems.refuse_outside(roots, path, "file")
    data = filesystems.read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise YoloError(f"{path} is not UTF-8 text; save it as UTF-8") from None


def parse_names(text: str, path: str) -> tuple[str, ...]:
    """Class names of an ``obj.names``: one per line, in class-id order (blank lines at
    the end are not classes)."""
    names = [line.strip().lstrip("\ufeff").strip() for line in class_file_lines(text)]
    while names and not names[-1]:
        names.pop()
    if "" in names:
        raise YoloError(f"{path}: line {names.index('') + 1} is blank; a class names file "
                        "holds one class name per line, class 0 first")
    if not names:
        raise YoloError(f"{path} names no classes; write one class name per line")
    return _distinct(tuple(names), path)


def _distinct(names: tuple[str, ...], path: str) -> tuple[str, ...]:
    first: dict[str, int] = {}
    for class_id, name in enumerate(names):
        if name in first:
            raise YoloError(f"{path}: class {class_id} and class {first[name]} are both named "
                            f"{name!r}; give each class its own name")
        first[name] = class_id
    check_class_list(names, [f"class {class_id}" for class_id in range(len(names))], path)
    return names


#: The most classes ``nc`` alone may declare (named ``class_<id>``, as Ultralytics does):
#: each is a line of labels.txt and an entry of the manifest, made up from one number.
MAX_UNNAMED_CLASSES = 100_000

#: The most values ``data.yaml`` may hold once its aliases are expanded: YAML repeats an
#: anchor's value wherever ``*alias`` names it, so a file of a few lines can stand for
#: billions. A data.yaml with 20,000 class names holds some 20,000.
MAX_YAML_VALUES = 1_000_000


def _yaml_values(node: yaml.Node, sizes: dict[int, int], counting: set[int]) -> int:
    """How many values ``node`` holds with its aliases expanded, at most
    ``MAX_YAML_VALUES + 1`` (also for an alias inside its own anchor: endless once
    expanded). Each node is counted once (``sizes``), so in time linear in the file;
    ``counting`` holds the nodes being counted. One call per level: less deep than the
    parser's, which has composed ``node``."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in counting:
        return MAX_YAML_VALUES + 1
    counting.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = node.value if isinstance(node, yaml.SequenceNode) else []
    total = 1
    for child in children:
        total += _yaml_values(child, sizes, counting)
    counting.discard(key)
    sizes[key] = min(total, MAX_YAML_VALUES + 1)
    return sizes[key]


def load_yaml(text: str, path: str) -> Any:
    """The document of a ``data.yaml``, with PyYAML's safe constructors only (no Python
    objects), refused (:class:`YoloError`) when it does not parse, nests deeper than the
    parser recurses, or expands to more than :data:`MAX_YAML_VALUES` values."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _yaml_values(node, {}, set()) > MAX_YAML_VALUES:
            raise YoloError(f"{path} expands to more than {MAX_YAML_VALUES:,} values (YAML "
                            "aliases, *name, repeat what their anchor holds); a data.yaml "
                            "lists splits and class names: write them out")
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        where = " ".join(str(error).split())  # PyYAML's marks span lines
        raise YoloError(f"{path} is not valid YAML ({where}); fix it") from None
    except RecursionError:
        raise YoloError(f"{path} nests values too deeply to be read; a data.yaml lists "
                        "splits and class names") from None
    finally:
        loader.dispose()


def _yaml_class_name(value: Any, class_id: int, path: str) -> str:
    """A ``names`` entry as text: a string as it is (stripped), a whole number as its
    digits; anything else YAML reads as another type is refused, since its Python text
    (``None``, ``True``, ``2024-01-01``, a list) is not what the file says."""
    if isinstance(value, str):
        return value.strip()
    if type(value) is int:
        return str(value)
    kinds = {type(None): "empty (null)", bool: "a boolean (YAML reads yes, no, on, off, "
             "true and false as booleans)", float: "a number with a fraction",
             list: "a list", dict: "a mapping"}
    kind = kinds.get(type(value)) or (
        "a date" if isinstance(value, datetime.date) else f"a YAML {type(value).__name__}")
    raise YoloError(f"{path}: the name of class {class_id} is {kind}, not text; quote it "
                    "('name') in names")


def yaml_names(names: Any, count: Any, path: str) -> tuple[str, ...]:
    """Class names of ``data.yaml``'s ``names`` (a list, or ``{id: name}``) and ``nc``."""
    if names is None and isinstance(count, int) and count > 0:
        if count > MAX_UNNAMED_CLASSES:
            raise YoloError(f"{path}: nc is {count:,} and names is not given; recordbeam "
                            f"makes up at most {MAX_UNNAMED_CLASSES:,} class names from nc. "
                            "List the class names in names")
        return tuple(f"class_{i}" for i in range(count))  # as Ultralytics names them
    if isinstance(names, dict):
        try:
            by_id = {int(key): value for key, value in names.items()}
        except (TypeError, ValueError):
            raise YoloError(f"{path}: names keys must be class ids 0, 1, ...; got "
                            f"{sorted(map(str, names))}") from None
        if sorted(by_id) != list(range(len(by_id))):
            raise YoloError(f"{path}: names has ids {sorted(by_id)}; they must be 0 to "
                            f"{len(by_id) - 1}, each once")
        names = [by_id[i] for i in range(len(by_id))]
    if not isinstance(names, list) or not names:
        raise YoloError(f"{path}: names must be a list of class names or a {{id: name}} "
                        "mapping, class 0 first")
    texts = tuple(_yaml_class_name(name, class_id, path) for class_id, name in enumerate(names))
    if "" in texts:
        raise YoloError(f"{path}: class {texts.index('')} has an empty name")
    if isinstance(count, int) and count != len(texts):
        raise YoloError(f"{path}: nc is {count} but names lists {len(texts)} classes; make "
                        "them agree")
    return _distinct(texts, path)


def _by_split(found: dict[str, list[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((split, tuple(paths)) for split, paths in found.items())


def read_layout(options: YoloOptions) -> YoloLayout:
    """The layout of ROOT (``data.yaml`` wins over ``obj.data`` when both are there;
    without either, the folders and a class names file)."""
    described = next((path for path in map(options.path, (*ULTRALYTICS_YAMLS, DARKNET_DATA))
                      if filesystems.exists(path)), None)
    if described is None:
        return _folders_layout(options)
    if options.classes_file:
        raise UsageError(f"--classes would be ignored: {described} names the classes; drop "
                         "--classes")
    if posixpath.basename(described) == DARKNET_DATA:
        return _darknet_layout(options, described)
    return _ultralytics_layout(options, described)


def _darknet_layout(options: YoloOptions, data_path: str) -> YoloLayout:
    roots = options.input_roots()
    pairs = (clean_line(line).partition("=") for line in _read_text(data_path, roots).splitlines())
    settings = {key.strip().lower(): value.strip() for key, equals, value in pairs if equals}
    strip_data = not filesystems.has_files(options.path("data"))

    def named_file(key: str) -> str | None:
        """The file of ROOT that ``key = ...`` names, when it is there."""
        relative = relative_to_root(clean_line(settings[key]), options.folder, "", strip_data)
        if relative is None or not filesystems.exists(options.path(relative)):
            return None
        return options.path(relative)

    names_path = options.path(DARKNET_NAMES)
    if settings.get("names"):
        names_path = named_file("names") or names_path
    if not filesystems.exists(names_path):
        raise YoloError(f"{data_path}: the class names file {settings.get('names') or ''} is "
                        f"not in {options.folder} (nor {DARKNET_NAMES}); add it, one class "
                        "name per line")
    classes = parse_names(_read_text(names_path, roots), names_path)
    if settings.get("classes", "").isdigit() and int(settings["classes"]) != len(classes):
        raise YoloError(f"{data_path}: classes = {settings['classes']} but {names_path} "
                        f"names {len(classes)}; make them agree")
    lists: dict[str, list[str]] = {}
    for key, split in DARKNET_SPLIT_KEYS.items():
        if not settings.get(key):
            continue
        path = named_file(key)
        if path is None:
            raise YoloError(f"{data_path}: {key} = {settings[key]} is not a file in "
                            f"{options.folder}; fix the line or add the list")
        filesystems.refuse_outside(roots, path, "split list")
        lists.setdefault(split, []).append(path)
    return YoloLayout("darknet", data_path, classes, lists=_by_split(lists),
                      strip_data=strip_data)


def _ultralytics_layout(options: YoloOptions, yaml_path: str) -> YoloLayout:
    data = load_yaml(_read_text(yaml_path, options.input_roots()), yaml_path)
    if not isinstance(data, dict):
        raise YoloError(f"{yaml_path} must be a mapping with names and train/val/test")
    classes = yaml_names(data.get("names"), data.get("nc"), yaml_path)
    base = ""
    if isinstance(data.get("path"), str) and not _is_absolute(data["path"]):
        inner = relative_to_root(clean_line(data["path"]), options.folder, "", False)
        if inner and filesystems.has_files(options.path(inner)):
            base = inner
    folders: dict[str, list[str]] = {}
    lists: dict[str, list[str]] = {}
    not_found: list[tuple[str, str]] = []
    for split in ULTRALYTICS_SPLIT_KEYS:
        entries = data.get(split)
        if entries in (None, ""):
            continue
        for entry in entries if isinstance(entries, list) else [entries]:
            try:
                kind, found = _split_entry(options, base, str(entry), f"{yaml_path}: {split}")
            except SplitEntryNotFound as error:
                if split != "test":
                    raise
                not_found.append((f"{yaml_path}: {split}: {entry}",
                                  str(error).removesuffix("; fix the entry or remove it")))
                continue
            if kind == "list":
                filesystems.refuse_outside(options.input_roots(), found, "split list")
            (folders if kind == "folder" else lists).setdefault(split, []).append(found)
    if folders and lists:
        raise YoloError(f"{yaml_path}: some splits are folders ({', '.join(folders)}) and "
                        f"some list files ({', '.join(lists)}); give all as folders or all as "
                        "list files")
    return YoloLayout("ultralytics", yaml_path, classes, _by_split(folders), _by_split(lists),
                      _keypoint_values(data.get("kpt_shape"), yaml_path),
                      splits_not_found=tuple(not_found))


def _keypoint_values(shape: Any, path: str) -> int:
    """How many values follow the box on a pose line (``kpt_shape: [points, 2 or 3]``)."""
    if shape is None:
        return 0
    if (not isinstance(shape, list) or len(shape) != 2
            or not all(isinstance(n, int) and n > 0 for n in shape) or shape[1] not in (2, 3)):
        raise YoloError(f"{path}: kpt_shape must be [number of keypoints, 2 or 3], got "
                        f"{shape!r}")
    return shape[0] * shape[1]


def _split_entry(options: YoloOptions, base: str, entry: str, where: str) -> tuple[str, str]:
    """``("folder" | "list", path)`` of one train/val/test ``entry`` (``where``: the file
    and key naming it), resolved against ``path:`` and ROOT (and, as Ultralytics does for
    Roboflow's ``../train/images``, without a leading ``../``). Raises :class:`YoloError`
    for an entry that names nothing, or that exists only outside ROOT (an absolute path,
    or ``..`` leading out) while reading there is not allowed."""
    cleaned = clean_line(entry)
    candidates, outside = [], []
    if _is_absolute(cleaned):
        path = cleaned.rstrip("/")
        roots = [spelling.rstrip("/") for spelling in root_spellings(options.folder)]
        inside = any(path == root or path.startswith(root + "/") for root in roots)
        (candidates if inside else outside).append(path)
    else:
        spellings = (cleaned, cleaned[3:]) if cleaned.startswith("../") else (cleaned,)
        for start in dict.fromkeys((base, "")):
            for spelled in spellings:
                relative = posixpath.normpath(posixpath.join(start, spelled))
                if relative == ".":
                    candidates.append(options.folder)
                elif relative != ".." and not relative.startswith("../"):
                    candidates.append(options.path(relative))
                elif spelled == cleaned:
                    outside.append(_joined_outside(options.folder, relative))
    if options.allow_outside_root:
        candidates += outside
    for candidate in dict.fromkeys(candidates):
        kind = _kind_there(candidate)
        if kind:
            return kind, candidate
    found = next((path for path in outside if _kind_there(path)), None)
    if found:
        raise YoloError(f"{where}: {entry} is {found}, outside {options.folder}; nothing there "
                        "is read unless you pass --allow-outside-root (or move the folder into "
                        "ROOT)")
    raise SplitEntryNotFound(f"{where}: {entry} is neither a folder of images nor a list "
                             f"file in {options.folder}; fix the entry or remove it")


def _kind_there(path: str) -> str:
    """``"list"`` for a list file that exists, ``"folder"`` for a folder holding files,
    else ""."""
    if path.lower().endswith(".txt"):
        return "list" if filesystems.exists(path) else ""
    return "folder" if filesystems.has_files(path) else ""


def _joined_outside(folder: str, relative: str) -> str:
    """``folder``/``relative`` (which starts with ``../``), ``..`` resolved by name: a
    local ``folder`` made absolute first, an object store's by its key."""
    scheme, sep, rest = folder.partition("://")
    if not sep:
        scheme, rest = "", posixpath.abspath(folder)
    joined = posixpath.normpath(posixpath.join(rest, relative))
    return f"{scheme}{sep}{joined}"


def _folders_layout(options: YoloOptions) -> YoloLayout:
    """A folder without ``obj.data`` or ``data.yaml``, as labelImg, Label Studio and
    Roboflow's "YOLO Darknet" export write it: the splits are the split folders (below
    ``images/``, else of ROOT) or, without them, ``images/`` or ROOT itself; the classes
    are ``--classes`` or the names file found in ROOT, ``labels/`` or the split folders."""
    images = options.path("images")
    base = images if filesystems.has_files(images) else options.folder
    folders = (tuple((split, (filesystems.join(base, split),)) for split in SPLIT_FOLDERS
                     if filesystems.has_files(filesystems.join(base, split)))
               or ((options.split, (base,)),))
    if options.classes_file:
        names_path = options.classes_file
        classes = parse_names(_read_text(names_path), names_path)
    else:
        names_path, classes = _found_names(options, [folder for _s, (folder,) in folders])
    return YoloLayout("folders", names_path, classes, folders=folders)


def _found_names(options: YoloOptions, folders: list[str]) -> tuple[str, tuple[str, ...]]:
    """The first class names file in ROOT, ``ROOT/labels`` or the split folders (each of
    Roboflow's holds one: they must agree), and its names."""
    places = [options.folder, options.path("labels"), *folders,
              *(filesystems.join(folder, "labels") for folder in folders)]
    found = [filesystems.join(place, name) for place in dict.fromkeys(places)
             for name in NAMES_FILES if filesystems.exists(filesystems.join(place, name))]
    if not found:
        raise NotAYoloFolder(
            f"{options.folder} holds neither data.yaml (Ultralytics) nor obj.data (darknet), "
            f"nor a class names file ({', '.join(NAMES_FILES)}) in it, in labels/ or in its "
            f"split folders{_other_yamls(options.folder)}; --input takes the YOLO folder as "
            "exported, or pass --classes FILE with one class name per line, class 0 first")
    first = parse_names(_read_text(found[0], options.input_roots()), found[0])
    for other in found[1:]:
        if parse_names(_read_text(other, options.input_roots()), other) != first:
            raise YoloError(f"{other} names other classes than {found[0]}; keep one class "
                            "names file, or pass --classes FILE")
    return found[0], first


def _other_yamls(folder: str) -> str:
    """What the message says of YAML files in ROOT under another name than data.yaml
    (Ultralytics takes any name: ``coco8.yaml``), which are not read; or of a data.yaml
    in the folder above (ROOT is a split folder of Roboflow's export)."""
    names = sorted(posixpath.basename(found.path) for pattern in ("*.yaml", "*.yml")
                   for found in filesystems.iter_match(filesystems.glob_below(folder, pattern)))
    parent = posixpath.dirname(folder.rstrip("/"))
    above = next((path for path in (filesystems.join(parent, name) for name in ULTRALYTICS_YAMLS)
                  if parent and filesystems.exists(path)), None)
    if above and not names:  # a split folder of Roboflow's export, given as ROOT
        return f" ({above} is in the folder above: pass {parent} as --input)"
    if not names:
        return ""
    return (f" ({', '.join(names[:3])} {'is' if len(names) == 1 else 'are'} not read: a "
            "dataset YAML is read as data.yaml, so copy or rename it to that name)")


def yolo_input_patterns(options: YoloOptions, layout: YoloLayout) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``): the
    folders :meth:`YoloFormat.listings` lists, then its :meth:`YoloFormat.small_inputs`
    (the pipeline sums the same files' terms)."""
    fmt = YoloFormat(options, layout)
    return [*(filesystems.everything_below(listing.folder) for listing in fmt.listings()),
            *fmt.small_inputs()]


# --- one label file ------------------------------------------------------------------


def parse_label_file(data: bytes, path: str, classes: tuple[str, ...],
                     keypoint_values: int = 0) -> ParsedAnnotation:
    """The objects of one YOLO label file; lines that cannot be used are annotation
    rejects naming ``<file>:<line>``. With ``keypoint_values`` (a pose dataset), lines are
    ``cls cx cy w h`` and that many keypoint values, which are not written (counted
    ``yolo_keypoints_not_written``, per object)."""
    lines = enumerate(data.decode("utf-8-sig", "replace").splitlines(), 1)
    parsed = [parse_label_line(line, f"{path}:{number}", classes, keypoint_values)
              for number, line in lines if line.strip()]
    objects = tuple(found for found in parsed if not isinstance(found, Reject))
    rejects = tuple(found for found in parsed if isinstance(found, Reject))
    counts: tuple[tuple[str, int], ...] = ()
    if not parsed:
        counts = (("yolo_empty_label_files", 1),)
    elif keypoint_values and objects:
        counts = (("yolo_keypoints_not_written", len(objects)),)
    return ParsedAnnotation(None, None, None, objects, rejects, counts)


def parse_label_line(line: str, where: str, classes: tuple[str, ...],
                     keypoint_values: int = 0) -> NamedObject | Reject:
    """One ``cls cx cy w h`` or ``cls x1 y1 x2 y2 ...`` line (``cls cx cy w h`` and
    ``keypoint_values`` more in a pose dataset)."""
    fields = line.split()
    too_many = too_many_vertices((len(fields) - 1) // 2)
    if too_many:
        return _malformed(where, f"{len(fields):,} values: {too_many}")
    values = [as_number(field) for field in fields]
    if None in values:
        return _malformed(where, f"{fields[values.index(None)]!r} is not a number")
    class_id = as_whole(fields[0], least=0)
    if class_id is None:
        return _malformed(where, f"the class id {fields[0]!r} is not a whole number")
    if class_id >= len(classes):
        return Reject("annotation", where, "unknown_category", (
            f"{where}: class id {class_id} is not in the class names (ids 0 to "
            f"{len(classes) - 1}); add the class there, or fix the id. The image was written "
            "without this object"))
    coordinates = values[1:]
    if keypoint_values and len(coordinates) != 4 + keypoint_values:
        return _malformed(where, (
            f"{len(fields)} values; a pose line (kpt_shape) is 'class cx cy w h' and "
            f"{keypoint_values} keypoint values"))
    if len(coordinates) == 4 or keypoint_values:
        cx, cy, w, h = coordinates[:4]
        return NamedObject(where, classes[class_id], (cx - w / 2, cy - h / 2, w, h),
                           normalized=True)
    if len(coordinates) % 2 or len(coordinates) < 6:
        return _malformed(where, (
            f"{len(fields)} values; a box line is 'class cx cy w h' and a segment line "
            "'class x1 y1 x2 y2 x3 y3 ...' (three points or more)"))
    xs, ys = coordinates[0::2], coordinates[1::2]
    x0, y0 = min(xs), min(ys)
    return NamedObject(where, classes[class_id], (x0, y0, max(xs) - x0, max(ys) - y0),
                       segmentation=[list(coordinates)], normalized=True)


def _malformed(where: str, what: str) -> Reject:
    return Reject("annotation", where, "malformed_line",
                  f"{where}: {what}; the image was written without this object")


# --- the pipeline ---------------------------------------------------------------------


class YoloFormat(AnnotationFormat):
    """YOLO for :class:`~recordbeam.sources.annotated_files.ReadAnnotatedImages`."""

    name = "yolo"
    annotations_need_images = True
    missing_image_hint = ("a label's image has its path with labels/ as images/, or lies "
                          "beside it; add the image or remove the label file")

    def __init__(self, options: YoloOptions, layout: YoloLayout) -> None:
        self._options = options
        self._layout = layout
        self.classes = list(layout.classes)
        self.class_list = layout.description
        self.default_split = options.split
        self.image_folder = options.folder

    def _prefix(self, folder: str) -> str:
        root = self._options.folder
        return "" if folder == root else (
            filesystems.relative_name(root, folder) if folder.startswith(root + "/") else folder)

    def listings(self) -> list[Listing]:
        """Each image folder with its labels folder (``images/`` as ``labels/``), or alone
        when its labels lie beside the images; ROOT when splits are lists. Without
        ``obj.data`` or ``data.yaml``, a names file may lie among the labels."""
        names_files = self._layout.kind == "folders"
        lists = frozenset(self._prefix(path) for _split, paths in self._layout.lists
                          for path in paths)
        listings = []
        for split, folders in self._layout.folders or ((None, (self._options.folder,)),):
            listing = partial(Listing, split=split, skipped="yolo_other_files_skipped")
            for folder in folders:
                prefix = self._prefix(folder)
                ids = partial(listed_key, prefix, names_files=names_files, lists=lists)
                labels_prefix = posixpath.dirname(label_key(posixpath.join(prefix, "x.jpg")))
                if labels_prefix == prefix:
                    listings.append(listing(folder, (".txt",), images=True, ids=ids))
                    continue
                labels = (labels_prefix if _is_absolute(labels_prefix)
                          else self._options.path(labels_prefix))
                listings.append(listing(folder, images=True, ids=ids))
                listings.append(listing(labels, (".txt",), ids=partial(
                    listed_key, labels_prefix, names_files=names_files, lists=lists)))
        return listings

    def split_lists(self) -> list[SplitList]:
        root = root_spellings(self._options.folder)
        return [SplitList(split, path, partial(line_key, root, posixpath.dirname(
                    self._prefix(path)), self._layout.strip_data))
                for split, paths in self._layout.lists for path in paths]

    def small_inputs(self) -> list[str]:
        """``data.yaml`` when only split folders are listed (else it lies in ROOT's
        listing); the class names file when no listed folder holds it."""
        names_file = self._layout.description
        if self._layout.kind == "folders" and any(
                names_file.startswith(listing.folder.rstrip("/") + "/")
                for listing in self.listings()):
            return []
        return [filesystems.literal(names_file)] if self._layout.folders else []

    def parse(self, data: bytes, path: str) -> ParsedAnnotation:
        return parse_label_file(data, path, self._layout.classes, self._layout.keypoint_values)

    def expected_annotation(self, image_id: str) -> str:
        return f"label file {image_id}.txt"

    def expected_image(self, image_id: str) -> str:
        return _rename_last_folder(image_id, "labels", "images") + f".* in {self.image_folder}"


class ReadYolo(ReadFormat):
    """Read a YOLO folder (darknet or Ultralytics) into ``ImageRecord``s for
    :class:`YoloEncoder`.

    Returns a :class:`~recordbeam.sources.result.SourceRead`. ``splits`` (known on
    construction, from ``obj.data``/``data.yaml`` or the split folders) are the splits it
    writes; ``classes`` the class names in class-id order.
    """

    def __init__(self, options: YoloOptions, skip_below: str | None = None) -> None:
        super().__init__(options, skip_below)
        self.layout = read_layout(options)
        self.splits = tuple(dict.fromkeys(self.layout.splits)) or (options.split,)
        self.classes = list(self.layout.classes)

    def annotation_format(self) -> YoloFormat:
        return YoloFormat(self._options, self.layout)

    def expand(self, pbegin):
        read = super().expand(pbegin)
        if not self.layout.splits_not_found:
            return read
        warnings = [Reject("warning", entry, "split_not_found",
                           f"{why}: the test split is not written (Roboflow's data.yaml "
                           "names one for exports without it)", self.splits[0])
                    for entry, why in self.layout.splits_not_found]
        said = pbegin | "SplitsNotFound" >> beam.Create(warnings)
        rejects = (read.rejects, said) | "WithSplitsNotFound" >> beam.Flatten()
        return SourceRead(read.records, rejects, read.counts, read.metadata, read.sizes)


class YoloEncoder(DetectionEncoder):
    """The detection features (and with ``include_masks`` the segments' masks) of YOLO's
    normalized objects.

    YOLO coordinates are fractions of the image as Ultralytics loads it: with its EXIF
    orientation applied (so are darknet's, read through OpenCV). With ``--apply-exif`` the
    written pixels are that image, and the boxes are only scaled; without it, the pixels
    are written as stored, and the boxes (and masks) are moved back to the stored pixels.
    """

    def __init__(self, checks=None, split: str = "train", fixes=None,
                 include_masks: bool = False) -> None:
        super().__init__(checks, split, fixes, include_masks=include_masks)

    def geometry(self, record: ImageRecord, info: ImageInfo) -> Geometry:
        base = super().geometry(record, info)
        orientation = info.exif_orientation if info.exif_orientation in UNDO_ORIENTATION else 1
        if orientation == 1:
            return base
        shown = ((info.height, info.width) if orientation in (5, 6, 7, 8)
                 else (info.width, info.height))
        applied = self.fixes.applied_orientation(info) if self.fixes else 1
        move = 1 if applied == orientation else UNDO_ORIENTATION[orientation]
        return Geometry(shown, move, base.displayed, base.written, True)

    def object_counts(self, columns) -> dict[str, int]:
        """Images written with no object (no label file, an empty one, or every object
        rejected), counted as they are written."""
        return {} if columns[feature_keys.OBJECT_LABEL] else {"images_without_objects": 1}


# --- the conversion ---------------------------------------------------------------------


def prepare(request: Request) -> Conversion:
    """``convert yolo``: checks the folder before any job (its description reads, a typed
    --split agrees with the splits it names, a label file at least)."""
    yolo = YoloOptions(request.input, request.split, request.classes, request.allow_outside_root)
    require_folder(yolo.folder, "; --input takes a YOLO folder holding obj.data (darknet), "
                   "data.yaml (Ultralytics), or images and labels with a classes.txt")
    if request.classes:
        require_file(request.classes, "--classes", "classes file",
                     "a text file with one class name per line, class 0 first")
    read = ReadYolo(yolo, skip_below=request.output)  # reads obj.data, data.yaml or names
    refuse_split(request, read.splits, f"the split folders of {yolo.folder} name the splits"
                 if read.layout.kind == "folders" else
                 f"{read.layout.description} names the splits")
    if not read.finds_annotation_file():
        folders = ", ".join(annotation_folders(read.annotation_format()))
        raise UsageError(f"{folders}: no label file (.txt){NO_OBJECTS}an image's labels are "
                         "its path with images/ as labels/ and .txt as extension "
                         f"(labels/<split>/<id>.txt), or beside it{UNLABELED}")

    def settings(shards: ShardOptions, checks: ImageChecks,
                 fixes: ImageFixes | None) -> dict[str, Any]:
        """``--include-masks`` is no :class:`YoloOptions` field: it is recorded only when
        on, and the classes file only when given, so other runs keep their fingerprints."""
        recorded = settings_of("yolo", yolo, shards, checks, fixes)
        if yolo.classes_file is None:
            del recorded["yolo"]["classes_file"]
        if request.include_masks:
            recorded["include_masks"] = True
        return recorded

    def build(p: beam.Pipeline, shards: ShardOptions, checks: ImageChecks,
              fixes: ImageFixes | None) -> WriteShards:
        """Every split ``obj.data`` or ``data.yaml`` names, into the sink; raises
        ``YoloError`` (exit 1) when the folder's description cannot be used."""
        read = ReadYolo(yolo, skip_below=request.output)
        encoder = YoloEncoder(checks, read.splits[0], fixes, include_masks=request.include_masks)
        return write_format(p, request.output, "ReadYolo", read, classes_known(read.classes),
                            encoder, shards, settings(shards, checks, fixes))

    return Conversion(splits=read.splits, input_patterns=yolo_input_patterns(yolo, read.layout),
                      settings=settings, build=build)
