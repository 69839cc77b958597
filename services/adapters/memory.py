"""Giving freed memory back to the system, in long-running service processes.

A service's live objects stay bounded (its caches are bounded in bytes), but on glibc the
allocator keeps what large temporary buffers used (a long session's encoded state, the
messages of a re-read) in its heaps after they are freed, and the resident memory of a busy
process creeps up by a few MiB a minute though nothing live grows. `malloc_trim(0)` hands
those pages back; it walks the heaps once, so it runs now and then, not per message. Where
the C library has no `malloc_trim` (musl, macOS) this does nothing.

Trimming cannot return a page that still holds one live small object, and glibc serves a
large buffer from its heaps, among small objects, once any buffer of that size was freed (its
mmap threshold then rises to the freed size). Bursts of large received payloads (a hot
session's state read back in one message) then leave heap pages pinned by whatever small
object landed beside them. `keep_large_buffers_apart` fixes the threshold instead, so every
buffer of `LARGE_BUFFER_BYTES` or more gets pages of its own and gives them back when freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
from collections.abc import Callable

#: Seconds between trims: often enough that the creep never adds up, rare enough to cost
#: nothing measurable.
TRIM_EVERY_S = 30.0

#: Buffers this large or larger are mapped apart from the heaps (glibc's `M_MMAP_THRESHOLD`).
#: Below the size of a typical hot session's state message, above every per-event buffer.
LARGE_BUFFER_BYTES = 64 * 1024

#: Allocations between two collections of the youngest generation (Python's default: 700).
COLLECT_AFTER_ALLOCATIONS = 10_000

#: The same for the projector, whose fetched batch of a thousand events holds tens of
#: thousands of objects at once: a collection every 10,000 ran several times per batch,
#: promoting what was in flight and walking it again in the older generations
#: (`bench/results/projector_gc_threshold_ab.json`). The providers measured slower with it.
PROJECTOR_COLLECT_AFTER_ALLOCATIONS = 50_000

#: glibc's `mallopt` parameter number for the mmap threshold (malloc.h).
M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    libc = _libc()
    if libc is None:
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


def keep_large_buffers_apart(threshold: int = LARGE_BUFFER_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes; False where that is not glibc."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


def collect_less_often(after_allocations: int = COLLECT_AFTER_ALLOCATIONS) -> None:
    """Tune the garbage collector of a busy worker's process, once it has started.

    The projector keeps thousands of session states in its cache and builds new ones on every
    event; the providers parse a session view and a runtime event and build a command for
    every event; the gateway decides, encodes and folds two events or more per
    command. With the default threshold the collector ran every few hundred allocations,
    promoted what was then in flight and walked the older generations again and again
    (`bench/fold_profile.py` measures its share in the projector; for the providers, see
    `docs/scaling.md`). Less often, the little cyclic garbage they make (asyncio's) waits a
    few thousand allocations longer. What start-up built lives as long as the process, so it
    is frozen out of every later collection.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(after_allocations, older, oldest)
