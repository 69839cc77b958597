"""The lifecycle every FastStream service shares: connect, provision, probes, ready, stop.

Each service passes what it adds on start and on stop; this module owns the order:
connect and provision before the broker consumes, ready only once it does, not ready as soon
as shutdown begins, and its own resources released only after in-flight handlers finished.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from faststream import FastStream
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js.api import AckPolicy as ConsumerAckPolicy
from nats.js.api import ConsumerConfig, DeliverPolicy

from services.adapters.connection import connect
from services.adapters.credentials import broker_security
from services.adapters.http import HealthServer
from services.adapters.jetstream import provision
from services.adapters.settings import Settings
from services.adapters.telemetry import traced

Hook = Callable[["ServiceRuntime"], Awaitable[None]]


@dataclass
class ServiceRuntime:
    """What a running service holds."""

    name: str
    settings: Settings
    nc: Client | None = None
    health: HealthServer | None = None
    ready: bool = False

    @property
    def connection(self) -> Client:
        """The raw nats-py connection (set once started)."""
        assert self.nc is not None, "the service has not started"
        return self.nc

    def is_ready(self) -> bool:
        """Connected and consuming."""
        return self.ready and self.nc is not None and self.nc.is_connected


def durable_consumer(durable: str, filter_subject: str, max_ack_pending: int) -> ConsumerConfig:
    """An explicit-ack durable consumer from the start of the stream that never gives up."""
    return ConsumerConfig(
        durable_name=durable,
        filter_subject=filter_subject,
        ack_policy=ConsumerAckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=30.0,
        max_ack_pending=max_ack_pending,
        max_deliver=-1,
    )


def build_service(
    name: str,
    settings: Settings,
    *,
    consumer: ConsumerConfig | None = None,
    on_start: Hook | None = None,
    on_stop: Hook | None = None,
) -> tuple[FastStream, NatsBroker, ServiceRuntime]:
    """A FastStream app with its broker and runtime; nothing connects until it runs.

    `consumer`, when given, is applied to the durable consumer at every start: an existing
    durable otherwise keeps its old configuration silently.
    """
    broker = NatsBroker(
        settings.nats_url,
        # FastStream's access log goes through our JSON formatter and its allow-list.
        logger=logging.getLogger("reminders.faststream"),
        log_level=logging.DEBUG,
        graceful_timeout=10.0,
        security=broker_security(settings),
        middlewares=[traced(settings, f"reminders-{name}")],
    )
    app = FastStream(broker, logger=logging.getLogger("reminders.faststream"))
    runtime = ServiceRuntime(name, settings)

    @app.on_startup
    async def start() -> None:
        runtime.nc = await connect(settings, f"reminders-{name}")
        js = runtime.nc.jetstream()
        await provision(js, settings)
        if consumer is not None:
            await js.add_consumer(settings.stream, consumer)
        if on_start is not None:
            await on_start(runtime)
        runtime.health = HealthServer(settings.http_host, settings.http_port, runtime.is_ready)
        await runtime.health.start()
        logging.getLogger(f"reminders.{name}").info(
            f"{name} starting", extra={"http_port": runtime.health.port}
        )

    @app.after_startup
    async def mark_ready() -> None:
        runtime.ready = True

    @app.on_shutdown
    async def not_ready() -> None:
        runtime.ready = False

    @app.after_shutdown
    async def stop() -> None:
        # The broker has drained its in-flight handlers by now.
        if on_stop is not None:
            await on_stop(runtime)
        if runtime.health is not None:
            await runtime.health.stop()
        if runtime.nc is not None:
            await runtime.nc.drain()

    return app, broker, runtime
