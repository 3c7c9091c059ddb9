"""Changes a test makes in the Python processes it starts, however they start.

A run's worker processes may be forked from the test's process (they inherit what the
test changed there), forked from a standby started as a new interpreter, or started anew
by Beam; a command may run in a subprocess. For the last three, ``tests/startup`` holds a
``sitecustomize`` that calls ``in_new_process()`` of the modules the environment names
(:data:`VARIABLE`) as each new Python process starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VARIABLE = "RECORDBEAM_TEST_STARTUP"
TESTS = str(Path(__file__).parent)  # this module's folder: the modules named import it
STARTUP = str(Path(TESTS) / "startup")


def environment(module: str, folder: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What to set in ``environ`` so that new processes call ``module.in_new_process()``,
    ``module`` being importable from ``folder``."""
    paths = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    modules = [m for m in environ.get(VARIABLE, "").split(",") if m]
    return {"PYTHONPATH": os.pathsep.join([STARTUP, TESTS, folder, *paths]),
            VARIABLE: ",".join([*modules, module])}


def register(monkeypatch: Any, module: str, folder: str) -> None:
    """:func:`environment`, for the rest of one test."""
    for name, value in environment(module, folder, os.environ).items():
        monkeypatch.setenv(name, value)
