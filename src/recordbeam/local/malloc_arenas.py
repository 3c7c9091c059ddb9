"""glibc's malloc tuned for local runs, in the launcher and in its worker processes: its
per-thread arenas capped, and its mmap and trim thresholds fixed.

Apart from the runner so that the command line can apply it before anything imports Beam,
ahead of the worker processes it starts early (:mod:`recordbeam.local.standby`).
"""

from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: Blocks from this size up are mapped on their own and returned when freed.
MMAP_THRESHOLD = 2 << 20
#: Free memory at the top of a heap kept for reuse, up to this, rather than given back.
TRIM_THRESHOLD = 16 << 20


def tune_malloc(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas and fix its mmap and trim thresholds, here and
    in worker processes started later (they read the environment as they start). A no-op
    on other C libraries; a value already in the environment is kept.

    - Arenas: Beam's local runner moves data through many gRPC threads; with glibc's
      default of 8 arenas per core, freed buffers stay mapped and the launcher's
      resident memory is 1.5x higher in a local run of 100k images.
    - mmap threshold: glibc raises it each time a mapped block is freed (up to 32 MiB),
      so that later message buffers of a few MiB come from the heap, whose freed space is
      rarely given back. Fixed at 2 MiB: images, records and most message buffers come
      from the heap, larger blocks are mapped on their own and returned when freed.
    - trim threshold: fixing the mmap threshold also fixes this one at glibc's default,
      128 KiB, and the top of the heap is then given back to the system whenever that
      much is free there. A worker that reads a 140 KB image, encodes it and writes it
      would give those pages back after every image and fault them in again for the next
      (~37 page faults per pair of such buffers). 16 MiB are kept.

    Measured (``benchmarks/RESULTS.md``, "malloc"): on 20k COCO images of 140 KB, ~4x
    fewer page faults and ~7% less CPU than the 128 KiB trim threshold; on 300k small
    images, the launcher and the largest worker peak 15-30 MiB higher.
    """
    os.environ.setdefault("MALLOC_ARENA_MAX", str(arenas))  # inherited by workers
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(TRIM_THRESHOLD))
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, int(os.environ["MALLOC_ARENA_MAX"]))
        libc.mallopt(_M_MMAP_THRESHOLD, int(os.environ["MALLOC_MMAP_THRESHOLD_"]))
        libc.mallopt(_M_TRIM_THRESHOLD, int(os.environ["MALLOC_TRIM_THRESHOLD_"]))
    except (OSError, AttributeError, ValueError):
        pass
