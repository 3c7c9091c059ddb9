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
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np

from recordbeam import __version__

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

    def on_corrupt(c: CorruptRecord) -> None:
        problems.append(f"{path}: record {c.record} at byte {c.offset}: {c.check} check failed")

    clean = 0
    with _open(path) as f:
        try:
            for number, (offset, _length, data) in enumerate(read_records_with_offsets(
                    f, path=path, compression=compression_for_path(path), skip_corrupt=True,
                    on_corrupt=on_corrupt)):
                try:
                    Example.FromString(data)
                    clean += 1
                except DecodeError:
                    problems.append(
                        f"{path}: record {number} at byte {offset}: does not parse as an Example")
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


def _run_conversion(build, args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import run

    result = run(build, args.output, beam_args=beam_args, overwrite=args.overwrite,
                 show_progress=not args.quiet)
    print(summary_table(result, [args.split]))
    print(f"output: {args.output}")
    exif = result.manifest["splits"].get(args.split, {}).get("counts", {}).get("exif_rotated", 0)
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
    if next(filesystems.list_files(images_dir), None) is None:
        raise UsageError(f"{images_dir}: no such folder, or it holds no files (check --images)")


def cmd_convert_coco(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.coco import CocoOptions
    from recordbeam.pipeline import coco_to_tfrecord

    _check_inputs(args.images, args.annotations)
    coco = CocoOptions(args.images, args.annotations, args.split, args.contiguous_labels)
    shards, checks = _shard_options(args), _checks(args)
    if getattr(args, "if_changed", False):
        from recordbeam.pipeline import coco_input_patterns, coco_settings, is_up_to_date

        settings = coco_settings(coco, shards, checks)
        if is_up_to_date(args.output, args.split, coco_input_patterns(coco), settings):
            print(f"{args.output} is up to date (same inputs, options and recordbeam version); nothing to do")
            return EXIT_OK
    return _run_conversion(
        lambda p: coco_to_tfrecord(p, args.output, coco, shards, checks), args, beam_args)


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
    from recordbeam.image_examples import DEFAULT_MAX_IMAGE_BYTES
    from recordbeam.images import DEFAULT_MAX_PIXELS
    from recordbeam.sink import DEFAULT_MAX_REJECT_FRACTION

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

    convert = sub.add_parser("convert", help="convert a dataset to sharded TFRecords")
    kinds = convert.add_subparsers(dest="kind", required=True)
    p = kinds.add_parser("coco", help="COCO instances JSON + image folder")
    p.add_argument("--images", required=True, help="folder of images named by file_name")
    p.add_argument("--annotations", required=True, help="COCO instances JSON")
    p.add_argument("--contiguous-labels", action="store_true",
                   help="write labels 1..K in category-id order instead of COCO's category ids")
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_coco)

    p = sub.add_parser("demo", help="convert a small generated COCO sample end to end")
    p.add_argument("--num-images", type=int, default=24, help="sample size (default 24)")
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_demo, contiguous_labels=False, max_reject_fraction=0.5)
    return parser


def _error_kind(error: BaseException) -> int:
    text = f"{type(error).__name__}: {error}"
    if any(m in text for m in ("RejectLimitExceeded", "CocoFormatError", "FeatureError")):
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


def main(argv: Sequence[str] | None = None) -> int:
    logging.getLogger().addFilter(_drop_beam_import_noise)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    handler = getattr(args, "pipeline_handler", None)
    if handler is None and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if handler is not None:
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
