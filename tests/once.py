"""Session data made once per test run, however many pytest-xdist processes run it: the
first process to ask makes it in a folder they all see, the others wait and read it."""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> Any:
    """``make(folder)``'s result, made by the first process of this run to ask for
    ``name`` (in ``folder``, shared by the run's processes) and read back, pickled, by the
    others. What it makes is read only: every process uses the same files."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's folder, above each worker's own
    root = base / "once"
    root.mkdir(exist_ok=True)
    made = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if made.exists():
            return pickle.loads(made.read_bytes())
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)  # left by a process that failed making it
        folder.mkdir()
        value = make(folder)
        partial = root / f"{name}.partial"
        partial.write_bytes(pickle.dumps(value))
        partial.rename(made)
        return value
