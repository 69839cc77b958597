"""The JSON-RPC adapters end to end on `reminders.v1.rpc` (SPEC §8)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from nats.aio.client import Client

from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


async def rpc(nc: Client, method: str, params: dict[str, Any], request_id: int = 1) -> Any:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    reply = await nc.request("reminders.v1.rpc", orjson.dumps(message), timeout=15)
    return orjson.loads(reply.data)


async def test_remind_then_pending_injections_always_sees_the_reminder(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env={"REMINDERS_RATE_LIMIT": "100000"})
    services.start("projector")
    for n in range(15):
        reminded = await rpc(nc, "session/remind", {"sessionId": "rpc", "body": f"b{n}"}, n)
        reminder_id = reminded["result"]["reminderId"]
        pending = await rpc(nc, "session/pending_injections", {"sessionId": "rpc"}, n)
        ids = [row["reminderId"] for row in pending["result"]["injections"]]
        assert reminder_id in ids
        assert pending["result"]["pendingCount"] == n + 1


async def test_revoke_reminder_round_trips_and_reports_reasons(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    reminded = await rpc(nc, "session/remind", {"sessionId": "rv", "reminder": {"body": "x"}})
    reminder_id = reminded["result"]["reminderId"]
    revoked = await rpc(
        nc, "session/revoke_reminder", {"sessionId": "rv", "reminderId": reminder_id}
    )
    assert revoked["result"] == {"reminderId": reminder_id, "status": "revoked"}
    again = await rpc(nc, "session/revoke_reminder", {"sessionId": "rv", "reminderId": reminder_id})
    assert again["result"]["status"] == "already_revoked"
    ghost = await rpc(nc, "session/revoke_reminder", {"sessionId": "rv", "reminderId": "ghost"})
    assert ghost["error"]["code"] == -32602
    assert ghost["error"]["data"] == {"reason": "unknown_reminder_id", "reminderId": "ghost"}
    bad = await rpc(nc, "session/remind", {"sessionId": "rv", "content": "x"})
    assert bad["error"]["data"]["code"] == "HARN-RMD-002"


async def test_notifications_inject_without_a_reply(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    for method, params in [
        (
            "notifications/reminder",
            {"reminder": {"body": "mcp", "ttlTurns": 2}, "_meta": {"sessionId": "n"}},
        ),
        (
            "notifications/message",
            {"_meta": {"sessionId": "n", "harn": {"reminder": {"body": "fallback"}}}},
        ),
    ]:
        await nc.publish(
            "reminders.v1.rpc",
            orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}),
        )
    for _ in range(100):
        stored = await read_session(nc, provisioned.stream, "n")
        if len(stored) == 2:
            break
        await asyncio.sleep(0.1)
    bodies = sorted(item.envelope["payload"]["reminder"]["body"] for item in stored)
    assert bodies == ["fallback", "mcp"]
    assert all(i.envelope["payload"]["reminder"]["source"] == "bridge" for i in stored)
    assert all(i.envelope["kind"] == "queued" for i in stored)
