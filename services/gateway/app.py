"""Wiring of the gateway service: a FastStream subscriber in a queue group on
`reminders.v1.*`, with a raw JetStream client for atomic batches."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from faststream import FastStream
from faststream.nats import NatsMessage

from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from services.runtime import ServiceRuntime, build_service
from services.settings import Settings
from services.telemetry import GatewayMetrics, meter_provider

COMMAND_SUBJECTS = "reminders.v1.*"
QUEUE_GROUP = "reminders-gateway"


@dataclass
class GatewayParts:
    """What the gateway adds to the shared runtime."""

    committer: GroupCommitter | None = None
    service: CommandService | None = None


def build_gateway(settings: Settings) -> tuple[FastStream, ServiceRuntime]:
    """The gateway app; nothing connects until it runs."""
    parts = GatewayParts()

    async def start(runtime: ServiceRuntime) -> None:
        metrics = GatewayMetrics.create(meter_provider("reminders-gateway").get_meter("gateway"))
        parts.committer = GroupCommitter(
            runtime.connection,
            settings.max_batch_messages,
            settings.request_timeout_s,
            on_batch=lambda size: metrics.batch_size.record(size),
        )
        parts.committer.start()
        parts.service = CommandService(runtime.connection, settings, parts.committer, metrics)

    async def stop(runtime: ServiceRuntime) -> None:
        if parts.committer is not None:
            await parts.committer.stop()

    app, broker, runtime = build_service("gateway", settings, on_start=start, on_stop=stop)

    @broker.subscriber(COMMAND_SUBJECTS, queue=QUEUE_GROUP, max_workers=256)
    async def on_command(msg: NatsMessage) -> bytes | None:
        """Decode, decide and commit, then reply (only after the batch is stored)."""
        op = msg.raw_message.subject.rsplit(".", 1)[-1]
        assert parts.service is not None
        if op == "rpc":
            response = await parts.service.handle_rpc(msg.body)
            return None if response is None else orjson.dumps(response)
        return orjson.dumps(await parts.service.handle(op, msg.body))

    return app, runtime
