"""glibc's heap, kept small in long-running processes: malloc arenas capped, the mmap threshold
pinned, free pages given back. Each call is a no-op under another C library.

The starter caps the arenas and gives the free heap back after large listings (its informers);
the worker caps the arenas and pins the mmap threshold (its activity threads and the Temporal
core's threads, and the large node-set buffers of a load-balancer burst).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library)."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None).malloc_trim
    return None


#: glibc's ``mallopt`` parameter for the number of malloc arenas.
_M_ARENA_MAX = -8


def cap_malloc_arenas(arenas: int = 2) -> None:
    """Let glibc keep at most ``arenas`` malloc arenas (its default is eight per core).

    For the starter (one event loop and a few I/O threads) and the worker (activity threads and
    the Temporal core's threads): every thread that allocates at once otherwise gets an arena of
    its own, whose free pages stay resident. Called before the threads start; another C library:
    nothing.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas)


#: glibc's ``mallopt`` parameter for the size from which ``malloc`` maps memory of its own.
_M_MMAP_THRESHOLD = -3


def pin_mmap_threshold(size: int = 128 * 1024) -> None:
    """Keep glibc's mmap threshold at ``size`` (its initial 128 KiB) instead of letting it grow.

    glibc raises the threshold to the size of every mapped block freed (up to 32 MiB), so after
    the first large buffers (a node set's JSON, gRPC messages) blocks of that size come from the
    heap, where one live neighbour keeps their pages resident. A pinned threshold maps and unmaps
    them (what it saves the worker: bench/README.md). Another C library: nothing.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, size)


def release_free_heap() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``; else nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
