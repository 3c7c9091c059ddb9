"""Changes a test makes in the Python processes it starts, however they start.

A run's worker processes may be forked from the test's process (they inherit what the
test changed there), forked from a standby started as a new interpreter, or started anew
by Beam; a command may run in a subprocess. For the last three, ``tests/startup`` holds a
``sitecustomize`` that calls ``in_new_process()`` of the modules the environment names
(:data:`VARIABLE`) as each new Python process starts.
"""

from __future__ import annotations

import os
import sys
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


def set_up_then_exec(setup: str) -> list[str]:
    """``[python, -c, CODE]``: a child that runs ``setup`` (Python statements; ``os`` and
    ``sys`` are imported, ``sys.argv[1]`` is its argument), then becomes ``python`` with
    the arguments after that one.

    For what a ``preexec_fn`` would otherwise do: one makes subprocess fork rather than
    vfork, and gRPC (1.81 and later), active in the test process once earlier tests have
    run portable pipelines, then sometimes crashes the forked child before its exec.
    """
    return [sys.executable, "-c",
            f"import os, sys; {setup}; "
            "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"]
