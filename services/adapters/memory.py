"""Giving freed memory back to the system, in long-running service processes.

A service's live objects stay bounded (its caches are bounded in bytes), but on glibc the
allocator keeps what large temporary buffers used (a long session's encoded state, the
messages of a re-read) in its heaps after they are freed, and the resident memory of a busy
process creeps up by a few MiB a minute though nothing live grows. `malloc_trim(0)` hands
those pages back; it walks the heaps once, so it runs now and then, not per message. Where
the C library has no `malloc_trim` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import Callable

#: Seconds between trims: often enough that the creep never adds up, rare enough to cost
#: nothing measurable.
TRIM_EVERY_S = 30.0


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)
    return trim


async def give_back_freed_memory(
    stop: asyncio.Event,
    every_s: float = TRIM_EVERY_S,
    trim: Callable[[int], int] | None = None,
) -> int:
    """Trim the allocator's heaps every `every_s` until `stop` is set; how many times."""
    trim = trim or malloc_trim()
    if trim is None:
        return 0
    trims = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if not stop.is_set():
            trim(0)
            trims += 1
    return trims
