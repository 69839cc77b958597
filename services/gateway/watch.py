"""One watch of the projection bucket per gateway replica, shared by every waiting query.

A KV watcher is a JetStream consumer: one per waiting query would exhaust the server's
consumers under a flood of long waits and break every session's queries (SPEC §4.10). So the
gateway keeps a single ordered consumer on `$KV.<bucket>.>` that delivers new values only,
and hands each update to the queries waiting on that key. Waits are bounded per replica and
per session, so one session's flood cannot take every place: past either bound a query is
answered `rate_limited` at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import DeliverPolicy

from contracts.records import Tombstone
from contracts.state import SessionState
from services.adapters.records import decode_record

log = logging.getLogger("reminders.gateway")

Record = SessionState | Tombstone | None


class TooManyWaiting(Exception):
    """Every place for a waiting query is taken (on this replica, or for this session)."""


@dataclass(eq=False)
class Waiter:
    """One query waiting until a record of its key satisfies `ready`."""

    token: str
    ready: Callable[[Record], bool]
    done: asyncio.Future[Record] = field(default_factory=asyncio.Future)


class ProjectionWatch:
    """Dispatches the bucket's updates to the queries waiting on each key."""

    def __init__(
        self, nc: Client, bucket: str, max_waiting: int, max_waiting_per_session: int
    ) -> None:
        self._nc = nc
        self._bucket = bucket
        self._prefix = f"$KV.{bucket}."
        self._max_waiting = max_waiting
        self._per_session = max_waiting_per_session
        self._waiters: dict[str, set[Waiter]] = {}
        self._count = 0
        self._subscription: Subscription | None = None
        self._starting = asyncio.Lock()

    @property
    def waiting(self) -> int:
        """Queries waiting now."""
        return self._count

    async def ensure_started(self) -> None:
        """Start the one watch on first use (an ordered consumer of new values only)."""
        async with self._starting:
            if self._subscription is not None:
                return
            self._subscription = await self._nc.jetstream().subscribe(
                f"{self._prefix}>",
                stream=f"KV_{self._bucket}",
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
                cb=self._on_update,
            )

    async def stop(self) -> None:
        """Stop the watch; waiting queries run into their deadlines."""
        if self._subscription is not None:
            await self._subscription.unsubscribe()
            self._subscription = None

    def register(self, token: str, ready: Callable[[Record], bool]) -> Waiter:
        """A place for one waiting query, or `TooManyWaiting`."""
        waiting_here = self._waiters.setdefault(token, set())
        if self._count >= self._max_waiting or len(waiting_here) >= self._per_session:
            if not waiting_here:
                del self._waiters[token]
            raise TooManyWaiting(token)
        waiter = Waiter(token, ready)
        waiting_here.add(waiter)
        self._count += 1
        return waiter

    def release(self, waiter: Waiter) -> None:
        """Give the place back (idempotent)."""
        waiting_here = self._waiters.get(waiter.token)
        if waiting_here is None or waiter not in waiting_here:
            return
        waiting_here.discard(waiter)
        self._count -= 1
        if not waiting_here:
            del self._waiters[waiter.token]
        if not waiter.done.done():
            waiter.done.cancel()

    async def _on_update(self, message: Msg) -> None:
        waiting_here = self._waiters.get(message.subject[len(self._prefix) :])
        if not waiting_here:
            return  # nobody waits on this key: not even decoded
        operation = (message.headers or {}).get("KV-Operation")
        try:
            record = None if operation in ("DEL", "PURGE") else decode_record(message.data)
        except ValueError as exc:  # a value the projector would not write: wait on
            log.warning("unreadable bucket value", extra={"error": type(exc).__name__})
            return
        for waiter in list(waiting_here):
            if not waiter.done.done() and waiter.ready(record):
                waiter.done.set_result(record)
