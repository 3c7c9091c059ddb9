"""A Google Cloud Storage emulator on a loopback port, for tests of ``gs://`` paths.

gcp-storage-emulator (in the ``test`` extra) serves Google's JSON API from memory, with
what Beam's GCS filesystem uses: simple and resumable uploads, ranged downloads, listing
by prefix, rewrite (Beam's copy, and so its rename), batch deletes. Google's storage
client sends every request there while ``STORAGE_EMULATOR_HOST`` names it; recordbeam
then connects without credentials and says so (``recordbeam.gcs_credentials``). It
serves one request at a time, from a thread of the test process: processes the test
starts (a venv's launcher, local workers) reach it over HTTP like any client.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

VARIABLE = "STORAGE_EMULATOR_HOST"


@dataclass(frozen=True)
class Emulator:
    """A running emulator: its URL, and a client for the test's own reads and writes."""

    url: str
    client: object  # google.cloud.storage.Client, anonymous, pointed at ``url``

    def upload_folder(self, folder: str, destination: str) -> None:
        """Every file below local ``folder`` to ``destination`` (``gs://bucket/prefix``)."""
        bucket, prefix = _split(destination)
        for root, _dirs, names in os.walk(folder):
            for name in sorted(names):
                local = os.path.join(root, name)
                relative = os.path.relpath(local, folder).replace(os.sep, "/")
                self.client.bucket(bucket).blob(f"{prefix}/{relative}").upload_from_filename(local)

    def upload_file(self, local: str, destination: str) -> None:
        bucket, name = _split(destination)
        self.client.bucket(bucket).blob(name).upload_from_filename(local)

    def names(self, folder: str) -> list[str]:
        """Object names below ``folder`` (``gs://bucket/prefix``), relative to it, sorted."""
        bucket, prefix = _split(folder)
        return sorted(blob.name.removeprefix(prefix + "/")
                      for blob in self.client.list_blobs(bucket, prefix=prefix + "/"))

    def read(self, path: str) -> bytes:
        bucket, name = _split(path)
        return self.client.bucket(bucket).blob(name).download_as_bytes()

    def snapshot(self, folder: str) -> dict[str, bytes]:
        """Relative name -> bytes of every object below ``folder``."""
        return {name: self.read(f"{folder}/{name}") for name in self.names(folder)}


def _split(path: str) -> tuple[str, str]:
    bucket, _, name = path.removeprefix("gs://").partition("/")
    return bucket, name.rstrip("/")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running(*buckets: str) -> Iterator[Emulator]:
    """An in-memory emulator with ``buckets`` created, stopped on exit. The caller sets
    ``STORAGE_EMULATOR_HOST`` to its URL where the code under test should use it."""
    server_module = pytest.importorskip("gcp_storage_emulator.server")
    storage = pytest.importorskip("google.cloud.storage")
    from google.auth.credentials import AnonymousCredentials

    # It warns on every JSON response it sends ("Content handled as string").
    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    port = _free_port()
    server = server_module.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    client = storage.Client(project="test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": url})
    for bucket in buckets:
        client.create_bucket(bucket)
    try:
        yield Emulator(url, client)
    finally:
        server.stop()
