"""JSON-RPC adapter shapes of SPEC §8, against a recording stand-in for the bus commands."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.gateway.rpc import handle_rpc


class Bus:
    """Records commands and answers like the gateway would."""

    def __init__(self, replies: dict[str, dict[str, Any]] | None = None) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.replies = replies or {}

    async def __call__(self, op: str, raw: object) -> dict[str, Any]:
        self.sent.append((op, raw))
        default = {
            "inject": {"ok": True, "reminder_id": "r-1", "session_seq": 1},
            "revoke": {"ok": True, "status": "revoked", "session_seq": 2},
            "pending_injections": {"ok": True, "pendingCount": 0, "injections": [], "stale": False},
        }
        return self.replies[op] if op in self.replies else default[op]


def request(method: str, params: object, request_id: object = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def test_session_remind_injects_flat_fields_with_finish_step_and_bridge_source() -> None:
    bus = Bus()
    response = await handle_rpc(
        bus, request("session/remind", {"sessionId": "s", "body": "hi", "ttlTurns": 2})
    )
    assert response == {"jsonrpc": "2.0", "id": 1, "result": {"reminderId": "r-1"}}
    assert bus.sent == [
        (
            "inject",
            {
                "session_id": "s",
                "mode": "finish_step",
                "reminder": {"body": "hi", "ttl_turns": 2, "source": "bridge"},
            },
        )
    ]


async def test_session_remind_accepts_fields_nested_under_reminder_and_a_mode() -> None:
    bus = Bus()
    await handle_rpc(
        bus,
        request(
            "session/remind",
            {"sessionId": "s", "mode": "interrupt", "reminder": {"body": "x", "dedupe_key": "k"}},
        ),
    )
    assert bus.sent[0][1]["mode"] == "interrupt"
    assert bus.sent[0][1]["reminder"]["dedupe_key"] == "k"


@pytest.mark.parametrize(
    "params",
    [
        "not an object",
        {"sessionId": "s", "content": "x"},
        {"sessionId": "s", "body": "x", "source": "hook"},
        {"sessionId": "s", "body": "x", "_meta": "nope"},
        {"sessionId": "s", "body": "x", "fired_at_turn": -1},
        {"sessionId": "s", "body": "x", "mode": "whenever"},
        {"body": "x"},
    ],
)
async def test_session_remind_wrong_shapes_are_invalid_params_harn_rmd_002(params: object) -> None:
    bus = Bus()
    response = await handle_rpc(bus, request("session/remind", params))
    assert response is not None
    assert response["error"]["code"] == -32602
    assert response["error"]["data"]["code"] == "HARN-RMD-002"
    assert bus.sent == []


async def test_a_field_error_from_the_command_keeps_its_own_code() -> None:
    bus = Bus(
        {
            "inject": {
                "ok": False,
                "error": {"code": "HARN-RMD-005", "message": "invalid propagate", "details": {}},
            }
        }
    )
    response = await handle_rpc(
        bus, request("session/remind", {"sessionId": "s", "body": "x", "propagate": "up"})
    )
    assert response is not None
    assert response["error"]["code"] == -32602
    assert response["error"]["data"]["code"] == "HARN-RMD-005"


async def test_a_rate_limited_error_keeps_retry_after_ms_in_data() -> None:
    limited = {
        "ok": False,
        "error": {
            "code": "rate_limited",
            "message": "slow down",
            "details": {"retry_after_ms": 40},
        },
    }
    response = await handle_rpc(
        Bus({"inject": limited}), request("session/remind", {"sessionId": "s", "body": "x"})
    )
    assert response is not None
    assert response["error"]["data"] == {
        "code": "rate_limited",
        "message": "slow down",
        "retry_after_ms": 40,
    }


@pytest.mark.parametrize("reason", ["already_delivered", "unknown_reminder_id"])
async def test_revoke_reminder_errors_carry_reason_and_reminder_id(reason: str) -> None:
    bus = Bus({"revoke": {"ok": False, "error": {"code": reason, "message": "m", "details": {}}}})
    response = await handle_rpc(
        bus, request("session/revoke_reminder", {"sessionId": "s", "reminderId": "r9"})
    )
    assert response is not None
    assert response["error"]["code"] == -32602
    assert response["error"]["data"] == {"reason": reason, "reminderId": "r9"}


async def test_revoke_reminder_returns_the_status() -> None:
    response = await handle_rpc(
        Bus(), request("session/revoke_reminder", {"sessionId": "s", "reminderId": "r9"})
    )
    assert response == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"reminderId": "r9", "status": "revoked"},
    }


async def test_pending_injections_returns_exactly_count_and_rows() -> None:
    response = await handle_rpc(Bus(), request("session/pending_injections", {"sessionId": "s"}))
    assert response == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"pendingCount": 0, "injections": []},
    }


async def test_the_mcp_reminder_notification_maps_camel_case_and_gets_no_reply() -> None:
    bus = Bus()
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/reminder",
        "params": {
            "reminder": {
                "id": "m1",
                "body": "x",
                "tags": ["a"],
                "dedupeKey": "k",
                "ttlTurns": 3,
                "preserveOnCompact": True,
                "propagate": "none",
                "roleHint": "developer",
                "firedAtTurn": 2,
            },
            "_meta": {"sessionId": "s"},
        },
    }
    assert await handle_rpc(bus, message) is None
    op, raw = bus.sent[0]
    assert op == "inject"
    assert raw["session_id"] == "s"
    assert raw["reminder"] == {
        "id": "m1",
        "body": "x",
        "tags": ["a"],
        "dedupe_key": "k",
        "ttl_turns": 3,
        "preserve_on_compact": True,
        "propagate": "none",
        "role_hint": "developer",
        "fired_at_turn": 2,
        "source": "bridge",
    }


async def test_the_message_notification_fallback_carries_the_reminder_in_meta_harn() -> None:
    bus = Bus()
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"_meta": {"sessionId": "s", "harn": {"reminder": {"body": "x"}}}},
    }
    assert await handle_rpc(bus, message) is None
    assert bus.sent[0][1]["reminder"]["body"] == "x"


async def test_a_malformed_notification_is_dropped_without_a_reply() -> None:
    bus = Bus()
    message = {"jsonrpc": "2.0", "method": "notifications/reminder", "params": {"reminder": 5}}
    assert await handle_rpc(bus, message) is None
    assert bus.sent == []


async def test_unknown_methods_and_invalid_requests_get_the_standard_codes() -> None:
    unknown = await handle_rpc(Bus(), request("session/explode", {}))
    assert unknown is not None and unknown["error"]["code"] == -32601
    invalid = await handle_rpc(Bus(), {"id": 3, "method": "session/remind"})
    assert invalid is not None and invalid["error"]["code"] == -32600


async def test_a_failure_behind_a_request_still_gets_a_json_rpc_error_reply() -> None:
    from services.adapters.settings import Settings
    from services.gateway.service import CommandService

    class Broken(CommandService):
        async def handle_value(self, op: str, raw: object) -> dict[str, Any]:
            raise TimeoutError("nats went away")

    broken = Broken(object(), Settings(), object())  # type: ignore[arg-type]
    message = request("session/remind", {"sessionId": "s", "body": "x"}, request_id=9)
    response = await broken.handle_rpc(orjson.dumps(message))
    assert response == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32000, "message": "unavailable", "data": {"code": "unavailable"}},
    }
    notification = {"jsonrpc": "2.0", "method": "notifications/reminder", "params": {}}
    assert await broken.handle_rpc(orjson.dumps(notification)) is None


async def test_acknowledge_reminder_maps_camel_case_both_ways() -> None:
    bus = Bus(
        {
            "acknowledge": {
                "ok": True,
                "reminder_id": "r-1",
                "outcome": "dismissed",
                "already_acknowledged": False,
                "session_seq": 5,
            }
        }
    )
    params = {
        "sessionId": "s",
        "reminderId": "r-1",
        "turn": 3,
        "outcome": "dismissed",
        "by": "model",
        "note": "no longer relevant",
    }
    response = await handle_rpc(bus, request("session/acknowledge_reminder", params))
    assert response["result"] == {
        "reminderId": "r-1",
        "outcome": "dismissed",
        "alreadyAcknowledged": False,
    }
    assert bus.sent == [
        (
            "acknowledge",
            {
                "session_id": "s",
                "reminder_id": "r-1",
                "turn": 3,
                "outcome": "dismissed",
                "by": "model",
                "note": "no longer relevant",
            },
        )
    ]


async def test_acknowledge_reminder_errors_keep_the_commands_code() -> None:
    refusal = {
        "ok": False,
        "error": {"code": "HARN-RMD-001", "message": "invalid outcome", "details": {}},
    }
    bus = Bus({"acknowledge": refusal})
    response = await handle_rpc(
        bus,
        request(
            "session/acknowledge_reminder",
            {"sessionId": "s", "reminderId": "r", "turn": 0, "outcome": "acted"},
        ),
    )
    assert response["error"]["code"] == -32602
    assert response["error"]["data"]["code"] == "HARN-RMD-001"


async def test_session_remind_maps_the_wall_clock_fields() -> None:
    bus = Bus()
    await handle_rpc(
        bus,
        request(
            "session/remind",
            {
                "sessionId": "s",
                "body": "x",
                "notBefore": "2026-11-29T15:00:00Z",
                "expiresAt": "2026-11-30T00:00:00+01:00",
            },
        ),
    )
    reminder = bus.sent[0][1]["reminder"]  # type: ignore[index]
    assert reminder["not_before"] == "2026-11-29T15:00:00Z"
    assert reminder["expires_at"] == "2026-11-30T00:00:00+01:00"
