"""Which MCP server notifications the host-side bridge forwards, and as what (SPEC §8)."""

from __future__ import annotations

from mcp.types import JSONRPCMessage, JSONRPCNotification, JSONRPCRequest

from client.mcp_bridge import McpReminderBridge, remind_params


def test_notifications_reminder_becomes_session_remind_for_its_session() -> None:
    params = {
        "reminder": {"body": "Lint fails.", "ttlTurns": 1},
        "mode": "interrupt",
        "_meta": {"sessionId": "s1"},
    }
    assert remind_params("notifications/reminder", params, "fallback") == {
        "reminder": {"body": "Lint fails.", "ttlTurns": 1},
        "sessionId": "s1",
        "mode": "interrupt",
    }


def test_the_default_session_applies_only_when_meta_names_none() -> None:
    params = {"reminder": {"body": "x"}}
    assert remind_params("notifications/reminder", params, "fallback") == {
        "reminder": {"body": "x"},
        "sessionId": "fallback",
    }
    assert remind_params("notifications/reminder", params) == {"reminder": {"body": "x"}}


def test_notifications_message_forwards_only_a_harn_reminder() -> None:
    with_reminder = {
        "level": "info",
        "data": "log text stays out",
        "_meta": {"harn": {"sessionId": "s2", "reminder": {"body": "Tests pass."}}},
    }
    assert remind_params("notifications/message", with_reminder) == {
        "reminder": {"body": "Tests pass."},
        "sessionId": "s2",
    }
    assert remind_params("notifications/message", {"level": "info", "data": "x"}, "s") is None
    assert remind_params("notifications/message", {"_meta": {"harn": {}}}, "s") is None
    assert remind_params("notifications/progress", {"progress": 1}, "s") is None


def test_a_malformed_meta_is_left_for_the_adapter_to_refuse() -> None:
    remind = remind_params("notifications/reminder", {"reminder": {"body": "x"}, "_meta": 3}, "s")
    assert remind == {"reminder": {"body": "x"}, "sessionId": "s", "_meta": 3}


async def test_offer_claims_reminder_notifications_only() -> None:
    bridge = McpReminderBridge(None, default_session_id="s")  # type: ignore[arg-type]
    reminder = JSONRPCMessage(
        JSONRPCNotification(
            jsonrpc="2.0", method="notifications/reminder", params={"reminder": {"body": "x"}}
        )
    )
    request = JSONRPCMessage(
        JSONRPCRequest(jsonrpc="2.0", id=1, method="notifications/reminder", params={})
    )
    assert bridge.offer(reminder) is True
    assert bridge.offer(request) is False
    assert bridge.offer({"jsonrpc": "2.0", "method": "notifications/reminder", "params": {}})
    assert bridge.offer({"jsonrpc": "2.0", "method": "tools/list_changed"}) is False
