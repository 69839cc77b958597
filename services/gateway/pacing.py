"""Per-session pacing inside one gateway replica: a rate limit (SPEC §4.1) and one command
of a session at a time."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RateLimiter:
    """At most `limit` commands per second per session, per gateway replica (SPEC §4.1)."""

    def __init__(self, limit: int, max_sessions: int = 100_000) -> None:
        self._limit = limit
        self._max_sessions = max_sessions
        self._windows: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after_ms(self, session_id: str, now: float) -> int:
        """0 when the command may go now (and counts it), else how long to wait."""
        window = self._windows.setdefault(session_id, deque())
        self._windows.move_to_end(session_id)
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= self._limit:
            return max(1, int((1.0 - (now - window[0])) * 1000))
        window.append(now)
        # Least recently used first: drop every window that no longer counts anything (its
        # newest command a second old), as well as any beyond the bound, so an idle session
        # holds nothing here.
        while self._windows:
            oldest = next(iter(self._windows.values()))
            if len(self._windows) <= self._max_sessions and now - oldest[-1] < 1.0:
                break
            self._windows.popitem(last=False)
        return 0


class SessionLocks:
    """One asyncio lock per session id, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str, timeout_s: float | None = None) -> AsyncIterator[None]:
        """Serialize commands of one session within this process; with `timeout_s`, raise
        `TimeoutError` rather than wait longer for the command in flight before this one."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            await asyncio.wait_for(lock.acquire(), timeout_s)
            try:
                yield
            finally:
                lock.release()
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)
