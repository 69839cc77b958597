"""The host-side MCP bridge against a real MCP server on stdio and a real ledger (SPEC §8)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from nats.aio.client import Client

from client.mcp_bridge import Forwarded, McpReminderBridge
from client.sdk import ReminderClient
from services.adapters.settings import Settings
from tests.integration.read_side import wait_projected_equal
from tests.processes import ServiceRunner

SERVER = Path(__file__).with_name("mcp_reminder_server.py")


async def queued_bodies(ledger: ReminderClient, session_id: str) -> dict[str, dict[str, Any]]:
    reply = await ledger.call("state", {"session_id": session_id})
    assert reply["stale"] is False
    return {row["reminder"]["body"]: row for row in reply["state"]["queued"]}


async def test_reminders_an_mcp_server_sends_reach_the_ledgers_state(
    nats_server: Any, nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    logged: list[types.LoggingMessageNotificationParams] = []
    surfaced: list[Any] = []
    outcomes: list[Forwarded] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async def on_message(message: Any) -> None:
        surfaced.append(message)

    server = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    bridge = await McpReminderBridge.connect(
        nats_server.url, default_session_id="mcp-default", on_forwarded=outcomes.append
    )
    async with (
        bridge,
        stdio_client(server) as (read, write),
        bridge.tap(read) as tapped,
        ClientSession(tapped, write, logging_callback=on_log, message_handler=on_message) as mcp,
    ):
        await mcp.initialize()
        result = await mcp.call_tool("emit", {"session_id": "mcp-host"})
        assert result.isError is False
        await bridge.flush()

    # Every reminder was answered by the ledger, in the order the server sent them.
    assert [(o.method, o.session_id, o.ok) for o in outcomes] == [
        ("notifications/reminder", "mcp-host", True),
        ("notifications/message", "mcp-host", True),
        ("notifications/reminder", "mcp-default", True),
        ("notifications/reminder", "mcp-host", False),
    ]
    assert outcomes[0].reminder_id == "lint-1"
    assert outcomes[3].error_code == "HARN-RMD-002"
    assert list(bridge.forwarded) == outcomes and bridge.dropped == 0

    # And they are in the ledger's projected state, queued (mode finish_step), source bridge.
    await wait_projected_equal(nc, provisioned, ["mcp-host", "mcp-default"])
    ledger = ReminderClient(nc)
    host = await queued_bodies(ledger, "mcp-host")
    assert set(host) == {"Lint is failing in src/app.py.", "Tests pass now."}
    lint = host["Lint is failing in src/app.py."]
    assert lint["mode"] == "finish_step"
    assert lint["reminder"]["id"] == "lint-1"
    assert lint["reminder"]["tags"] == ["lint"]
    assert lint["reminder"]["dedupe_key"] == "lint"
    assert lint["reminder"]["ttl_turns"] == 1
    assert lint["reminder"]["role_hint"] == "developer"
    assert lint["reminder"]["propagate"] == "none"
    assert {row["reminder"]["source"] for row in host.values()} == {"bridge"}
    assert host["Tests pass now."]["reminder"]["ttl_turns"] == 2
    assert set(await queued_bodies(ledger, "mcp-default")) == {"Check the default session."}

    # The session still got the core logging notifications (the reminder one too), but never
    # the proposal's notifications/reminder, which the bridge consumed.
    assert [params.data for params in logged] == ["tests finished", "just a log line"]
    assert not any(
        isinstance(m, types.ServerNotification) and m.root.method == "notifications/reminder"
        for m in surfaced
    )
