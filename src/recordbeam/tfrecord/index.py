"""Index files for TFRecord shards, as NVIDIA DALI's ``tfrecord2idx`` and the ``tfrecord`` package
(PyPI) write and read them.

An index is a text file with one line per record::

    <offset> <framed_length>\\n

where ``offset`` is the byte offset at which the record starts and ``framed_length`` is
``8 + 4 + len(data) + 4``, the whole framed record. Readers use it to seek straight to record N
or to split one shard between several workers.

For GZIP / ZLIB shards the offsets count bytes of the *decompressed* record stream, so they are
not positions in the compressed file. DALI's TFRecord reader needs uncompressed shards; write
uncompressed shards if you want to use the index with DALI.

:class:`recordbeam.tfrecord.framing.RecordWriter` writes the same lines while it writes a shard when given
``index=``; :func:`write_index` builds an index for a shard that already exists.
"""

from __future__ import annotations

from typing import BinaryIO, TextIO

from recordbeam.tfrecord.framing import Compression, read_records_with_offsets

__all__ = ["index_path_for", "read_index", "write_index"]

_MIN_FRAMED = 16  # header (12) + footer (4) around empty data


def index_path_for(shard_path: str) -> str:
    """The index file name we use for ``shard_path``: the shard name plus ``.idx``."""
    return shard_path + ".idx"


def write_index(
    records: BinaryIO,
    out: TextIO,
    *,
    path: str = "<stream>",
    compression: Compression | str | None = None,
) -> int:
    """Write the index of an existing TFRecord stream in one streaming pass.

    Every record's CRCs are verified on the way, so a damaged shard raises
    :class:`recordbeam.tfrecord.framing.RecordError` rather than producing a misleading index.

    Args:
        records: the shard, a readable binary file object positioned at its start.
        out: text file that receives the index lines.
        path: the shard's name, for error messages and (when ``compression`` is None) to infer
            compression from its suffix.
        compression: the shard's compression, or None to infer it from ``path``.

    Returns:
        The number of records indexed.
    """
    count = 0
    for offset, framed_length, _ in read_records_with_offsets(
        records, path=path, compression=compression
    ):
        out.write(f"{offset} {framed_length}\n")
        count += 1
    return count


def read_index(fileobj: TextIO, *, path: str | None = None) -> list[tuple[int, int]]:
    """Parse an index file into a list of ``(offset, framed_length)``, one per record.

    Blank lines are ignored.

    Args:
        fileobj: the index, opened in text mode.
        path: name for error messages; defaults to ``fileobj.name`` when it has one.

    Raises:
        ValueError: a line is not two non-negative integers, or its length is below the 16
            bytes every framed record has; the message names the file and line number.
    """
    name = path or getattr(fileobj, "name", None) or "<index>"
    entries: list[tuple[int, int]] = []
    for lineno, line in enumerate(fileobj, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not all(f.isascii() and f.isdigit() for f in fields):
            raise ValueError(
                f"{name}: line {lineno}: expected '<offset> <framed_length>' as two "
                f"non-negative integers, got {line.rstrip(chr(10))!r}; the index is damaged or "
                "not a TFRecord index. Re-create it with recordbeam.tfrecord.index.write_index."
            )
        offset, framed_length = int(fields[0]), int(fields[1])
        if framed_length < _MIN_FRAMED:
            raise ValueError(
                f"{name}: line {lineno}: framed length {framed_length} is shorter than the "
                f"{_MIN_FRAMED} bytes of header and footer every record has; the index is "
                "damaged. Re-create it with recordbeam.tfrecord.index.write_index."
            )
        entries.append((offset, framed_length))
    return entries
