"""Progress of a running conversion, read from the output folder by the launcher.

The sink writes the planned input bytes to ``plan.json`` in its temp folder and streams
shards into the same folder; comparing the two gives a fraction done and an ETA without
any channel between workers and launcher, on any filesystem.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TextIO

from recordbeam import filesystems
from recordbeam.dataset.names import PLAN
from recordbeam.images.checks import human_bytes


def _snapshot(temp_dir: str) -> tuple[int | None, int]:
    planned, written = None, 0
    try:
        for meta in filesystems.list_files(temp_dir):
            if meta.path.endswith("/" + PLAN):
                planned = sum(json.loads(filesystems.read_bytes(meta.path))["input_bytes"].values())
            elif not meta.path.endswith(".idx"):
                written += meta.size_in_bytes
    except Exception:  # noqa: BLE001 - the folder changes under us; try again next tick
        pass
    return planned, written


class ProgressReporter:
    """Prints ``written / planned, rate, ETA`` while a run goes on.

    On a terminal, one line rewritten in place (``\r``) every ``interval`` seconds. Elsewhere
    (a log file, a pipe) a ``\r`` would pile every update onto one line: there a plain line
    every ``log_interval`` seconds instead.
    """

    def __init__(self, temp_dir: str, *, interval: float = 2.0, log_interval: float = 30.0,
                 stream: TextIO = sys.stderr) -> None:
        self._temp_dir = temp_dir
        self._stream = stream
        self._live = _is_terminal(stream)
        self._interval = interval if self._live else log_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._start = time.monotonic()
        self._printed = False

    def __enter__(self) -> ProgressReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 1)
        if self._printed and self._live:
            self._stream.write("\n")
            self._stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            planned, written = _snapshot(self._temp_dir)
            if not written:
                continue
            elapsed = time.monotonic() - self._start
            line = f"writing: {human_bytes(written)}"
            if planned:
                fraction = min(written / planned, 1.0)
                rate = written / elapsed
                eta = (planned - written) / rate if rate > 0 and planned > written else 0.0
                line += f" of ~{human_bytes(planned)} ({fraction:.0%}), ETA {eta:.0f}s"
            self._stream.write("\r" + line.ljust(60) if self._live else line + "\n")
            self._stream.flush()
            self._printed = True


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
