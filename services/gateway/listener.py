"""The gateway's command subscription: a plain nats-py queue subscription on `reminders.v1.*`.

Commands are the write hot path, and group commit needs many of them in flight at once, so
each message is handed to its own task, with a bound on the commands in flight (queries
have their own bound on waiting reads) and one consumer span per command when spans are
exported at all. Past the bound a command is shed:
answered `unavailable` with `retry_after_ms` at once, never queued, so under overload the
admitted commands keep their latency and no queue grows without bound (a blocked callback
would leave messages piling up in the client's pending buffer, each older than its caller's
deadline by the time it is served). While it sheds, the bound is also lowered so that the
admitted commands keep to a target latency, a multiple of what a command costs unloaded
(`services/gateway/admission.py`).
The gateway runs in the shared worker runtime like every other worker (`services/runtime.py`);
its subjects are declared in the AsyncAPI document (`reminders asyncapi`), generated from the
contracts, not from this code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AbstractContextManager, nullcontext

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import context as otel_context
from opentelemetry.trace import Span, SpanKind, Tracer

from contracts.subjects import COMMAND_SUBJECTS, RPC_OP, last_token
from contracts.tenants import TENANT_COMMAND_SUBJECTS, command_tenant
from services.adapters import stages
from services.adapters.telemetry import MESSAGING_SYSTEM, extract_context
from services.gateway.admission import Admission
from services.gateway.replies import overloaded_reply
from services.gateway.rpc import rpc_error_response
from services.gateway.service import QUERY_OPS, CommandService

log = logging.getLogger("reminders.gateway")

QUEUE_GROUP = "reminders-gateway"
#: The answer to a shed command, encoded once: under overload the gateway sends it for most
#: of what arrives, and must spend as little as possible on each.
OVERLOADED = orjson.dumps(overloaded_reply())


class CommandListener:
    """Serves commands concurrently; replies only after the service's commit finished."""

    def __init__(
        self,
        nc: Client,
        service: CommandService,
        tracer: Tracer | None,
        in_flight: int = 64,
        shed_latency_s: float = 0.0,
        shed_latency_factor: float = 0.0,
    ) -> None:
        self._nc = nc
        self._service = service
        self._tracer = tracer
        self._admission = Admission(in_flight, shed_latency_s, shed_latency_factor)
        self._tasks: set[asyncio.Task[None]] = set()
        self._subscriptions: list[Subscription] = []

    async def start(self) -> None:
        """Join the queue group, on the `default` tenant's subjects and every tenant's."""
        for subjects in (COMMAND_SUBJECTS, TENANT_COMMAND_SUBJECTS):
            subscription = await self._nc.subscribe(
                subjects, queue=QUEUE_GROUP, cb=self._dispatch, pending_msgs_limit=100_000
            )
            self._subscriptions.append(subscription)
        # The server knows of the subscriptions only once it has read them: without this a
        # client that sees the gateway ready could still get "no responders" for a moment.
        await self._nc.flush()

    async def stop(self) -> None:
        """Leave the queue group, then let every command in flight finish and reply."""
        for subscription in self._subscriptions:
            await subscription.unsubscribe()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _dispatch(self, message: Msg) -> None:
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        # Queries wait for the projection under their own bound (per replica and per
        # session, SPEC §4.10): a flood of long waits must not take the commands' places.
        slot = last_token(message.subject) not in QUERY_OPS
        received = time.monotonic()
        ticket = self._admission.admit(received) if slot else 0
        if slot and not ticket:
            await self._shed(message)
            return
        task = asyncio.create_task(self._serve(message, received, ticket))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if profile is not None:
            profile.add("receive", since)

    async def _shed(self, message: Msg) -> None:
        """Answer a command the gateway has no room for (a JSON-RPC request as a JSON-RPC
        error; a notification, or a request without a reply subject, gets nothing)."""
        if not message.reply:
            return
        body = OVERLOADED
        if last_token(message.subject) == RPC_OP:
            try:
                raw = orjson.loads(message.data)
            except orjson.JSONDecodeError:
                raw = None
            if not isinstance(raw, dict) or "id" not in raw:
                return
            body = orjson.dumps(rpc_error_response(raw.get("id"), overloaded_reply()))
        try:
            await message.respond(body)
        except Exception:  # the client times out and retries
            log.exception("reply failed", extra={"op": "shed"})

    def _span(self, message: Msg) -> AbstractContextManager[Span | None]:
        """The command's consumer span; without a tracer (no exporter) none is made, and
        a caller's trace context, when it sent one, is carried on to the events as is."""
        if self._tracer is not None:
            return self._tracer.start_as_current_span(
                f"{message.subject} process",
                context=extract_context(message.headers),
                kind=SpanKind.CONSUMER,
                attributes={
                    **MESSAGING_SYSTEM,
                    "messaging.destination.name": message.subject,
                    "messaging.operation.type": "process",
                    "messaging.operation.name": "process",
                    "messaging.consumer.group.name": QUEUE_GROUP,
                },
            )
        if message.headers and "traceparent" in message.headers:
            # Each command runs in its own task, so the attached context ends with it.
            otel_context.attach(extract_context(message.headers))
        return nullcontext()

    async def _serve(self, message: Msg, received: float, ticket: int) -> None:
        """Serve one command or query; a command's `ticket` is its place in flight
        (`Admission.admit`), taken when it was `received` (0 for a query, which has none)."""
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        op = last_token(message.subject)
        # Tenants (SPEC §10.1): the server let the caller publish only on its tenant's subjects.
        # A subject of neither shape names no tenant (""), which the service refuses.
        tenant = command_tenant(message.subject) or ("", op)
        try:
            with self._span(message):
                if profile is not None:
                    profile.add("receive", since)
                if op == RPC_OP:
                    response = await self._service.handle_rpc(message.data, tenant[0])
                    since = 0.0 if profile is None else profile.now()
                    body = None if response is None else orjson.dumps(response)
                else:
                    reply = await self._service.handle(op, message.data, tenant[0])
                    since = 0.0 if profile is None else profile.now()
                    body = orjson.dumps(reply)
            if body is not None and message.reply:
                await message.respond(body)  # into the client's buffer: does not wait
            if profile is not None:
                profile.add("reply", since)
                profile.count("commands")
        except Exception:  # a reply could not be sent; the client times out and retries
            log.exception("reply failed", extra={"op": op[:64]})
        finally:
            if ticket:
                now = time.monotonic()
                self._admission.done(ticket, now - received, now)
