"""Wiring of the gateway: a queue subscription on `reminders.v1.*` for commands (see
`listener`) and group commit of their atomic batches (see `committer`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.adapters import stages
from services.adapters.memory import collect_less_often
from services.adapters.provisioning import DurableConsumer
from services.adapters.settings import Settings
from services.adapters.telemetry import (
    GatewayMetrics,
    meter_provider,
    session_cache_metrics,
    tracer_provider,
    tracing_enabled,
)
from services.gateway.committer import GroupCommitter
from services.gateway.failover import Failover
from services.gateway.listener import CommandListener
from services.gateway.service import CommandService
from services.runtime import Runtime


@dataclass
class GatewayParts:
    """What the gateway adds to the shared runtime."""

    committer: GroupCommitter | None = None
    failover: Failover | None = None
    listener: CommandListener | None = None
    service: CommandService | None = None

    def active_sessions(self) -> int:
        """Sessions active at this gateway (0 before it started)."""
        return self.service.active_sessions() if self.service is not None else 0

    def cached_bytes(self) -> int:
        """Encoded bytes in this gateway's session cache (0 before it started)."""
        return self.service.cached_bytes() if self.service is not None else 0

    def cache_evictions(self) -> int:
        """Sessions evicted from this gateway's cache so far (0 before it started)."""
        return self.service.cache_evictions() if self.service is not None else 0


@dataclass
class Gateway:
    """The gateway worker: commands in, atomic batches out, replies after the commit."""

    settings: Settings
    name: str = "gateway"
    parts: GatewayParts = field(default_factory=GatewayParts)

    def consumers(self) -> list[DurableConsumer]:
        """None: commands arrive by request/reply in a queue group."""
        return []

    async def start(self, runtime: Runtime) -> None:
        """Start group commit and join the command queue group."""
        parts = self.parts
        if stages.PROFILE is not None:
            stages.profile_client_io(runtime.connection, stages.PROFILE)
        meter = meter_provider("reminders-gateway").get_meter("gateway")
        metrics = GatewayMetrics.create(meter, parts.active_sessions)
        session_cache_metrics(
            meter, parts.cached_bytes, self.settings.gateway_cache_bytes, parts.cache_evictions
        )
        parts.failover = Failover(runtime.connection, self.settings.failover_after_s)
        parts.committer = GroupCommitter(
            runtime.connection,
            self.settings.max_batch_messages,
            self.settings.request_timeout_s,
            on_batch=lambda size: metrics.batch_size.record(size),
            failover=parts.failover,
        )
        parts.committer.start()
        parts.service = CommandService(runtime.connection, self.settings, parts.committer, metrics)
        tracer = tracer_provider("reminders-gateway", self.settings).get_tracer("reminders.gateway")
        # Spans nobody exports are skipped: making one is a large share of a command's CPU.
        parts.listener = CommandListener(
            runtime.connection,
            parts.service,
            tracer if tracing_enabled() else None,
            in_flight=self.settings.max_in_flight,
            shed_latency_s=self.settings.shed_latency_ms / 1000,
            shed_latency_factor=self.settings.shed_latency_factor,
        )
        await parts.listener.start()
        # What start-up made (modules, models, schemas, clients) lives as long as the
        # process: out of the collector's generations, a collection scans only what
        # commands made since. And the youngest generation is collected less often: a
        # command makes thousands of objects, most gone by its reply, and a collection in
        # the middle promoted those in flight to be walked again
        # (`bench/results/gateway_gc_threshold_2_ab.json`).
        collect_less_often()

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Commands are served by the subscription's callbacks; wait for the stop."""
        await stop.wait()

    async def stop(self, runtime: Runtime) -> None:
        """Leave the queue group, answer what is in flight, then stop group commit."""
        if self.parts.listener is not None:
            await self.parts.listener.stop()
        if self.parts.committer is not None:
            await self.parts.committer.stop()
        if self.parts.failover is not None:
            await self.parts.failover.stop()
        if self.parts.service is not None:
            await self.parts.service.close()
        if stages.PROFILE is not None:
            stages.PROFILE.write()
