"""Rewrite existing TFRecord files into a new shard count or compression.

``recordbeam reshard 'old/train-*' new --shards 64 --compression gzip``: each input file is
read, streaming, by one task (our framing reader, CRCs checked); the records go to
:class:`recordbeam.sink.WriteShards` as they are (its default encoder), so the output has
the sink's guarantees: hash-ordered shards, atomic commit, a manifest with the feature
spec, TFDS metadata. When the inputs come from one recordbeam folder, its label map, task
and list features are carried over so class names and variable-length boxes survive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from recordbeam import filesystems, output_folder
from recordbeam.feature_spec import is_list_feature
from recordbeam.framing import compression_for_path, read_records
from recordbeam.manifest import split_of_shard_file
from recordbeam.sink import ExampleEncoder, ShardOptions, WriteShards

__all__ = [
    "ReadRecordFiles",
    "ReshardOptions",
    "carried_list_features",
    "carried_metadata",
    "reshard",
    "split_for",
]

#: Manifest keys that describe the dataset (not one run) and survive a reshard.
CARRIED_KEYS = ("label_map", "label_names", "task", "category_ids")


@dataclass(frozen=True)
class ReshardOptions:
    """What to reshard.

    Attributes:
        inputs: the input files (already expanded from globs).
        split: the split name the output shards get.
    """

    inputs: tuple[str, ...]
    split: str


class _ReadFile(beam.DoFn):
    """All records of one TFRecord file, streamed (compression from the file name)."""

    def process(self, path: str) -> Iterator[bytes]:
        with filesystems.open_read(path) as f:
            yield from read_records(f, path=path, compression=compression_for_path(path))


class ReadRecordFiles(beam.PTransform):
    """A PCollection of serialized records from a list of TFRecord files, one task per file."""

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__()
        self._paths = list(paths)

    def expand(self, p):
        return (
            p
            | "Files" >> beam.Create(self._paths)
            | "SpreadFiles" >> beam.Reshuffle()  # one file per task, not all on one worker
            | "ReadFile" >> beam.ParDo(_ReadFile())
        )


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def split_for(paths: Sequence[str], default: str = "train") -> str:
    """The split named by our shard names when all inputs share one, else ``default``."""
    names = {p.rsplit("/", 1)[-1] for p in paths}
    if names and all(output_folder.is_shard_file(n) for n in names):
        splits = {split_of_shard_file(n) for n in names}
        if len(splits) == 1:
            return splits.pop()
    return default


def _source_manifest(paths: Sequence[str]) -> dict[str, Any]:
    """The manifest of the one recordbeam folder the inputs come from, else empty."""
    folders = {_parent(p) for p in paths}
    if len(folders) != 1:
        return {}
    return output_folder.read_manifest(folders.pop()) or {}


def carried_metadata(paths: Sequence[str]) -> dict[str, Any]:
    """Label map, label names and task of the recordbeam folder the inputs come from
    (empty when they come from several folders or from none)."""
    found = _source_manifest(paths)
    return {k: found[k] for k in CARRIED_KEYS if k in found}


def carried_list_features(paths: Sequence[str]) -> frozenset[str]:
    """The features the inputs' recordbeam folder declares as lists (see
    :mod:`recordbeam.feature_spec`), so that resharding a one-box-per-image dataset keeps
    its boxes variable-length. Empty for inputs from several folders or from none."""
    features = _source_manifest(paths).get("features", {})
    return frozenset(name for name, spec in features.items() if is_list_feature(name, spec))


def check_not_in_place(paths: Sequence[str], output_dir: str) -> None:
    """Refuse to write into the folder the inputs are read from (the commit would delete
    the inputs as stale shards of the same split)."""
    out = output_dir.rstrip("/")
    inside = [p for p in paths if _parent(p).rstrip("/") == out]
    if inside:
        raise output_folder.OutputFolderError(
            f"{inside[0]} is in the output folder {output_dir}; reshard into a new folder and "
            "move it over the old one afterwards"
        )


def reshard(
    p: beam.Pipeline, output_dir: str, options: ReshardOptions, shards: ShardOptions
) -> WriteShards:
    """Add the reshard to ``p``; returns the sink (its ``temp_dir`` shows progress)."""
    check_not_in_place(options.inputs, output_dir)
    metadata = {
        **carried_metadata(options.inputs),
        "settings": {
            "command": "reshard",
            "inputs": list(options.inputs),
            "shards": shards.to_json(),
        },
    }
    sink = WriteShards(
        output_dir,
        ExampleEncoder(options.split, list_features=carried_list_features(options.inputs)),
        options=shards,
        metadata=p | "Metadata" >> beam.Create([metadata]),
    )
    _ = p | "ReadRecords" >> ReadRecordFiles(options.inputs) | "WriteShards" >> sink
    return sink
