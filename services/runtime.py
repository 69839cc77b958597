"""One runtime for every worker: connect, check the streams, probes, ready, signals, drain.

A worker is the few things that differ — its name, its durable consumers, what it sets up,
its main loop — and this module owns the order they run in: connect and check the streams and
consumers (which `reminders provision` creates) before anything is consumed, ready only once
the loop runs, not ready as soon as shutdown begins, and the connection drained (acks
flushed) only after the loop and the worker's own stop finished.

Why the workers read with nats-py rather than through FastStream subscribers: every worker
here is a hot path or a pinned consumer. FastStream's per-message pull pipeline runs several
times slower than a raw `fetch` + ack (see `bench/results/`), it cannot express the
projector's pinned-client priority group, and its idle pull subscribers log timeouts as
errors. So the workers pull with nats-py in batches, and FastStream keeps what it does well
here: generating the AsyncAPI document of every subject (`cli/asyncapi.py`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from nats.aio.client import Client
from nats.js import JetStreamContext

from contracts.subjects import command_subject
from services.adapters.connection import connect
from services.adapters.http import HealthServer
from services.adapters.memory import give_back_freed_memory, keep_large_buffers_apart
from services.adapters.provisioning import DurableConsumer, ensure_consumer, provision
from services.adapters.settings import EventLoopChoice, Settings, check_payload_bounds
from services.adapters.telemetry import inject_traceparent


@dataclass
class Runtime:
    """What a running worker holds."""

    name: str
    settings: Settings
    nc: Client | None = None
    ready: bool = False

    @property
    def connection(self) -> Client:
        """The nats-py connection (set once started)."""
        assert self.nc is not None, "the worker has not started"
        return self.nc

    @property
    def js(self) -> JetStreamContext:
        """A JetStream context on the connection."""
        return self.connection.jetstream()

    async def command(self, op: str, command: dict[str, Any]) -> dict[str, Any]:
        """Send one command to the gateway (`reminders.v1.<op>`) and return its reply, with
        the current trace context; raises when nobody answered in time."""
        response = await self.connection.request(
            command_subject(op),
            orjson.dumps(command),
            timeout=self.settings.request_timeout_s,
            headers=inject_traceparent() or None,
        )
        reply: dict[str, Any] = orjson.loads(response.data)
        return reply

    def is_ready(self) -> bool:
        """Connected and running its loop."""
        return self.ready and self.nc is not None and self.nc.is_connected


@dataclass(frozen=True)
class WorkerProcess:
    """One process that runs a worker (`reminders serve NAME` with this environment):
    most workers are one, a partitioned projector one per partition."""

    label: str
    env: dict[str, str]


class Worker(Protocol):
    """A service: what it sets up, its main loop, and what it releases."""

    name: str

    def consumers(self) -> list[DurableConsumer]:
        """The durable consumers it reads from: `reminders provision` creates them, the
        runtime checks them at start-up."""

    async def start(self, runtime: Runtime) -> None:
        """Set up consumers, subscriptions and instruments (connected, not yet ready)."""

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Consume until `stop` is set."""

    async def stop(self, runtime: Runtime) -> None:
        """Release what `start` set up; the connection is still open."""


async def run_worker(worker: Worker, settings: Settings, stop: asyncio.Event) -> None:
    """Run one worker until `stop` is set, in the order the module docstring gives."""
    log = logging.getLogger(f"reminders.{worker.name}")
    runtime = Runtime(worker.name, settings)
    runtime.nc = await connect(settings, f"reminders-{worker.name}")
    health: HealthServer | None = None
    try:
        # The size invariant (SPEC §4.1.1) against the server's real max_payload.
        check_payload_bounds(settings.core, runtime.connection.max_payload)
        # Services only check: creating streams, buckets and durables is `reminders provision`'s
        # job, under an admin user (SPEC §10), so no service needs the rights to delete them.
        await provision(runtime.js, settings, check=True)
        for durable in worker.consumers():
            await ensure_consumer(runtime.connection, durable, check=True)
        await worker.start(runtime)
        health = HealthServer(settings.http_host, settings.http_port, runtime.is_ready)
        await health.start()
        log.info(f"{worker.name} starting", extra={"http_port": health.port})
        runtime.ready = True
        await worker.run(runtime, stop)
    finally:
        runtime.ready = False
        try:
            await worker.stop(runtime)
        finally:
            if health is not None:
                await health.stop()
            if runtime.connection.is_connected:
                await runtime.connection.drain()  # acks are plain publishes: flush them


def serve(worker: Worker, settings: Settings) -> None:
    """Run a worker in the foreground until SIGTERM or Ctrl-C."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # One per process: the allocator's heaps are the process's, whatever runs in it.
        keep_large_buffers_apart()
        trimmer = asyncio.create_task(give_back_freed_memory(stop))
        try:
            await run_worker(worker, settings, stop)
        finally:
            stop.set()
            await trimmer

    with asyncio.Runner(loop_factory=event_loop_factory(settings.event_loop)) as runner:
        runner.run(main())


def event_loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a service runs on (`REMINDERS_EVENT_LOOP`); None is asyncio's own.

    uvloop by default where it is installed: the same Python work costs less CPU on it
    wherever the loop's own wake-ups, reads and writes weigh, as in a gateway at light load
    (measured: bench/README.md, "The services on uvloop"). `uvloop` insists on it
    (ImportError without it); `asyncio` keeps the standard loop."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not installed (Windows has no uvloop): the standard loop
        if choice == "uvloop":
            raise
        return None
    return uvloop.new_event_loop
