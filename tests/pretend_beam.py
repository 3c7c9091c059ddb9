"""Run the tests as on a Beam the local runner is not tested with, with the Beam at hand.

    RECORDBEAM_PRETEND_BEAM=2.99.0 pytest tests/integration

``recordbeam.local.internals.beam_version()`` then answers that version in the test
process (``tests/conftest.py``) and in every Python process the tests start
(``tests/in_new_processes.py``): commands run as subprocesses, a standby started as a new
interpreter, the workers Beam starts. Workers forked from the test's process inherit it.
So ``why_unusable()`` says what it says on a Beam newer than ``TESTED_BEAM``, everywhere:
local runs are Beam's plain FnApiRunner, and the tests marked ``fast_path`` skip. Beam
itself is unchanged, so this shows what the version check decides, not what a new Beam
release breaks: that is ``make test-newest-beam``.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "RECORDBEAM_PRETEND_BEAM"


def install(version: str) -> None:
    """In this process: ``beam_version()`` answers ``version`` from now on."""
    from recordbeam.local import internals

    internals.beam_version = lambda: version
    internals.why_unusable.cache_clear()


def in_new_process() -> None:
    """In a process the tests started (``tests/startup``)."""
    try:
        install(os.environ[VARIABLE])
    except ImportError:  # a Python without recordbeam (pip building a package...)
        pass


def install_everywhere(environ: dict[str, str] | os._Environ) -> str | None:
    """When ``environ`` names a version: install it here and in every Python process
    started with ``environ`` from now on. Returns the version, or None."""
    version = environ.get(VARIABLE)
    if not version:
        return None
    import in_new_processes

    install(version)
    environ.update(in_new_processes.environment(__name__, str(Path(__file__).parent), environ))
    return version
