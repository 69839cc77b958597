"""Wiring of the projector: a pinned pull loop over `transcript.reminder.>` into the bucket.

This is a hot path (every event of every session), so it pulls with nats-py directly in
batches rather than through FastStream's per-message handler.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from nats.aio.client import Client
from opentelemetry.trace import Span, SpanKind, Tracer

from services.adapters.connection import connect
from services.adapters.http import HealthServer
from services.adapters.jetstream import provision
from services.adapters.settings import Settings
from services.adapters.telemetry import (
    MESSAGING_SYSTEM,
    ProjectorMetrics,
    extract_context,
    meter_provider,
    tracer_provider,
)
from services.projector.adapters import JetStreamDeadLetters, KvSessionStore, NatsDelivery
from services.projector.apply import Projector, Verdict
from services.projector.consumer import next_batch, pinned_consumer_config, upsert_consumer

log = logging.getLogger("reminders.projector")

DURABLE = "projector"
GROUP = "projector"
FETCH_BATCH = 500


@dataclass
class ProjectorRuntime:
    """What the projector holds while it runs."""

    settings: Settings
    nc: Client | None = None
    ready: bool = False
    pinned: bool = False

    def is_ready(self) -> bool:
        """Connected and pulling (a standby replica is ready too: it takes over on failure)."""
        return self.ready and self.nc is not None and self.nc.is_connected


def consumer_span(tracer: Tracer, delivery: NatsDelivery) -> Span | None:
    """A consumer span continuing the command's trace (only for traced events)."""
    if not delivery.headers or "traceparent" not in delivery.headers:
        return None
    kind = delivery.subject.split(".")[2] if delivery.subject.count(".") >= 3 else "event"
    return tracer.start_span(
        f"transcript.reminder.{kind} process",
        context=extract_context(delivery.headers),
        kind=SpanKind.CONSUMER,
        attributes={
            **MESSAGING_SYSTEM,
            "messaging.destination.name": f"transcript.reminder.{kind}",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.consumer.group.name": DURABLE,
            "messaging.message.id": str(delivery.headers.get("Nats-Msg-Id", "")),
        },
    )


async def run_projector(settings: Settings, stop: asyncio.Event) -> None:
    """Pull, fold, write, ack — until `stop` is set."""
    runtime = ProjectorRuntime(settings)
    runtime.nc = nc = await connect(settings, "reminders-projector")
    js = nc.jetstream()
    await provision(js, settings)
    await upsert_consumer(
        nc,
        settings.stream,
        pinned_consumer_config(DURABLE, GROUP, "transcript.reminder.>", priority_timeout_s=3.0),
    )
    metrics = ProjectorMetrics.create(meter_provider("reminders-projector").get_meter("projector"))
    tracer = tracer_provider("reminders-projector", settings).get_tracer("reminders.projector")
    dead_letters = JetStreamDeadLetters(js)
    projector = Projector(KvSessionStore(await js.key_value(settings.kv_bucket)), dead_letters)
    health = HealthServer(settings.http_host, settings.http_port, runtime.is_ready)
    await health.start()
    runtime.ready = True
    log.info("projector started", extra={"http_port": health.port})
    pin_id: str | None = None
    try:
        stopping = asyncio.ensure_future(stop.wait())
        while not stop.is_set():
            fetch = asyncio.ensure_future(
                next_batch(nc, settings.stream, DURABLE, GROUP, FETCH_BATCH, pin_id)
            )
            await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not fetch.done():
                # Idle long poll at shutdown: anything it was owed is redelivered after ack_wait.
                fetch.cancel()
                await asyncio.gather(fetch, return_exceptions=True)
                break
            try:
                messages, pin_id = fetch.result()
            except Exception as exc:  # NATS away: back off and pull again
                log.warning("fetch failed", extra={"error": type(exc).__name__})
                await asyncio.sleep(0.5)
                continue
            if not messages:
                continue
            deliveries = [NatsDelivery(message) for message in messages]
            spans = [consumer_span(tracer, delivery) for delivery in deliveries]
            try:
                report = await projector.process(list(deliveries))
            finally:
                for span in spans:
                    if span is not None:
                        span.end()
            metrics.lag[0] = deliveries[-1].num_pending
            metrics.apply_latency.record(projector.last_apply_latency_s)
            for verdict in Verdict:
                if report.verdicts[verdict]:
                    metrics.events.add(report.verdicts[verdict], {"verdict": verdict.value})
            if report.verdicts[Verdict.POISON]:
                metrics.dead_letters.add(report.verdicts[Verdict.POISON])
    finally:
        runtime.ready = False
        await health.stop()
        await nc.flush()  # acks are fire-and-forget publishes: make sure they left
        await nc.close()


def serve_projector(settings: Settings) -> None:
    """Run until SIGTERM or Ctrl-C."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_projector(settings, stop)

    asyncio.run(main())
