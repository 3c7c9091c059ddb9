"""ImageNet-style class folders input: ``root/<class>/<image>``.

Layouts:

* ``root/<class>/...``: one split (``--split``, default ``train``), or two when
  ``val_fraction`` moves a deterministic share of the images (by a salted hash of their
  relative path) into ``val``;
* ``root/train/<class>/...`` and ``root/val/<class>/...`` (and ``valid``, ``validation``,
  ``test``): the folders are
  the splits. The launcher checks for them with a listing limited to one file.

Classes are the class folder names sorted by name, or the lines of a classes file (one
name per line, in label order). Labels start at ``label_offset`` (0, or 1 for the slim
ImageNet convention that keeps 0 for background). Files are listed on workers with
``MatchFiles``; bytes are read only by the shard writer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam
from apache_beam.pvalue import AsSingleton, TaggedOutput

from recordbeam import feature_keys, filesystems
from recordbeam.dataset.class_names import check_class_list
from recordbeam.errors import DataError, UsageError
from recordbeam.images.checks import ImageInfo
from recordbeam.images.transcode import ImageFixes
from recordbeam.records import MAX_LABEL, ImageRecord, Reject
from recordbeam.sources.classes_file import read_classes_file
from recordbeam.sources.conversion import settings_of, write_format
from recordbeam.sources.fingerprint import input_terms, inputs_entry
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import refuse_split, require_classes_file, require_folder
from recordbeam.sources.listing import ListFilesBelow, MatchFile, is_skipped, skipped_prefix
from recordbeam.sources.record_coder import ImageRecordCoder  # noqa: F401 - registers it
from recordbeam.sources.result import SourceRead
from recordbeam.sources.splits import split_share
from recordbeam.tfrecord.example import encode_example
from recordbeam.write.image_encoder import ImageChecks, ImageExampleEncoder
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

#: Top-level folder names recognized as splits, each named as its folder (``valid``:
#: Roboflow's exports; ``validation``: Hugging Face's and Kaggle's layouts).
SPLIT_FOLDERS = ("train", "val", "valid", "validation", "test")


#: Files that sit beside images as notes or metadata (ImageNet ships synset lists and box
#: XMLs, exports add CSV/JSON sidecars): skipped and counted like hidden files, because
#: they are not meant as examples and rejecting them would count against
#: --max-reject-fraction.
NON_IMAGE_SUFFIXES = (".txt", ".csv", ".tsv", ".json", ".jsonl", ".xml", ".md", ".yaml", ".yml")

#: Files Windows writes into folders it shows (thumbnail caches, folder settings), in lower
#: case: skipped and counted as hidden files, as ``.DS_Store`` is; they are hidden there.
SYSTEM_FILES = ("thumbs.db", "ehthumbs.db", "ehthumbs_vista.db", "desktop.ini")


def is_hidden(parts: list[str]) -> bool:
    """Whether a file is hidden: a name below the root starting with ``.`` (``.DS_Store``,
    macOS's ``._a.jpg``, ``.ipynb_checkpoints/``) or a Windows system file (``Thumbs.db``)."""
    return any(part.startswith(".") for part in parts) or parts[-1].lower() in SYSTEM_FILES


class ImageFolderError(DataError, ValueError):
    """The class folders or the classes file cannot be used as given."""


class ImageFolderOptionError(UsageError, ImageFolderError):  # UsageError first: its exit code
    """An option that does not fit the folder (``--val-fraction`` beside split folders):
    exit 2."""


@dataclass(frozen=True)
class ImageFolderOptions:
    """What to read and how to label it.

    Attributes:
        root: the folder holding class folders (or split folders), any Beam filesystem.
        split: split name for a flat layout.
        classes_file: one class name per line, in label order; None sorts folder names.
        label_offset: label of the first class (1 keeps 0 for background, as slim does).
        val_fraction: in a flat layout, the share of images written to ``val`` instead.
        allow_outside_root: also read files that symbolic links lead outside ``root``
            (refused by default: rejected ``outside_root``, never opened).
    """

    root: str
    split: str = "train"
    classes_file: str | None = None
    label_offset: int = 0
    val_fraction: float | None = None
    allow_outside_root: bool = False

    def input_roots(self) -> filesystems.InputRoots | None:
        """The folders this run reads (see :class:`recordbeam.filesystems.InputRoots`)."""
        return filesystems.input_roots((self.root,), self.allow_outside_root)

    def __post_init__(self) -> None:
        if self.val_fraction is not None and not 0.0 < self.val_fraction < 1.0:
            raise ImageFolderError(
                f"--val-fraction must be between 0 and 1, got {self.val_fraction}"
            )
        if not 0 <= self.label_offset <= MAX_LABEL:
            raise ImageFolderOptionError(f"--label-offset must be between 0 and {MAX_LABEL} "
                                         f"(labels are 64-bit integers), got {self.label_offset}")
        if self.val_fraction is not None and self.split == "val":
            raise UsageError(
                "--split val with --val-fraction would write the held-out share and the rest "
                "both to split val; name the rest's split with --split (default train), or "
                "drop --val-fraction"
            )


def split_folders(root: str) -> tuple[str, ...]:
    """The split folders under ``root`` that hold class folders with files, at any depth
    below the class folder (may be empty).

    Each check is a listing stopped at the first match, cheap on any filesystem.
    """
    return tuple(name for name in SPLIT_FOLDERS if next(
        filesystems.iter_match(filesystems.glob_below(root, name, "*", "**")), None) is not None)


def val_share(relative_path: str) -> float:
    """Where a file falls in [0, 1) for ``val_fraction`` (a salted hash of its path)."""
    return split_share(relative_path)


class ClassifiedFile(NamedTuple):
    """A listed image file and the split and class its folders give it (handed from
    ``_Classify`` to ``_Label`` in one fused stage: it crosses no shuffle). ``in_class``
    is its path below its class folder (``sub/a.jpg``: the file name for one nested
    deeper)."""

    relative: str
    path: str
    size: int
    split: str
    class_name: str
    in_class: str = ""
    modified: float = 0.0  # as listed


class _Classify(beam.DoFn):
    """A listed file -> :class:`ClassifiedFile`, or a reject."""

    def __init__(self, root: str, splits: tuple[str, ...], options: ImageFolderOptions) -> None:
        self._root = root
        self._splits = splits
        self._options = options

    def process(self, meta):
        relative = filesystems.relative_name(self._root, meta.path)
        parts = relative.split("/")
        if is_hidden(parts):
            yield TaggedOutput("counts", ("skipped_hidden_files", 1))
            return
        if parts[-1].lower().endswith(NON_IMAGE_SUFFIXES):
            yield TaggedOutput("counts", ("skipped_non_image_files", 1))
            return
        if self._splits:
            if parts[0] not in self._splits or len(parts) < 3:
                yield _not_in_class_folder(
                    meta.path, f"{relative} is not inside <split>/<class>/ with split one of "
                    f"{', '.join(self._splits)}; move it into a class folder or delete it",
                    parts[0] if parts[0] in self._splits else None)
                return
            split, class_name, in_class = parts[0], parts[1], parts[2:]
        else:
            if len(parts) < 2:
                yield _not_in_class_folder(
                    meta.path, f"{relative} lies directly in the root folder, not in a class "
                    "folder; move it into <root>/<class>/ or delete it")
                return
            class_name, in_class = parts[0], parts[1:]
            split = self._options.split
            fraction = self._options.val_fraction
            if fraction is not None and val_share(relative) < fraction:
                split = "val"
        yield ClassifiedFile(relative, meta.path, meta.size_in_bytes, split, class_name,
                             "/".join(in_class), float(meta.last_updated_in_seconds or 0.0))


def _not_in_class_folder(path: str, message: str, split: str | None = None) -> TaggedOutput:
    return TaggedOutput("rejects", Reject("image", path, "not_in_class_folder", message,
                                          split=split))


class _Label(beam.DoFn):
    def __init__(self, offset: int) -> None:
        self._offset = offset
        self._labels: dict[str, int] | None = None

    def process(self, file: ClassifiedFile, classes):
        if self._labels is None:
            self._labels = {name: i + self._offset for i, name in enumerate(classes)}
        label = self._labels.get(file.class_name)
        if label is None:
            yield TaggedOutput(
                "rejects",
                Reject(
                    "image",
                    file.path,
                    "unknown_class",
                    f"class folder {file.class_name!r} is not in the classes file; add it "
                    "there or remove the folder",
                    split=file.split,
                ),
            )
            return
        labels = {"label": label, "text": file.class_name, "source_id": file.relative}
        if "/" in file.in_class:  # nested below its class: two a.jpg keep their own names
            labels["filename"] = file.in_class
        yield ImageRecord(
            identity=file.relative,
            path=file.path,
            size=file.size,
            split=file.split,
            labels=labels,
            modified=(file.modified,),
        )


def _metadata(classes: list[str], offset: int, terms: tuple[int, int]) -> dict:
    if not classes:
        raise ImageFolderError("no class folders with files were found under the root folder")
    if offset + len(classes) - 1 > MAX_LABEL:
        raise ImageFolderError(f"--label-offset {offset} with {len(classes)} classes would give "
                               f"labels above {MAX_LABEL}, the largest 64-bit label; lower it")
    return {
        "task": "classification",
        "label_map": {str(i + offset): name for i, name in enumerate(classes)},
        "label_names": list(classes),
        "label_offset": offset,
        "inputs": inputs_entry(terms),
    }


def checked_folder_classes(names: Iterable[str], root: str) -> list[str]:
    """The class folders' names, sorted; raises
    :class:`~recordbeam.dataset.class_names.ClassNameError` for a name that cannot be one
    line of labels.txt, or two that differ only in Unicode normalisation."""
    classes = sorted(names)
    check_class_list(classes, ["a class folder"] * len(classes), root)
    return classes


def _listed_class_names(root: str, split_folders: tuple[str, ...],
                        skipped_prefix: str | None) -> list[str]:
    """The class names a run would find, from a listing on the launcher: the folders
    holding files that ``_Classify`` keeps (not hidden, not notes, in a class folder)."""
    names: set[str] = set()
    for meta in filesystems.iter_match(filesystems.everything_below(root)):
        if is_skipped(meta.path, skipped_prefix):
            continue
        parts = filesystems.relative_name(root, meta.path).split("/")
        if is_hidden(parts) or parts[-1].lower().endswith(NON_IMAGE_SUFFIXES):
            continue
        if split_folders:
            if parts[0] in split_folders and len(parts) >= 3:
                names.add(parts[1])
        elif len(parts) >= 2:
            names.add(parts[0])
    return sorted(names)


class ReadImageFolder(beam.PTransform):
    """Read class folders into ``ImageRecord``s.

    Construction looks for split folders (a listing limited to one file per name);
    :attr:`splits` then names every split this read can produce, for ``WriteShards``.

    ``skip_below``, a folder inside the root (the output folder, when it was put there),
    is left out of the listing: its shards are neither classes nor inputs.

    Returns a :class:`~recordbeam.sources.result.SourceRead` without ``sizes``; its
    ``metadata`` holds the label map.
    """

    def __init__(self, options: ImageFolderOptions, skip_below: str | None = None) -> None:
        super().__init__()
        self._options = options
        self._root = options.root.rstrip("/")
        self.input_roots = options.input_roots()
        self._skipped_prefix = skipped_prefix(self._root, skip_below)
        self.split_folders = split_folders(self._root)
        if self.split_folders and options.val_fraction is not None:
            raise ImageFolderOptionError(
                f"{options.root} already has split folders ({', '.join(self.split_folders)}); "
                "--val-fraction only splits a flat <root>/<class>/ layout"
            )
        if self.split_folders:
            self.splits: tuple[str, ...] = self.split_folders
        elif options.val_fraction is not None:
            self.splits = (options.split, "val")
        else:
            self.splits = (options.split,)

    def label_metadata(self) -> dict:
        """The ``label_map`` a run will write, found on the launcher: from the classes
        file, else from a listing of the class folders (a whole listing: call it only when
        the answer is needed, to check a run against splits already in its output)."""
        opts = self._options
        if opts.classes_file:
            classes = read_classes_file(opts.classes_file)
        else:
            classes = checked_folder_classes(
                _listed_class_names(self._root, self.split_folders, self._skipped_prefix),
                self._root)
        return {"label_map": {str(i + opts.label_offset): name for i, name in enumerate(classes)}}

    def expand(self, pbegin):
        opts = self._options
        files = pbegin | "ListImages" >> ListFilesBelow(self._root, self._skipped_prefix)
        classified = files | "Classify" >> beam.ParDo(
            _Classify(self._root, self.split_folders, opts)
        ).with_outputs("rejects", "counts", main="files")
        listed = [files]
        if opts.classes_file:
            classes = (
                pbegin
                | "ClassesFile" >> beam.Create([opts.classes_file])
                | "ReadClasses" >> beam.Map(read_classes_file)
            )
            listed.append(pbegin | "ListClassesFile" >> MatchFile(opts.classes_file))
        else:
            classes = (
                classified.files
                | "ClassNames" >> beam.Map(lambda file: file.class_name)
                | "DistinctClasses" >> beam.Distinct()
                | "SortClasses"
                >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
                | "Sorted" >> beam.Map(checked_folder_classes, self._root)
            )
        records = classified.files | "Label" >> beam.ParDo(
            _Label(opts.label_offset), AsSingleton(classes, default_value=[])
        ).with_output_types(ImageRecord).with_outputs("rejects", main="records")
        terms = input_terms(tuple(listed) | "AllInputs" >> beam.Flatten())
        offset = opts.label_offset
        metadata = (
            pbegin
            | "Metadata" >> beam.Impulse()
            | "LabelMap"
            >> beam.Map(
                lambda _, c, t: _metadata(list(c), offset, t),
                AsSingleton(classes, default_value=[]),
                terms,
            )
        )
        rejects = (classified.rejects, records.rejects) | "FolderRejects" >> beam.Flatten()
        return SourceRead(records.records, rejects, classified.counts, metadata)


class ClassificationEncoder(ImageExampleEncoder):
    """Adds ``image/class/label`` (int64) and ``image/class/text`` (the class name)."""

    def label_size(self, record: ImageRecord | None) -> int:
        measured = getattr(self, "_class_bytes", None)
        if measured is None:
            template = {feature_keys.CLASS_LABEL: 1000, feature_keys.CLASS_TEXT: ""}
            measured = self._class_bytes = len(encode_example(template, feature_keys.IMAGE_LABEL_KINDS))
        text = record.labels["text"] if record is not None else "n" * self.TYPICAL_NAME_BYTES
        return measured + len(text.encode("utf-8"))

    def label_features(self, record: ImageRecord, info: ImageInfo):
        features = {
            feature_keys.CLASS_LABEL: record.labels["label"],
            feature_keys.CLASS_TEXT: record.labels["text"],
        }
        return features, feature_keys.IMAGE_LABEL_KINDS, [], {}


def imagefolder_input_patterns(folder: ImageFolderOptions) -> list[str]:
    """The files a conversion reads, for its inputs fingerprint (``--if-changed``)."""
    patterns = [filesystems.everything_below(folder.root)]
    return patterns + ([filesystems.literal(folder.classes_file)] if folder.classes_file else [])


def to_tfrecord(p: beam.Pipeline, output_dir: str, folder: ImageFolderOptions,
                shards: ShardOptions, checks: ImageChecks,
                fixes: ImageFixes | None = None) -> WriteShards:
    """Add the class-folders conversion to ``p`` (every split it finds); returns the sink."""
    read = ReadImageFolder(folder, skip_below=output_dir)
    return write_format(p, output_dir, "ReadImageFolder", read, read.label_metadata,
                        ClassificationEncoder(checks, read.splits[0], fixes), shards,
                        settings_of("imagefolder", folder, shards, checks, fixes))


def prepare(request: Request) -> Conversion:
    """``convert imagefolder``: checks the folder and the classes file before any job, and
    refuses a typed --split when split folders name the splits."""
    require_folder(request.input, " (check --input)")
    require_classes_file(request.classes)
    folder = ImageFolderOptions(request.input, request.split, request.classes,
                                request.label_offset, request.val_fraction,
                                request.allow_outside_root)
    read = ReadImageFolder(folder)  # looks for split folders
    if read.split_folders:
        refuse_split(request, read.split_folders,
                     f"the split folders of {folder.root} name the splits")
    return Conversion(
        splits=read.splits, input_patterns=imagefolder_input_patterns(folder),
        settings=lambda shards, checks, fixes: settings_of("imagefolder", folder, shards,
                                                           checks, fixes),
        build=lambda p, shards, checks, fixes: to_tfrecord(p, request.output, folder, shards,
                                                            checks, fixes))
