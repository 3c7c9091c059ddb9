"""Checking record files, and saying what is wrong with one in words a user can act on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recordbeam.cli.record_files import (
    RecordFile,
    missing_text,
    open_record_file,
    read_file_records,
)
from recordbeam.errors import DataError

#: Checks that fail at byte 0 of a file that was never a TFRecord file (JSON, text, images).
_NO_RECORD_HEADER = ("length_crc", "truncated_header", "too_large")


def _not_tfrecord(path: str, command: str) -> str:
    from recordbeam.dataset.layout import is_ours, is_shard_file

    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name.endswith(".idx"):
        shard = path[: -len(".idx")]
        advice = (f"it is an index file (the offsets of the shard beside it); check the shard "
                  f"itself (recordbeam {command} {shard})")
    elif is_ours(name) and not is_shard_file(name):
        folder = path[: -len(name)].rstrip("/") or "."
        advice = (f"it is one of recordbeam's metadata files; give the output folder instead "
                  f"(recordbeam {command} {folder})")
    else:
        advice = "if it should be one, it is damaged from its first byte: re-create it"
    return f"{path}: not a TFRecord file (it does not start with a record header); {advice}"


def record_error_text(error: Any, command: str) -> str:
    """A :class:`recordbeam.tfrecord.framing.RecordError` said for the command line."""
    if error.record == 0 and error.offset == 0 and error.check in _NO_RECORD_HEADER:
        return _not_tfrecord(error.path, command)
    if error.check == "decompression":
        return str(error)  # its advice (check the compression) holds here too
    return (f"{error.problem}. The file is damaged: `recordbeam verify {error.path}` lists "
            "every damaged record; re-create the file")


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
    with open_record_file(path) as f:
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


def verify_listed(file: RecordFile) -> tuple[int, list[str]]:
    """:func:`verify_file`, plus, for a shard of an output folder, that it exists and
    holds as many records as ``manifest.json`` lists."""
    from recordbeam import filesystems
    from recordbeam.dataset.wholeness import ShardChanged, check_size

    if file.listed is not None and not filesystems.exists(file.path):
        return 0, [missing_text(file)]
    clean, problems = verify_file(file.path)
    try:
        check_size(file.path, file.listed_bytes)
    except ShardChanged as changed:
        problems.append(str(changed))
    if file.listed is not None and not problems and clean != file.listed:
        problems.append(f"{file.path}: {clean} records, but manifest.json lists {file.listed}; "
                        "the shard does not belong to this manifest (re-run the conversion)")
    return clean, problems


def check_first_records(files: Sequence[RecordFile], command: str) -> None:
    """Before a job reads ``files``: raise :class:`DataError` for the first local one whose
    first record does not read (not a TFRecord file, or damaged at its start), in the words
    ``inspect`` uses. Files on object stores are left to the job: one open per shard there
    adds up, and the job names the file too. An empty file is a TFRecord file of no records.
    """
    from contextlib import closing

    from recordbeam import filesystems
    from recordbeam.tfrecord.framing import RecordError

    for file in files:
        if filesystems.local_path(file.path) is None:
            continue
        try:
            with closing(read_file_records(file.path)) as records:
                next(records, None)
        except RecordError as error:
            raise DataError(record_error_text(error, command)) from None
