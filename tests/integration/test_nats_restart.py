"""A crash of the NATS server itself: acknowledged events survive and the gateway heals."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from client.sdk import ReminderClient
from services.adapters.connection import connect
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.conftest import NatsUnderTest
from tests.processes import ServiceRunner


async def test_acknowledged_events_survive_a_nats_sigkill_and_the_gateway_reconnects(
    nats_server: NatsUnderTest, provisioned: Settings, services: ServiceRunner
) -> None:
    if nats_server.embedded is None:
        pytest.skip("needs the embedded server to kill it (REMINDERS_TEST_NATS_URL is set)")
    gateway = services.start("gateway")
    nc = await connect(provisioned, "test-client")
    client = ReminderClient(nc, timeout_s=2)
    for n in range(10):
        await client.inject("survivor", f"b{n}")
    nats_server.embedded.kill()
    nats_server.embedded.start()
    reply = None
    for _ in range(100):  # bounded: the clients reconnect within a few seconds
        try:
            reply = await client.inject("survivor", "after restart")
            break
        except Exception:
            await asyncio.sleep(0.2)
    assert reply is not None and reply["session_seq"] == 11
    stored = await read_session(nc, provisioned.stream, "survivor")
    assert len(stored) == 11
    await nc.close()
    # The gateway's log says when and where its connection went, and nothing else of it.
    server = nats_server.url.split("://", 1)[-1]
    moves = [
        (line["level"], line["msg"], line.get("server"))
        for line in map(orjson.loads, gateway.log_path.read_bytes().splitlines())
        if line["logger"] == "reminders.nats"
    ]
    assert ("warning", "nats connection lost; reconnecting", server) in moves
    assert ("info", "nats reconnected", server) in moves


async def test_a_connection_closed_on_purpose_logs_no_reconnection(
    nats_server: NatsUnderTest, provisioned: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    nc = await connect(provisioned, "test-client")
    with caplog.at_level(logging.INFO, logger="reminders.nats"):
        await nc.close()
    assert [record.getMessage() for record in caplog.records] == []


async def test_every_worker_rides_out_a_nats_restart_and_the_projection_catches_up(
    nats_server: NatsUnderTest, provisioned: Settings, services: ServiceRunner
) -> None:
    if nats_server.embedded is None:
        pytest.skip("needs the embedded server to kill it (REMINDERS_TEST_NATS_URL is set)")
    started = [services.start(name) for name in ("gateway", "projector", "propagator", "observer")]
    nc = await connect(provisioned, "test-client")
    client = ReminderClient(nc, timeout_s=2)
    for n in range(5):
        await client.inject("blip", f"before {n}")

    nats_server.embedded.kill()
    await asyncio.sleep(1.5)
    nats_server.embedded.start()

    reply = None
    for _ in range(100):  # bounded: the clients reconnect within a few seconds
        try:
            reply = await client.inject("blip", "after restart")
            break
        except Exception:
            await asyncio.sleep(0.2)
    assert reply is not None and reply["session_seq"] == 6
    patient = ReminderClient(nc, timeout_s=15)
    state = await patient.call("state", {"session_id": "blip", "min_seq": 6, "timeout_ms": 10000})
    assert state["stale"] is False and state["state"]["session_seq"] == 6
    for service in started:
        assert service.process.poll() is None, f"{service.name} exited\n{service.log()}"
    deadline = asyncio.get_running_loop().time() + 15
    while not all(service.ready() for service in started):
        assert asyncio.get_running_loop().time() < deadline, "a worker never became ready again"
        await asyncio.sleep(0.2)
    await nc.close()
