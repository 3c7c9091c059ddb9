"""Rewrite existing TFRecord files into a new shard count or compression.

``recordbeam reshard 'old/train-*' new --shards 64 --compression gzip``: each input file is
read, streaming, by one task (our framing reader, CRCs checked); the records go to
:class:`recordbeam.write.sink.WriteShards` as they are (its default encoder), so the output has
the sink's guarantees: hash-ordered shards, atomic commit, a manifest with the feature
spec, TFDS metadata. When the inputs come from one recordbeam folder, its label map, task
and list features are carried over so class names and variable-length boxes survive.

Splits stay apart: each input keeps the split its shard name gives it
(``val-00000-of-00004.tfrecord`` stays ``val``), so resharding a whole folder never
leaks validation examples into training. ``--split`` renames the one split of the
inputs; it is refused when the inputs hold several.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from recordbeam import filesystems
from recordbeam.dataset import layout
from recordbeam.dataset.class_names import check_class_list
from recordbeam.dataset.manifest import split_of_shard_file
from recordbeam.errors import DataError, UsageError
from recordbeam.tfrecord.feature_spec import is_list_feature
from recordbeam.tfrecord.framing import RecordError, compression_for_path, read_records
from recordbeam.write.encoder import Encoded, ExampleEncoder
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

__all__ = [
    "DamagedInput",
    "ReadRecordFiles",
    "ReshardError",
    "ReshardOptions",
    "SplitRecord",
    "SplitRecordEncoder",
    "carried_list_features",
    "carried_metadata",
    "input_splits",
    "reshard",
]

#: Manifest keys that describe the dataset (not one run) and survive a reshard.
CARRIED_KEYS = ("label_map", "label_names", "task", "category_ids")


class ReshardError(UsageError):
    """The inputs cannot be resharded as asked (``--split`` over several splits)."""


@dataclass(frozen=True)
class ReshardOptions:
    """What to reshard.

    Attributes:
        inputs: the input files (already expanded from globs).
        split: None keeps each input's split (from its shard name; ``train`` for files
            named otherwise); a name puts every input in that split, which is refused
            when the inputs' names carry several splits (see :func:`input_splits`).
    """

    inputs: tuple[str, ...]
    split: str | None = None


@dataclass(frozen=True)
class SplitRecord:
    """One serialized record and the split it is written to."""

    split: str
    data: bytes


class SplitRecordEncoder(ExampleEncoder):
    """Writes :class:`SplitRecord` data as it is, into the record's own split. The
    identity is the data's hash, as for plain ``bytes`` elements, so a one-split reshard
    orders its records as before."""

    def identity(self, record: SplitRecord) -> str:
        return hashlib.sha256(record.data).hexdigest()

    def size(self, record: SplitRecord) -> int:
        return super().size(record.data)

    def split(self, record: SplitRecord) -> str:
        return record.split

    def encode(self, record: SplitRecord) -> Encoded:
        return Encoded(serialized=record.data)


class DamagedInput(DataError):
    """An input file failed a check while it was read. Its message keeps the reader's
    problem and gives advice a reshard can follow: ``skip_corrupt``, the reader's own
    advice to Python callers, is no option of a reshard."""


def _records(path: str) -> Iterator[bytes]:
    """All records of one TFRecord file, streamed (compression from the file name)."""
    try:
        with filesystems.open_read(path) as f:
            yield from read_records(f, path=path, compression=compression_for_path(path))
    except RecordError as error:
        raise DamagedInput(
            f"{error.problem}. The input file is damaged: re-create it, or "
            f"reshard without it (`recordbeam verify {path}` lists every damaged record)"
        ) from None


class _ReadFile(beam.DoFn):
    """All records of one TFRecord file, streamed."""

    def process(self, path: str) -> Iterator[bytes]:
        yield from _records(path)


class _ReadFileSplit(beam.DoFn):
    """All records of one TFRecord file as :class:`SplitRecord`s of its split."""

    def process(self, path_split: tuple[str, str]) -> Iterator[SplitRecord]:
        path, split = path_split
        for data in _records(path):
            yield SplitRecord(split, data)


class ReadRecordFiles(beam.PTransform):
    """A PCollection of serialized records from a list of TFRecord files, one task per file.

    With ``splits`` (input path -> split name, see :func:`input_splits`) the records are
    :class:`SplitRecord`s of their file's split; without, plain ``bytes``.
    """

    def __init__(self, paths: Sequence[str], splits: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._paths = list(paths)
        self._splits = dict(splits) if splits is not None else None

    def expand(self, p):
        if self._splits is None:
            files, read = self._paths, _ReadFile()
        else:
            files, read = [(path, self._splits[path]) for path in self._paths], _ReadFileSplit()
        return (
            p
            | "Files" >> beam.Create(files)
            | "SpreadFiles" >> beam.Reshuffle()  # one file per task, not all on one worker
            | "ReadFile" >> beam.ParDo(read)
        )


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def input_splits(paths: Sequence[str], split: str | None = None,
                 default: str = "train") -> dict[str, str]:
    """Each input's output split: the one its shard name gives (``default`` for other
    names), or ``split`` for every input when given.

    Raises:
        ReshardError: ``split`` is given but the inputs' names carry several splits
            (writing them as one would merge e.g. validation into training).
    """
    named = {p: split_of_shard_file(_name(p)) for p in paths
             if layout.is_shard_file(_name(p))}
    if split is None:
        return {p: named.get(p, default) for p in paths}
    found = sorted(set(named.values()))
    if len(found) > 1:
        raise ReshardError(
            f"the inputs hold the splits {', '.join(found)}; --split {split} would merge them "
            "into one. Leave --split out to keep each split apart, or pick one split's files "
            f"with the glob (e.g. '{_parent(paths[0])}/{found[0]}-*')"
        )
    return dict.fromkeys(paths, split)


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _source_manifest(paths: Sequence[str]) -> dict[str, Any]:
    """The manifest of the one recordbeam folder the inputs come from, else empty."""
    folders = {_parent(p) for p in paths}
    if len(folders) != 1:
        return {}
    return layout.read_manifest(folders.pop()) or {}


def carried_metadata(paths: Sequence[str]) -> dict[str, Any]:
    """Label map, label names and task of the recordbeam folder the inputs come from
    (empty when they come from several folders or from none). Their class names are
    checked as a conversion's are (a manifest may have been edited by hand):
    :class:`~recordbeam.dataset.class_names.ClassNameError` names the manifest."""
    found = _source_manifest(paths)
    carried = {k: found[k] for k in CARRIED_KEYS if k in found}
    names = carried.get("label_names") or []
    if names:
        source = filesystems.join(_parent(paths[0]), layout.MANIFEST)
        check_class_list(names, [f"label_names[{i}]" for i in range(len(names))], source,
                         repeats_allowed=True)
    return carried


def carried_list_features(paths: Sequence[str]) -> frozenset[str]:
    """The features the inputs' recordbeam folder declares as lists (see
    :mod:`recordbeam.tfrecord.feature_spec`), so that resharding a one-box-per-image dataset keeps
    its boxes variable-length. Empty for inputs from several folders or from none."""
    features = _source_manifest(paths).get("features", {})
    return frozenset(name for name, spec in features.items() if is_list_feature(name, spec))


def check_not_in_place(paths: Sequence[str], output_dir: str) -> None:
    """Refuse to write into the folder the inputs are read from (the commit would delete
    the inputs as stale shards of the same split)."""
    out = output_dir.rstrip("/")
    inside = [p for p in paths if _parent(p).rstrip("/") == out]
    if inside:
        raise layout.OutputFolderError(
            f"{inside[0]} is in the output folder {output_dir}; reshard into a new folder and "
            "move it over the old one afterwards"
        )


def reshard(
    p: beam.Pipeline, output_dir: str, options: ReshardOptions, shards: ShardOptions
) -> WriteShards:
    """Add the reshard to ``p``; returns the sink (its ``temp_dir`` shows progress).

    Raises ``ReshardError`` before any work when ``options.split`` would merge splits,
    ``LabelMapMismatch`` when ``output_dir`` holds other splits with another label map.
    """
    if not options.inputs:
        raise ReshardError("no input files to reshard")
    check_not_in_place(options.inputs, output_dir)
    splits = input_splits(options.inputs, options.split)
    written = sorted(set(splits.values()))
    carried = carried_metadata(options.inputs)
    layout.check_labels_agree(output_dir, written, lambda: carried)
    metadata = {
        **carried,
        "settings": {
            "command": "reshard",
            "inputs": list(options.inputs),
            "shards": shards.to_json(),
        },
    }
    sink = WriteShards(
        output_dir,
        SplitRecordEncoder(written[0], list_features=carried_list_features(options.inputs)),
        options=shards,
        metadata=p | "Metadata" >> beam.Create([metadata]),
        splits=written[1:],
    )
    _ = p | "ReadRecords" >> ReadRecordFiles(options.inputs, splits) | "WriteShards" >> sink
    return sink
