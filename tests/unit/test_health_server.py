"""The probe and metrics endpoint (aiohttp): routes, port 0, probes, quiet logs, stop."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from aiohttp import ClientSession

from services.adapters.http import METRICS_CONTENT_TYPE, HealthServer


async def fetch(port: int, path: str, method: str = "GET") -> tuple[int, str, str]:
    async with (
        ClientSession() as session,
        session.request(method, f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text(), response.headers.get("Content-Type", "")


async def test_probes_follow_their_callables_on_a_port_chosen_by_the_system() -> None:
    state = {"ready": False, "alive": True}
    server = HealthServer("127.0.0.1", 0, lambda: state["ready"], lambda: state["alive"])
    await server.start()
    try:
        assert server.port > 0
        assert (await fetch(server.port, "/healthz"))[:2] == (200, "ok\n")
        assert (await fetch(server.port, "/readyz"))[:2] == (503, "not ready\n")
        state["ready"] = True
        assert (await fetch(server.port, "/readyz"))[:2] == (200, "ready\n")
        state["alive"] = False
        assert (await fetch(server.port, "/healthz"))[:2] == (503, "unhealthy\n")
    finally:
        await server.stop()


async def test_metrics_are_the_prometheus_text_format_and_anything_else_is_refused() -> None:
    server = HealthServer("127.0.0.1", 0, lambda: True)
    await server.start()
    try:
        status, body, content_type = await fetch(server.port, "/metrics")
        assert status == 200
        assert content_type == METRICS_CONTENT_TYPE
        assert "# TYPE" in body
        assert (await fetch(server.port, "/metrics?x=1"))[0] == 200
        assert (await fetch(server.port, "/nope"))[0] == 404
        assert (await fetch(server.port, "/readyz", "POST"))[0] == 405
        assert (await fetch(server.port, "/readyz", "HEAD"))[0] == 200
    finally:
        await server.stop()


async def test_stop_releases_the_port_and_refuses_connections() -> None:
    server = HealthServer("127.0.0.1", 0, lambda: True)
    await server.start()
    port = server.port
    await server.stop()
    await server.stop()  # idempotent
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    again = HealthServer("127.0.0.1", port, lambda: True)
    await again.start()  # the port is free again
    await again.stop()


async def test_a_port_in_use_fails_start() -> None:
    first = HealthServer("127.0.0.1", 0, lambda: True)
    await first.start()
    try:
        with pytest.raises(OSError):
            await HealthServer("127.0.0.1", first.port, lambda: True).start()
    finally:
        await first.stop()


async def test_quiet_by_default_and_an_access_line_is_method_path_status_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    quiet = HealthServer("127.0.0.1", 0, lambda: True)
    await quiet.start()
    try:
        await fetch(quiet.port, "/readyz?session=secret-session")
    finally:
        await quiet.stop()
    assert not [r for r in caplog.records if r.name.startswith(("aiohttp", "reminders.http"))]

    caplog.clear()
    logged = HealthServer("127.0.0.1", 0, lambda: True, access_log=True)
    await logged.start()
    try:
        await fetch(logged.port, "/readyz?session=secret-session")
        await asyncio.sleep(0)
    finally:
        await logged.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "reminders.http.access"]
    assert lines == ["GET /readyz 200"]
    assert "secret-session" not in caplog.text
