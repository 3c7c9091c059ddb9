"""glibc's malloc arenas, capped for local runs: in the launcher and in its worker processes.

Apart from the runner so that the command line can apply it before anything imports Beam,
ahead of the worker processes it starts early (:mod:`recordbeam.local.standby`).
"""

from __future__ import annotations

import ctypes
import os

_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas, here and in worker processes started later.

    Beam's local runner moves data through many gRPC threads; with glibc's default of
    8 arenas per core, freed buffers stay mapped and the launcher's resident memory is
    1.5x higher in a local run of 100k images. A no-op on other C libraries.
    """
    os.environ.setdefault("MALLOC_ARENA_MAX", str(arenas))  # inherited by workers
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, int(os.environ["MALLOC_ARENA_MAX"]))
    except (OSError, AttributeError, ValueError):
        pass
