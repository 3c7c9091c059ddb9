"""The ``recordbeam`` command: a thin shell over the library.

Exit codes:
    0  success (``verify``: every record is clean)
    1  the data has problems: ``verify`` found a corrupt record, or a conversion failed
       on its inputs (malformed annotations, too many rejects)
    2  usage: bad arguments, missing input paths, an output folder holding foreign files
    3  the run failed for another reason (I/O error such as a full disk, runner failure)
  130  interrupted (Ctrl-C)

Each error recordbeam raises on purpose carries its exit code in its type
(:mod:`recordbeam.errors`); messages never start with a type's name.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import signal
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from recordbeam import __version__
from recordbeam.errors import (
    EXIT_DATA,
    EXIT_FAILED,  # noqa: F401 - part of the command's interface (cli.EXIT_FAILED)
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    RecordbeamError,
    UsageError,
    describe,
    unknown_arguments_error,
)
from recordbeam.local import standby

# --- paths on any Beam filesystem -------------------------------------------------


def expand_paths(patterns: Sequence[str]) -> list[str]:
    """Files matching each path or glob, in order; a pattern matching nothing is an error."""
    from apache_beam.io.filesystems import FileSystems

    paths: list[str] = []
    for pattern in patterns:
        found = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
        found = [p for p in found if not p.endswith(".idx")] if any(c in pattern for c in "*?[") else found
        if not found:
            raise UsageError(f"{pattern}: no such file (check the path or quote the glob)")
        paths.extend(found)
    return paths


def _open(path: str) -> BinaryIO:
    from recordbeam import filesystems

    return filesystems.open_read(path)


# --- inspect --------------------------------------------------------------------------


def _text_value(value: bytes) -> str:
    from google.protobuf import text_encoding

    from recordbeam.images.checks import describe_bytes

    if len(value) > 64:
        return describe_bytes(value)
    return '"' + text_encoding.CEscape(value, as_utf8=True) + '"'


def _feature_text(feature: Any, indent: str) -> list[str]:
    kind = feature.WhichOneof("kind")
    if kind is None:
        return []
    values = getattr(feature, kind).value
    if kind == "bytes_list":
        shown = [_text_value(v) for v in values]
    elif kind == "float_list":
        import numpy as np  # here, not at the top: the command starts ~0.15 s sooner

        shown = [str(np.float32(v)) for v in values]
    else:
        shown = [str(v) for v in values]
    lines = [f"{indent}{kind} {{"]
    lines += [f"{indent}  value: {v}" for v in shown]
    lines.append(f"{indent}}}")
    return lines


def _features_text(features: Any, indent: str) -> list[str]:
    lines = []
    for name in sorted(features.feature):
        lines += [f"{indent}feature {{", f'{indent}  key: "{name}"', f"{indent}  value {{"]
        lines += _feature_text(features.feature[name], indent + "    ")
        lines += [f"{indent}  }}", f"{indent}}}"]
    return lines


def example_text(message: Any) -> str:
    """TensorFlow's ``print(example)`` layout, with large bytes values summarized."""
    if hasattr(message, "feature_lists"):
        lines = ["context {"] + _features_text(message.context, "  ") + ["}", "feature_lists {"]
        for name in sorted(message.feature_lists.feature_list):
            lines += ["  feature_list {", f'    key: "{name}"', "    value {"]
            for feature in message.feature_lists.feature_list[name].feature:
                lines += ["      feature {"] + _feature_text(feature, "        ") + ["      }"]
            lines += ["    }", "  }"]
        return "\n".join(lines + ["}"])
    return "\n".join(["features {"] + _features_text(message.features, "  ") + ["}"])


def _json_values(feature: Any) -> list[Any]:
    kind = feature.WhichOneof("kind")
    if kind is None:
        return []
    values = getattr(feature, kind).value
    if kind != "bytes_list":
        return [float(v) if kind == "float_list" else int(v) for v in values]
    out = []
    for v in values:
        try:
            out.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            out.append({"base64": base64.b64encode(v).decode("ascii")})
    return out


def example_json(message: Any) -> dict[str, Any]:
    """Feature name -> list of values (UTF-8 text where it decodes, else ``{"base64": ...}``)."""
    if hasattr(message, "feature_lists"):
        return {
            "context": {k: _json_values(f) for k, f in sorted(message.context.feature.items())},
            "feature_lists": {
                k: [_json_values(f) for f in fl.feature]
                for k, fl in sorted(message.feature_lists.feature_list.items())
            },
        }
    return {k: _json_values(f) for k, f in sorted(message.features.feature.items())}


def parse_record(data: bytes, mode: str) -> Any:
    """Parse as Example or SequenceExample; ``auto`` picks SequenceExample when it has
    feature lists (an Example never carries field 2)."""
    from recordbeam.tfrecord.example import Example, SequenceExample

    if mode in ("auto", "sequence"):
        sequence = SequenceExample.FromString(data)
        if mode == "sequence" or len(sequence.feature_lists.feature_list):
            return sequence
    return Example.FromString(data)


def _records(path: str) -> Iterator[bytes]:
    from recordbeam.tfrecord.framing import compression_for_path, read_records

    with _open(path) as f:
        yield from read_records(f, path=path, compression=compression_for_path(path))


# --- which files: TFRecord files, globs, or an output folder --------------------------


@dataclass(frozen=True)
class RecordFile:
    """A file ``inspect``, ``verify`` or ``index`` reads; ``listed`` is its example count
    in ``manifest.json`` when it was found through its output folder."""

    path: str
    listed: int | None = None


def record_files(arguments: Sequence[str]) -> list[RecordFile]:
    """The files named by each argument: an output folder (the shards its manifest lists,
    every split), a file, or a glob (see :func:`expand_paths`)."""
    files: list[RecordFile] = []
    for argument in arguments:
        shards = _output_folder_shards(argument)
        if shards is None:
            files += [RecordFile(path) for path in expand_paths([argument])]
        else:
            files += shards
    return files


def _output_folder_shards(argument: str) -> list[RecordFile] | None:
    """The shards of the output folder ``argument``; None when it names no folder."""
    from recordbeam import filesystems
    from recordbeam.dataset.layout import MANIFEST, read_manifest

    if any(c in argument for c in "*?["):
        return None
    manifest_path = filesystems.join(argument, MANIFEST)
    # On object stores a folder is a prefix: it counts as one when a manifest is below it.
    if not (os.path.isdir(argument) if "://" not in argument else filesystems.exists(manifest_path)):
        return None
    manifest = read_manifest(argument)
    if manifest is None:
        raise UsageError(
            f"{argument} is a folder without a finished recordbeam manifest ({MANIFEST}); "
            f"give its TFRecord files instead, e.g. '{filesystems.join(argument, '*.tfrecord*')}'"
        )
    splits = manifest.get("splits", {})
    return [
        RecordFile(filesystems.join(argument, shard["file"]), int(shard["examples"]))
        for name in sorted(splits)
        for shard in splits[name]["shards"]
    ]


#: Checks that fail at byte 0 of a file that was never a TFRecord file (JSON, text, images).
_NO_RECORD_HEADER = ("length_crc", "truncated_header", "too_large")


def _not_tfrecord(path: str, command: str) -> str:
    from recordbeam.dataset.layout import is_ours, is_shard_file

    name = path.rstrip("/").rsplit("/", 1)[-1]
    if is_ours(name) and not is_shard_file(name):
        folder = path[: -len(name)].rstrip("/") or "."
        advice = (f"it is one of recordbeam's metadata files; give the output folder instead "
                  f"(recordbeam {command} {folder})")
    else:
        advice = "if it should be one, it is damaged from its first byte: re-create it"
    return f"{path}: not a TFRecord file (it does not start with a record header); {advice}"


def _record_error_text(error: Any, command: str) -> str:
    """A :class:`recordbeam.tfrecord.framing.RecordError` said for the command line."""
    if error.record == 0 and error.offset == 0 and error.check in _NO_RECORD_HEADER:
        return _not_tfrecord(error.path, command)
    if error.check == "decompression":
        return str(error)  # its advice (check the compression) holds here too
    return (f"{error.problem}. The file is damaged: `recordbeam verify {error.path}` lists "
            "every damaged record; re-create the file")


def cmd_inspect(args: argparse.Namespace) -> int:
    from recordbeam.tfrecord.framing import RecordError

    shown = 0
    for file in record_files(args.paths):
        try:
            for number, data in enumerate(_records(file.path)):
                if shown >= args.n:
                    return EXIT_OK
                message = parse_record(data, args.kind)
                if args.json:
                    print(json.dumps(example_json(message), ensure_ascii=False))
                else:
                    print(f"# {file.path} record {number}")
                    print(example_text(message))
                shown += 1
        except RecordError as error:
            print(f"recordbeam: {_record_error_text(error, 'inspect')}", file=sys.stderr)
            return EXIT_DATA
    return EXIT_OK


# --- verify and index -----------------------------------------------------------------


def verify_file(path: str) -> tuple[int, list[str]]:
    """(clean records, problems) for one file; reads every record, never stops early."""
    from google.protobuf.message import DecodeError

    from recordbeam.tfrecord.example import Example
    from recordbeam.tfrecord.framing import (
        CorruptRecord,
        compression_for_path,
        read_records_with_offsets,
    )

    problems: list[str] = []
    corrupt: list[CorruptRecord] = []  # records the reader stepped over keep their numbers

    def on_corrupt(c: CorruptRecord) -> None:
        corrupt.append(c)
        problems.append(f"{path}: record {c.record} at byte {c.offset}: {c.check} check failed")

    clean = 0
    with _open(path) as f:
        try:
            for read, (offset, _length, data) in enumerate(read_records_with_offsets(
                    f, path=path, compression=compression_for_path(path), skip_corrupt=True,
                    on_corrupt=on_corrupt)):
                try:
                    Example.FromString(data)
                    clean += 1
                except DecodeError:
                    problems.append(f"{path}: record {read + len(corrupt)} at byte {offset}: "
                                    "does not parse as an Example")
        except Exception as error:  # noqa: BLE001 - an unreadable file is a finding, not a crash
            problems.append(f"{path}: {error}")
    if (clean == 0 and len(problems) == len(corrupt) == 1 and corrupt[0].offset == 0
            and corrupt[0].check in _NO_RECORD_HEADER):
        # No header at byte 0 and none found after it: say what the file is not, rather
        # than call a JSON or text file a TFRecord file with a corrupt record.
        problems = [_not_tfrecord(path, "verify")]
    return clean, problems


def _verify_listed(file: RecordFile) -> tuple[int, list[str]]:
    """:func:`verify_file`, plus, for a shard of an output folder, that it exists and
    holds as many records as ``manifest.json`` lists."""
    from recordbeam import filesystems

    if file.listed is not None and not filesystems.exists(file.path):
        return 0, [f"{file.path}: listed in manifest.json but missing; the folder is "
                   "incomplete (re-run the conversion)"]
    clean, problems = verify_file(file.path)
    if file.listed is not None and not problems and clean != file.listed:
        problems.append(f"{file.path}: {clean} records, but manifest.json lists {file.listed}; "
                        "the shard does not belong to this manifest (re-run the conversion)")
    return clean, problems


def cmd_verify(args: argparse.Namespace) -> int:
    total, bad_files, first = 0, 0, None
    for file in record_files(args.paths):
        path = file.path
        clean, problems = _verify_listed(file)
        total += clean
        status = "ok" if not problems else f"{len(problems)} problem(s)"
        print(f"{path}: {clean} records, {status}")
        for problem in problems[: args.max_problems]:
            print(f"  {problem}")
        if problems:
            bad_files += 1
            first = first or problems[0]
    print(f"total: {total} clean records" + (f", {bad_files} bad file(s)" if bad_files else ""))
    if first:
        print(f"first problem: {first}", file=sys.stderr)
        return EXIT_DATA
    return EXIT_OK


def cmd_index(args: argparse.Namespace) -> int:
    import io

    from recordbeam import filesystems
    from recordbeam.tfrecord.framing import RecordError, compression_for_path
    from recordbeam.tfrecord.index import index_path_for, write_index

    for file in record_files(args.paths):
        path = file.path
        out = io.StringIO()
        try:
            with _open(path) as f:
                count = write_index(f, out, path=path, compression=compression_for_path(path))
        except RecordError as error:  # no index is written for a damaged file
            print(f"recordbeam: {_record_error_text(error, 'index')}", file=sys.stderr)
            return EXIT_DATA
        filesystems.write_bytes(index_path_for(path), out.getvalue().encode("ascii"))
        print(f"{index_path_for(path)}: {count} records")
    return EXIT_OK


# --- schema, report, reshard ----------------------------------------------------------


def _finished_manifest(output_dir: str) -> dict[str, Any]:
    from recordbeam.dataset.layout import read_manifest

    manifest = read_manifest(output_dir)
    if manifest is None:
        raise UsageError(f"{output_dir}: no manifest.json; point at a finished recordbeam output folder")
    return manifest


def cmd_schema(args: argparse.Namespace) -> int:
    from recordbeam.dataset.schema import schema_code, schema_json

    manifest = _finished_manifest(args.output_dir)
    if args.json:
        print(json.dumps(schema_json(manifest, args.split, ragged=args.ragged), indent=2))
    else:
        print(schema_code(manifest, args.split, ragged=args.ragged, source=args.output_dir), end="")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from recordbeam.dataset.report import write_report

    _finished_manifest(args.output_dir)
    html_path, charts = write_report(args.output_dir, args.html, max_examples=args.max_examples)
    note = "" if charts else " (tables only: install recordbeam[report] for charts)"
    print(f"report: {html_path}{note}")
    return EXIT_OK


def cmd_reshard(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import run
    from recordbeam.sources.reshard import ReshardOptions, check_not_in_place, input_splits, reshard
    from recordbeam.write.planning import ShardOptions, parse_size

    inputs = expand_paths([args.inputs])
    check_not_in_place(inputs, args.output)
    splits = sorted(set(input_splits(inputs, args.split).values()))
    shards = ShardOptions(num_shards=args.shards, shard_size=parse_size(args.shard_size),
                          compression=args.compression, index=args.index)
    options = ReshardOptions(tuple(inputs), args.split)
    result = run(lambda p: reshard(p, args.output, options, shards), args.output,
                 beam_args=beam_args, overwrite=args.overwrite, show_progress=not args.quiet)
    return _report_run(result, args, splits)


# --- convert --------------------------------------------------------------------------


def _shard_options(args: argparse.Namespace):
    from recordbeam.write.planning import ShardOptions, parse_size

    return ShardOptions(
        num_shards=args.shards, shard_size=parse_size(args.shard_size),
        compression=args.compression, index=args.index,
        max_reject_fraction=args.max_reject_fraction,
        max_annotation_reject_fraction=getattr(args, "max_annotation_reject_fraction", None),
    )


def _checks(args: argparse.Namespace):
    from recordbeam.write.image_encoder import ImageChecks
    from recordbeam.write.planning import parse_size

    return ImageChecks(
        max_pixels=args.max_pixels or None, max_bytes=parse_size(args.max_image_bytes),
        verify_decode=args.verify_decode,
    )


def _counted(n: int, noun: str) -> str:
    """``1 shard``, ``2 shards``: the nouns here all take an s."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def summary_table(result: Any, splits: Sequence[str]) -> str:
    """The end-of-run table for the splits a run wrote: examples, shards, bytes, rejects
    by reason, counts, wall time and speed."""
    from recordbeam.images.checks import human_bytes

    entries = [(name, result.manifest["splits"][name]) for name in splits
               if name in result.manifest["splits"]]
    examples = sum(e["examples"] for _, e in entries)
    rows = [
        ("examples", str(examples)),
        ("shards", str(sum(len(e["shards"]) for _, e in entries))),
        ("bytes", human_bytes(sum(e["bytes"] for _, e in entries))),
    ]
    for name, e in entries:
        rows.append((f"  {name}", f"{_counted(e['examples'], 'example')} in "
                                  f"{_counted(len(e['shards']), 'shard')}"))
    rejects: Counter[str] = Counter()
    warnings: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for _, e in entries:
        rejects.update(e["rejects"]["by_reason"])
        warnings.update(e.get("warnings", {}))
        counts.update(e.get("counts", {}))
    rows.append(("rejects", str(sum(rejects.values()))))
    rows += [(f"  {reason}", str(n)) for reason, n in sorted(rejects.items())]
    rows += [(f"warning {reason}", str(n)) for reason, n in sorted(warnings.items())]
    rows += [(name.replace("_", " "), str(n)) for name, n in sorted(counts.items())
             if name != "images_written"]
    empty = sum(1 for _, e in entries for s in e["shards"] if not s["examples"])
    if empty:
        rows.append(("warning empty shards", str(empty)))
    rows.append(("wall time", f"{result.wall_seconds:.1f} s"))
    rate = examples / result.wall_seconds if result.wall_seconds else 0.0
    rows.append(("images/s", f"{rate:.0f}"))
    width = max(len(k) for k, _ in rows)
    table = "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
    return table + _missing_folder_note(examples, rejects, counts)


def _missing_folder_note(examples: int, rejects: Counter[str], counts: Counter[str]) -> str:
    """A line of advice when most images are missing and their file_names start with
    the images folder's own name: the names are relative to the folder above it."""
    from recordbeam.sources.coco import MISSING_UNDER_FOLDER_NAME

    missing = rejects.get("image:missing", 0)
    prefixed = counts.get(MISSING_UNDER_FOLDER_NAME, 0)
    images = examples + sum(n for key, n in rejects.items() if key.startswith("image:"))
    if not (missing * 2 > images and prefixed * 2 > missing):
        return ""
    return (
        f"\nnote: {missing} of {images} images are missing, and {prefixed} of them have "
        "file_names that start with the name of the --images folder itself (train2017/x.jpg "
        "looked for in train2017/): pass the folder above it as --images (rejects.jsonl "
        "names it)"
    )


def print_summary(result: Any, splits: Sequence[str], output_dir: str) -> None:
    """The summary table and the output folder on stdout; warnings about what was
    written (empty shards) on stderr."""
    from recordbeam.dataset.manifest import empty_shards_warning

    print(summary_table(result, splits))
    print(f"output: {output_dir}")
    for split in splits:
        entry = result.manifest["splits"].get(split)
        warning = entry and empty_shards_warning(split, entry)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)


def _run_conversion(build, args: argparse.Namespace, beam_args: Sequence[str],
                    splits: Sequence[str] | None = None) -> int:
    from recordbeam.pipeline import run

    result = run(build, args.output, options=args.beam_options, overwrite=args.overwrite,
                 show_progress=not args.quiet, detach=getattr(args, "detach", False))
    return _report_run(result, args, list(splits or [args.split]))


def _report_run(result: Any, args: argparse.Namespace, splits: Sequence[str]) -> int:
    """Print what a run did: the summary of a finished run, or what became of a job this
    command did not wait for (``--detach``, a Dataflow ``--dry_run``)."""
    from recordbeam.pipeline import SubmittedRun

    if isinstance(result, SubmittedRun):
        print(_submitted_text(result, args.output))
        return EXIT_OK
    print_summary(result, splits, args.output)
    exif = sum(result.manifest["splits"].get(s, {}).get("counts", {}).get("exif_rotated", 0)
               for s in splits)
    if exif:
        carry = "image carries" if exif == 1 else "images carry"
        print(f"warning: {exif} {carry} an EXIF orientation other than 1; TensorFlow's "
              "decoders ignore it, so they are written and read unrotated (pass --apply-exif "
              "to rotate their pixels).", file=sys.stderr)
    return EXIT_OK


def _submitted_text(result: Any, output: str) -> str:
    from recordbeam import filesystems

    if result.dry_run:
        return (f"dry run: the {result.runner} job graph was built and checked; nothing was "
                f"submitted and nothing was written to {output}")
    job = f"job {result.job_id}" if result.job_id else "the job (the runner gave no id)"
    manifest = filesystems.join(output, "manifest.json")
    return (f"submitted {job} to the {result.runner}; not waiting for it (--detach). "
            f"The job commits its output itself: {manifest} appears, last, when it has "
            "finished; follow the job on the runner's own console")


def _require_file(path: str, flag: str, kind: str, what: str) -> None:
    """Fail fast, before Beam starts, on an input file that is missing or is a folder
    (``kind`` names the file, ``what`` says what ``flag`` takes)."""
    from recordbeam import filesystems

    if "://" not in path and os.path.isdir(path):
        raise UsageError(f"{path} is a folder; {flag} takes {what}")
    if not filesystems.exists(path):
        raise UsageError(f"{path}: no such {kind} (check {flag})")


def _check_inputs(images_dir: str, annotations: str) -> None:
    """Fail fast, before Beam starts, on input paths that do not exist."""
    from recordbeam import filesystems

    _require_file(annotations, "--annotations", "annotation file",
                  "the COCO instances JSON file, e.g. annotations/instances_train2017.json")
    # Listing, not exists(): a gs:// or s3:// "folder" is not an object of its own.
    if not filesystems.has_files(images_dir):
        raise UsageError(f"{images_dir}: no such folder, or it holds no files (check --images)")


def cmd_convert_coco(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import coco_input_patterns, coco_settings, coco_to_tfrecord
    from recordbeam.sources.coco import CocoOptions

    _check_inputs(args.images, args.annotations)
    coco = CocoOptions(args.images, args.annotations, args.split, args.contiguous_labels,
                       allow_outside_root=getattr(args, "allow_outside_root", False),
                       include_masks=getattr(args, "include_masks", False))
    shards, checks, fixes = _shard_options(args), _checks(args), _fixes(args)
    if _up_to_date(args, [args.split], coco_input_patterns(coco),
                   coco_settings(coco, shards, checks, fixes)):
        return EXIT_OK
    return _run_conversion(
        lambda p: coco_to_tfrecord(p, args.output, coco, shards, checks, fixes), args, beam_args)


def _fixes(args: argparse.Namespace):
    from recordbeam.images.transcode import ImageFixes

    return ImageFixes(
        transcode=getattr(args, "transcode", "keep"),
        quality=getattr(args, "jpeg_quality", 95),
        max_side=getattr(args, "max_side", None),
        apply_exif=getattr(args, "apply_exif", False),
    )


def _up_to_date(args: argparse.Namespace, splits: Sequence[str], patterns: list[str],
                settings: dict[str, Any]) -> bool:
    from recordbeam.pipeline import is_up_to_date

    if getattr(args, "if_changed", False) and all(
            is_up_to_date(args.output, split, patterns, settings) for split in splits):
        print(f"{args.output} is up to date (same inputs, options and recordbeam version); nothing to do")
        return True
    return False


def cmd_convert_imagefolder(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam import filesystems
    from recordbeam.pipeline import (
        imagefolder_input_patterns,
        imagefolder_settings,
        imagefolder_to_tfrecord,
    )
    from recordbeam.sources.imagefolder import ImageFolderOptions, ReadImageFolder

    if not filesystems.has_files(args.root):
        raise UsageError(f"{args.root}: no such folder, or it holds no files (check --root)")
    if args.classes:
        _require_file(args.classes, "--classes", "classes file", "a text file with one class name per line")
    folder = ImageFolderOptions(args.root, args.split, args.classes, args.label_offset,
                                args.val_fraction)
    shards, checks, fixes = _shard_options(args), _checks(args), _fixes(args)
    splits = ReadImageFolder(folder).splits
    settings = imagefolder_settings(folder, shards, checks, fixes)
    if _up_to_date(args, splits, imagefolder_input_patterns(folder), settings):
        return EXIT_OK
    return _run_conversion(
        lambda p: imagefolder_to_tfrecord(p, args.output, folder, shards, checks, fixes),
        args, beam_args, splits)


def cmd_convert_manifest(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import table_input_patterns, table_settings, table_to_tfrecord
    from recordbeam.sources.tabular import (
        ReadTable,
        TableError,
        TableOptions,
        parse_split_fractions,
    )

    _require_file(args.manifest, "--manifest", "file", "a .csv or .jsonl file with one row per example")
    if args.schema:
        _require_file(args.schema, "--schema", "file", 'a JSON file such as {"label": "int64"}')
    # --split is a split name, or fractions such as train=0.8,val=0.2 (split by hash).
    fractions = parse_split_fractions(args.split) if "=" in args.split else ()
    if fractions:
        args.split = fractions[0][0]
    try:
        table = TableOptions(
            args.manifest, args.split, args.schema,
            tuple(c.strip() for c in (args.image_columns or "").split(",") if c.strip()),
            args.split_column, fractions, args.group_by, args.allow_outside_root,
        )
        read = ReadTable(table)  # streams the manifest once to learn the column types
    except TableError as error:
        print(f"recordbeam: {error}", file=sys.stderr)
        return EXIT_DATA
    shards, checks, fixes = _shard_options(args), _checks(args), _fixes(args)
    settings = table_settings(table, shards, checks, fixes)
    if _up_to_date(args, read.splits, table_input_patterns(table), settings):
        return EXIT_OK
    return _run_conversion(
        lambda p: table_to_tfrecord(p, args.output, table, shards, checks, fixes),
        args, beam_args, read.splits)


def cmd_demo(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.testing.samples import make_coco_sample

    with tempfile.TemporaryDirectory(prefix="recordbeam-demo-") as root:
        sample = make_coco_sample(root, num_images=args.num_images, seed=0)
        # Not where: the folder is deleted when the command ends.
        print(f"generated a COCO sample of {sample.num_images} images, some deliberately broken")
        args.images, args.annotations = sample.images_dir, sample.annotations
        code = cmd_convert_coco(args, beam_args)
    if code == EXIT_OK:
        print("\nfirst example, as `recordbeam inspect` shows it:")
        from recordbeam import filesystems

        first = filesystems.join(args.output, f"{args.split}-00000-of-")
        shards = expand_paths([first + "*.tfrecord*"])
        cmd_inspect(argparse.Namespace(paths=shards[:1], n=1, json=False, kind="auto"))
    return code


# --- argument parsing -----------------------------------------------------------------


def _whole_number(minimum: int, meaning: str) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``; ``meaning`` says which."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {meaning}, got {value}")
        return value

    return parse


def _fraction(*, zero_allowed: bool, one_allowed: bool) -> Callable[[str], float]:
    """An argparse type: a number between 0 and 1, ends included as asked."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        low_ok = value > 0 or (zero_allowed and value == 0)
        high_ok = value < 1 or (one_allowed and value == 1)
        if not (low_ok and high_ok):
            low, high = ("[0" if zero_allowed else "(0"), ("1]" if one_allowed else "1)")
            raise argparse.ArgumentTypeError(f"must be a fraction in {low}, {high}, got {text}")
        return value

    return parse


def _size(text: str) -> str:
    """An argparse type: a size such as 128MiB, above 0 (kept as text: the commands parse it)."""
    from recordbeam.write.planning import parse_size

    try:
        value = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0 bytes, got {text!r}")
    return text


_POSITIVE = _whole_number(1, "1 or more")
_NON_NEGATIVE = _whole_number(0, "0 or more")


def _add_fix_args(parser: argparse.ArgumentParser) -> None:
    from recordbeam.images.transcode import DEFAULT_JPEG_QUALITY, TRANSCODE_CHOICES

    parser.add_argument("--transcode", default="keep", choices=TRANSCODE_CHOICES,
                        help="re-encode images that are not 8-bit RGB JPEG (jpeg) or PNG (png), "
                        "and convert GIF, BMP, WebP and TIFF; default: keep (bytes written as "
                        "they are, other formats rejected)")
    parser.add_argument("--jpeg-quality", type=_whole_number(1, "between 1 and 100"),
                        default=DEFAULT_JPEG_QUALITY, metavar="1-100",
                        help=f"quality of re-encoded JPEGs (default: {DEFAULT_JPEG_QUALITY})")
    parser.add_argument("--max-side", type=_POSITIVE, default=None, metavar="PIXELS",
                        help="downsize images whose longer side exceeds this many pixels, "
                        "keeping the aspect (default: no downsizing)")
    parser.add_argument("--apply-exif", action="store_true",
                        help="rotate pixels by the EXIF orientation, width and height swap "
                        "(default: off; images are written unrotated and counted)")


def _add_output_args(parser: argparse.ArgumentParser, *, output_required: bool = True) -> None:
    from recordbeam.images.checks import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_PIXELS
    from recordbeam.records import DEFAULT_MAX_REJECT_FRACTION

    parser.add_argument("--output", required=output_required, metavar="OUT",
                        help="output folder, on any Beam filesystem (local, gs://, s3://)")
    parser.add_argument("--split", default="train",
                        help="split name used in shard names (default: train)")
    parser.add_argument("--shards", type=_POSITIVE, default=None, metavar="N",
                        help="number of shards (default: total input bytes / --shard-size)")
    parser.add_argument("--shard-size", type=_size, default="128MiB", metavar="SIZE",
                        help="target shard size when --shards is not given, in bytes or with "
                        "a unit: B, KiB, MiB, GiB, KB, MB, GB (default: 128MiB)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"],
                        help="compression of the shards (default: none)")
    parser.add_argument("--index", action="store_true",
                        help="also write <shard>.idx index files (default: off)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a folder that holds files recordbeam did not write; "
                        "they are kept (default: refuse such a folder)")
    parser.add_argument("--max-reject-fraction", type=_fraction(zero_allowed=True, one_allowed=True),
                        default=DEFAULT_MAX_REJECT_FRACTION, metavar="F",
                        help="fail and commit nothing when more than this fraction (0 to 1) of "
                        f"the images is rejected (default: {DEFAULT_MAX_REJECT_FRACTION})")
    parser.add_argument("--max-pixels", type=_whole_number(0, "0 (no limit) or more pixels"),
                        default=DEFAULT_MAX_PIXELS,
                        metavar="PIXELS",
                        help="reject images whose header claims more pixels, width x height "
                        f"(decompression bombs); 0: no limit (default: {DEFAULT_MAX_PIXELS:,})")
    parser.add_argument("--max-image-bytes", type=_size, metavar="SIZE",
                        default=f"{DEFAULT_MAX_IMAGE_BYTES // 2**20}MiB",
                        help="reject larger image files unread, in bytes or with a unit "
                        f"(default: {DEFAULT_MAX_IMAGE_BYTES // 2**20}MiB)")
    parser.add_argument("--verify-decode", action="store_true",
                        help="fully decode every image, slower (default: header checks only)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress line (default: a progress line on a terminal)")
    parser.add_argument("--if-changed", action="store_true",
                        help="exit 0 at once when OUT already holds a finished output of the same "
                        "inputs (names, sizes, modification times), options and recordbeam "
                        "version (default: always convert)")


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--detach", action="store_true",
                        help="remote runners only: submit the job, print its id and exit 0 "
                        "without waiting; the job commits OUT itself (default: wait for the end)")


#: Said by every command that runs a pipeline: what it does not know goes to Beam.
_TO_BEAM = ("Options not listed here go to Beam as pipeline options (--runner, "
            "--direct_num_workers, --project...); an option neither recordbeam nor Beam "
            "knows is an error.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordbeam", allow_abbrev=False,
        description="Image datasets to sharded TFRecords with Apache Beam; read and check TFRecords "
        "without TensorFlow. Commands that run a pipeline (convert, reshard, demo) pass "
        "options they do not know to Beam (e.g. --runner).",
        epilog="exit codes: 0 ok, 1 data problems, 2 usage error, 3 run failed, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"recordbeam {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, allow_abbrev=False, **kwargs)

    p = command("inspect", help="print the first records as Examples")
    p.add_argument("paths", nargs="+", metavar="PATH_OR_GLOB")
    p.add_argument("-n", type=_NON_NEGATIVE, default=3, metavar="N",
                   help="how many records, across all files (default: 3)")
    p.add_argument("--json", action="store_true",
                   help="JSON Lines, one object per example (default: TensorFlow's text layout)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--sequence", dest="kind", action="store_const", const="sequence",
                      help="parse as SequenceExample (default: whichever the record is)")
    kind.add_argument("--example", dest="kind", action="store_const", const="example",
                      help="parse as Example (default: whichever the record is)")
    p.set_defaults(kind="auto", handler=cmd_inspect)

    p = command("verify", help="check every record's CRCs and that it parses as an Example")
    p.add_argument("paths", nargs="+", metavar="PATH_OR_GLOB")
    p.add_argument("--max-problems", type=_NON_NEGATIVE, default=10, metavar="N",
                   help="problems listed per file (default: 10)")
    p.set_defaults(handler=cmd_verify)

    p = command("index", help="write FILE.idx (offset and length per record)")
    p.add_argument("paths", nargs="+", metavar="FILE")
    p.set_defaults(handler=cmd_index)

    p = command("schema", help="print feature_description code for tf.io.parse_single_example")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--split", default=None, help="use this split's features (default: all splits)")
    p.add_argument("--ragged", action="store_true",
                   help="tf.io.RaggedFeature instead of VarLenFeature for variable-length "
                   "features (default: VarLenFeature)")
    p.add_argument("--json", action="store_true",
                   help="print the spec as JSON (default: Python code)")
    p.set_defaults(handler=cmd_schema)

    p = command("report", help="write a static HTML report of an output folder")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--html", default="report.html", help="where to write it (default: report.html)")
    p.add_argument("--max-examples", type=_POSITIVE, default=None, metavar="N",
                   help="read at most this many examples per split for the histograms "
                   "(default: all)")
    p.set_defaults(handler=cmd_report)

    p = command("reshard", help="rewrite TFRecord files into a new shard count or compression",
                epilog=_TO_BEAM)
    p.add_argument("inputs", metavar="IN_GLOB", help="input files (quote the glob)")
    p.add_argument("output", metavar="OUT", help="new output folder (any Beam filesystem)")
    p.add_argument("--split", default=None,
                   help="put every input in this split (default: each input keeps the split "
                   "its shard name gives, else train; refused when the inputs hold several)")
    p.add_argument("--shards", type=_POSITIVE, default=None, metavar="N",
                   help="number of shards (default: total input bytes / --shard-size)")
    p.add_argument("--shard-size", type=_size, default="128MiB", metavar="SIZE",
                   help="target shard size without --shards, in bytes or with a unit "
                   "(default: 128MiB)")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"],
                   help="compression of the new shards (default: none)")
    p.add_argument("--index", action="store_true",
                   help="also write <shard>.idx index files (default: off)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a folder that holds files recordbeam did not write; they "
                   "are kept (default: refuse such a folder)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line (default: a progress line on a terminal)")
    p.set_defaults(pipeline_handler=cmd_reshard)

    convert = command("convert", help="convert a dataset to sharded TFRecords",
                      description="Convert a dataset to sharded TFRecords. " + _TO_BEAM)
    kinds = convert.add_subparsers(dest="kind", required=True)

    def kind_parser(name: str, help: str) -> argparse.ArgumentParser:
        return kinds.add_parser(name, help=help, allow_abbrev=False, epilog=_TO_BEAM)

    p = kind_parser("coco", "COCO instances JSON + image folder")
    p.add_argument("--images", required=True, metavar="DIR",
                   help="folder of images named by file_name")
    p.add_argument("--annotations", required=True, metavar="FILE",
                   help="COCO instances JSON file")
    p.add_argument("--contiguous-labels", action="store_true",
                   help="write labels 1..K in category-id order (default: COCO's category ids)")
    p.add_argument("--allow-outside-root", action="store_true",
                   help="also read files outside --images: file_names with '..' or absolute "
                   "paths, and symbolic links leading out (default: refused)")
    p.add_argument("--include-masks", action="store_true",
                   help="write image/object/mask: one 0/1 PNG per object from the "
                   "segmentations (default: off)")
    p.add_argument("--max-annotation-reject-fraction",
                   type=_fraction(zero_allowed=True, one_allowed=True), default=None, metavar="F",
                   help="fail when more than this fraction (0 to 1) of annotations is rejected "
                   "(unknown image or category, invalid box or mask, duplicate id...; annotations "
                   "of rejected images count as image rejects) (default: --max-reject-fraction)")
    _add_fix_args(p)
    _add_output_args(p)
    _add_run_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_coco)

    p = kind_parser("imagefolder", "ImageNet-style class folders: ROOT/<class>/<image>")
    p.add_argument("--root", required=True, metavar="DIR",
                   help="folder of class folders (or of train/ and val/ split folders)")
    p.add_argument("--classes", default=None, metavar="FILE",
                   help="file with one class name per line, in label order "
                   "(default: folder names sorted)")
    p.add_argument("--label-offset", type=_NON_NEGATIVE, default=0, metavar="N",
                   help="label of the first class; 1 keeps 0 for background, as slim does "
                   "(default: 0)")
    p.add_argument("--val-fraction", type=_fraction(zero_allowed=False, one_allowed=False),
                   default=None, metavar="F",
                   help="write this share (0 to 1) of a flat layout's images to val, by a hash "
                   "of their path (default: no val split)")
    _add_fix_args(p)
    _add_output_args(p)
    _add_run_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_imagefolder)

    p = kind_parser("manifest", "CSV or JSON Lines manifest: one row per example")
    p.add_argument("--manifest", required=True, metavar="FILE",
                   help="FILE.csv or FILE.jsonl; --split also takes fractions by hash of the "
                   "image path, e.g. --split train=0.8,val=0.1,test=0.1")
    p.add_argument("--schema", default=None, metavar="FILE",
                   help='JSON {"column": "int64|float|bytes|image|int64_list|float_list|bytes_list"} '
                   "(default: inferred from every row)")
    p.add_argument("--image-columns", default=None, metavar="COLUMNS",
                   help="comma-separated columns holding image paths (default: from the schema)")
    p.add_argument("--split-column", default=None, metavar="COLUMN",
                   help="column holding each row's split name (default: none, --split names it)")
    p.add_argument("--allow-outside-root", action="store_true",
                   help="also read image paths with '..' or absolute local paths "
                   "(default: refused)")
    p.add_argument("--group-by", default=None, metavar="COLUMN",
                   help="write one SequenceExample per value of this column, rows become "
                   "steps (default: one Example per row)")
    _add_fix_args(p)
    _add_output_args(p)
    _add_run_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_manifest)

    p = command("demo", help="convert a small generated COCO sample end to end", epilog=_TO_BEAM)
    p.add_argument("--num-images", type=_POSITIVE, default=24, metavar="N",
                   help="good images in the sample; a few broken ones are added "
                   "(default: 24)")
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_demo, contiguous_labels=False, max_reject_fraction=0.5)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Let each command know its own parser: an unknown option is reported with the
    command's name and the closest of its options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                child.set_defaults(command_parser=child)
                _remember_parsers(child)


def _own_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


def _drop_beam_import_noise(record: logging.LogRecord) -> bool:
    """Beam warns at import time that optional GCP client libraries are absent; local
    users do not need them, and the ``gcp`` extra installs them for Dataflow."""
    return not str(record.msg).startswith("apitools not found")


def _interrupt_once(_signal: int, _frame: Any) -> None:
    """SIGINT's handler in the command: the first Ctrl-C stops the work (KeyboardInterrupt),
    which then ends its processes and says what became of the output; a second one during
    that clean-up ends the command at once."""
    signal.signal(signal.SIGINT, _exit_at_once)
    raise KeyboardInterrupt


def _exit_at_once(_signal: int, _frame: Any) -> None:
    os._exit(EXIT_INTERRUPTED)


def console(argv: Sequence[str] | None = None) -> None:
    """The ``recordbeam`` command: :func:`main`, then exit at once with its code.

    Everything is flushed and closed first; skipping the interpreter's own shutdown
    (Beam's and gRPC's threads, a large heap) saved about 0.5 s per command here.
    """
    # A shell that starts a background job ignores SIGINT for it: keep that.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupt_once)
    code = main(argv)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    logging.getLogger().addFilter(_drop_beam_import_noise)
    # Google's client libraries (the gcp extra, imported with Beam) warn about their own
    # support schedules (Python versions, grpcio releases): nothing a user of this command
    # can act on. Seen with Beam 2.60's pinned grpcio.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
    args = argparse.Namespace()  # what _interrupted knows when Ctrl-C comes while parsing
    try:
        parser = build_parser()  # imports no Beam: the standby workers get a head start
        args, extra = parser.parse_known_args(argv)
        handler = getattr(args, "pipeline_handler", None)
        # A local run's workers: their standby imports Beam while this process does and
        # builds the pipeline. A command that ends up running nothing (--if-changed, a
        # usage error) pays little for it: ~0.05 s on two cores.
        with standby.started(standby.workers_needed(extra) if handler is not None else 0):
            return _dispatch(args, extra, handler)
    except KeyboardInterrupt as interrupt:
        return _interrupted(args, interrupt)


def _dispatch(args: argparse.Namespace, extra: Sequence[str], handler: Any) -> int:
    command = args.command_parser
    try:
        if handler is None:
            if extra:
                raise unknown_arguments_error(extra, _own_flags(command), command.prog, beam=False)
            return args.handler(args)
        from recordbeam.local.runner import check_beam_args, pipeline_options
        from recordbeam.pipeline import check_run_options

        check_beam_args(extra, command=command.prog, other_flags=_own_flags(command))
        args.beam_options = pipeline_options(extra)  # also configures filesystems here
        check_run_options(args.beam_options, detach=getattr(args, "detach", False))
        return handler(args, extra)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:  # noqa: BLE001 - turn any failure into a message and an exit code
        return _report_error(error)


def _report_error(error: Exception) -> int:
    failure = describe(error)
    code = failure.exit_code
    if isinstance(error, ValueError) and not isinstance(error, RecordbeamError):
        # Raised on the launcher, before any run: a bad option value (runs' failures
        # arrive wrapped, never as a ValueError).
        code = EXIT_USAGE
    print(f"recordbeam: {failure.message}", file=sys.stderr)
    log_path = getattr(error, "log_path", None)
    if log_path:
        print(f"recordbeam: the full log of the run is in {log_path}", file=sys.stderr)
    return code


def _interrupted(args: argparse.Namespace, interrupt: KeyboardInterrupt) -> int:
    """One line for Ctrl-C: what became of the output, and where the run's log is."""
    parts = ["interrupted"]
    outcome = getattr(interrupt, "outcome", None)
    output = getattr(args, "output", None)
    if outcome:
        parts.append(outcome)
    elif output and getattr(args, "pipeline_handler", None) is not None:
        parts.append(f"nothing was committed to {output}")
    log_path = getattr(interrupt, "log_path", None)
    if log_path:
        parts.append(f"log: {log_path}")
    print("recordbeam: " + "; ".join(parts), file=sys.stderr)
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
