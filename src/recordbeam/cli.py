"""The ``recordbeam`` command: a thin shell over the library.

Exit codes:
    0  success (``verify``: every record is clean)
    1  the data has problems: ``verify`` found a corrupt record, or a conversion failed
       on its inputs (malformed annotations, too many rejects)
    2  usage: bad arguments, missing input paths, an output folder holding foreign files
    3  the run failed for another reason (I/O error such as a full disk, runner failure)
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np

from recordbeam import __version__, standby

EXIT_OK, EXIT_DATA, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


class UsageError(Exception):
    """Bad arguments or paths; exits 2."""


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

    from recordbeam.images import describe_bytes

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
    from recordbeam.example import Example, SequenceExample

    if mode in ("auto", "sequence"):
        sequence = SequenceExample.FromString(data)
        if mode == "sequence" or len(sequence.feature_lists.feature_list):
            return sequence
    return Example.FromString(data)


def _records(path: str) -> Iterator[bytes]:
    from recordbeam.framing import compression_for_path, read_records

    with _open(path) as f:
        yield from read_records(f, path=path, compression=compression_for_path(path))


def cmd_inspect(args: argparse.Namespace) -> int:
    shown = 0
    for path in expand_paths(args.paths):
        for number, data in enumerate(_records(path)):
            if shown >= args.n:
                return EXIT_OK
            message = parse_record(data, args.kind)
            if args.json:
                print(json.dumps(example_json(message), ensure_ascii=False))
            else:
                print(f"# {path} record {number}")
                print(example_text(message))
            shown += 1
    return EXIT_OK


# --- verify and index -----------------------------------------------------------------


def verify_file(path: str) -> tuple[int, list[str]]:
    """(clean records, problems) for one file; reads every record, never stops early."""
    from google.protobuf.message import DecodeError

    from recordbeam.example import Example
    from recordbeam.framing import CorruptRecord, compression_for_path, read_records_with_offsets

    problems: list[str] = []
    skipped = 0  # corrupt records the reader stepped over: they keep their numbers

    def on_corrupt(c: CorruptRecord) -> None:
        nonlocal skipped
        skipped += 1
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
                    problems.append(f"{path}: record {read + skipped} at byte {offset}: "
                                    "does not parse as an Example")
        except Exception as error:  # noqa: BLE001 - an unreadable file is a finding, not a crash
            problems.append(f"{path}: {error}")
    return clean, problems


def cmd_verify(args: argparse.Namespace) -> int:
    total, bad_files, first = 0, 0, None
    for path in expand_paths(args.paths):
        clean, problems = verify_file(path)
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
    from recordbeam.framing import compression_for_path
    from recordbeam.index import index_path_for, write_index

    for path in expand_paths(args.paths):
        out = io.StringIO()
        with _open(path) as f:
            count = write_index(f, out, path=path, compression=compression_for_path(path))
        filesystems.write_bytes(index_path_for(path), out.getvalue().encode("ascii"))
        print(f"{index_path_for(path)}: {count} records")
    return EXIT_OK


# --- schema, report, reshard ----------------------------------------------------------


def _finished_manifest(output_dir: str) -> dict[str, Any]:
    from recordbeam.output_folder import read_manifest

    manifest = read_manifest(output_dir)
    if manifest is None:
        raise UsageError(f"{output_dir}: no manifest.json; point at a finished recordbeam output folder")
    return manifest


def cmd_schema(args: argparse.Namespace) -> int:
    from recordbeam.schema import schema_code, schema_json

    manifest = _finished_manifest(args.output_dir)
    if args.json:
        print(json.dumps(schema_json(manifest, args.split, ragged=args.ragged), indent=2))
    else:
        print(schema_code(manifest, args.split, ragged=args.ragged, source=args.output_dir), end="")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from recordbeam.report import write_report

    _finished_manifest(args.output_dir)
    html_path, charts = write_report(args.output_dir, args.html, max_examples=args.max_examples)
    note = "" if charts else " (tables only: install recordbeam[report] for charts)"
    print(f"report: {html_path}{note}")
    return EXIT_OK


def cmd_reshard(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import run
    from recordbeam.planning import parse_size
    from recordbeam.reshard import ReshardOptions, check_not_in_place, reshard, split_for
    from recordbeam.sink import ShardOptions

    inputs = expand_paths([args.inputs])
    split = args.split or split_for(inputs)
    check_not_in_place(inputs, args.output)
    shards = ShardOptions(num_shards=args.shards, shard_size=parse_size(args.shard_size),
                          compression=args.compression, index=args.index)
    options = ReshardOptions(tuple(inputs), split)
    result = run(lambda p: reshard(p, args.output, options, shards), args.output,
                 beam_args=beam_args, overwrite=args.overwrite, show_progress=not args.quiet)
    print(summary_table(result, [split]))
    print(f"output: {args.output}")
    return EXIT_OK


# --- convert --------------------------------------------------------------------------


def _shard_options(args: argparse.Namespace):
    from recordbeam.planning import parse_size
    from recordbeam.sink import ShardOptions

    return ShardOptions(
        num_shards=args.shards, shard_size=parse_size(args.shard_size),
        compression=args.compression, index=args.index,
        max_reject_fraction=args.max_reject_fraction,
    )


def _checks(args: argparse.Namespace):
    from recordbeam.image_examples import ImageChecks
    from recordbeam.planning import parse_size

    return ImageChecks(
        max_pixels=args.max_pixels or None, max_bytes=parse_size(args.max_image_bytes),
        verify_decode=args.verify_decode,
    )


def summary_table(result: Any, splits: Sequence[str]) -> str:
    """The end-of-run table for the splits a run wrote: examples, shards, bytes, rejects
    by reason, counts, wall time and speed."""
    from recordbeam.images import human_bytes

    entries = [(name, result.manifest["splits"][name]) for name in splits
               if name in result.manifest["splits"]]
    examples = sum(e["examples"] for _, e in entries)
    rows = [
        ("examples", str(examples)),
        ("shards", str(sum(len(e["shards"]) for _, e in entries))),
        ("bytes", human_bytes(sum(e["bytes"] for _, e in entries))),
    ]
    for name, e in entries:
        rows.append((f"  {name}", f"{e['examples']} examples in {len(e['shards'])} shards"))
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
    rows.append(("wall time", f"{result.wall_seconds:.1f} s"))
    rate = examples / result.wall_seconds if result.wall_seconds else 0.0
    rows.append(("images/s", f"{rate:.0f}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _run_conversion(build, args: argparse.Namespace, beam_args: Sequence[str],
                    splits: Sequence[str] | None = None) -> int:
    from recordbeam.pipeline import run

    result = run(build, args.output, options=args.beam_options, overwrite=args.overwrite,
                 show_progress=not args.quiet)
    splits = list(splits or [args.split])
    print(summary_table(result, splits))
    print(f"output: {args.output}")
    exif = sum(result.manifest["splits"].get(s, {}).get("counts", {}).get("exif_rotated", 0)
               for s in splits)
    if exif:
        print(f"warning: {exif} images carry an EXIF orientation other than 1; TensorFlow's "
              "decoders ignore it, so they are read unrotated.", file=sys.stderr)
    return EXIT_OK


def _check_inputs(images_dir: str, annotations: str) -> None:
    """Fail fast, before Beam starts, on input paths that do not exist."""
    from recordbeam import filesystems

    if not filesystems.exists(annotations):
        raise UsageError(f"{annotations}: no such annotation file (check --annotations)")
    # Listing, not exists(): a gs:// or s3:// "folder" is not an object of its own.
    if not filesystems.has_files(images_dir):
        raise UsageError(f"{images_dir}: no such folder, or it holds no files (check --images)")


def cmd_convert_coco(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.coco import CocoOptions
    from recordbeam.pipeline import coco_input_patterns, coco_settings, coco_to_tfrecord

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
    from recordbeam.transcode import ImageFixes

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
    from recordbeam.imagefolder import ImageFolderOptions, ReadImageFolder
    from recordbeam.pipeline import (
        imagefolder_input_patterns,
        imagefolder_settings,
        imagefolder_to_tfrecord,
    )

    if not filesystems.has_files(args.root):
        raise UsageError(f"{args.root}: no such folder, or it holds no files (check --root)")
    if args.classes and not filesystems.exists(args.classes):
        raise UsageError(f"{args.classes}: no such classes file (check --classes)")
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
    from recordbeam import filesystems
    from recordbeam.pipeline import table_input_patterns, table_settings, table_to_tfrecord
    from recordbeam.tabular import ReadTable, TableError, TableOptions, parse_split_fractions

    for path, flag in ((args.manifest, "--manifest"), (args.schema, "--schema")):
        if path and not filesystems.exists(path):
            raise UsageError(f"{path}: no such file (check {flag})")
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


def _add_fix_args(parser: argparse.ArgumentParser) -> None:
    from recordbeam.transcode import DEFAULT_JPEG_QUALITY, TRANSCODE_CHOICES

    parser.add_argument("--transcode", default="keep", choices=TRANSCODE_CHOICES,
                        help="re-encode images that are not 8-bit RGB JPEG (jpeg) or PNG (png); "
                        "keep (default) writes the bytes as they are")
    parser.add_argument("--jpeg-quality", type=int, default=DEFAULT_JPEG_QUALITY,
                        help=f"quality of re-encoded JPEGs (default {DEFAULT_JPEG_QUALITY})")
    parser.add_argument("--max-side", type=int, default=None,
                        help="downsize images whose longer side exceeds this, keeping the aspect")
    parser.add_argument("--apply-exif", action="store_true",
                        help="rotate pixels by the EXIF orientation (width and height swap)")


def cmd_demo(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.samples import make_coco_sample

    with tempfile.TemporaryDirectory(prefix="recordbeam-demo-") as root:
        sample = make_coco_sample(root, num_images=args.num_images, seed=0)
        print(f"generated a COCO sample of {sample.num_images} images (some deliberately broken) in {root}")
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


def _add_output_args(parser: argparse.ArgumentParser, *, output_required: bool = True) -> None:
    from recordbeam.images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_PIXELS
    from recordbeam.records import DEFAULT_MAX_REJECT_FRACTION

    parser.add_argument("--output", required=output_required, help="output folder (any Beam filesystem)")
    parser.add_argument("--split", default="train", help="split name used in shard names (default: train)")
    parser.add_argument("--shards", type=int, default=None,
                        help="number of shards; default: from total input bytes / --shard-size")
    parser.add_argument("--shard-size", default="128MiB",
                        help="target shard size when --shards is not given (default: 128MiB)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"])
    parser.add_argument("--index", action="store_true", help="also write <shard>.idx index files")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a folder that holds files recordbeam did not write (they are kept)")
    parser.add_argument("--max-reject-fraction", type=float, default=DEFAULT_MAX_REJECT_FRACTION,
                        help=f"fail when more than this fraction of images is rejected (default: {DEFAULT_MAX_REJECT_FRACTION})")
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help="reject images with more pixels (decompression bombs); 0 disables")
    parser.add_argument("--max-image-bytes", default="256MiB", help=f"reject larger files unread (default: {DEFAULT_MAX_IMAGE_BYTES // 2**20}MiB)")
    parser.add_argument("--verify-decode", action="store_true", help="fully decode every image (slower)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("--if-changed", action="store_true",
                        help="exit 0 at once when OUT already holds a finished output of the same "
                        "inputs (names, sizes, modification times), options and recordbeam version")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordbeam",
        description="Image datasets to sharded TFRecords with Apache Beam; read and check TFRecords "
        "without TensorFlow. Options not listed here are passed to Beam (e.g. --runner).",
        epilog="exit codes: 0 ok, 1 data problems, 2 usage error, 3 run failed",
    )
    parser.add_argument("--version", action="version", version=f"recordbeam {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="print the first records as Examples")
    p.add_argument("paths", nargs="+", metavar="PATH_OR_GLOB")
    p.add_argument("-n", type=int, default=3, help="how many records (default 3)")
    p.add_argument("--json", action="store_true", help="JSON Lines, one object per example")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--sequence", dest="kind", action="store_const", const="sequence",
                      help="parse as SequenceExample")
    kind.add_argument("--example", dest="kind", action="store_const", const="example",
                      help="parse as Example")
    p.set_defaults(kind="auto", handler=cmd_inspect)

    p = sub.add_parser("verify", help="check every record's CRCs and that it parses as an Example")
    p.add_argument("paths", nargs="+", metavar="PATH_OR_GLOB")
    p.add_argument("--max-problems", type=int, default=10, help="problems listed per file")
    p.set_defaults(handler=cmd_verify)

    p = sub.add_parser("index", help="write FILE.idx (offset and length per record)")
    p.add_argument("paths", nargs="+", metavar="FILE")
    p.set_defaults(handler=cmd_index)

    p = sub.add_parser("schema", help="print feature_description code for tf.io.parse_single_example")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--split", default=None, help="use this split's features (default: all splits)")
    p.add_argument("--ragged", action="store_true",
                   help="tf.io.RaggedFeature instead of VarLenFeature for variable-length features")
    p.add_argument("--json", action="store_true", help="print the spec as JSON instead of code")
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("report", help="write a static HTML report of an output folder")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--html", default="report.html", help="where to write it (default: report.html)")
    p.add_argument("--max-examples", type=int, default=None,
                   help="read at most this many examples per split for the histograms (default: all)")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser("reshard", help="rewrite TFRecord files into a new shard count or compression")
    p.add_argument("inputs", metavar="IN_GLOB", help="input files (quote the glob)")
    p.add_argument("output", metavar="OUT", help="new output folder (any Beam filesystem)")
    p.add_argument("--split", default=None,
                   help="split name of the output (default: the inputs' split, else train)")
    p.add_argument("--shards", type=int, default=None,
                   help="number of shards; default: from total input bytes / --shard-size")
    p.add_argument("--shard-size", default="128MiB", help="target shard size without --shards")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"])
    p.add_argument("--index", action="store_true", help="also write <shard>.idx index files")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a folder that holds files recordbeam did not write (they are kept)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(pipeline_handler=cmd_reshard)

    convert = sub.add_parser("convert", help="convert a dataset to sharded TFRecords")
    kinds = convert.add_subparsers(dest="kind", required=True)
    p = kinds.add_parser("coco", help="COCO instances JSON + image folder")
    p.add_argument("--images", required=True, help="folder of images named by file_name")
    p.add_argument("--annotations", required=True, help="COCO instances JSON")
    p.add_argument("--contiguous-labels", action="store_true",
                   help="write labels 1..K in category-id order instead of COCO's category ids")
    p.add_argument("--allow-outside-root", action="store_true",
                   help="also read files outside --images: file_names with '..' or absolute "
                   "paths, and symbolic links leading out (refused by default)")
    p.add_argument("--include-masks", action="store_true",
                   help="write image/object/mask: one 0/1 PNG per object from the segmentations")
    _add_fix_args(p)
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_coco)

    p = kinds.add_parser("imagefolder", help="ImageNet-style class folders: ROOT/<class>/<image>")
    p.add_argument("--root", required=True,
                   help="folder of class folders (or of train/ and val/ split folders)")
    p.add_argument("--classes", default=None,
                   help="file with one class name per line, in label order (default: folder names sorted)")
    p.add_argument("--label-offset", type=int, default=0,
                   help="label of the first class (default 0; 1 keeps 0 for background, as slim does)")
    p.add_argument("--val-fraction", type=float, default=None,
                   help="write this share of a flat layout's images to val (by a hash of their path)")
    _add_fix_args(p)
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_imagefolder)

    p = kinds.add_parser("manifest", help="CSV or JSON Lines manifest: one row per example")
    p.add_argument("--manifest", required=True,
                   help="FILE.csv or FILE.jsonl; --split also takes fractions by hash of the "
                   "image path, e.g. --split train=0.8,val=0.1,test=0.1")
    p.add_argument("--schema", default=None,
                   help='JSON {"column": "int64|float|bytes|image|int64_list|float_list|bytes_list"}; '
                   "default: inferred from every row")
    p.add_argument("--image-columns", default=None,
                   help="comma-separated columns holding image paths (default: from the schema)")
    p.add_argument("--split-column", default=None, help="column holding each row's split name")
    p.add_argument("--allow-outside-root", action="store_true",
                   help="also read image paths with '..' or absolute local paths (refused by default)")
    p.add_argument("--group-by", default=None,
                   help="write one SequenceExample per value of this column (rows become steps)")
    _add_fix_args(p)
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_manifest)

    p = sub.add_parser("demo", help="convert a small generated COCO sample end to end")
    p.add_argument("--num-images", type=int, default=24, help="sample size (default 24)")
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_demo, contiguous_labels=False, max_reject_fraction=0.5)
    return parser


def _error_kind(error: BaseException) -> int:
    text = f"{type(error).__name__}: {error}"
    if any(m in text for m in ("RejectLimitExceeded", "CocoFormatError", "FeatureError",
                               "RecordError", "ImageFolderError", "TableError")):  # RecordError: a corrupt reshard input
        return EXIT_DATA
    return EXIT_FAILED


def _short_error(error: BaseException) -> str:
    """The user-facing line of a (possibly runner-wrapped) error, without Beam's traceback."""
    text = str(error)
    for marker in ("RejectLimitExceeded: ", "CocoFormatError: ", "RecordError: ", "OSError: "):
        if marker in text:
            tail = text.rsplit(marker, 1)[1]
            return marker.rstrip(": ") + ": " + tail.split(" [while running")[0].strip()
    # Runner-wrapped errors end in tracebacks; the last "SomethingError: ..." line says most.
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Exceeded")) and " " not in head:
            return line
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _drop_beam_import_noise(record: logging.LogRecord) -> bool:
    """Beam warns at import time that optional GCP client libraries are absent; local
    users do not need them, and the ``gcp`` extra installs them for Dataflow."""
    return not str(record.msg).startswith("apitools not found")


def console(argv: Sequence[str] | None = None) -> None:
    """The ``recordbeam`` command: :func:`main`, then exit at once with its code.

    Everything is flushed and closed first; skipping the interpreter's own shutdown
    (Beam's and gRPC's threads, a large heap) saved about 0.5 s per command here.
    """
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
    parser = build_parser()  # imports no Beam: the standby workers get a head start
    args, extra = parser.parse_known_args(argv)
    handler = getattr(args, "pipeline_handler", None)
    if handler is None and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    # A local run's workers: their standby imports Beam while this process does and builds
    # the pipeline. A command that ends up running nothing (--if-changed, a usage error)
    # pays little for it: ~0.05 s on two cores.
    with standby.started(standby.workers_needed(extra) if handler is not None else 0):
        return _dispatch(args, extra, handler)


def _dispatch(args: argparse.Namespace, extra: Sequence[str], handler: Any) -> int:
    try:
        if handler is not None:
            from recordbeam.runner import pipeline_options

            args.beam_options = pipeline_options(extra)  # also configures filesystems here
            return handler(args, extra)
        return args.handler(args)
    except UsageError as error:
        print(f"recordbeam: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:  # noqa: BLE001 - turn any failure into a message and an exit code
        from recordbeam.framing import RecordError
        from recordbeam.output_folder import OutputFolderError

        if isinstance(error, RecordError):
            print(f"recordbeam: {error}", file=sys.stderr)
            return EXIT_DATA
        if isinstance(error, (OutputFolderError, ValueError)) and not _is_runner_error(error):
            print(f"recordbeam: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"recordbeam: {_short_error(error)}", file=sys.stderr)
        log_path = getattr(error, "log_path", None)
        if log_path:
            print(f"recordbeam: the full log of the run is in {log_path}", file=sys.stderr)
        return _error_kind(error)


def _is_runner_error(error: BaseException) -> bool:
    return "while running" in str(error) or "Traceback" in str(error)


if __name__ == "__main__":
    sys.exit(main())
