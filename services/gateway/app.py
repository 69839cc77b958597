"""Wiring of the gateway service: FastStream subscriber, raw JetStream client, HTTP probes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import orjson
from faststream import FastStream
from faststream.nats import NatsBroker, NatsMessage
from nats.aio.client import Client

from services.connection import connect
from services.credentials import broker_security
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from services.http import HealthServer
from services.jetstream import provision
from services.settings import Settings
from services.telemetry import GatewayMetrics, meter_provider, traced

log = logging.getLogger("reminders.gateway")

COMMAND_SUBJECTS = "reminders.v1.*"
QUEUE_GROUP = "reminders-gateway"


@dataclass
class GatewayRuntime:
    """What the gateway holds while it runs."""

    settings: Settings
    nc: Client | None = None
    committer: GroupCommitter | None = None
    service: CommandService | None = None
    health: HealthServer | None = None
    ready: bool = False
    provisioned: dict[str, str] = field(default_factory=dict)

    def is_ready(self) -> bool:
        """Connected, provisioned and consuming."""
        return self.ready and self.nc is not None and self.nc.is_connected


def build_gateway(settings: Settings) -> tuple[FastStream, GatewayRuntime]:
    """The gateway app; nothing connects until it runs."""
    broker = NatsBroker(
        settings.nats_url,
        log_level=logging.DEBUG,
        graceful_timeout=10.0,
        security=broker_security(settings),
        middlewares=[traced(settings, "reminders-gateway")],
    )
    app = FastStream(broker, logger=logging.getLogger("reminders.faststream"))
    runtime = GatewayRuntime(settings)

    @broker.subscriber(COMMAND_SUBJECTS, queue=QUEUE_GROUP, max_workers=256)
    async def on_command(msg: NatsMessage) -> bytes | None:
        """Decode, decide and commit, then reply (only after the batch is stored)."""
        op = msg.raw_message.subject.rsplit(".", 1)[-1]
        assert runtime.service is not None
        if op == "rpc":
            response = await runtime.service.handle_rpc(msg.body)
            return None if response is None else orjson.dumps(response)
        return orjson.dumps(await runtime.service.handle(op, msg.body))

    @app.on_startup
    async def start_gateway() -> None:
        runtime.nc = await connect(settings, "reminders-gateway")
        runtime.provisioned = await provision(runtime.nc.jetstream(), settings)
        metrics = GatewayMetrics.create(meter_provider("reminders-gateway").get_meter("gateway"))
        runtime.committer = GroupCommitter(
            runtime.nc,
            settings.max_batch_messages,
            settings.request_timeout_s,
            on_batch=lambda size: metrics.batch_size.record(size),
        )
        runtime.committer.start()
        runtime.service = CommandService(runtime.nc, settings, runtime.committer, metrics)
        runtime.health = HealthServer(settings.http_host, settings.http_port, runtime.is_ready)
        await runtime.health.start()
        log.info(
            "gateway starting",
            extra={"http_port": runtime.health.port, "streams": runtime.provisioned},
        )

    @app.after_startup
    async def mark_ready() -> None:
        runtime.ready = True

    @app.on_shutdown
    async def not_ready() -> None:
        runtime.ready = False

    @app.after_shutdown
    async def stop_gateway() -> None:
        # The broker has drained its in-flight handlers by now; their commits are done.
        if runtime.committer is not None:
            await runtime.committer.stop()
        if runtime.health is not None:
            await runtime.health.stop()
        if runtime.nc is not None:
            await runtime.nc.drain()

    return app, runtime
