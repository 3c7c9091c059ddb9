"""COCO input: an instances (detection), person keypoints or LVIS JSON, and/or a
captions JSON, + a folder of images.

Everything is read inside the pipeline, on workers: the job graph holds two paths, not
the dataset, whatever its size. The annotation file's images and categories are streamed
with ``ijson``; its annotations are read in byte ranges by all workers when the file is
large (:mod:`~recordbeam.sources.coco.annotation_ranges`), streamed by one worker when it
is not, so a 448 MB train2017 file never sits in memory, and a file of millions of
annotations is not parsed on one worker.

Stages: one stage streams the images and categories (the annotations of a small file,
the captions file's) and lists the image files (two groups of tasks on the workers:
:mod:`~recordbeam.sources.coco.input_tasks`), the ranged read parses a large file's
annotations -> join files and image entries by file name -> join images, annotations,
captions and LVIS category lists by image id
(:mod:`~recordbeam.sources.coco.join`) -> ``ImageRecord``s for the sink, written by
:class:`~recordbeam.sources.coco.encoder.CocoEncoder`.

:func:`prepare` checks a ``convert coco`` request's inputs before any job and says how
to build it (:func:`to_tfrecord`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import AsList

from recordbeam import filesystems
from recordbeam.dataset import layout
from recordbeam.errors import UsageError
from recordbeam.images.transcode import ImageFixes
from recordbeam.records import ImageRecord
from recordbeam.sources.coco.annotation_ranges import ReadAnnotationRanges, read_in_ranges
from recordbeam.sources.coco.encoder import LABEL_0_OBJECTS, CocoEncoder
from recordbeam.sources.coco.input_tasks import CAPTIONS_TASK, LIST_TASK, ReadInputs
from recordbeam.sources.coco.join import (
    JoinAnnotations,
    JoinFiles,
    LocateOutside,
    planned_size,
)
from recordbeam.sources.coco.json_stream import stream_section
from recordbeam.sources.coco.labels import category_name_warnings, label_map, metadata_of
from recordbeam.sources.coco.options import CocoOptions
from recordbeam.sources.coco.records import JoinKey, JoinMessage
from recordbeam.sources.conversion import settings_of, write_read
from recordbeam.sources.fingerprint import input_terms
from recordbeam.sources.format import Conversion, Request
from recordbeam.sources.input_checks import require_file, require_folder, require_json_object
from recordbeam.sources.listing import skipped_prefix
from recordbeam.sources.record_coder import ImageRecordCoder  # noqa: F401 - registers it
from recordbeam.sources.result import SourceRead
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.planning import ShardOptions
from recordbeam.write.sink import WriteShards


def _tasks_of_group(group: tuple[int, Iterable[str]]) -> Iterable[str]:
    _worker_group, tasks = group
    return tasks


class ReadCoco(beam.PTransform):
    """Read a COCO dataset (instances, person keypoints, LVIS, captions: see
    :class:`CocoOptions`) into ``ImageRecord``s.

    Returns a :class:`~recordbeam.sources.result.SourceRead`; its ``sizes`` are those of
    every file that joined an image entry.

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
        # One stage reads the inputs, in two groups of tasks: the annotations (a small
        # file's, streamed whole) and the captions (a whole file), and the images pass
        # (which stops where its list ends) and the categories pass (which parses the
        # file's end, where COCO puts them: see section_at_end) with the listing. A
        # shuffle on the group spreads them (Create's own shuffle uses random keys, and
        # one run in three put the annotations and images passes on one worker); the
        # local runner deals keys to its workers in turn. A large file's annotations are
        # read in byte ranges by every worker instead (read_in_ranges).
        ranged = bool(opts.annotations) and read_in_ranges(opts.annotations)
        streamed = bool(opts.annotations) and not ranged
        tasks = [(1, "images"), (1, LIST_TASK)]
        if opts.annotations:  # a captions file has no categories
            tasks[1:1] = [(1, "categories")]
        if streamed:
            tasks.insert(0, (0, "annotations"))
        if opts.captions:  # beside the streamed annotations: both read a whole file
            tasks.append((1 if streamed else 0, CAPTIONS_TASK))
        # Main outputs carry their types, so their shuffles use the compact coders of
        # coco.records (Beam types tagged outputs only from 2.72 on).
        inputs = (
            pbegin
            | "InputTasks" >> beam.Create(tasks, reshuffle=False)  # (worker group, task)
            | "SpreadTasks" >> beam.GroupByKey()  # (worker group, [task])
            | "Task" >> beam.FlatMap(_tasks_of_group)  # task
            | "ReadInputs" >> beam.ParDo(ReadInputs(opts, self._skipped_prefix))
            .with_output_types(tuple[JoinKey, JoinMessage])
            .with_outputs("categories", "rejects", "outside", "inputs", "counts",
                          "duplicate_annotation_ids", main="by_name")
        )
        by_name, rejects, counts = inputs.by_name, [inputs.rejects], [inputs.counts]
        duplicate_ids = inputs.duplicate_annotation_ids
        if ranged:
            annotations = pbegin | "ReadAnnotations" >> ReadAnnotationRanges(opts)
            by_name = (by_name, annotations["batches"]) | "EntriesAndAnnotations" >> beam.Flatten()
            rejects.append(annotations["rejects"])
            counts.append(annotations["counts"])
            duplicate_ids = annotations["duplicate_annotation_ids"]
        images_dir = opts.images_dir
        joined = (
            by_name
            | "JoinFilesByName" >> beam.GroupByKey()  # (JoinKey, [ImageEntry | ListedFile...])
            | "MatchFiles" >> beam.ParDo(JoinFiles(images_dir))
            .with_output_types(tuple[str, JoinMessage])  # (image id key, LocatedImage...)
            .with_outputs("rejects", "counts", main="images")
        )
        located = joined.images
        rejects.append(joined.rejects)
        if opts.allow_outside_root:  # only then can entries name files outside the listing
            outside = inputs.outside | "LocateOutside" >> beam.ParDo(  # ImageEntry
                LocateOutside(images_dir)).with_output_types(tuple[str, JoinMessage]
            ).with_outputs("rejects", main="images")
            located = (located, outside.images) | "AllImageFiles" >> beam.Flatten()
            rejects.append(outside.rejects)
        categories = inputs.categories  # Category
        records = (
            located
            # (image id key, [LocatedImage | ImageNotLocated | AnnotationBatch])
            | "JoinAnnotationsById" >> beam.GroupByKey()
            | "BuildRecords" >> beam.ParDo(
                JoinAnnotations(opts.split, opts.contiguous_labels, opts.include_keypoints,
                                opts.captions is not None), AsList(categories),
                AsList(duplicate_ids),
            ).with_output_types(ImageRecord).with_outputs("rejects", main="records")
        )
        terms = input_terms(inputs.inputs)
        contiguous, keypoints = opts.contiguous_labels, opts.include_keypoints
        task = "detection" if opts.annotations else "captioning"
        metadata = pbegin | "Metadata" >> beam.Impulse() | "LabelMap" >> beam.Map(
            lambda _, cats, t: metadata_of(list(cats), contiguous, t, keypoints, task),
            AsList(categories), terms,
        )
        if opts.annotations:
            rejects.append(pbegin | "ClassNames" >> beam.Impulse() | "RepeatedNames" >> beam.FlatMap(
                lambda _, path, cats: category_name_warnings(list(cats), path),
                opts.annotations, AsList(categories)).with_output_types(Any))
        all_rejects = (*rejects, records.rejects) | "CocoRejects" >> beam.Flatten()
        planned = located | "PlannedSizes" >> beam.FlatMap(planned_size, opts.split)
        counts = (joined.counts, *counts) | "CocoCounts" >> beam.Flatten()
        return SourceRead(records.records, all_rejects, counts, metadata, planned)


def coco_input_patterns(coco: CocoOptions) -> list[str]:
    files = [filesystems.literal(f) for f in (coco.annotations, coco.captions) if f]
    return [filesystems.everything_below(coco.images_dir), *files]


#: Options of ``convert coco`` added after its first release: recorded in the settings
#: only when set, so outputs made without them keep their manifests and fingerprints.
_LATER_COCO_OPTIONS = {"include_keypoints": False, "captions": None}


def coco_settings(coco: CocoOptions, shards: ShardOptions, checks: ImageChecks,
                  fixes: ImageFixes | None = None) -> dict[str, Any]:
    settings = settings_of("coco", coco, shards, checks, fixes)
    settings["coco"] = {key: value for key, value in settings["coco"].items()
                        if _LATER_COCO_OPTIONS.get(key, "always") != value}
    return settings


def coco_label_metadata(coco: CocoOptions) -> dict[str, Any] | None:
    """The ``label_map`` and ``category_ids`` a run will write, from the categories
    section (read on the launcher, stopping where the section ends); None when the file
    is broken there, which the run itself then reports with the item's position."""
    if not coco.annotations:  # a captions file alone: no categories
        return {"label_map": {}, "category_ids": {}}
    try:
        categories = [(item["id"], item["name"])
                      for item in stream_section(coco.annotations, "categories", stop_early=True)]
        labels = label_map(categories, coco.contiguous_labels)
    except Exception:  # noqa: BLE001 - any broken file is the run's to report, not ours
        return None
    return {"label_map": {str(label): name for label, name in labels.values()},
            "category_ids": {str(cid): label for cid, (label, _name) in labels.items()}}


def to_tfrecord(
    p: beam.Pipeline, output_dir: str, coco: CocoOptions, shards: ShardOptions,
    checks: ImageChecks, fixes: ImageFixes | None = None,
) -> WriteShards:
    """Add the COCO conversion to ``p``; returns the sink (its ``temp_dir`` shows progress).

    Raises ``LabelMapMismatch`` before any work when ``output_dir`` holds other splits
    whose label map disagrees with the annotation file's categories.
    """
    layout.check_labels_agree(output_dir, [coco.split], lambda: coco_label_metadata(coco))
    encoder = CocoEncoder(checks, coco.split, fixes, coco.include_masks, coco.include_keypoints,
                          captions=coco.captions is not None,
                          write_objects=coco.annotations is not None)
    return write_read(p, "ReadCoco", ReadCoco(coco, skip_below=output_dir), output_dir, encoder,
                      shards, coco_settings(coco, shards, checks, fixes), ())


def prepare(request: Request) -> Conversion:
    """``convert coco``: checks the inputs before any job (an annotation or captions file
    at least, each there and starting as a JSON object, and an images folder with files).
    Once the run is committed, says how many objects were written with label 0."""
    _check_inputs(request.images, request.annotations, request.captions)
    coco = CocoOptions(request.images, request.annotations, request.split,
                       request.contiguous_labels, allow_outside_root=request.allow_outside_root,
                       include_masks=request.include_masks,
                       include_keypoints=request.include_keypoints, captions=request.captions)
    return Conversion(
        splits=[coco.split], input_patterns=coco_input_patterns(coco),
        settings=lambda shards, checks, fixes: coco_settings(coco, shards, checks, fixes),
        build=lambda p, shards, checks, fixes: to_tfrecord(p, request.output, coco, shards,
                                                            checks, fixes),
        after_run=None if coco.contiguous_labels
        else lambda output: _warn_of_label_0(output, coco.split))


def _check_inputs(images_dir: str, annotations: str | None, captions: str | None) -> None:
    """Input paths that exist, then annotation files that are JSON objects."""
    if annotations is None and captions is None:
        raise UsageError("convert coco needs --annotations FILE, --captions FILE or both")
    given = ((annotations, "--annotations", "annotation file",
              "the COCO instances JSON file, e.g. annotations/instances_train2017.json"),
             (captions, "--captions", "captions file",
              "the COCO captions JSON file, e.g. annotations/captions_train2017.json"))
    for path, flag, kind, what in given:
        if path is not None:
            require_file(path, flag, kind, what)
    require_folder(images_dir, " (check --images)")
    for path, flag, _kind, what in given:  # every path exists: now what the files hold
        if path is not None:
            require_json_object(path, flag, what)


def _warn_of_label_0(output: str, split: str) -> None:
    """Known once the objects are written: some had category id 0 (Label Studio's COCO
    export numbers categories from 0), written as label 0, the background's."""
    manifest = layout.read_manifest(output) or {}
    count = manifest.get("splits", {}).get(split, {}).get("counts", {}).get(LABEL_0_OBJECTS, 0)
    if count:
        print(f"warning: {count} object{'s have' if count > 1 else ' has'} category id 0, "
              "written as label 0, which the Object Detection API and Model Garden read as "
              "background; rerun with --contiguous-labels to write labels 1..K", file=sys.stderr)
