"""Services the runner tests start on loopback ports: Beam's local job service, its
worker pool, the stand-in Dataflow API (``fake_dataflow.py``). Each is a process group of
its own, ended (children too) when its ``with`` block ends."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

FAKE_DATAFLOW = Path(__file__).with_name("fake_dataflow.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(command: Sequence[str], port: int, log: Path, *, python: str = sys.executable,
            env: Mapping[str, str] | None = None, start_seconds: float = 60) -> Iterator[None]:
    """Run ``python *command`` until the block ends, once it accepts connections on
    ``port``; its output goes to ``log``; ``env`` is its environment (default: this
    process's). The worker pool starts workers as plain ``python``: ``PATH`` leads to
    ``python``'s folder first."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = str(Path(python).parent) + os.pathsep + env.get("PATH", "")
    with log.open("w") as out:
        proc = subprocess.Popen([python, *command], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + start_seconds
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(command)} did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)


def job_service(port: int, log: Path, **kwargs) -> contextlib.AbstractContextManager[None]:
    """Beam's local job service (the portable runner's ``--job_endpoint``)."""
    return serving(["-m", "apache_beam.runners.portability.local_job_service_main",
                    "--port", str(port)], port, log, **kwargs)


def worker_pool(port: int, log: Path, **kwargs) -> contextlib.AbstractContextManager[None]:
    """Beam's worker pool (``--environment_type EXTERNAL --environment_config``)."""
    return serving(["-m", "apache_beam.runners.worker.worker_pool_main",
                    f"--service_port={port}"], port, log, **kwargs)


def fake_dataflow(port: int, log: Path, job_id: str,
                  **kwargs) -> contextlib.AbstractContextManager[None]:
    """The stand-in Dataflow job API (``--dataflow_endpoint=http://localhost:PORT``)."""
    return serving([str(FAKE_DATAFLOW), "--port", str(port), "--job-id", job_id], port, log,
                   **kwargs)
