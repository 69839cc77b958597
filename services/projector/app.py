"""Wiring of the projector: a pinned pull loop over `transcript.reminder.>` into the bucket.

Replicas form one pinned-client priority group (see `consumer`), so one consumes and another
takes over within seconds when it dies.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from opentelemetry.trace import Tracer

from services.adapters import stages
from services.adapters.memory import PROJECTOR_COLLECT_AFTER_ALLOCATIONS, collect_less_often
from services.adapters.provisioning import DurableConsumer
from services.adapters.records import KvSessionStore
from services.adapters.settings import Settings
from services.adapters.telemetry import (
    ProjectorMetrics,
    consumer_span,
    meter_provider,
    session_cache_metrics,
    tracer_provider,
)
from services.projector.adapters import JetStreamDeadLetters, LeaderSessionLog, NatsDelivery
from services.projector.apply import BatchReport, Projector, Verdict
from services.projector.consumer import next_batch
from services.projector.partitions import (
    DURABLE,
    GROUP,
    ProjectorSource,
    projector_consumers,
    projector_source,
)
from services.runtime import Runtime

log = logging.getLogger("reminders.projector")

FETCH_BATCH = 1000


@dataclass
class ProjectorWorker:
    """The projector worker: a pinned pull loop that folds events into the bucket."""

    settings: Settings
    name: str = DURABLE
    projector: Projector | None = None
    metrics: ProjectorMetrics | None = None
    tracer: Tracer | None = None
    source: ProjectorSource | None = None

    def consumers(self) -> list[DurableConsumer]:
        """One durable consumer that every replica pulls from as one pinned group (one per
        partition when partitioned: `partitions`)."""
        return projector_consumers(self.settings)

    async def start(self, runtime: Runtime) -> None:
        """Register the instruments and open the bucket."""
        self.source = projector_source(self.settings)
        meter = meter_provider("reminders-projector").get_meter("projector")
        self.metrics = ProjectorMetrics.create(meter)
        self.tracer = tracer_provider("reminders-projector", self.settings).get_tracer(
            "reminders.projector"
        )
        kv = await runtime.js.key_value(self.settings.kv_bucket)
        self.projector = Projector(
            KvSessionStore(kv, runtime.connection, self.settings.kv_bucket),
            JetStreamDeadLetters(runtime.js),
            cache_bytes=self.settings.projector_cache_bytes,
            log=LeaderSessionLog(runtime.connection, self.settings.stream),
        )
        projector = self.projector
        session_cache_metrics(
            meter,
            lambda: projector.cached_bytes,
            self.settings.projector_cache_bytes,
            lambda: projector.cache_evictions,
        )
        collect_less_often(PROJECTOR_COLLECT_AFTER_ALLOCATIONS)

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Pull, fold, write, ack — until `stop` is set."""
        nc = runtime.connection
        assert self.source is not None
        source = self.source
        pin_id: str | None = None
        stopping = asyncio.ensure_future(stop.wait())
        while not stop.is_set():
            profile = stages.PROFILE
            since = 0.0 if profile is None else profile.now()
            fetch = asyncio.ensure_future(
                next_batch(nc, source.stream, source.durable, GROUP, FETCH_BATCH, pin_id)
            )
            await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not fetch.done():
                # Idle long poll at shutdown: anything it was owed is redelivered after ack_wait.
                fetch.cancel()
                await asyncio.gather(fetch, return_exceptions=True)
                break
            try:
                messages, pin_id = fetch.result()
            except Exception as exc:  # NATS away: nats-py reconnects; pull again soon
                log.warning("fetch failed", extra={"error": type(exc).__name__})
                await asyncio.sleep(0.5)
                continue
            if not messages:
                continue
            if profile is not None:
                # Nothing else runs while a fetch is awaited: its CPU is the receive's.
                profile.add("receive", since)
            try:
                await self._project([source.wrap(message) for message in messages])
            except Exception as exc:  # NATS away mid-batch: what was not acked is redelivered
                log.warning("batch not applied", extra={"error": type(exc).__name__})
                await asyncio.sleep(0.5)
        stopping.cancel()

    async def _project(self, deliveries: list[NatsDelivery]) -> None:
        assert self.projector is not None and self.metrics is not None and self.tracer
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        spans = [consumer_span(self.tracer, d.subject, d.headers, DURABLE) for d in deliveries]
        report = BatchReport()
        try:
            await self.projector.process(list(deliveries), report)
        finally:
            for span in spans:
                if span is not None:
                    span.end()
            # What was acked counts even when a session of the batch failed (and is
            # redelivered): the counters follow the acks, not the batches that finished.
            self._count(report, deliveries)
        if profile is not None:
            # The whole batch: `process` less its bracketed stages is the KV reads and
            # writes with the scheduling around them (sessions run concurrently).
            profile.add("batch", since)
            profile.count("events", len(deliveries))
            profile.count("batches")

    def _count(self, report: BatchReport, deliveries: list[NatsDelivery]) -> None:
        """The batch's verdicts, gap fills and dead letters into the metrics."""
        assert self.projector is not None and self.metrics is not None
        metrics = self.metrics
        metrics.lag[0] = deliveries[-1].num_pending
        metrics.apply_latency.record(self.projector.last_apply_latency_s)
        for verdict in Verdict:
            if report.verdicts[verdict]:
                metrics.events.add(report.verdicts[verdict], {"verdict": verdict.value})
        if report.filled:
            metrics.gap_fills.add(report.filled)
        if report.verdicts[Verdict.POISON]:
            metrics.dead_letters.add(report.verdicts[Verdict.POISON])

    async def stop(self, runtime: Runtime) -> None:
        """Nothing of its own to release: unacked messages are redelivered."""
        if stages.PROFILE is not None:
            stages.PROFILE.write()
