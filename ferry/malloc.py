"""glibc's malloc, tuned for a process that moves object bytes in parts with many threads."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

# mallopt's parameters (glibc's malloc.h) and ferry's values for them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_TUNING = (
    # Two arenas, where glibc would make up to eight per core: each thread that allocates under contention gets
    # an arena of its own, which keeps what it frees (tens of MB of freed 8 MiB parts at peak, holding no data).
    (_M_ARENA_MAX, 2),
    # A part (8 MiB by default) comes from the heap, not a fresh mapping faulted in page by page (glibc's
    # threshold, 128 KiB at first, rises only as mapped chunks are freed)...
    (_M_MMAP_THRESHOLD, 32 << 20),
    # ...and the heap keeps freed parts for the next ones instead of giving them back and faulting them in again.
    (_M_TRIM_THRESHOLD, 256 << 20),
)


def tune() -> None:
    """Tune malloc from now on for parts passed between threads, where the environment does not tune it itself.

    Measured (2 cores): a sync of 64 x 256 MiB from ferry's synthetic source into its null target took 3.8 s of CPU
    with glibc's defaults (188-196 MB peak RSS); with two arenas alone, 6.9 s (3.6-4.2 s of it in the kernel: freed
    parts trimmed and faulted in again) and 121 MB; with all three settings, 3.1 s and 130-147 MB. Into moto
    (2,000 x 64 KiB and 4 x 256 MiB): 187-195 MB without, 168-184 MB with, at the same CPU. Python's own small
    objects are pymalloc's, not malloc's.

    Called first thing by `ferry` (ferry.cli.run) and again as a transfer starts its workers, for a process that
    ferry's command line did not start (a Dask worker). It changes what glibc does from then on: the arenas made
    before stay, and once a process has made more than eight, glibc has fixed its limit (a Dask worker's
    environment can say MALLOC_ARENA_MAX=2 instead). An environment that tunes malloc itself (any MALLOC_* setting,
    or glibc.malloc in GLIBC_TUNABLES) is left as it is, and so is any libc but glibc's.
    """
    chosen = any(name.startswith("MALLOC_") for name in os.environ)
    if chosen or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "") or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # no mallopt (musl): nothing to tune
        mallopt = ctypes.CDLL(None).mallopt
        for param, value in _TUNING:
            mallopt(param, value)
