"""A durable pull consumer that hands each decoded event to a plain handler.

A handler is an async function of one event that returns a `Settlement` (how the message is
settled); it never sees a NATS message, so a unit test calls it directly with fake ports. This
loop does the rest, the same way for every worker: decode, checking the event against its
subject (what does not decode goes to the dead-letter stream with the decoder's code), one
consumer span per message continuing the command's trace, and settling — ack, redeliver after
a delay, or copy to the DLQ and ack. An exception from a handler is never swallowed: it is
logged and the message is redelivered. `send_command` is the one reply path of a worker that
asks the gateway (the propagator, the providers).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from typing import Any, Literal

from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from opentelemetry import trace
from opentelemetry.trace import Tracer

from contracts.decode import DecodeError, decode
from contracts.events import Event
from services.adapters.deadletter import dead_letter_message
from services.adapters.provisioning import DurableConsumer
from services.adapters.pull_flow import PullFlow
from services.adapters.telemetry import consumer_span
from services.runtime import Runtime

log = logging.getLogger("reminders.consumer")
#: Nanoseconds per second: JetStream's durations (ack_wait, expires, …) are nanoseconds.
NS = 1_000_000_000


@dataclass(frozen=True)
class Settlement:
    """How a handled message is settled."""

    action: Literal["ack", "retry", "dead_letter"]
    delay_s: float = 0.0
    code: str = ""
    reason: str = ""


ACK = Settlement("ack")


def retry(delay_s: float = 1.0) -> Settlement:
    """Redeliver after `delay_s` (the cause is transient: a gateway away, a conflict)."""
    return Settlement("retry", delay_s=delay_s)


def dead_letter(code: str, reason: str) -> Settlement:
    """Copy to the dead-letter stream with a stable code, then ack (SPEC §6.4)."""
    return Settlement("dead_letter", code=code, reason=reason)


Handler = Callable[[Event], Awaitable[Settlement]]

#: Sends one command to the gateway and returns its reply; raises when nobody answered.
Request = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

#: Gateway answers that a later attempt may turn into an ok.
RETRYABLE = frozenset({"unavailable", "conflict", "rate_limited"})


async def send_command(
    request: Request, op: str, command: dict[str, Any], refused: str
) -> tuple[Settlement, dict[str, Any]]:
    """Send one command to the gateway and settle by its reply (the worker reply path).

    Ack once the gateway replied ok; redeliver after a delay while it is away (nobody
    answered) or its answer may change (`RETRYABLE`); dead-letter what it refuses for good,
    with its code and `refused` as the reason. Returns the reply too (`{}` when none came),
    so a worker can read an ok reply's fields.
    """
    try:
        reply = await request(op, command)
    except Exception as exc:  # gateway away: retried by redelivery, never dropped
        log.warning("gateway unavailable", extra={"op": op, "error": type(exc).__name__})
        return retry(), {}
    if reply.get("ok"):
        return ACK, reply
    code = str(reply.get("error", {}).get("code", "invalid_reply"))
    if code in RETRYABLE:
        return retry(), reply
    return dead_letter(code, refused), reply


def durable_consumer(
    stream: str, durable: str, filter_subject: str, max_ack_pending: int
) -> DurableConsumer:
    """An explicit-ack durable consumer from the start of the stream that never gives up.

    `max_ack_pending` bounds what is in flight, so a slow handler is not sent duplicates.
    """
    return DurableConsumer(
        stream,
        {
            "durable_name": durable,
            "filter_subject": filter_subject,
            "ack_policy": "explicit",
            "deliver_policy": "all",
            "ack_wait": 30 * NS,
            "max_ack_pending": max_ack_pending,
            "max_deliver": -1,
        },
    )


@dataclass
class EventConsumer:
    """One durable consumer of the event stream and the handler of what it delivers."""

    durable: DurableConsumer
    batch: int
    tracer: Tracer

    async def run(
        self,
        runtime: Runtime,
        handle: Handler,
        stop: asyncio.Event,
        key_of: Callable[[Msg], str] | None = None,
    ) -> None:
        """Fetch, handle and settle until `stop` is set (within about a second); with
        `key_of`, as a flow settled in lanes (`run_messages`)."""
        await self.run_messages(
            runtime, lambda message: self._outcome(message, handle), stop, key_of
        )

    async def run_messages(
        self,
        runtime: Runtime,
        outcome_of: Callable[[Msg], Awaitable[Settlement]],
        stop: asyncio.Event,
        key_of: Callable[[Msg], str] | None = None,
    ) -> None:
        """The same loop for a stream whose messages are not ledger events (the providers'
        runtime events): `outcome_of` decodes one message and handles it. With `key_of`,
        messages are settled concurrently across keys (e.g. sessions) and in delivery order
        within a key, as a stream (`_run_lanes`)."""
        if key_of is not None:
            await self._run_lanes(runtime, outcome_of, stop, key_of)
            return
        subscription = await runtime.js.pull_subscribe_bind(
            durable=self.durable.name, stream=self.durable.stream
        )
        try:
            while not stop.is_set():
                for message in await self._fetch(subscription, self.batch):
                    await self._settle(runtime, message, outcome_of)
        finally:
            await subscription.unsubscribe()

    async def _run_lanes(
        self,
        runtime: Runtime,
        outcome_of: Callable[[Msg], Awaitable[Settlement]],
        stop: asyncio.Event,
        key_of: Callable[[Msg], str],
    ) -> None:
        """Up to `batch` messages in flight, each settled as soon as the one before it of
        the same key is, and more asked for as places free up (`PullFlow`): no batch waits
        for its slowest message, so what it feeds (the gateway, for the providers) is never
        left idle while a batch drains. The order within a key is the delivery order (a
        redelivered message goes behind what its key already has in flight)."""
        lanes: dict[str, deque[Msg]] = {}
        running: set[asyncio.Task[None]] = set()

        async def drain(key: str, lane: deque[Msg]) -> None:
            while lane:
                try:
                    await self._settle(runtime, lane[0], outcome_of)
                finally:
                    lane.popleft()
                    flow.release()
            del lanes[key]

        def deliver(message: Msg) -> None:
            key = key_of(message)
            lane = lanes.get(key)
            if lane is not None:
                lane.append(message)
                return
            lanes[key] = lane = deque([message])
            task = asyncio.create_task(drain(key, lane))
            running.add(task)
            task.add_done_callback(running.discard)

        flow = PullFlow(
            runtime.connection, self.durable.stream, self.durable.name, self.batch, deliver
        )
        await flow.run(stop)
        if running:  # let what is in flight settle before the loop ends
            await asyncio.wait(list(running))

    async def _fetch(
        self, subscription: JetStreamContext.PullSubscription, batch: int
    ) -> list[Msg]:
        """Up to `batch` messages, or none after a second idle or when NATS is away."""
        try:
            return await subscription.fetch(batch, timeout=1.0)
        except TimeoutError:  # nats-py's and asyncio's: idle, nothing wrong
            return []
        except Exception as exc:  # NATS away: nats-py reconnects; pull again soon
            log.warning("fetch failed", extra={"error": type(exc).__name__})
            await asyncio.sleep(0.5)
            return []

    async def _settle(
        self, runtime: Runtime, message: Msg, outcome_of: Callable[[Msg], Awaitable[Settlement]]
    ) -> None:
        span = consumer_span(self.tracer, message.subject, message.headers, self.durable.name)
        try:
            with trace.use_span(span, end_on_exit=True) if span else nullcontext():
                outcome = await outcome_of(message)
            if outcome.action == "ack":
                await message.ack()
            elif outcome.action == "retry":
                await message.nak(delay=outcome.delay_s)
            else:
                await dead_letter_message(
                    runtime.js, self.durable.name, message, outcome.code, outcome.reason
                )
                await message.ack()
        except Exception as exc:  # never swallowed: redelivered after ack_wait or the nak
            log.warning("handling failed", extra={"error": type(exc).__name__})
            with suppress(Exception):  # the connection is away: ack_wait redelivers it
                await message.nak(delay=1.0)

    @staticmethod
    async def _outcome(message: Msg, handle: Handler) -> Settlement:
        try:
            event = decode(message.data, subject=message.subject)
        except DecodeError as exc:
            return dead_letter(exc.code, exc.reason)
        return await handle(event)
