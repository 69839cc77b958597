"""The propagator: `handed_off` events become `inherit` commands on the child session.

The child's events go through the gateway's optimistic-concurrency append like every
command, and the child state remembers which `handed_off` event ids it applied, so a
redelivery has no second effect. Settling: ack once the gateway replied ok; redeliver after
a delay while the gateway is away or busy; dead-letter what the gateway refuses for good.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from contracts.events import Event, HandedOff
from contracts.subjects import kind_subject_filter
from services.adapters.jetstream import DurableConsumer
from services.adapters.settings import Settings
from services.adapters.telemetry import tracer_provider
from services.consumer import (
    EventConsumer,
    Request,
    Settlement,
    dead_letter,
    durable_consumer,
    send_command,
)
from services.runtime import Runtime

DURABLE = "propagator"
FILTER = kind_subject_filter("handed_off")


def inherit_command(event: Event) -> dict[str, Any]:
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


async def handle_handed_off(event: Event, request: Request) -> Settlement:
    """Ask the gateway to apply one handoff to the child session."""
    if not isinstance(event.payload, HandedOff):
        return dead_letter("invalid_event", "not a handed_off event")
    command = inherit_command(event)
    outcome, _ = await send_command(
        request, "inherit", command, "the gateway refused the inheritance"
    )
    return outcome


def propagator_consumers(settings: Settings) -> list[DurableConsumer]:
    """Its durable consumer of `handed_off` events."""
    return [durable_consumer(settings.stream, DURABLE, FILTER, max_ack_pending=64)]


@dataclass
class Propagator:
    """The propagator worker: one durable consumer of `handed_off` events."""

    settings: Settings
    name: str = DURABLE
    consumer: EventConsumer | None = None

    def consumers(self) -> list[DurableConsumer]:
        """Its durable consumer of `handed_off` events."""
        return propagator_consumers(self.settings)

    async def start(self, runtime: Runtime) -> None:
        """Set up the consumer loop."""
        tracer = tracer_provider("reminders-propagator", self.settings).get_tracer(DURABLE)
        self.consumer = EventConsumer(self.consumers()[0], batch=16, tracer=tracer)

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Consume `handed_off` events until stopped."""
        assert self.consumer is not None

        request = runtime.command

        await self.consumer.run(runtime, lambda event: handle_handed_off(event, request), stop)

    async def stop(self, runtime: Runtime) -> None:
        """Nothing of its own to release."""
