"""Shared fixtures for integration tests: one generated COCO sample per session, a way to
convert it, and readers for what a conversion wrote.

Pipelines run in Beam's in-memory mode with one worker unless a test is about the
runner mode: every real run costs about a second even on this tiny sample.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from once import once_per_run

from recordbeam import pipeline
from recordbeam.dataset.layout import MANIFEST, REJECTS
from recordbeam.sources.coco.reader import CocoOptions
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord
from recordbeam.testing.samples import SampleDataset, make_coco_sample
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
MULTI_PROCESS = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")

#: The sample rejects about a quarter of its images on purpose; tests that are not about
#: the limit raise it so the run commits.
LENIENT = 0.5

#: Kinds the object features are written with, so empty lists decode with the right dtype.
OBJECT_KINDS = {
    "image/object/bbox/xmin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/ymax": "float",
    "image/object/area": "float",
    "image/object/class/label": "int64",
    "image/object/class/text": "bytes",
    "image/object/is_crowd": "int64",
}


@dataclass(frozen=True)
class Converted:
    """A finished conversion: where it went and what it wrote."""

    output: str
    manifest: dict[str, Any] | None

    def shard_paths(self) -> list[str]:
        return shard_paths(self.output)

    def records(self) -> list[bytes]:
        return [r for path in self.shard_paths() for r in open_records(path)]

    def examples(self) -> list[dict[str, Any]]:
        return [decode_example(r, OBJECT_KINDS) for r in self.records()]

    def rejects(self, name: str = REJECTS) -> list[dict[str, str]]:
        return read_rejects(os.path.join(self.output, name))

    def files(self) -> list[str]:
        """Every file below the output folder, relative, sorted."""
        found = []
        for folder, _dirs, names in os.walk(self.output):
            found += [os.path.relpath(os.path.join(folder, n), self.output) for n in names]
        return sorted(found)

    def snapshot(self) -> dict[str, bytes]:
        """Relative path -> bytes of every file."""
        out = {}
        for name in self.files():
            with open(os.path.join(self.output, name), "rb") as f:
                out[name] = f.read()
        return out


def shard_paths(output: str) -> list[str]:
    """Shard files in ``output`` (not indexes), sorted by name."""
    names = sorted(n for n in os.listdir(output) if ".tfrecord" in n and not n.endswith(".idx"))
    return [os.path.join(output, n) for n in names]


def read_rejects(path: str) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_manifest(output: str) -> dict[str, Any] | None:
    path = os.path.join(output, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def output_at() -> Callable[[str | os.PathLike[str]], Converted]:
    """``output_at(folder)``: a view of any output folder (its manifest is None when absent)."""

    def at(output: str | os.PathLike[str]) -> Converted:
        return Converted(os.fspath(output), read_manifest(os.fspath(output)))

    return at


@pytest.fixture(scope="session")
def coco_sample(tmp_path_factory) -> SampleDataset:
    """The generated COCO sample with every bad case; never modified by tests. Made once
    per test run."""
    return once_per_run(tmp_path_factory, "coco-sample",
                        lambda folder: make_coco_sample(folder, num_images=24, seed=0))


@pytest.fixture(scope="session")
def coco_json(coco_sample) -> dict[str, Any]:
    with open(coco_sample.annotations, encoding="utf-8") as f:
        return json.load(f)


ConvertFn = Callable[..., Converted]


@pytest.fixture(scope="session")
def convert(coco_sample) -> ConvertFn:
    """``convert(output, **options)`` runs the COCO pipeline on the sample (or ``sample=``).

    Options: ``shards``, ``compression``, ``index``, ``contiguous_labels``, ``split``,
    ``max_reject_fraction`` (default lenient), ``beam_args`` (default in-memory),
    ``overwrite``.
    """

    def run(
        output: str | os.PathLike[str],
        *,
        sample: SampleDataset | None = None,
        shards: int | None = None,
        compression: str = "none",
        index: bool = False,
        contiguous_labels: bool = False,
        split: str = "train",
        max_reject_fraction: float = LENIENT,
        beam_args: tuple[str, ...] = IN_MEMORY,
        overwrite: bool = False,
    ) -> Converted:
        data = sample or coco_sample
        out = os.fspath(output)
        coco = CocoOptions(data.images_dir, data.annotations, split, contiguous_labels)
        shard_options = ShardOptions(
            num_shards=shards,
            compression=compression,
            index=index,
            max_reject_fraction=max_reject_fraction,
        )
        result = pipeline.run(
            lambda p: coco_to_tfrecord(p, out, coco, shard_options, ImageChecks()),
            out,
            beam_args=list(beam_args),
            overwrite=overwrite,
            show_progress=False,
        )
        return Converted(out, dict(result.manifest))

    return run


@pytest.fixture(scope="session")
def converted(convert, tmp_path_factory) -> Converted:
    """The sample converted with default options (one shard, uncompressed). Read only."""
    return _converted_once(tmp_path_factory, "converted", lambda folder: convert(folder / "out"))


@pytest.fixture(scope="session")
def three_shards(convert, tmp_path_factory) -> Converted:
    """The sample converted into three shards, in memory. Read only."""
    return _converted_once(tmp_path_factory, "three-shards",
                           lambda folder: convert(folder / "out", shards=3))


def _converted_once(tmp_path_factory, name: str, make: Callable[[Any], Converted]) -> Converted:
    """``make``'s conversion, once per test run (:func:`once.once_per_run`); what crosses
    between the processes is its folder and manifest (a conftest's class does not pickle)."""

    def plain(folder):
        done = make(folder)
        return done.output, done.manifest

    return Converted(*once_per_run(tmp_path_factory, name, plain))
