"""CPU time by stage inside a service process, for the benchmark (`python -m bench`).

Off unless `REMINDERS_STAGE_PROFILE` names a file: then `PROFILE` is a `StageProfile`, and
the process adds the thread CPU time of each stage it brackets and rewrites the file (JSON:
seconds per stage, and the units of work counted) at most once a second. Off, `PROFILE` is
None and each call site costs one test of a module global (`if stages.PROFILE is not None`).

A stage is bracketed only around code that does not wait (parsing, folding, encoding, a
publish that only fills a buffer): the thread's CPU time between two points of one
coroutine is that coroutine's own only when no other task ran in between. What waits (a KV
round trip, a fetch) is measured as a whole phase, when nothing else runs beside it, or is
left to the remainder: the process's CPU time minus every bracketed stage.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from nats.aio.client import Client

#: The variable that turns profiling on: the file to write.
PROFILE_ENV = "REMINDERS_STAGE_PROFILE"


class StageProfile:
    """Seconds of thread CPU time per stage, and units of work counted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {"gc": 0.0}
        self.units: dict[str, int] = {}
        self._started = time.process_time()
        self._written = time.monotonic()
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, _info: dict[str, int]) -> None:
        # A collection runs in whatever code allocated last, so it would land in a bracket
        # or outside at random: it is its own stage, `gc`, and no bracket's.
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            self.seconds["gc"] += time.thread_time() - self._gc_started

    def now(self) -> float:
        """The thread's CPU time less the garbage collector's: the start of a bracket."""
        return time.thread_time() - self.seconds["gc"]

    def add(self, stage: str, since: float) -> float:
        """Charge the CPU time since `since` (the collector's left out) to `stage`; returns
        now (to chain brackets)."""
        now = time.thread_time() - self.seconds["gc"]
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - since
        return now

    def count(self, unit: str, n: int = 1) -> None:
        """Count `n` units of work (events, commands, batches); writes the file now and
        then."""
        self.units[unit] = self.units.get(unit, 0) + n
        if time.monotonic() - self._written >= 1.0:
            self.write()

    def write(self) -> None:
        """Rewrite the file: every stage, the units, and the process's CPU time so far."""
        self._written = time.monotonic()
        data = {
            "seconds": self.seconds,
            "units": self.units,
            "process_cpu_s": time.process_time() - self._started,
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        temporary.replace(self.path)


def _from_env() -> StageProfile | None:
    target = os.environ.get(PROFILE_ENV)
    return StageProfile(Path(target)) if target else None


#: The process's profile, or None when profiling is off.
PROFILE: StageProfile | None = _from_env()


def profile_client_io(nc: Client, profile: StageProfile) -> None:
    """Bracket the client's own work on the socket, which no call site of ours can: its
    protocol parser on every chunk read (`nats_read`: every message in, parsed and queued
    for its subscription or request) and its socket writes (`nats_write`). Neither waits:
    the parser hands each message over without blocking, and a write only sends what the
    kernel takes. Only while profiling (these are the client's internals, and a reconnect
    makes a new transport that is not bracketed)."""
    parser: Any = nc._ps
    parse: Callable[[bytes], Awaitable[None]] = parser.parse

    async def timed_parse(data: bytes) -> None:
        since = profile.now()
        try:
            await parse(data)
        finally:
            profile.add("nats_read", since)

    parser.parse = timed_parse
    transport: Any = nc._transport
    writelines: Callable[[Iterable[bytes]], None] = transport.writelines

    def timed_writelines(payload: Iterable[bytes]) -> None:
        since = profile.now()
        try:
            writelines(payload)
        finally:
            profile.add("nats_write", since)

    transport.writelines = timed_writelines
