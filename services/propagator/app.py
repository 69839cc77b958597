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

from opentelemetry.metrics import Meter

from contracts.events import Event, HandedOff
from contracts.subjects import kind_subject_filter
from services.adapters.provisioning import DurableConsumer
from services.adapters.settings import Settings
from services.adapters.telemetry import (
    LabelledCount,
    labelled_count,
    meter_provider,
    tracer_provider,
)
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


#: How the delivery of a `handed_off` event ended: applied to the child, already applied (a
#: redelivery, answered from the log), redelivered later, or dead-lettered.
HANDOFF_OUTCOMES = ("applied", "already_applied", "retried", "dead_lettered")
#: What became of each reminder handed to a child: inherited, or skipped (already live there).
REMINDER_OUTCOMES = ("inherited", "skipped")


@dataclass
class PropagatorMetrics:
    """The propagator's counters, every series published at 0 from the start."""

    handoffs: LabelledCount
    reminders: LabelledCount

    @classmethod
    def create(cls, meter: Meter) -> PropagatorMetrics:
        """Register the counters on `meter`."""
        handoffs = labelled_count(
            meter, "reminders_propagator_handoffs", "handed_off events handled, by outcome"
        )
        reminders = labelled_count(
            meter, "reminders_propagator_reminders", "Reminders handed to child sessions"
        )
        for outcome in HANDOFF_OUTCOMES:
            handoffs.add(0, {"outcome": outcome})
        for outcome in REMINDER_OUTCOMES:
            reminders.add(0, {"outcome": outcome})
        return cls(handoffs, reminders)

    def count(self, settlement: Settlement, reply: dict[str, Any]) -> None:
        """Count one settled `handed_off` event and, once applied, its reminders."""
        if settlement.action == "retry":
            outcome = "retried"
        elif settlement.action == "dead_letter":
            outcome = "dead_lettered"
        else:
            outcome = "already_applied" if reply.get("already_applied") else "applied"
        self.handoffs.add(1, {"outcome": outcome})
        if outcome == "applied":
            self.reminders.add(len(reply.get("inherited_ids", [])), {"outcome": "inherited"})
            self.reminders.add(len(reply.get("skipped_ids", [])), {"outcome": "skipped"})


async def handle_handed_off(
    event: Event, request: Request, metrics: PropagatorMetrics | None = None
) -> Settlement:
    """Ask the gateway to apply one handoff to the child session (and count how it went)."""
    reply: dict[str, Any] = {}
    if not isinstance(event.payload, HandedOff):
        settlement = dead_letter("invalid_event", "not a handed_off event")
    else:
        settlement, reply = await send_command(
            request, "inherit", inherit_command(event), "the gateway refused the inheritance"
        )
    if metrics is not None:
        metrics.count(settlement, reply)
    return settlement


def propagator_consumers(settings: Settings) -> list[DurableConsumer]:
    """Its durable consumer of `handed_off` events."""
    return [durable_consumer(settings.stream, DURABLE, FILTER, max_ack_pending=64)]


@dataclass
class Propagator:
    """The propagator worker: one durable consumer of `handed_off` events."""

    settings: Settings
    name: str = DURABLE
    consumer: EventConsumer | None = None
    metrics: PropagatorMetrics | None = None

    def consumers(self) -> list[DurableConsumer]:
        """Its durable consumer of `handed_off` events."""
        return propagator_consumers(self.settings)

    async def start(self, runtime: Runtime) -> None:
        """Register the counters and set up the consumer loop."""
        self.metrics = PropagatorMetrics.create(
            meter_provider("reminders-propagator").get_meter(DURABLE)
        )
        tracer = tracer_provider("reminders-propagator", self.settings).get_tracer(DURABLE)
        self.consumer = EventConsumer(self.consumers()[0], batch=16, tracer=tracer)

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Consume `handed_off` events until stopped."""
        assert self.consumer is not None
        request, metrics = runtime.command, self.metrics
        await self.consumer.run(
            runtime, lambda event: handle_handed_off(event, request, metrics), stop
        )

    async def stop(self, runtime: Runtime) -> None:
        """Nothing of its own to release."""
