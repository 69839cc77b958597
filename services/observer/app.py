"""Wiring of the observer: its own durable consumer over `transcript.reminder.>`.

Metrics carry only the event kind and reason as labels — never a session id, a reminder id
or any text. Span events carry ids and counts. For every `fired` event two ACP notifications go to
`reminders.v1.acp.<token>`, in this order: the reference runtime's `session/update`
(`reminder_emitted`), then the extension notification `_reminders/emitted` that ACP clients
whose union of session updates is closed route to their extension handler (SPEC §8).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.metrics import Histogram

from contracts import events as ev
from contracts.subjects import EVENT_SUBJECTS
from contracts.tenants import tenant_acp_subject
from services.adapters.provisioning import DurableConsumer
from services.adapters.settings import Settings
from services.adapters.telemetry import (
    LabelledCount,
    labelled_count,
    meter_provider,
    tracer_provider,
)
from services.consumer import ACK, EventConsumer, Settlement, durable_consumer
from services.observer.effect import EffectMetrics
from services.runtime import Runtime

log = logging.getLogger("reminders.observer")
DURABLE = "observer"


#: Publishes one core NATS message (subject, body).
Publish = Callable[[str, bytes], Awaitable[None]]


#: The ACP extension method carrying the same reminder (SPEC §8); `_` marks an extension.
ACP_EXTENSION_METHOD = "_reminders/emitted"


def acp_reminder(event: ev.Event) -> dict[str, Any]:
    """The reminder fields both ACP notifications carry for one `fired` event."""
    payload = event.payload
    assert isinstance(payload, ev.Fired)
    return {
        "reminderId": payload.reminder_id,
        "tags": payload.tags,
        "body": payload.body,
        "roleHint": payload.role_hint,
        "authority": payload.authority,
        "renderedRole": payload.rendered_role,
        "source": payload.source,
        "ttlTurns": payload.ttl_turns,
    }


def acp_notification(event: ev.Event) -> dict[str, Any]:
    """The reference runtime's ACP `session/update` for one `fired` event (SPEC §8)."""
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": event.session_id,
            "update": {
                "sessionUpdate": "reminder_emitted",
                "_meta": {"harn": {"reminder": acp_reminder(event)}},
            },
        },
    }


def acp_extension_notification(event: ev.Event) -> dict[str, Any]:
    """The ACP extension notification `_reminders/emitted` for one `fired` event (SPEC §8)."""
    return {
        "jsonrpc": "2.0",
        "method": ACP_EXTENSION_METHOD,
        "params": {"sessionId": event.session_id, "reminder": acp_reminder(event)},
    }


def acp_notifications(event: ev.Event) -> list[dict[str, Any]]:
    """Both notifications for one `fired` event, in publication order."""
    return [acp_notification(event), acp_extension_notification(event)]


def observer_consumers(settings: Settings) -> list[DurableConsumer]:
    """Its own durable consumer of every event."""
    return [durable_consumer(settings.stream, DURABLE, EVENT_SUBJECTS, max_ack_pending=1000)]


#: Why a render held an eligible reminder back (SPEC §12.1), the `reason` label's values.
WITHHELD_REASONS = ("shed", "muted", "not_yet")


@dataclass
class ObserverMetrics:
    """Dashboard-ready instruments: no custom code needed downstream."""

    lifecycle: LabelledCount
    live: LabelledCount
    envelope_bytes: Histogram
    ttl_expiries: LabelledCount
    envelope_tokens: Histogram
    withheld: LabelledCount
    neutralized: LabelledCount
    effect: EffectMetrics

    @classmethod
    def create(cls) -> ObserverMetrics:
        """Register the instruments on the process meter."""
        meter = meter_provider("reminders-observer").get_meter("observer")
        # Counts kept as plain ints and read at scrape time: the SDK's `Counter.add` cleaned,
        # hashed and locked its labels on every event, a quarter of the observer's work.
        metrics = cls(
            lifecycle=labelled_count(
                meter, "reminders_lifecycle_events", "Lifecycle events by kind and reason"
            ),
            live=labelled_count(
                meter,
                "reminders_live",
                "Reminders live, as seen since the observer began",
                up_down=True,
            ),
            envelope_bytes=meter.create_histogram(
                "reminders_envelope_bytes", unit="By", description="Delivered envelope sizes"
            ),
            ttl_expiries=labelled_count(
                meter, "reminders_ttl_expiries", "Reminders expired by their TTL"
            ),
            envelope_tokens=meter.create_histogram(
                "reminders_envelope_tokens",
                unit="{token}",
                description="Estimated tokens of each delivered envelope (SPEC §12.1)",
            ),
            withheld=labelled_count(
                meter,
                "reminders_withheld",
                "Eligible reminders a render held back, by reason: shed, muted, not_yet",
            ),
            neutralized=labelled_count(
                meter,
                "reminders_forged_directives_neutralized",
                "Directive-shaped tags escaped in tool output (SPEC §12.5)",
            ),
            effect=EffectMetrics.create(meter),
        )
        # The label-free series exist before their first change (the labelled ones appear
        # with their first kind and reason).
        metrics.live.add(0)
        metrics.ttl_expiries.add(0)
        metrics.neutralized.add(0)
        for reason in WITHHELD_REASONS:
            metrics.withheld.add(0, {"reason": reason})
        return metrics

    def _held_back(self, summary: ev.RenderSummary | None) -> None:
        if summary is None:
            return
        for reason, ids in (
            ("shed", summary.shed_ids),
            ("muted", summary.muted_ids),
            ("not_yet", summary.not_yet_ids),
        ):
            if ids:
                self.withheld.add(len(ids), {"reason": reason})

    def observe(self, event: ev.Event) -> None:
        """Count one event; labels are kinds and reasons only."""
        payload = event.payload
        reason = getattr(payload, "reason", None)
        labels = {"kind": event.kind, "reason": reason if isinstance(reason, str) else "none"}
        if isinstance(payload, ev.ProviderEvaluated):
            labels["reason"] = "fired" if payload.fired else "quiet"
        self.lifecycle.add(1, labels)
        self.effect.observe(event)
        if isinstance(payload, ev.Injected):
            self.live.add(1)
        elif isinstance(payload, ev.Deduped):
            self.live.add(-payload.dropped_count)
        elif isinstance(payload, ev.Expired | ev.Dropped):
            self.live.add(-1)
            if isinstance(payload, ev.Expired) and payload.reason == "ttl":
                self.ttl_expiries.add(1)
        elif isinstance(payload, ev.Delivered):
            self.envelope_bytes.record(
                len(payload.text.encode("utf-8")), {"format": payload.format}
            )
            if payload.summary is not None:
                self.envelope_tokens.record(payload.summary.est_tokens, {"format": payload.format})
            self._held_back(payload.summary)
        elif isinstance(payload, ev.Withheld):
            self._held_back(payload.summary)
        elif isinstance(payload, ev.ForgedDirectiveNeutralized):
            self.neutralized.add(payload.count)


def span_event(event: ev.Event) -> None:
    """Record the lifecycle step on the current consumer span (ids and counts only)."""
    attributes: dict[str, Any] = {
        "reminders.kind": event.kind,
        "reminders.session_seq": event.session_seq,
        "reminders.turn": event.turn,
    }
    reminder_id = getattr(event.payload, "reminder_id", None)
    if isinstance(reminder_id, str):
        attributes["reminders.reminder_id"] = reminder_id
    if isinstance(event.payload, ev.Delivered):
        attributes["reminders.directives"] = len(event.payload.directive_ids)
        attributes["reminders.envelope_bytes"] = len(event.payload.text.encode("utf-8"))
    trace.get_current_span().add_event(f"reminder.{event.kind}", attributes)


async def handle_event(event: ev.Event, metrics: ObserverMetrics, publish: Publish) -> Settlement:
    """Count one event, note it on the current span, and notify ACP clients of a `fired`:
    the `session/update`, then right after it the `_reminders/emitted` extension."""
    metrics.observe(event)
    span_event(event)
    if isinstance(event.payload, ev.Fired):
        # Tenants (SPEC §10.1): on the tenant's own subject, naming the session as its host does.
        subject, host_session_id = tenant_acp_subject(event.session_id)
        for notification in acp_notifications(event):
            notification["params"]["sessionId"] = host_session_id
            await publish(subject, orjson.dumps(notification))
    return ACK


def one_lane(_message: Msg) -> str:
    """Every event in one lane: settled one after another in delivery order, as a fetch loop
    would, but taken from a flow (`PullFlow`) rather than nats-py's `fetch`, whose timed wait
    per message (a task and a timer each) cost more than counting the event."""
    return ""


@dataclass
class Observer:
    """The observer worker: its own durable consumer of every event."""

    settings: Settings
    name: str = DURABLE
    consumer: EventConsumer | None = None
    metrics: ObserverMetrics | None = None

    def consumers(self) -> list[DurableConsumer]:
        """Its own durable consumer of every event."""
        return observer_consumers(self.settings)

    async def start(self, runtime: Runtime) -> None:
        """Register the instruments and set up the consumer loop."""
        self.metrics = ObserverMetrics.create()
        tracer = tracer_provider("reminders-observer", self.settings).get_tracer(DURABLE)
        self.consumer = EventConsumer(self.consumers()[0], batch=100, tracer=tracer)

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Observe events until stopped."""
        assert self.consumer is not None and self.metrics is not None
        metrics = self.metrics
        publish = runtime.connection.publish
        await self.consumer.run(
            runtime, lambda event: handle_event(event, metrics, publish), stop, one_lane
        )

    async def stop(self, runtime: Runtime) -> None:
        """Nothing of its own to release."""
