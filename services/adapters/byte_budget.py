"""A budget of bytes in flight, shared by concurrent tasks of one process.

A task holds its weight while it works, and waits, in arrival order, while the others
already hold too much. A task heavier than the whole budget runs alone rather than never.
What this bounds is transient memory: the projector writes each touched session's whole
state, and every write holds several copies of it at once (the encoded value, the client's
publish command, the transport's buffer), so a batch that touches many large sessions would
otherwise hold all of them at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class ByteBudget:
    """At most `budget` bytes held at once, except by a single task heavier than that."""

    def __init__(self, budget: int) -> None:
        self._budget = max(1, budget)
        self._held = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def held(self) -> int:
        """Bytes held now."""
        return self._held

    @contextlib.asynccontextmanager
    async def hold(self, weight: int) -> AsyncIterator[None]:
        """Hold `weight` bytes for the body of the `async with`, waiting until they fit."""
        weight = max(0, weight)
        await self._acquire(weight)
        try:
            yield
        finally:
            self._release(weight)

    def _fits(self, weight: int) -> bool:
        return self._held == 0 or self._held + weight <= self._budget

    async def _acquire(self, weight: int) -> None:
        if not self._waiters and self._fits(weight):
            self._held += weight
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (weight, granted)
        self._waiters.append(waiter)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(weight)  # granted, then cancelled before it ran: give it back
            else:
                if waiter in self._waiters:  # `_wake` may have dropped it already
                    self._waiters.remove(waiter)
                self._wake()  # the next in line may fit now that this one left
            raise

    def _release(self, weight: int) -> None:
        self._held -= weight
        self._wake()

    def _wake(self) -> None:
        """Grant waiters in arrival order while the first in line fits: a heavy one is not
        overtaken by lighter ones behind it, so it is never starved."""
        while self._waiters and self._fits(self._waiters[0][0]):
            weight, granted = self._waiters.popleft()
            if granted.done():
                continue  # cancelled while waiting: it holds nothing
            self._held += weight
            granted.set_result(None)
