"""The annotations list of a COCO file, read in byte ranges by many workers at once
(:class:`~recordbeam.sources.byte_ranges.ReadJsonArray`), so no worker parses the whole
list. Files from :data:`RANGED_FROM_BYTES` on are read this way (:func:`read_in_ranges`); a
smaller one is streamed by one worker.

The annotations leave as from the streamed pass (:meth:`ReadInputs._read_annotations`):
batches keyed by image id, rejects naming the position in the whole list, counts, and the
ids given twice (the ids are split by value into as many buckets as there are ranges, each
bucket checked on its own: :func:`repeated_ids`). A file whose structure the ranges cannot
follow (broken brackets, a document that is no object, a key given twice, nesting deeper
than ``MAX_JSON_DEPTH``, no JSON outside the ``annotations``, ``images`` and
``categories`` lists) is read by the streamed pass on one worker, which fails with the
streamed parser's message, or reads an odd but valid file as a small file's is read. An
annotation the ranged parse refuses (not JSON, ``NaN``, bytes that are not UTF-8) fails
the run the same way (:meth:`ParseRange.fail_as_streamed`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from recordbeam.sources import byte_ranges
from recordbeam.sources.byte_ranges import (  # noqa: F401 - file_ranges: the ranges read
    MAX_RANGE_BYTES,
    MIN_RANGE_BYTES,
    ByteRange,
    ParseRanges,
    ReadJsonArray,
    file_ranges,
)
from recordbeam.sources.coco.input_tasks import (
    IdTally,
    ReadInputs,
    annotation_outputs,
    annotation_reject,
)
from recordbeam.sources.coco.json_stream import CocoFormatError, stream_section
from recordbeam.sources.coco.options import CocoOptions
from recordbeam.sources.coco.records import JoinKey, JoinMessage

#: Annotation files from this size on are read in ranges; a smaller one is streamed whole
#: by one worker beside the images pass and the listing (ReadInputs). The ranged read
#: costs three passes in stages of their own, which the stream's neighbours do not hide:
#: on 2 local workers a full run of 100k images (a 153 MB file) took 32-37 s ranged
#: against 28-29 s streamed, and 20k images (30 MB) ~1 CPU s more. Its own stage runs
#: 1.7x faster on 2 workers than on one at 1M annotations (``coco_annotations_bench.py``)
#: and spreads over every worker of a cluster, which matters once one worker's stream
#: would be long: 512 MiB is ~2.4M annotations, ~35 s of one worker's stream.
RANGED_FROM_BYTES = 512 << 20


def read_in_ranges(path: str) -> bool:
    """Whether the annotations of ``path`` are read in ranges (:data:`RANGED_FROM_BYTES`);
    a file that cannot be sized is streamed, and fails there with the streamed pass's
    message."""
    return byte_ranges.read_in_ranges(path, RANGED_FROM_BYTES)


class ParseRange(ParseRanges):
    """The annotations that begin in one range, checked and batched by image id as in the
    streamed pass, their ids by bucket on ``id_buckets``."""

    output_type = tuple[JoinKey, JoinMessage]
    main = "batches"
    outputs = ("rejects", "counts", "id_buckets", "duplicate_annotation_ids")

    def __init__(self, options: CocoOptions) -> None:
        super().__init__(options.annotations)
        self._options = options

    def streamed(self) -> Iterable[Any]:
        return ReadInputs(self._options).process("annotations")

    def elements(self, rng: ByteRange, span: tuple[int, int], first: int, items: list[Any]):
        tally = IdTally(spill_ids=len(items) + 1)  # one range's ids: parted, never spilled
        try:
            for _position, output in annotation_outputs(
                    enumerate(items, first), self.path, self._options, tally):
                yield output
        except CocoFormatError:  # a panoptic or captions file: its first item names it
            self.fail_as_streamed(span[0])
        for bucket, part in tally.parts(rng.count):
            yield TaggedOutput("id_buckets", (bucket, part))

    def fail_as_streamed(self, where: int) -> None:
        path = self._options.annotations
        for position, item in enumerate(stream_section(path, "annotations")):
            annotation_reject(item, path, position, self._options)  # raises for a panoptic file...
        raise CocoFormatError(
            f"{path}: malformed JSON while reading 'annotations' (an annotation at byte {where} "
            "is not plain JSON: NaN, bytes that are not UTF-8 or a control character in a "
            "string). Fix or re-export the annotation file.")


def repeated_ids(bucket: tuple[int, Iterable[tuple[bytes, list[Any]]]]) -> list[Any]:
    _bucket, parts = bucket
    return IdTally.merged(parts).repeated()


class ReadAnnotationRanges(beam.PTransform):
    """The annotations of ``options.annotations``, read in ranges: a tagged result with
    the main output (``(JoinKey, AnnotationBatch)``), ``rejects``, ``counts`` and
    ``duplicate_annotation_ids``, as :class:`ReadInputs` gives them for the section."""

    def __init__(self, options: CocoOptions, smallest: int | None = None,
                 largest: int | None = None) -> None:
        super().__init__()
        self._options = options
        self._smallest = MIN_RANGE_BYTES if smallest is None else smallest
        self._largest = MAX_RANGE_BYTES if largest is None else largest

    def expand(self, pbegin):
        parsed = pbegin | "Ranges" >> ReadJsonArray(
            ParseRange(self._options), "annotations", ("images", "categories"),
            self._smallest, self._largest)
        duplicates = (
            parsed.id_buckets
            | "IdsByBucket" >> beam.GroupByKey()
            | "RepeatedIds" >> beam.FlatMap(repeated_ids)
        )
        all_duplicates = ((parsed.duplicate_annotation_ids, duplicates)
                          | "DuplicateAnnotationIds" >> beam.Flatten())
        return {"batches": parsed.batches, "rejects": parsed.rejects, "counts": parsed.counts,
                "duplicate_annotation_ids": all_duplicates}
