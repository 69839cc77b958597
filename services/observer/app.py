"""Wiring of the observer: its own durable consumer over `transcript.reminder.>`.

Metrics carry only the event kind and reason as labels — never a session id, a reminder id
or any text. Span events carry ids and counts. For every `fired` event an ACP
`session/update` notification (`reminder_emitted`) goes to `reminders.v1.acp.<token>`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson
from faststream import AckPolicy, FastStream
from faststream.nats import JStream, NatsMessage, PullSub
from nats.js.api import ConsumerConfig
from opentelemetry import trace
from opentelemetry.metrics import Counter, Histogram, UpDownCounter
from pydantic import ValidationError

from contracts import events as ev
from services.adapters.deadletter import dead_letter_message
from services.adapters.settings import Settings
from services.adapters.telemetry import meter_provider
from services.runtime import ServiceRuntime, build_service, durable_consumer

log = logging.getLogger("reminders.observer")
DURABLE = "observer"


def consumer_config() -> ConsumerConfig:
    """The observer's durable consumer, applied at every start-up."""
    return durable_consumer(DURABLE, "transcript.reminder.>", max_ack_pending=1000)


def acp_notification(event: ev.Event) -> dict[str, Any]:
    """The outbound ACP `session/update` for one `fired` event (SPEC §8)."""
    payload = event.payload
    assert isinstance(payload, ev.Fired)
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": event.session_id,
            "update": {
                "sessionUpdate": "reminder_emitted",
                "_meta": {
                    "harn": {
                        "reminder": {
                            "reminderId": payload.reminder_id,
                            "tags": payload.tags,
                            "body": payload.body,
                            "roleHint": payload.role_hint,
                            "authority": payload.authority,
                            "renderedRole": payload.rendered_role,
                            "source": payload.source,
                            "ttlTurns": payload.ttl_turns,
                        }
                    }
                },
            },
        },
    }


@dataclass
class ObserverMetrics:
    """Dashboard-ready instruments: no custom code needed downstream."""

    lifecycle: Counter
    live: UpDownCounter
    envelope_bytes: Histogram
    ttl_expiries: Counter

    @classmethod
    def create(cls) -> ObserverMetrics:
        """Register the instruments on the process meter."""
        meter = meter_provider("reminders-observer").get_meter("observer")
        return cls(
            lifecycle=meter.create_counter(
                "reminders_lifecycle_events", description="Lifecycle events by kind and reason"
            ),
            live=meter.create_up_down_counter(
                "reminders_live", description="Reminders live, as seen since the observer began"
            ),
            envelope_bytes=meter.create_histogram(
                "reminders_envelope_bytes", unit="By", description="Delivered envelope sizes"
            ),
            ttl_expiries=meter.create_counter(
                "reminders_ttl_expiries", description="Reminders expired by their TTL"
            ),
        )

    def observe(self, event: ev.Event) -> None:
        """Count one event; labels are kinds and reasons only."""
        payload = event.payload
        reason = getattr(payload, "reason", None)
        labels = {"kind": event.kind, "reason": reason if isinstance(reason, str) else "none"}
        if isinstance(payload, ev.ProviderEvaluated):
            labels["reason"] = "fired" if payload.fired else "quiet"
        self.lifecycle.add(1, labels)
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


def build_observer(settings: Settings) -> tuple[FastStream, ServiceRuntime]:
    """The observer app; nothing connects until it runs."""
    app, broker, runtime = build_service(DURABLE, settings, consumer=consumer_config())
    metrics = ObserverMetrics.create()

    @broker.subscriber(
        "transcript.reminder.>",
        stream=JStream(settings.stream, declare=False),
        durable=DURABLE,
        config=consumer_config(),
        pull_sub=PullSub(batch_size=100, timeout=1.0),
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_event(msg: NatsMessage) -> None:
        raw = msg.raw_message
        token = raw.subject.rsplit(".", 1)[-1]
        try:
            event = ev.Event.model_validate(orjson.loads(msg.body))
        except (ValueError, ValidationError, orjson.JSONDecodeError) as exc:
            await dead_letter_message(
                runtime.connection.jetstream(), DURABLE, raw, "invalid_event", type(exc).__name__
            )
            await msg.ack()
            return
        metrics.observe(event)
        span_event(event)
        if isinstance(event.payload, ev.Fired):
            await runtime.connection.publish(
                f"reminders.v1.acp.{token}", orjson.dumps(acp_notification(event))
            )
        await msg.ack()

    return app, runtime
