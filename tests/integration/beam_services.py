"""Beam's own services on loopback ports, for tests of the portable runner: the local job
service (``apache_beam.runners.portability.local_job_service_main``) and a worker pool
(``apache_beam.runners.worker.worker_pool_main``)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

JOB_SERVICE = "apache_beam.runners.portability.local_job_service_main"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def service(args: list[str], port: int, log: Path) -> Iterator[None]:
    """Start a Beam service on a loopback port; stop it (and its children) afterwards."""
    env = dict(os.environ)
    # The worker pool starts workers as plain `python`: make that our interpreter.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
