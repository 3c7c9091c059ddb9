"""The commands that read record files or a finished output folder: ``inspect``,
``verify``, ``index``, ``schema``, ``report`` and ``check``. Each takes the parsed arguments and
returns the command's exit code."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from recordbeam.cli.output_file import check_output_file, write_output_file
from recordbeam.cli.record_files import (
    check_listed_exist,
    open_record_file,
    read_file_records,
    record_files,
)
from recordbeam.cli.show import example_json, example_text, parse_record
from recordbeam.cli.verify import record_error_text, verify_listed
from recordbeam.errors import EXIT_DATA, EXIT_OK, UsageError, counted


def cmd_inspect(args: argparse.Namespace) -> int:
    from recordbeam.tfrecord.framing import RecordError

    shown = 0
    files = record_files(args.paths)
    check_listed_exist(files)
    for file in files:
        if shown >= args.n:
            return EXIT_OK
        number = -1
        try:
            for number, data in enumerate(read_file_records(file.path)):
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
            print(f"recordbeam: {record_error_text(error, 'inspect')}", file=sys.stderr)
            return EXIT_DATA
        if number < 0:
            # A valid TFRecord file of no records: say so rather than print nothing (stdout
            # keeps JSON lines only with --json).
            print(f"# {file.path}: 0 records (a TFRecord file of no records)",
                  file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    total, bad_files, first = 0, 0, None
    for file in record_files(args.paths):
        path = file.path
        clean, problems = verify_listed(file)
        total += clean
        status = "ok" if not problems else counted(len(problems), "problem")
        print(f"{path}: {clean} records, {status}")
        for problem in problems[: args.max_problems]:
            print(f"  {problem}")
        if problems:
            bad_files += 1
            first = first or problems[0]
    print(f"total: {total} clean records" + (f", {counted(bad_files, 'bad file')}" if bad_files else ""))
    if first:
        print(f"first problem: {first}", file=sys.stderr)
        return EXIT_DATA
    return EXIT_OK


def cmd_index(args: argparse.Namespace) -> int:
    from recordbeam.tfrecord.framing import Compression, compression_for_path

    files = record_files(args.paths)
    check_listed_exist(files)
    compressed = [f.path for f in files if compression_for_path(f.path) is not Compression.NONE]
    if compressed:
        # Offsets into a compressed shard would count decompressed bytes: no reader (ours,
        # DALI, the tfrecord package) can seek to them, as convert --index also refuses.
        raise UsageError(f"{compressed[0]} is compressed: an index of it would be of no use, "
                         "since a compressed shard cannot be entered in the middle. Index "
                         "uncompressed shards (recordbeam reshard ... --compression none)")
    with _folders_held(f.path.rsplit("/", 1)[0] for f in files if f.listed is not None):
        return _write_indexes(files)


@contextlib.contextmanager
def _folders_held(folders) -> Iterator[None]:
    """Hold the lock of each output folder for the block: an index is not written into a
    folder another run is replacing the shards of."""
    import uuid

    from recordbeam.dataset import folder_lock

    with contextlib.ExitStack() as stack:
        for folder in sorted(set(folders)):
            lock = folder_lock.acquire(folder, uuid.uuid4().hex[:12], command="index")
            stack.callback(lock.release)
        yield


def _write_indexes(files) -> int:
    import io

    from recordbeam import filesystems
    from recordbeam.tfrecord.framing import RecordError, compression_for_path
    from recordbeam.tfrecord.index import index_path_for, write_index

    for file in files:
        path = file.path
        out = io.StringIO()
        try:
            with open_record_file(path) as f:
                count = write_index(f, out, path=path, compression=compression_for_path(path))
        except RecordError as error:  # no index is written for a damaged file
            print(f"recordbeam: {record_error_text(error, 'index')}", file=sys.stderr)
            return EXIT_DATA
        filesystems.write_bytes(index_path_for(path), out.getvalue().encode("ascii"))
        empty = f" ({path} is a TFRecord file of no records)" if not count else ""
        print(f"{index_path_for(path)}: {count} records{empty}")
    return EXIT_OK


def _finished_manifest(output_dir: str) -> dict[str, Any]:
    from recordbeam.dataset.layout import finished_manifest

    manifest = finished_manifest(output_dir)
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
    from recordbeam.dataset.report import report_page

    check_output_file(args.html, "--html", "report.html")
    _finished_manifest(args.output_dir)
    check_listed_exist(record_files([args.output_dir]))
    page, charts = report_page(args.output_dir, max_examples=args.max_examples,
                               gallery=args.gallery,
                               near_duplicates=getattr(args, "near_duplicates", False))
    write_output_file(args.html, page.encode("utf-8"), "--html")
    note = "" if charts else " (tables only: pip install matplotlib for charts)"
    print(f"report: {args.html}{note}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from recordbeam.dataset.consumers import CONSUMERS, check_folder, label_map_pbtxt, summary_line

    duplicates = getattr(args, "duplicates", False)
    near = getattr(args, "near_duplicates", False)
    if args.consumer is None and not duplicates:
        raise UsageError("check needs --for CONSUMER (whose rules), --duplicates, or both")
    if near and not duplicates:
        raise UsageError("--near-duplicates goes with --duplicates; add it")
    if args.write_label_map is not None and args.consumer != "od-api":
        raise UsageError("--write-label-map writes the Object Detection API's label map; "
                         "use it with --for od-api")
    if args.write_label_map is not None:
        check_output_file(args.write_label_map, "--write-label-map", "label_map.pbtxt")
    finder = None
    if duplicates:
        from recordbeam.dataset.find_duplicates import DuplicateFinder

        finder = DuplicateFinder(near=near)
    result = check_folder(args.output_dir, args.consumer, max_records=args.max_records,
                          max_shown=args.max_problems, finder=finder)
    if finder is not None:
        from recordbeam.dataset.duplicate_rules import duplicate_rules

        result.rules += duplicate_rules(finder, args.max_problems)
    if args.write_label_map is not None:
        write_output_file(args.write_label_map, label_map_pbtxt(result.manifest).encode("utf-8"),
                          "--write-label-map")
    read = counted(result.records, "record")
    stopped = " (stopped there: --max-records; shards not read to their end are not counted)" \
        if result.stopped_early else ""
    whose = [f"{args.consumer} ({CONSUMERS[args.consumer]})"] if args.consumer else []
    whose += ["duplicates"] if duplicates else []
    print(f"{args.output_dir} for {' and '.join(whose)}: {read} read{stopped}")
    for rule in result.rules:
        print(summary_line(rule))
        for violation in rule.shown:
            print(f"    {violation}")
        if rule.more:
            print(f"    and {rule.more} more")
    if args.write_label_map is not None:
        print(f"label map: {args.write_label_map}")
    failed = [rule.name for rule in result.rules if not rule.ok]
    if failed:
        what = f"does not fit {args.consumer}" if args.consumer else "holds duplicates"
        if args.consumer and duplicates:
            what = f"does not fit {args.consumer}, or holds duplicates"
        print(f"recordbeam: {args.output_dir} {what}: "
              f"{counted(len(failed), 'rule')} failed ({', '.join(failed)})", file=sys.stderr)
        return EXIT_DATA
    return EXIT_OK
