"""Wiring of the gateway service: the shared FastStream lifecycle, a raw queue subscription
on `reminders.v1.*` for commands (see `listener`), group commit on a raw JetStream client."""

from __future__ import annotations

from dataclasses import dataclass

from faststream import FastStream

from services.adapters.settings import Settings
from services.adapters.telemetry import GatewayMetrics, meter_provider, tracer_provider
from services.gateway.committer import GroupCommitter
from services.gateway.listener import CommandListener
from services.gateway.service import CommandService
from services.runtime import ServiceRuntime, build_service


@dataclass
class GatewayParts:
    """What the gateway adds to the shared runtime."""

    committer: GroupCommitter | None = None
    listener: CommandListener | None = None
    service: CommandService | None = None

    def active_sessions(self) -> int:
        """Sessions active at this gateway (0 before it started)."""
        return self.service.active_sessions() if self.service is not None else 0


def build_gateway(settings: Settings) -> tuple[FastStream, ServiceRuntime]:
    """The gateway app; nothing connects until it runs."""
    parts = GatewayParts()

    async def start(runtime: ServiceRuntime) -> None:
        meter = meter_provider("reminders-gateway").get_meter("gateway")
        metrics = GatewayMetrics.create(meter, lambda: parts.active_sessions())
        parts.committer = GroupCommitter(
            runtime.connection,
            settings.max_batch_messages,
            settings.request_timeout_s,
            on_batch=lambda size: metrics.batch_size.record(size),
        )
        parts.committer.start()
        service = CommandService(runtime.connection, settings, parts.committer, metrics)
        parts.service = service
        tracer = tracer_provider("reminders-gateway", settings).get_tracer("reminders.gateway")
        parts.listener = CommandListener(runtime.connection, service, tracer)
        await parts.listener.start()

    async def stop(runtime: ServiceRuntime) -> None:
        if parts.listener is not None:
            await parts.listener.stop()
        if parts.committer is not None:
            await parts.committer.stop()

    app, _, runtime = build_service("gateway", settings, on_start=start, on_stop=stop)
    return app, runtime
