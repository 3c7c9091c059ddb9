"""The calls made once per file on ``s3://`` (open, create, exists, metadata), through one
S3 client per thread.

Beam's ``S3FileSystem`` builds a new boto3 client for every call (``S3IO(options=...)``),
and building one loads botocore's service model: 0.13-0.28 s of CPU here, several times
per image read, whatever the endpoint. Here each thread keeps one Beam ``S3IO`` per set
of S3 options, built from the options Beam's ``FileSystems`` holds in this process (the
launcher's own, or the ones a worker was started with), so a worker pays for its client
once. One per thread, not per process: Beam's S3 client keeps the position of its open
download in the client itself. Everything else (listings, deletes, renames: a few calls
per run) stays Beam's.

An empty object is written with one ``PutObject``: Beam's writer always makes a multipart
upload, and S3 refuses to complete one of no parts (``MalformedXML``), which made an empty
``rejects.jsonl`` fail the run's commit.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any, BinaryIO

from recordbeam.local.internals import filesystems_options

#: Beam's ``S3Options``, each of which changes the client (Beam's ``boto3_client.Client``).
_CLIENT_OPTIONS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token",
                   "s3_endpoint_url", "s3_region_name", "s3_api_version", "s3_verify",
                   "s3_disable_ssl")

_clients = threading.local()


def for_this_thread() -> SharedS3 | None:
    """This thread's client for the S3 options Beam's ``FileSystems`` holds; None when
    they cannot be read here (Beam's filesystem then serves the calls as it would)."""
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    readable, options = filesystems_options()
    if not readable or not isinstance(options, (PipelineOptions, type(None))):
        return None
    options = options or PipelineOptions([])
    s3 = options.view_as(S3Options)
    key = tuple(getattr(s3, name, None) for name in _CLIENT_OPTIONS)
    held = getattr(_clients, "held", None)
    if held is None or held.key != key:
        _clients.held = held = SharedS3(key, options)
    return held


class SharedS3:
    """The per-file calls of Beam's ``FileSystem`` API on ``s3://``, through one client."""

    def __init__(self, key: tuple, options: Any) -> None:
        from apache_beam.io.aws import s3io

        self.key = key
        self._io = s3io.S3IO(options=options)

    def open(self, path: str, mime_type: str, compression_type: Any = None) -> BinaryIO:
        return self._io.open(path, "rb", mime_type=mime_type)

    def create(self, path: str, mime_type: str, compression_type: Any = None) -> BinaryIO:
        return _Upload(self._io, path, mime_type)

    def exists(self, path: str) -> bool:
        return self._io.exists(path)

    def metadata(self, path: str) -> Any:
        """Beam's ``FileMetadata`` of one object, with the modification time Beam's
        listing gives it; raises as Beam's S3 client does for a missing one (404)."""
        from apache_beam.io.aws.clients.s3 import messages
        from apache_beam.io.aws.s3io import parse_s3_path
        from apache_beam.io.filesystem import FileMetadata

        found = self._io.client.get_object_metadata(messages.GetRequest(*parse_s3_path(path)))
        updated = found.last_modified  # as S3IO turns it into seconds in its listings
        seconds = time.mktime(updated.timetuple()) - time.timezone + updated.microsecond / 1e6
        return FileMetadata(path, found.size, seconds)


class _Upload(io.RawIOBase):
    """A new object: Beam's multipart upload (buffered by Beam), begun at the first byte
    written; an object closed without any is put whole, empty."""

    def __init__(self, client: Any, path: str, mime_type: str) -> None:
        super().__init__()
        self._client, self._path, self._mime_type = client, path, mime_type
        self._upload: BinaryIO | None = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        size = len(memoryview(data))
        if size and self._upload is None:
            self._upload = self._client.open(self._path, "wb", mime_type=self._mime_type)
        if size:
            self._upload.write(data)
        return size

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._upload is not None:
                self._upload.close()
            else:
                self._put_empty()
        finally:
            super().close()

    def _put_empty(self) -> None:
        from apache_beam.io.aws.s3io import parse_s3_path

        bucket, key = parse_s3_path(self._path)
        self._client.client.client.put_object(Bucket=bucket, Key=key, Body=b"",
                                              ContentType=self._mime_type)
