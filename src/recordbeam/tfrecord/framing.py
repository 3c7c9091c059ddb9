"""TFRecord framing: writing and reading the record container, without TensorFlow.

A TFRecord file is a sequence of records, each laid out (all integers little-endian) as::

    uint64  length
    uint32  masked_crc32c(the 8 length bytes)
    bytes   data[length]
    uint32  masked_crc32c(data)

A compressed file (GZIP or ZLIB) is that same byte stream passed through one compressor from
start to end, which is how TensorFlow's ``TFRecordWriter`` writes it and how
``tf.data.TFRecordDataset`` expects it.

Everything here works on plain binary file objects, so it can be used from a notebook, a
PyTorch ``Dataset`` or the Beam sink alike. Reading streams: memory use depends on the size of
one record, never on the size of the file.
"""

from __future__ import annotations

import enum
import io
import logging
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from crc32c import crc32c as _crc32c

from recordbeam.errors import DataError

__all__ = [
    "CHECKS",
    "Compression",
    "CorruptRecord",
    "RecordError",
    "RecordWriter",
    "compression_for_path",
    "frame_record",
    "masked_crc32c",
    "open_records",
    "parse_compression",
    "read_records",
    "read_records_with_offsets",
    "shard_suffix",
]

_log = logging.getLogger(__name__)

_HEADER = struct.Struct("<QI")  # length, masked crc of the length bytes
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_BYTES = _HEADER.size  # 12
FOOTER_BYTES = _CRC.size  # 4
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF

# Records up to this size are read with one call. Larger ones are read in chunks that start here
# and double up to _MAX_CHUNK, so a damaged or truncated file that claims a huge record only
# costs memory for the bytes that really arrive.
_FIRST_CHUNK = 1 << 20
_MAX_CHUNK = 16 << 20
# How much compressed input, and at least how much decompressed output, to handle per step.
_IN_CHUNK = 256 << 10
_OUT_CHUNK = 256 << 10
# Window step when scanning for the next intact header after a damaged one.
_SCAN_CHUNK = 64 << 10
# RecordWriter.write_chunks hands chunks at least this long to the file as they are and joins
# shorter neighbours: below it one copy costs less than one more call into the file layer.
_DIRECT_WRITE_BYTES = 16 << 10

CHECKS = (
    "length_crc",
    "data_crc",
    "truncated_header",
    "truncated_data",
    "truncated_footer",
    "too_large",
    "decompression",
)


class Compression(enum.Enum):
    """Compression of a whole TFRecord file; values are TF's ``TFRecordOptions`` names."""

    NONE = ""
    GZIP = "GZIP"
    ZLIB = "ZLIB"


_COMPRESSION_NAMES = {
    "": Compression.NONE,
    "none": Compression.NONE,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "gz": Compression.GZIP,
    "zlib": Compression.ZLIB,
}


def parse_compression(name: str | Compression | None) -> Compression:
    """Turn a user-given compression name into a :class:`Compression`.

    Args:
        name: a ``Compression``, ``None`` or ``""`` (no compression), or one of the names
            "none", "gzip", "zlib" in any letter case (TF's "GZIP" / "ZLIB" included).

    Raises:
        ValueError: the name is not one we know; the message lists the accepted names.
    """
    if isinstance(name, Compression):
        return name
    if name is None:
        return Compression.NONE
    if isinstance(name, str):
        found = _COMPRESSION_NAMES.get(name.strip().lower())
        if found is not None:
            return found
    raise ValueError(
        f"unknown compression {name!r}; use one of: none, gzip, zlib "
        "(or '' / None for no compression)"
    )


def compression_for_path(path: str) -> Compression:
    """Infer compression from a file name: ``.gz`` is GZIP, ``.zz`` or ``.zlib`` is ZLIB."""
    lower = path.lower()
    if lower.endswith(".gz"):
        return Compression.GZIP
    if lower.endswith((".zz", ".zlib")):
        return Compression.ZLIB
    return Compression.NONE


_SUFFIXES = {
    Compression.NONE: ".tfrecord",
    Compression.GZIP: ".tfrecord.gz",
    Compression.ZLIB: ".tfrecord.zz",
}


def shard_suffix(c: Compression) -> str:
    """The file suffix our writers use for a shard with compression ``c``."""
    return _SUFFIXES[parse_compression(c)]


def masked_crc32c(data: bytes) -> int:
    """CRC-32C of ``data``, rotated and offset the way TFRecord stores it.

    The masking keeps a CRC computed over bytes that themselves contain CRCs well distributed.
    """
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


def _header_for(length: int) -> bytes:
    crc = _crc32c(_LENGTH.pack(length))
    return _HEADER.pack(length, (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32)


def frame_record(data: bytes) -> bytes:
    """Return one complete framed record (header, data, footer) for ``data``."""
    data = _as_bytes(data)
    return b"".join((_header_for(len(data)), data, _CRC.pack(masked_crc32c(data))))


def _as_bytes(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    try:
        # Accepts bytearray, memoryview, numpy buffers; flattens to plain bytes in C order.
        return memoryview(data).tobytes()  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"a TFRecord record must be bytes-like, got {type(data).__name__}; "
            "encode text or serialize protos before writing"
        ) from None


class RecordWriter:
    """Write TFRecord records to a binary file object, one ``write`` call per record.

    Args:
        fileobj: a writable binary file object. It is flushed by :meth:`close` but not closed,
            unless ``close_fileobj`` is true.
        compression: NONE, GZIP or ZLIB (or a name :func:`parse_compression` accepts). The whole
            stream is compressed, as TensorFlow does.
        index: optional text file that receives one ``"<offset> <framed_length>\\n"`` line per
            record (the format of :mod:`recordbeam.tfrecord.index`). Offsets count bytes of the
            uncompressed record stream, so they only equal file positions when uncompressed.
        close_fileobj: close ``fileobj`` in :meth:`close`.
        compression_level: zlib level 0-9 for GZIP/ZLIB; 6 is zlib's and TF's default.

    Attributes:
        records_written: number of records written so far.
        bytes_written: framed bytes written so far, before compression.
    """

    def __init__(
        self,
        fileobj: BinaryIO,
        compression: Compression | str | None = Compression.NONE,
        *,
        index: TextIO | None = None,
        close_fileobj: bool = False,
        compression_level: int = 6,
    ) -> None:
        self.compression = parse_compression(compression)
        self._file = fileobj
        self._index = index
        self._close_fileobj = close_fileobj
        self._compressor = None
        if self.compression is Compression.GZIP:
            # wbits 16+15: gzip header and trailer around a deflate stream.
            self._compressor = zlib.compressobj(compression_level, zlib.DEFLATED, 31)
        elif self.compression is Compression.ZLIB:
            # wbits 15: the zlib (RFC 1950) header and Adler-32 trailer, as TF's ZLIB writes.
            self._compressor = zlib.compressobj(compression_level, zlib.DEFLATED, 15)
        self.records_written = 0
        self.bytes_written = 0
        self._closed = False

    def write(self, data: bytes) -> None:
        """Append one record holding ``data`` (any bytes-like object)."""
        if self._closed:
            raise ValueError("cannot write to a closed RecordWriter; open a new one")
        if not isinstance(data, bytes):
            data = _as_bytes(data)
        length = len(data)
        crc = _crc32c(_LENGTH.pack(length))
        header = _HEADER.pack(length, (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32)
        crc = _crc32c(data)
        footer = _CRC.pack((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32)
        compressor = self._compressor
        if compressor is None:
            if length >= _DIRECT_WRITE_BYTES:
                # Large payloads go to the file as they are: three calls cost less than
                # copying the payload into a joined buffer.
                write = self._file.write
                write(header)
                write(data)
                write(footer)
            else:
                # One write of one buffer: for small records the copy is cheaper than
                # extra calls into the file layer.
                self._file.write(b"".join((header, data, footer)))
        else:
            out = compressor.compress(header) + compressor.compress(data)
            out += compressor.compress(footer)
            if out:
                self._file.write(out)
        if self._index is not None:
            self._index.write(f"{self.bytes_written} {length + 16}\n")
        self.records_written += 1
        self.bytes_written += length + 16

    def write_chunks(self, chunks: Sequence[bytes | memoryview]) -> None:
        """Append ONE record whose data is the concatenation of ``chunks``, without joining them.

        The file receives the same bytes as ``write(b"".join(chunks))``, but a large chunk
        (say an encoded image from :func:`recordbeam.tfrecord.wire.encode_example_chunks`) goes to the
        file, or the compressor, as it is instead of being copied into a joined buffer.
        Small neighbouring pieces are still joined so that the file layer sees few calls.

        Args:
            chunks: bytes-like objects (bytes, bytearray, contiguous memoryviews or arrays);
                a non-contiguous buffer is copied into bytes first.
        """
        if self._closed:
            raise ValueError("cannot write to a closed RecordWriter; open a new one")
        views: list[bytes | memoryview] = []
        length = 0
        crc = 0
        for chunk in chunks:
            if type(chunk) is not bytes:
                try:
                    view = memoryview(chunk)  # type: ignore[arg-type]
                except TypeError:
                    raise TypeError(
                        f"a TFRecord record chunk must be bytes-like, got {type(chunk).__name__}; "
                        "encode text or serialize protos before writing"
                    ) from None
                # A flat byte view so that len() counts bytes and writes see the raw memory.
                chunk = view.cast("B") if view.c_contiguous else view.tobytes()
            length += len(chunk)
            crc = _crc32c(chunk, value=crc)
            views.append(chunk)
        header_crc = _crc32c(_LENGTH.pack(length))
        header = _HEADER.pack(
            length, (((header_crc >> 15) | (header_crc << 17)) + _MASK_DELTA) & _U32
        )
        footer = _CRC.pack((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32)
        compressor = self._compressor
        if compressor is None:
            write = self._file.write
            small: list[bytes | memoryview] = [header]
            for chunk in views:
                if len(chunk) >= _DIRECT_WRITE_BYTES:
                    if small:
                        write(b"".join(small))
                        small = []
                    write(chunk)
                else:
                    small.append(chunk)
            small.append(footer)
            write(b"".join(small))
        else:
            out = [compressor.compress(header)]
            out.extend(compressor.compress(chunk) for chunk in views)
            out.append(compressor.compress(footer))
            joined = b"".join(out)
            if joined:
                self._file.write(joined)
        if self._index is not None:
            self._index.write(f"{self.bytes_written} {length + 16}\n")
        self.records_written += 1
        self.bytes_written += length + 16

    def close(self) -> None:
        """Finish the compressed stream (if any) and flush; closes ``fileobj`` if asked to.

        Calling it again does nothing.
        """
        if self._closed:
            return
        self._closed = True
        if self._compressor is not None:
            tail = self._compressor.flush()
            if tail:
                self._file.write(tail)
        if self._close_fileobj:
            self._file.close()
        else:
            flush = getattr(self._file, "flush", None)
            if flush is not None:
                flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_WHAT_FAILED = {
    "length_crc": "the CRC of the length field does not match (the length is damaged)",
    "data_crc": "the CRC of the record data does not match (the data is damaged)",
    "truncated_header": "the file ends inside the 12-byte record header",
    "truncated_data": "the file ends inside the record data",
    "truncated_footer": "the file ends inside the 4-byte data CRC after the data",
    "too_large": "the record is longer than max_record_bytes",
    "decompression": "the compressed stream cannot be decompressed",
}

_HINTS = {
    "length_crc": "The file is corrupt; re-create it, or read with skip_corrupt=True to skip to "
    "the next intact record.",
    "data_crc": "The file is corrupt; re-create it, or read with skip_corrupt=True to skip the "
    "damaged record.",
    "truncated_header": "The file is corrupt or was cut short; re-create it or read with "
    "skip_corrupt=True.",
    "too_large": "If the file is genuine pass a larger max_record_bytes; otherwise it is corrupt "
    "(re-create it or read with skip_corrupt=True).",
    "decompression": "Check that the compression setting matches the file (.gz is GZIP, .zz or "
    ".zlib is ZLIB, anything else uncompressed) or re-create the file; a file cut short also "
    "ends up here.",
}
_HINTS["truncated_data"] = _HINTS["truncated_footer"] = _HINTS["truncated_header"]


class RecordError(DataError, ValueError):
    """A TFRecord file failed a check while reading.

    Attributes:
        path: the file name given to the reader.
        record: 0-based number of the record that failed.
        offset: byte offset of that record's start in the (uncompressed) record stream.
        check: which check failed, one of :data:`CHECKS`.
        detail: extra facts (sizes, the decompressor's message), may be empty.
        problem: the message without the advice to Python callers (``skip_corrupt``), for
            front ends that give their own (the command line).
    """

    def __init__(self, path: str, record: int, offset: int, check: str, detail: str = "") -> None:
        if check not in _WHAT_FAILED:
            raise ValueError(f"unknown check {check!r}; expected one of {CHECKS}")
        self.path = path
        self.record = record
        self.offset = offset
        self.check = check
        self.detail = detail
        message = f"{path}: record {record} at byte offset {offset}: {_WHAT_FAILED[check]}"
        if detail:
            message += f" ({detail})"
        self.problem = message
        super().__init__(f"{message}. {_HINTS[check]}")

    def __reduce__(self):  # keeps the error picklable across Beam workers
        return (type(self), (self.path, self.record, self.offset, self.check, self.detail))


@dataclass(frozen=True)
class CorruptRecord:
    """One problem the reader stepped over when reading with ``skip_corrupt=True``.

    ``skipped_bytes`` counts the uncompressed bytes from ``offset`` that were passed over.
    """

    path: str
    record: int
    offset: int
    check: str
    skipped_bytes: int


class _DecompressError(Exception):
    """Raised inside the decompressing reader; turned into a RecordError with position facts."""


class _Inflater:
    """A file-like ``read(n)`` over a GZIP or ZLIB stream that returns exactly n bytes until EOF.

    Gzip input may hold several members one after another (``cat a.gz b.gz`` is a valid gzip
    file), optionally padded with zero bytes between them.
    """

    def __init__(self, read: Callable[[int], bytes], gzip: bool) -> None:
        self._raw_read = read
        self._wbits = 31 if gzip else 15
        self._multi_member = gzip
        self._name = "GZIP" if gzip else "ZLIB"
        self._d = zlib.decompressobj(self._wbits)
        self._buf = b""
        self._pos = 0
        self._seen_input = False
        self._done = False

    def read(self, n: int) -> bytes:
        buf, pos = self._buf, self._pos
        end = pos + n
        if end <= len(buf):
            self._pos = end
            return buf[pos:end]
        parts = [buf[pos:]] if pos < len(buf) else []
        need = end - len(buf)
        self._buf, self._pos = b"", 0
        while need > 0:
            out = self._inflate(max(need, _OUT_CHUNK))
            if not out:
                break
            if len(out) > need:
                parts.append(out[:need])
                self._buf, self._pos = out, need
                break
            parts.append(out)
            need -= len(out)
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def _inflate(self, max_len: int) -> bytes:
        """Return the next non-empty piece of output (at most max_len bytes), b"" at the end."""
        while True:
            d = self._d
            if d.eof:
                if not self._multi_member or self._done:
                    return b""
                rest = d.unused_data.lstrip(b"\0")
                while not rest:
                    more = self._raw_read(_IN_CHUNK)
                    if not more:
                        self._done = True
                        return b""
                    rest = more.lstrip(b"\0")
                self._d = d = zlib.decompressobj(self._wbits)
                data = rest
            elif d.unconsumed_tail:
                data = d.unconsumed_tail
            else:
                data = self._raw_read(_IN_CHUNK)
                if not data:
                    # zlib may still hold output when the last call stopped at max_len.
                    out = self._decompress(d, b"", max_len)
                    if out:
                        return out
                    if d.eof:
                        continue
                    if not self._seen_input:
                        return b""  # an empty file holds zero records
                    raise _DecompressError(
                        f"the {self._name} stream ends before its end marker; "
                        "the file was probably cut short"
                    )
                self._seen_input = True
            out = self._decompress(d, data, max_len)
            if out:
                return out

    def _decompress(self, d, data: bytes, max_len: int) -> bytes:
        try:
            return d.decompress(data, max_len)
        except zlib.error as exc:
            raise _DecompressError(f"invalid {self._name} data: {exc}") from exc


def _exact_reader(read: Callable[[int], bytes | None]) -> Callable[[int], bytes]:
    """Wrap a ``read`` that may return short reads (raw files, sockets) into one that doesn't."""

    def read_exact(n: int) -> bytes:
        data = read(n) or b""
        if len(data) == n or not data:
            return data
        parts = [data]
        got = len(data)
        while got < n:
            more = read(n - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    return read_exact


class _Source:
    """The uncompressed record stream, plus a push-back buffer used only after resyncing."""

    def __init__(self, fileobj: BinaryIO, compression: Compression) -> None:
        if isinstance(fileobj, (io.BufferedReader, io.BufferedRandom, io.BytesIO)):
            raw_read = fileobj.read  # these already return exactly n bytes unless at EOF
        else:
            raw_read = _exact_reader(fileobj.read)
        if compression is not Compression.NONE:
            raw_read = _Inflater(raw_read, compression is Compression.GZIP).read
        self._raw_read = raw_read
        self._pending = b""
        self.read = raw_read

    def unread(self, data: bytes) -> None:
        self._pending = bytes(data) + self._pending
        self.read = self._read_pending

    def _read_pending(self, n: int) -> bytes:
        pending = self._pending
        if len(pending) >= n:
            self._pending = pending[n:]
            out = pending[:n]
        else:
            out = pending + self._raw_read(n - len(pending))
            self._pending = b""
        if not self._pending:
            self.read = self._raw_read
        return out

    def skip(self, n: int) -> int:
        """Read and drop up to n bytes in bounded pieces; return how many were there."""
        skipped = 0
        while skipped < n:
            want = min(n - skipped, _MAX_CHUNK)
            got = len(self.read(want))
            skipped += got
            if got < want:
                break
        return skipped


def _read_large(read: Callable[[int], bytes], length: int) -> bytes:
    """Read ``length`` bytes in growing chunks; returns fewer if the stream ends first."""
    parts = []
    got = 0
    chunk = _FIRST_CHUNK
    while got < length:
        want = min(chunk, length - got)
        part = read(want)
        parts.append(part)
        got += len(part)
        if len(part) < want:
            break
        chunk = min(chunk * 2, _MAX_CHUNK)
    return b"".join(parts)


def _high_zero_bytes(max_record_bytes: int) -> int:
    """How many top bytes of a length field must be zero for the length to be acceptable."""
    return max(0, 8 - (max_record_bytes.bit_length() + 7) // 8)


def _resync(source: _Source, bad_header: bytes, max_record_bytes: int) -> tuple[bool, int]:
    """Find the next plausible record header after a damaged one.

    Scans byte by byte from the byte after the damaged header's start for 12 bytes whose length
    CRC is valid and whose length is acceptable, keeping only a small sliding window in memory.
    On success the found header is pushed back into ``source``. Returns (found, bytes skipped
    from the damaged header's start).
    """
    window = bytes(bad_header[1:])
    skipped = 1  # window[0] sits this many bytes after the damaged header's start
    zeros = _high_zero_bytes(max_record_bytes)
    needle = b"\0" * zeros
    while True:
        chunk = source.read(_SCAN_CHUNK)
        window += chunk
        last = len(window) - HEADER_BYTES  # last index where a whole header fits
        i = 0
        while i <= last:
            if zeros:
                # Jump straight to positions whose top length bytes are zero, the only ones
                # that can hold an acceptable length.
                j = window.find(needle, i + 8 - zeros, last + 8)
                if j < 0:
                    break
                i = j - (8 - zeros)
            length, length_crc = _HEADER.unpack_from(window, i)
            if length <= max_record_bytes and masked_crc32c(window[i : i + 8]) == length_crc:
                source.unread(window[i:])
                return True, skipped + i
            i += 1
        if not chunk:
            return False, skipped + len(window)
        drop = max(last + 1, 0)
        window = window[drop:]
        skipped += drop


def read_records_with_offsets(
    fileobj: BinaryIO,
    *,
    path: str = "<stream>",
    compression: Compression | str | None = None,
    verify: bool = True,
    skip_corrupt: bool = False,
    on_corrupt: Callable[[CorruptRecord], None] | None = None,
    max_record_bytes: int = 2**31,
) -> Iterator[tuple[int, int, bytes]]:
    """Iterate over ``(offset, framed_length, data)`` for each record in a TFRecord stream.

    ``offset`` is where the record starts in the uncompressed record stream and
    ``framed_length`` is ``16 + len(data)``; together they are the lines of an index file.

    Args:
        fileobj: a readable binary file object, positioned at the first record.
        path: the name used in error messages (and to infer compression when it is None).
        compression: NONE, GZIP, ZLIB or a name for one; None infers it from ``path``'s suffix.
        verify: check the length CRC and the data CRC of every record.
        skip_corrupt: instead of raising, report each damaged record and go on. After a bad
            data CRC the record is skipped; after a bad length CRC the reader scans forward to
            the next intact header; a file cut short or undecodable ends the iteration. A
            resynced stretch counts as one record, so later record numbers are a best guess.
        on_corrupt: called with a :class:`CorruptRecord` for each problem skipped; without it
            problems are logged as warnings.
        max_record_bytes: refuse records claiming more data than this (check "too_large").

    Raises:
        RecordError: a check failed and ``skip_corrupt`` is false.
        ValueError: an unknown compression name.
    """
    comp = compression_for_path(path) if compression is None else parse_compression(compression)
    if max_record_bytes < 0:
        raise ValueError(f"max_record_bytes must be >= 0, got {max_record_bytes}")
    source = _Source(fileobj, comp)
    return _scan(source, path, verify, skip_corrupt, on_corrupt, max_record_bytes)


def _scan(
    source: _Source,
    path: str,
    verify: bool,
    skip_corrupt: bool,
    on_corrupt: Callable[[CorruptRecord], None] | None,
    max_record_bytes: int,
) -> Iterator[tuple[int, int, bytes]]:
    def report(err: RecordError, skipped: int) -> None:
        if not skip_corrupt:
            raise err
        info = CorruptRecord(err.path, err.record, err.offset, err.check, skipped)
        if on_corrupt is None:
            _log.warning("%s Skipped %d bytes.", err, skipped)
        else:
            on_corrupt(info)

    offset = 0
    record = 0
    read = source.read
    try:
        while True:
            header = read(12)
            if len(header) != 12:
                if header:
                    err = RecordError(
                        path,
                        record,
                        offset,
                        "truncated_header",
                        f"only {len(header)} of its 12 bytes are present",
                    )
                    report(err, len(header))
                return
            length, length_crc = _HEADER.unpack(header)
            if verify:
                crc = _crc32c(header[:8])
                if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32 != length_crc:
                    err = RecordError(path, record, offset, "length_crc")
                    if not skip_corrupt:
                        raise err
                    found, skipped = _resync(source, header, max_record_bytes)
                    report(err, skipped)
                    if not found:
                        return
                    offset += skipped
                    record += 1
                    read = source.read
                    continue
            if length > max_record_bytes:
                err = RecordError(
                    path,
                    record,
                    offset,
                    "too_large",
                    f"it claims {length} bytes, max_record_bytes is {max_record_bytes}",
                )
                if not skip_corrupt:
                    raise err
                skipped = 12 + source.skip(length + 4)
                report(err, skipped)
                if skipped < length + 16:
                    return
                offset += skipped
                record += 1
                continue
            data = read(length) if length <= _FIRST_CHUNK else _read_large(read, length)
            if len(data) != length:
                err = RecordError(
                    path,
                    record,
                    offset,
                    "truncated_data",
                    f"{len(data)} of {length} data bytes are present",
                )
                report(err, 12 + len(data))
                return
            footer = read(4)
            if len(footer) != 4:
                err = RecordError(
                    path,
                    record,
                    offset,
                    "truncated_footer",
                    f"only {len(footer)} of its 4 bytes are present",
                )
                report(err, 12 + length + len(footer))
                return
            if verify:
                crc = _crc32c(data)
                if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32 != _CRC.unpack(footer)[0]:
                    report(RecordError(path, record, offset, "data_crc"), length + 16)
                    offset += length + 16
                    record += 1
                    continue
            yield offset, length + 16, data
            offset += length + 16
            record += 1
    except _DecompressError as exc:
        err = RecordError(path, record, offset, "decompression", str(exc))
        if not skip_corrupt:
            raise err from exc
        report(err, 0)


def read_records(
    fileobj: BinaryIO,
    *,
    path: str = "<stream>",
    compression: Compression | str | None = None,
    verify: bool = True,
    skip_corrupt: bool = False,
    on_corrupt: Callable[[CorruptRecord], None] | None = None,
    max_record_bytes: int = 2**31,
) -> Iterator[bytes]:
    """Iterate over the data of each record; arguments as :func:`read_records_with_offsets`."""
    scan = read_records_with_offsets(
        fileobj,
        path=path,
        compression=compression,
        verify=verify,
        skip_corrupt=skip_corrupt,
        on_corrupt=on_corrupt,
        max_record_bytes=max_record_bytes,
    )
    return (data for _, _, data in scan)


def open_records(path: str, **kw) -> Iterator[bytes]:
    """Read the records of a local file; compression is inferred from the suffix unless given.

    Keyword arguments are those of :func:`read_records`. The file is closed when the iteration
    ends or the iterator is closed.
    """
    kw.setdefault("compression", compression_for_path(path))
    kw.setdefault("path", path)
    with open(path, "rb") as f:
        yield from read_records(f, **kw)
