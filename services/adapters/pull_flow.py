"""A durable pull consumer's messages as a flow into a callback, one pull request open at a time.

nats-py's `fetch` sends a pull request and then takes each message with `next_msg`, a timed
wait (a task and a timer) per message; a consumer that pulls again whenever one place frees
up (the providers' lanes, where each message settles on its own) pays that and a pull
request for nearly every message. Here one subscription on the replica's own inbox takes
every message in its callback, and a pull request asks for all the free places at once,
only when no other is open and at least a quarter of the places are free: while the rest
are in flight, whatever they feed stays busy.

Each request expires after `expires_s` (the server then answers `408`), so an idle flow asks
about once a second and a stopping one is done within about that. A request that ends
without an answer (the connection was lost) is given up after `expires_s` more. The
messages are ordinary JetStream messages: `ack()`, `nak(delay=…)` work on them, and each
must be `release`d once settled, which frees its place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg

from services.adapters.nats_client import LedgerClient

log = logging.getLogger("reminders.pull")

NS = 1_000_000_000

#: Status of a pull request whose time ran out (what an idle flow sees once a second).
EXPIRED = "408"
#: An idle heartbeat: the request is still open.
HEARTBEAT = "100"
#: Pause before asking again after a request was refused (e.g. the consumer is gone), so a
#: refusal that repeats does not become a busy loop.
REFUSED_PAUSE_S = 0.5


class PullFlow:
    """Delivers a durable pull consumer's messages to `deliver`, at most `capacity` held at
    once (delivered and not yet `release`d)."""

    def __init__(
        self,
        nc: Client,
        stream: str,
        durable: str,
        capacity: int,
        deliver: Callable[[Msg], None],
        expires_s: float = 1.0,
    ) -> None:
        self._nc = nc
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._capacity = capacity
        self._low_water = max(1, capacity // 4)
        self._deliver = deliver
        self._expires_s = expires_s
        self._held = 0
        self._open: str | None = None  # the reply subject of the open request
        self._asked = 0  # what the open request may still deliver
        self._refused = False
        self._changed = asyncio.Event()

    @property
    def held(self) -> int:
        """Messages delivered and not yet released."""
        return self._held

    def release(self) -> None:
        """One delivered message is settled: its place is free again."""
        self._held -= 1
        if self._open is None and self._capacity - self._held >= self._low_water:
            self._changed.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Ask for messages until `stop` is set, then until the open request ended."""
        inbox = self._nc.new_inbox()
        subscription = await self._nc.subscribe(f"{inbox}.*", cb=self._on_message)
        if isinstance(self._nc, LedgerClient):  # the service's client: no queue, no task
            self._nc.handle_at_once(subscription, self._take)
        loop = asyncio.get_running_loop()
        requests = 0
        opened_at = 0.0
        try:
            while not stop.is_set():
                # Cleared before looking, so what changes from here on ends the wait below.
                self._changed.clear()
                if self._open is not None and loop.time() - opened_at > 2 * self._expires_s:
                    self._open = None  # never answered: the connection was lost meanwhile
                free = self._capacity - self._held
                if self._open is None and free >= self._low_water:
                    requests += 1
                    opened_at = loop.time()
                    await self._ask(f"{inbox}.{requests}", free)
                await _wait(self._changed, self._expires_s, stop)
                if self._refused:
                    self._refused = False
                    await asyncio.sleep(REFUSED_PAUSE_S)
            while True:  # stopping: what the open request still brings is taken
                self._changed.clear()
                if self._open is None or loop.time() - opened_at > 2 * self._expires_s:
                    break
                await _wait(self._changed, self._expires_s, None)
        finally:
            await subscription.unsubscribe()

    async def _ask(self, reply: str, batch: int) -> None:
        request = {"batch": batch, "expires": int(self._expires_s * NS)}
        self._open, self._asked = reply, batch
        try:
            await self._nc.publish(self._next_subject, orjson.dumps(request), reply=reply)
        except Exception as exc:  # NATS away: nats-py reconnects; ask again soon
            log.warning("pull request failed", extra={"error": type(exc).__name__})
            self._open, self._refused = None, True

    async def _on_message(self, message: Msg) -> None:
        self._take(message)

    def _take(self, message: Msg) -> None:
        headers = message.headers
        status = headers.get("Status") if headers and not message.data else None
        if status is None:
            self._held += 1
            self._asked -= 1
            if self._asked <= 0 and self._open is not None:
                self._end()
            self._deliver(message)
            return
        if status == HEARTBEAT or message.subject != self._open:
            return  # a heartbeat, or the end of a request already given up
        if status != EXPIRED:
            log.warning("pull request refused", extra={"status": status})
            self._refused = True
        self._end()

    def _end(self) -> None:
        self._open = None
        self._changed.set()


async def _wait(changed: asyncio.Event, timeout_s: float, stop: asyncio.Event | None) -> None:
    """Until `changed` (or `stop`) is set, or `timeout_s` passed."""
    waits = [asyncio.ensure_future(changed.wait())]
    if stop is not None:
        waits.append(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
