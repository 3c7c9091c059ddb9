"""The tail every format's conversion shares: the settings that shape an output, the
inputs' fingerprint, and the sink (:class:`recordbeam.write.sink.WriteShards`) fed by the
format's read transform."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import apache_beam as beam

from recordbeam import __version__
from recordbeam.dataset import layout
from recordbeam.images.transcode import ImageFixes
from recordbeam.sources.annotated_files import label_metadata
from recordbeam.sources.fingerprint import fingerprint
from recordbeam.sources.format import Conversion
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.incremental import Incremental
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards

#: Options every format but COCO and manifests gained after its first release, with their
#: defaults: recorded in the settings only when set, so outputs made without them keep
#: their manifests and fingerprints (COCO and manifests record theirs always).
_LATER_FORMAT_OPTIONS = {"allow_outside_root": False}


def settings_of(kind: str, inputs: Any, shards: ShardOptions, checks: ImageChecks,
                fixes: ImageFixes | None = None) -> dict[str, Any]:
    """Everything that shapes an output besides the input files (goes in the manifest,
    and into the fingerprint ``--if-changed`` compares). Fixes appear only when some are
    on, so outputs made without them keep their fingerprints."""
    options = asdict(inputs)
    if kind not in ("coco", "manifest"):
        options = {key: value for key, value in options.items()
                   if _LATER_FORMAT_OPTIONS.get(key, "always") != value}
    settings = {
        "command": f"convert {kind}",
        "recordbeam_version": __version__,
        kind: options,
        "shards": shards.to_json(),
        "checks": asdict(checks),
    }
    if fixes is not None and fixes.active:
        settings["fixes"] = asdict(fixes)
    return settings


def _with_fingerprint(metadata: dict, settings: Mapping[str, Any]) -> dict:
    inputs = metadata.pop("inputs")
    metadata["inputs_fingerprint"] = fingerprint(int(inputs["terms"], 16), inputs["files"], settings)
    metadata["input_files"] = inputs["files"]
    return metadata


def write_read(p: beam.Pipeline, name: str, read_transform: beam.PTransform, output_dir: str,
               encoder: Any, shards: ShardOptions, settings: dict[str, Any],
               splits: Sequence[str]) -> WriteShards:
    """The common tail of every input kind: fingerprint, then the sink, whose encoder reads
    no file that links lead out of the read's ``input_roots``."""
    encoder.input_roots = read_transform.input_roots
    read = p | name >> read_transform
    metadata = read.metadata | "Fingerprint" >> beam.Map(
        lambda m: {**_with_fingerprint(m, settings), "settings": settings}
    ).with_output_types(Any)
    incremental = (Incremental(settings, shards.input_key, shards.compact_below)
                   if shards.incremental else None)
    sink = WriteShards(
        output_dir, encoder, options=shards, rejects=read.rejects, counts=read.counts,
        metadata=metadata, splits=splits, sizes=read.sizes, incremental=incremental,
    )
    _ = read.records | "WriteShards" >> sink
    return sink


def classes_known(classes: Sequence[str] | None) -> Callable[[], dict[str, Any] | None]:
    """The label metadata of classes known before the run; None when they are known only
    once the annotations are read (the commit then checks them against other splits)."""
    return lambda: label_metadata(classes) if classes is not None else None


def write_format(p: beam.Pipeline, output_dir: str, name: str, read: Any,
                 known_labels: Callable[[], dict[str, Any] | None], encoder: Any,
                 shards: ShardOptions, settings: dict[str, Any]) -> WriteShards:
    """Every split ``read`` finds, into the sink. Raises ``LabelMapMismatch`` before any
    work when ``output_dir`` holds other splits whose label map disagrees with
    ``known_labels()``."""
    layout.check_labels_agree(output_dir, read.splits, known_labels)
    return write_read(p, name, read, output_dir, encoder, shards, settings, read.splits)


def conversion(kind: str, options: Any, splits: Sequence[str], input_patterns: Sequence[str],
               output_dir: str, read: Callable[[], Any],
               encoder: Callable[[Any, ImageChecks, ImageFixes | None], Any],
               after_run: Callable[[str], None] | None = None) -> Conversion:
    """The :class:`~recordbeam.sources.format.Conversion` of a format whose read transform
    knows its splits and classes (``read()``, made as the pipeline is built: it may read
    small files on the launcher) and whose encoder is ``encoder(read, checks, fixes)``;
    ``options`` (a dataclass) are its settings."""

    def settings(shards: ShardOptions, checks: ImageChecks, fixes: ImageFixes | None) -> dict:
        return settings_of(kind, options, shards, checks, fixes)

    def build(p: beam.Pipeline, shards: ShardOptions, checks: ImageChecks,
              fixes: ImageFixes | None) -> WriteShards:
        transform = read()
        return write_format(p, output_dir, type(transform).__name__, transform,
                            classes_known(transform.classes), encoder(transform, checks, fixes),
                            shards, settings(shards, checks, fixes))

    return Conversion(splits, input_patterns, settings, build, after_run)
