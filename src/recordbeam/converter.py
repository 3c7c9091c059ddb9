"""``recordbeam.convert``: a dataset to sharded TFRecords, from Python (the function is
:func:`convert` here, which ``recordbeam`` exposes under its own name).

The same checks and the same run as ``recordbeam convert <format>``: the keywords are the
command's options with underscores (``max_side=640`` for ``--max-side 640``), checked as
the command checks them; Beam's own options go in ``beam_args`` as they would be typed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recordbeam.errors import UsageError
from recordbeam.options import checked, conversion_options
from recordbeam.sources.format import Conversion, Format, Request, formats


@dataclass(frozen=True)
class UpToDate:
    """Nothing was run: ``output`` already holds these splits, made from the same inputs,
    options and recordbeam version (``if_changed=True``)."""

    output: str
    splits: tuple[str, ...]


def find_format(name: str) -> Format:
    """The format called ``name``; ``UsageError`` naming the closest one otherwise."""
    known = formats()
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"no input format {name!r}{hint}; the formats are {', '.join(known)}")
    return known[name]


def convert(format: str, *, output: str, beam_args: Sequence[str] = (), **options: Any):
    """Convert a dataset of ``format`` (``"coco"``, ``"voc"``, ...) into ``output``.

    Returns the :class:`recordbeam.pipeline.RunResult` of a finished run (its manifest,
    with the counts and rejects, and its wall time), a
    :class:`recordbeam.pipeline.SubmittedRun` for a job not waited for (``detach=True``,
    Dataflow's ``--dry_run``), or :class:`UpToDate`. Raises ``UsageError`` for options
    that do not fit (exit code 2 on the command line), ``DataError`` for inputs with
    problems (1); see :mod:`recordbeam.errors`.

    Example::

        recordbeam.convert("coco", images="train2017/",
                           annotations="annotations/instances_train2017.json",
                           output="out/", shard_size="256MiB")
    """
    from recordbeam.local.runner import check_beam_args, pipeline_options
    from recordbeam.pipeline import check_run_options

    fmt = find_format(format)
    command = f"convert {fmt.name}"
    values = checked((*fmt.options, *conversion_options()), {"output": output, **options},
                     command)
    check_beam_args(list(beam_args), command=command, other_flags=[], explained={})
    beam_options = pipeline_options(list(beam_args))
    check_run_options(beam_options, detach=values["detach"])
    return execute(fmt, prepare(fmt, values, "split" in options), values, beam_options)


def request_of(fmt: Format, values: Mapping[str, Any], split_given: bool) -> Request:
    own = {option.name: values[option.name] for option in fmt.options}
    return Request(output=values["output"], split=values["split"], values=own,
                   split_given=split_given)


def prepare(fmt: Format, values: Mapping[str, Any], split_given: bool) -> Conversion:
    """The format's checks of its inputs, before any job: its :class:`Conversion`.
    ``values`` holds every option of the format and of
    :func:`recordbeam.options.conversion_options`."""
    return fmt.prepare(request_of(fmt, values, split_given))


def execute(fmt: Format, conversion: Conversion, values: Mapping[str, Any], beam_options: Any):
    """Run a prepared conversion, or find the output up to date (``if_changed``)."""
    from recordbeam.pipeline import is_up_to_date, run

    shards, checks, fixes = shard_options(values), image_checks(values), image_fixes(values)
    settings = conversion.settings(shards, checks, fixes)
    output = values["output"]
    if values["if_changed"] and all(
            is_up_to_date(output, split, conversion.input_patterns, settings)
            for split in conversion.splits):
        return UpToDate(output, tuple(conversion.splits))
    result = run(lambda p: conversion.build(p, shards, checks, fixes), output,
                 options=beam_options, overwrite=values["overwrite"],
                 show_progress=not values["quiet"], detach=values["detach"],
                 break_lock=values["break_lock"], command=f"convert {fmt.name}",
                 inputs=conversion.input_patterns)
    _after_run(conversion, result, output)
    return result


def _after_run(conversion: Conversion, result: Any, output: str) -> None:
    from recordbeam.pipeline import RunResult

    if conversion.after_run is not None and isinstance(result, RunResult):
        conversion.after_run(output)


def shard_options(values: Mapping[str, Any]):
    """The shards asked for; ``near_duplicates`` with ``duplicates="off"`` is refused, not
    ignored."""
    from recordbeam.write.planning import ShardOptions, parse_size

    if values["duplicates"] == "off" and values["near_duplicates"]:
        raise UsageError("--near-duplicates would be ignored with --duplicates off; drop one "
                         "of them")
    incremental = values["incremental"]
    if values["verify_unchanged"] and not incremental:
        raise UsageError("--verify-unchanged applies to incremental runs only: add "
                         "--incremental, or drop --verify-unchanged")
    if values["compact_below"] is not None and not incremental:
        raise UsageError("--compact-below applies to incremental runs only: add --incremental, "
                         "or drop --compact-below")
    if incremental and values["shards"] is not None:
        raise UsageError("--shards cannot be combined with --incremental: an incremental run "
                         "keeps the shards that did not change and cuts its new ones by "
                         "--shard-size; drop --shards")
    if incremental and (values["duplicates"] not in ("keep", "off") or values["near_duplicates"]):
        raise UsageError("--duplicates drop and --near-duplicates cannot be combined with "
                         "--incremental yet (an incremental run does not look for "
                         "duplicates); drop one of them")

    return ShardOptions(
        num_shards=values["shards"], shard_size=parse_size(str(values["shard_size"])),
        compression=values["compression"], index=values["index"],
        max_reject_fraction=values["max_reject_fraction"],
        max_annotation_reject_fraction=values.get("max_annotation_reject_fraction"),
        duplicates=values["duplicates"], near_duplicates=values["near_duplicates"],
        incremental=incremental,
        input_key="content" if values["verify_unchanged"] else "stat",
        compact_below=values["compact_below"] or 0.0,
    )


def image_checks(values: Mapping[str, Any]):
    from recordbeam.write.image_encoder import ImageChecks
    from recordbeam.write.planning import parse_size

    return ImageChecks(
        max_pixels=values["max_pixels"] or None,
        max_bytes=parse_size(str(values["max_image_bytes"])),
        verify_decode=values["verify_decode"],
    )


def image_fixes(values: Mapping[str, Any]):
    """The image fixes asked for; a JPEG quality no fix would use is refused, not ignored."""
    from recordbeam.images.transcode import DEFAULT_JPEG_QUALITY, ImageFixes

    quality = values["jpeg_quality"]
    fixes = ImageFixes(
        transcode=values["transcode"],
        quality=DEFAULT_JPEG_QUALITY if quality is None else quality,
        max_side=values["max_side"],
        apply_exif=values["apply_exif"],
    )
    if quality is not None and (not fixes.active or fixes.transcode == "png"):
        raise UsageError(
            f"--jpeg-quality {quality} would be ignored: no image is re-encoded as JPEG. It "
            "applies with --transcode jpeg, and to the JPEGs --max-side or --apply-exif "
            "re-encode (not with --transcode png); drop it or add one of those")
    return fixes
