"""Wiring of the propagator: a durable pull consumer of `handed_off` events.

For each `handed_off` it asks the gateway to `inherit` into the child session, so the child's
events go through the same optimistic-concurrency append as every command. The child state
remembers which `handed_off` event ids it applied, so a redelivery has no second effect.
Ack policy is manual and explicit: ack after the gateway replied ok (or after a poison copy
reached the DLQ); nak with a delay when the gateway is unavailable or busy, so it is retried.
"""

from __future__ import annotations

import logging

import orjson
from faststream import AckPolicy, FastStream
from faststream.nats import JStream, NatsMessage, PullSub
from nats.js.api import ConsumerConfig
from pydantic import ValidationError

from contracts.events import Event, HandedOff
from services.adapters.deadletter import dead_letter_message
from services.adapters.settings import Settings
from services.adapters.telemetry import inject_traceparent
from services.runtime import ServiceRuntime, build_service, durable_consumer

log = logging.getLogger("reminders.propagator")

DURABLE = "propagator"
RETRYABLE = frozenset({"unavailable", "conflict", "rate_limited"})


def consumer_config() -> ConsumerConfig:
    """The propagator's durable consumer, applied at every start-up."""
    return durable_consumer(DURABLE, "transcript.reminder.handed_off.>", max_ack_pending=64)


def inherit_command(event: Event) -> dict[str, object]:
    """The child-side command for one `handed_off` event."""
    payload = event.payload
    assert isinstance(payload, HandedOff)
    return {
        "session_id": payload.child_session_id,
        "agent_id": payload.sub_agent_id,
        "parent_session_id": event.session_id,
        "parent_agent_id": event.agent_id,
        "handoff_event_id": event.event_id,
        "sub_agent_id": payload.sub_agent_id,
        "reminders": [spec.model_dump(mode="json") for spec in payload.reminders],
    }


def build_propagator(settings: Settings) -> tuple[FastStream, ServiceRuntime]:
    """The propagator app; nothing connects until it runs."""
    app, broker, runtime = build_service(DURABLE, settings, consumer=consumer_config())

    @broker.subscriber(
        "transcript.reminder.handed_off.>",
        stream=JStream(settings.stream, declare=False),
        durable=DURABLE,
        config=consumer_config(),
        pull_sub=PullSub(batch_size=16, timeout=1.0),
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_handed_off(msg: NatsMessage) -> None:
        js = runtime.connection.jetstream()
        try:
            event = Event.model_validate(orjson.loads(msg.body))
            if not isinstance(event.payload, HandedOff):
                raise ValueError("not a handed_off event")
        except (ValueError, ValidationError, orjson.JSONDecodeError) as exc:
            await dead_letter_message(
                js, DURABLE, msg.raw_message, "invalid_event", type(exc).__name__
            )
            await msg.ack()
            return
        try:
            response = await runtime.connection.request(
                "reminders.v1.inherit",
                orjson.dumps(inherit_command(event)),
                timeout=settings.request_timeout_s,
                headers=inject_traceparent() or None,
            )
            reply = orjson.loads(response.data)
        except Exception as exc:  # gateway away: retried by redelivery, never dropped
            log.warning("gateway unavailable", extra={"error": type(exc).__name__})
            await msg.nack(delay=1.0)
            return
        if reply.get("ok"):
            await msg.ack()
            return
        code = str(reply["error"]["code"])
        if code in RETRYABLE:
            await msg.nack(delay=1.0)
            return
        await dead_letter_message(
            js, DURABLE, msg.raw_message, code, "the gateway refused the inheritance"
        )
        await msg.ack()

    return app, runtime
