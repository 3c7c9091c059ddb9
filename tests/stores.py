"""Object stores on loopback ports for the tests: S3 (moto's server, reached through
``--s3_endpoint_url`` as MinIO or Ceph are) and GCS (``gcs_emulator``), behind one small
interface, so that a test of what recordbeam does with a store runs on each.

Both serve from a thread of the test process; the processes a run starts (local workers,
a job service) reach them over HTTP like any client, with the run's options (S3) or the
environment it inherits (``STORAGE_EMULATOR_HOST``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gcs_emulator
import pytest

#: What a run is told to reach moto's server: only options, as a MinIO user gives them,
#: so that a process that does not get them fails to reach it.
S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
                  "region_name": "us-east-1"}


@dataclass
class Store:
    """A running store with bucket ``data``: where its paths start (``s3://data``), the
    options and environment a run needs to reach it, and the test's own access to it."""

    scheme: str
    #: Beam options a command needs to reach it (S3's endpoint and credentials).
    argv: list[str]
    #: Environment variables a process needs to reach it.
    environment: dict[str, str]
    _put: Any = field(repr=False)
    _get: Any = field(repr=False)
    _list: Any = field(repr=False)
    _delete: Any = field(repr=False)

    @property
    def root(self) -> str:
        return f"{self.scheme}://data"

    def upload_file(self, local: str | os.PathLike[str], path: str) -> None:
        with open(local, "rb") as f:
            self._put(_key(path), f.read())

    def upload_folder(self, folder: str | os.PathLike[str], path: str) -> None:
        for root, _dirs, names in os.walk(folder):
            for name in sorted(names):
                local = os.path.join(root, name)
                relative = os.path.relpath(local, folder).replace(os.sep, "/")
                self.upload_file(local, f"{path}/{relative}")

    def put(self, path: str, data: bytes) -> None:
        self._put(_key(path), data)

    def delete(self, path: str) -> None:
        self._delete(_key(path))

    def read(self, path: str) -> bytes:
        return self._get(_key(path))

    def names(self, folder: str) -> list[str]:
        """Object names below ``folder``, relative to it, sorted."""
        prefix = _key(folder) + "/"
        return sorted(name.removeprefix(prefix) for name in self._list(prefix))

    def snapshot(self, folder: str) -> dict[str, bytes]:
        """Relative name -> bytes of every object below ``folder``."""
        return {name: self.read(f"{folder}/{name}") for name in self.names(folder)}

    def download(self, folder: str, into: os.PathLike[str]) -> None:
        for name, data in self.snapshot(folder).items():
            target = os.path.join(into, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)


def _key(path: str) -> str:
    """The object name in bucket ``data`` of ``scheme://data/name``."""
    bucket, _, name = path.split("://", 1)[1].partition("/")
    assert bucket == "data", path
    return name.rstrip("/")


@contextlib.contextmanager
def s3() -> Iterator[Store]:
    """moto's S3 server with bucket ``data``; runs reach it through ``Store.argv``."""
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("apache_beam.io.aws.s3filesystem")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, **S3_CREDENTIALS)
        client.create_bucket(Bucket="data")

        def names(prefix: str) -> Iterator[str]:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="data",
                                                                          Prefix=prefix):
                yield from (item["Key"] for item in page.get("Contents", ()))

        yield Store(
            "s3",
            [f"--s3_endpoint_url={endpoint}", "--s3_access_key_id=testing",
             "--s3_secret_access_key=testing", "--s3_region_name=us-east-1"],
            {},
            lambda key, data: client.put_object(Bucket="data", Key=key, Body=data),
            lambda key: client.get_object(Bucket="data", Key=key)["Body"].read(),
            names,
            lambda key: client.delete_object(Bucket="data", Key=key))
    finally:
        server.stop()


@contextlib.contextmanager
def gcs() -> Iterator[Store]:
    """The GCS emulator with bucket ``data``; ``STORAGE_EMULATOR_HOST`` names it while the
    store is in use."""
    with gcs_emulator.running("data") as running, pytest.MonkeyPatch.context() as patch:
        patch.setenv(gcs_emulator.VARIABLE, running.url)
        bucket = running.client.bucket("data")
        yield Store(
            "gs", [], {gcs_emulator.VARIABLE: running.url},
            lambda key, data: bucket.blob(key).upload_from_string(data),
            lambda key: bucket.blob(key).download_as_bytes(),
            lambda prefix: (blob.name for blob in running.client.list_blobs("data",
                                                                             prefix=prefix)),
            lambda key: bucket.blob(key).delete())


STORES = {"s3": s3, "gs": gcs}
