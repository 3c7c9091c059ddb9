"""glibc's malloc tuned for local runs, in the launcher and in its worker processes: its
per-thread arenas capped, and its mmap threshold fixed.

Apart from the runner so that the command line can apply it before anything imports Beam,
ahead of the worker processes it starts early (:mod:`recordbeam.local.standby`).
"""

from __future__ import annotations

import ctypes
import os

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers
_M_ARENA_MAX = -8

#: Blocks from this size up are mapped on their own and returned when freed.
MMAP_THRESHOLD = 1 << 20


def tune_malloc(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas and fix its mmap threshold, here and in worker
    processes started later (they read the environment as they start). A no-op on other
    C libraries.

    Beam's local runner moves data through many gRPC threads; with glibc's default of
    8 arenas per core, freed buffers stay mapped and the launcher's resident memory is
    1.5x higher in a local run of 100k images. And glibc raises its mmap threshold each
    time a mapped block is freed (up to 32 MiB), so that later message buffers of a few
    MiB come from the heap, whose freed space is rarely given back: with the threshold
    fixed at 1 MiB, a 300k-image run's launcher peaked 16-61 MiB lower and its largest
    worker 24-26 MiB lower, no slower (``benchmarks/RESULTS.md``).
    """
    os.environ.setdefault("MALLOC_ARENA_MAX", str(arenas))  # inherited by workers
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, int(os.environ["MALLOC_ARENA_MAX"]))
        libc.mallopt(_M_MMAP_THRESHOLD, int(os.environ["MALLOC_MMAP_THRESHOLD_"]))
    except (OSError, AttributeError, ValueError):
        pass
