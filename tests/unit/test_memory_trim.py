"""Service processes give the allocator's freed pages back now and then
(`services/adapters/memory.py`)."""

from __future__ import annotations

import asyncio

from services.adapters.memory import (
    give_back_freed_memory,
    keep_large_buffers_apart,
    malloc_trim,
)


async def test_it_trims_every_interval_until_stopped() -> None:
    calls: list[int] = []
    stop = asyncio.Event()

    def trim(pad: int) -> int:
        calls.append(pad)
        if len(calls) == 3:
            stop.set()
        return 1

    assert await give_back_freed_memory(stop, every_s=0.01, trim=trim) == 3
    assert calls == [0, 0, 0]


async def test_a_stop_before_the_first_interval_trims_nothing() -> None:
    stop = asyncio.Event()
    stop.set()
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    assert await give_back_freed_memory(stop, every_s=10.0, trim=trim) == 0
    assert calls == []


def test_glibc_s_trim_is_found_and_runs() -> None:
    trim = malloc_trim()
    assert trim is not None  # the suite runs on glibc (Debian, the project's images)
    assert trim(0) in (0, 1)


def test_glibc_s_mmap_threshold_is_fixed() -> None:
    assert keep_large_buffers_apart()  # mallopt answers 1 on success
