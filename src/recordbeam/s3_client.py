"""Every ``s3://`` call through one S3 client per thread.

Beam's ``S3FileSystem`` builds a new boto3 client for every call (``S3IO(options=...)``),
and building one loads botocore's service model: 0.13-0.28 s of CPU here, whatever the
endpoint, once per image read and a dozen times per run for the listings, sizes, renames
and deletes around it. ``SharedS3`` is Beam's ``S3FileSystem`` with one ``S3IO``
instead, kept per thread and per set of S3 options, built from the options Beam's
``FileSystems`` holds in this process (the launcher's own, or the ones a worker was
started with), so a process pays for its client once. One per thread, not per process:
Beam's S3 client keeps the position of its open download in the client itself.

An empty object is written with one ``PutObject``: Beam's writer always makes a multipart
upload, and S3 refuses to complete one of no parts (``MalformedXML``), which made an empty
``rejects.jsonl`` fail the run's commit.
"""

from __future__ import annotations

import functools
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


def for_this_thread() -> Any:
    """This thread's client for the S3 options Beam's ``FileSystems`` holds; None when
    they cannot be read here (Beam's filesystem then serves the calls as it would)."""
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    readable, options = filesystems_options()
    if not readable or not isinstance(options, (PipelineOptions, type(None))):
        return None
    held = getattr(_clients, "held", None)
    if held is not None and held.given is options:
        return held  # the options it was last checked against: no need to read them again
    given, options = options, options or PipelineOptions([])
    s3 = options.view_as(S3Options)
    key = tuple(getattr(s3, name, None) for name in _CLIENT_OPTIONS)
    if held is None or held.key != key:
        _clients.held = held = _shared_s3_class()(key, options)
    held.given = given
    return held


@functools.cache
def _shared_s3_class() -> type:
    """``SharedS3``'s class, made on first use: Beam's S3 filesystem imports boto3."""
    from apache_beam.io.aws import s3io
    from apache_beam.io.aws.s3filesystem import S3FileSystem
    from apache_beam.io.filesystem import BeamIOError, FileMetadata

    def failed(operation: str, errors: dict) -> BeamIOError:
        return BeamIOError(f"{operation} operation failed", errors)

    class SharedS3(S3FileSystem):
        """Beam's ``S3FileSystem``, each call through this one ``S3IO``; errors raised as
        Beam's raises them (``BeamIOError`` naming the paths)."""

        @classmethod
        def scheme(cls) -> str:
            # Beam finds a path's filesystem among FileSystem's subclasses by this name:
            # s3:// stays Beam's own S3FileSystem there, this one is handed out here only.
            return "recordbeam-shared-s3"

        def __init__(self, key: tuple, options: Any) -> None:
            super().__init__(options)
            self.key = key
            self.given: Any = None  # the FileSystems options it was last checked against
            self._io = s3io.S3IO(options=options)

        def open(self, path, mime_type="application/octet-stream", compression_type=None):
            return self._io.open(path, "rb", mime_type=mime_type)

        def create(self, path, mime_type="application/octet-stream", compression_type=None):
            return _Upload(self._io, path, mime_type)

        def exists(self, path):
            return self._io.exists(path)

        def _list(self, dir_or_prefix):
            try:
                for path, (size, updated) in self._io.list_files(dir_or_prefix,
                                                                 with_metadata=True):
                    yield FileMetadata(path, size, updated)
            except Exception as error:  # noqa: BLE001 - as Beam's lister reports it
                raise failed("List", {dir_or_prefix: error}) from error

        def size(self, path):
            try:
                return self._io.size(path)
            except Exception as error:  # noqa: BLE001
                raise failed("size()", {path: error}) from error

        def metadata(self, path):
            """Beam's ``FileMetadata`` of one object, with the modification time Beam's
            listing gives it; raises as Beam's S3 client does for a missing one (404)."""
            from apache_beam.io.aws.clients.s3 import messages

            found = self._io.client.get_object_metadata(
                messages.GetRequest(*s3io.parse_s3_path(path)))
            updated = found.last_modified  # as S3IO turns it into seconds in its listings
            seconds = (time.mktime(updated.timetuple()) - time.timezone
                       + updated.microsecond / 1e6)
            return FileMetadata(path, found.size, seconds)

        def rename(self, source_file_names, destination_file_names):
            if len(source_file_names) != len(destination_file_names):
                raise BeamIOError("Unable to rename unequal number of sources and destinations")
            results = self._io.rename_files(list(zip(source_file_names, destination_file_names,
                                                     strict=True)))
            errors = {(src, dest): error for src, dest, error in results if error is not None}
            if errors:
                raise failed("Rename", errors)

        def delete(self, paths):
            errors = {path: error for path, error in self._io.delete_paths(paths).items()
                      if error is not None}
            if errors:
                raise failed("Delete", errors)

    return SharedS3


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
