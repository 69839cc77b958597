"""JSON-RPC 2.0 adapters on `reminders.v1.rpc` (SPEC §8), translated into bus commands.

Methods: `session/remind`, `session/pending_injections`, `session/revoke_reminder`, the
control methods `session/mute`, `session/unmute` and `session/sanitize` (SPEC §12, the bus
ops with camelCase names), and the notifications `notifications/reminder` (the MCP
proposal) and `notifications/message` carrying `params._meta.harn.reminder`.
Notifications (no `id`) never get a reply; a message with an `id` always does, whatever its
method.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from contracts.errors import ErrorCode
from contracts.spec import MODE_ALIASES

log = logging.getLogger("reminders.rpc")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
SERVER_ERROR = -32000

#: camelCase names accepted by the adapters, and the spec field each maps to.
CAMEL_TO_SNAKE = {
    "dedupeKey": "dedupe_key",
    "ttlTurns": "ttl_turns",
    "preserveOnCompact": "preserve_on_compact",
    "roleHint": "role_hint",
    "firedAtTurn": "fired_at_turn",
    "originatingAgentId": "originating_agent_id",
    "notBefore": "not_before",
    "expiresAt": "expires_at",
}

Serve = Callable[[str, object], Awaitable[dict[str, Any]]]


class RpcError(Exception):
    """A JSON-RPC error response."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The `error` member."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def _shape_error(message: str) -> RpcError:
    return RpcError(
        INVALID_PARAMS,
        "Invalid params",
        {"code": ErrorCode.INVALID_RPC_PAYLOAD.value, "message": message},
    )


def _reply_error(reply: dict[str, Any]) -> RpcError:
    error = reply["error"]
    code = str(error["code"])
    # The command error's details travel in `data` (SPEC §8): `rate_limited` keeps its
    # `retry_after_ms`, `too_large` its byte budget.
    data = {**(error.get("details") or {}), "code": code, "message": error["message"]}
    if code.startswith("HARN-RMD-") or code in ("invalid_request", "too_large", "unknown_mute_id"):
        return RpcError(INVALID_PARAMS, "Invalid params", data)
    return RpcError(SERVER_ERROR, error["message"], data)


def _session_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise _shape_error("sessionId must be a non-empty string")
    return value


def _spec_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """Reminder fields with camelCase mapped, checked for the §2.2 HARN-RMD-002 shapes."""
    fields = {CAMEL_TO_SNAKE.get(key, key): value for key, value in raw.items()}
    if "content" in fields and "body" not in fields:
        raise _shape_error("use body, not content")
    source = fields.setdefault("source", "bridge")
    if source != "bridge":
        raise _shape_error("source must be bridge")
    fired = fields.get("fired_at_turn")
    if isinstance(fired, int) and not isinstance(fired, bool) and fired < 0:
        raise _shape_error("fired_at_turn must be >= 0")
    return fields


def _mode(value: object) -> str:
    if value is None:
        return "finish_step"
    if not isinstance(value, str) or value not in MODE_ALIASES:
        raise _shape_error(f"unknown mode: {str(value)[:40]}")
    return value


def _meta(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta", {})
    if not isinstance(meta, dict):
        raise _shape_error("_meta must be an object")
    return meta


async def _inject(serve: Serve, session_id: str, mode: str, fields: dict[str, Any]) -> str:
    reply = await serve("inject", {"session_id": session_id, "mode": mode, "reminder": fields})
    if not reply.get("ok"):
        raise _reply_error(reply)
    return str(reply["reminder_id"])


async def _remind(serve: Serve, params: dict[str, Any]) -> dict[str, Any]:
    _meta(params)
    session_id = _session_id(params.get("sessionId"))
    nested = params.get("reminder")
    if nested is not None and not isinstance(nested, dict):
        raise _shape_error("reminder must be an object")
    flat = {k: v for k, v in params.items() if k not in ("sessionId", "mode", "_meta", "reminder")}
    fields = _spec_fields({**flat, **(nested or {})})
    return {"reminderId": await _inject(serve, session_id, _mode(params.get("mode")), fields)}


async def _pending(serve: Serve, params: dict[str, Any]) -> dict[str, Any]:
    reply = await serve("pending_injections", {"session_id": _session_id(params.get("sessionId"))})
    if not reply.get("ok"):
        raise _reply_error(reply)
    return {"pendingCount": reply["pendingCount"], "injections": reply["injections"]}


async def _revoke(serve: Serve, params: dict[str, Any]) -> dict[str, Any]:
    session_id = _session_id(params.get("sessionId"))
    reminder_id = params.get("reminderId")
    if not isinstance(reminder_id, str) or not reminder_id:
        raise _shape_error("reminderId must be a non-empty string")
    reply = await serve("revoke", {"session_id": session_id, "reminder_id": reminder_id})
    if reply.get("ok"):
        return {"reminderId": reminder_id, "status": reply["status"]}
    code = str(reply["error"]["code"])
    if code in ("already_delivered", "unknown_reminder_id"):
        raise RpcError(
            INVALID_PARAMS, "Invalid params", {"reason": code, "reminderId": reminder_id}
        )
    raise _reply_error(reply)


#: camelCase names of the control methods' params and results, and their bus names.
_CONTROL_NAMES = {
    "sessionId": "session_id",
    "untilTurn": "until_turn",
    "muteId": "mute_id",
    "toolName": "tool_name",
    "providerId": "provider_id",
    "dedupeKey": "dedupe_key",
    "requestId": "request_id",
    "reminderId": "reminder_id",
    "alreadyAcknowledged": "already_acknowledged",
}
_CONTROL_RESULTS = {snake: camel for camel, snake in _CONTROL_NAMES.items()}

#: Control methods (SPEC §8, §12): JSON-RPC method → bus op and the reply fields returned.
CONTROL_METHODS: dict[str, tuple[str, tuple[str, ...]]] = {
    "session/mute": ("mute", ("mute_id",)),
    "session/unmute": ("unmute", ("mute_id",)),
    "session/sanitize": ("sanitize", ("text", "neutralized")),
    "session/acknowledge_reminder": (
        "acknowledge",
        ("reminder_id", "outcome", "already_acknowledged"),
    ),
}


def _snake(value: object) -> object:
    """camelCase keys of params (and of a nested selector) in their bus names."""
    if not isinstance(value, dict):
        return value
    return {_CONTROL_NAMES.get(key, key): _snake(item) for key, item in value.items()}


async def _control(serve: Serve, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A control method as its bus op: same rules, same error codes (SPEC §8)."""
    op, returned = CONTROL_METHODS[method]
    body = _snake({k: v for k, v in params.items() if k != "_meta"})
    assert isinstance(body, dict)
    body["session_id"] = _session_id(body.get("session_id"))
    reply = await serve(op, body)
    if not reply.get("ok"):
        raise _reply_error(reply)
    return {_CONTROL_RESULTS.get(name, name): reply[name] for name in returned}


async def _notification(serve: Serve, method: str, params: dict[str, Any]) -> None:
    meta = _meta(params)
    if method == "notifications/reminder":
        reminder = params.get("reminder")
        session_id = meta.get("sessionId")
    else:
        harn = meta.get("harn")
        if not isinstance(harn, dict):
            raise _shape_error("_meta.harn must be an object")
        reminder = harn.get("reminder")
        session_id = meta.get("sessionId", harn.get("sessionId"))
    if not isinstance(reminder, dict):
        raise _shape_error("reminder must be an object")
    await _inject(serve, _session_id(session_id), _mode(params.get("mode")), _spec_fields(reminder))


async def handle_rpc_bytes(serve: Serve, data: bytes) -> dict[str, Any] | None:
    """One JSON-RPC message as received; the response (None for a notification). Never
    raises: whatever broke behind a request, its caller gets an error response."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _response(None, error=RpcError(PARSE_ERROR, "Parse error"))
    try:
        return await handle_rpc(serve, raw)
    except Exception:  # the caller must get an answer whatever broke; logged, no body
        log.exception("rpc failed")
        if isinstance(raw, dict) and "id" not in raw:
            return None  # a notification: nobody waits for an answer
        unavailable = RpcError(SERVER_ERROR, "unavailable", {"code": "unavailable"})
        return _response(raw.get("id") if isinstance(raw, dict) else None, error=unavailable)


async def handle_rpc(serve: Serve, raw: object) -> dict[str, Any] | None:
    """One JSON-RPC message in; the response out (None for notifications)."""
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0" or "method" not in raw:
        return _response(None, error=RpcError(INVALID_REQUEST, "Invalid Request"))
    request_id = raw.get("id")
    notification = "id" not in raw
    method = raw["method"]
    params = raw.get("params", {})
    try:
        if not isinstance(params, dict):
            raise _shape_error("params must be an object")
        if method == "session/remind":
            result = await _remind(serve, params)
        elif method == "session/pending_injections":
            result = await _pending(serve, params)
        elif method == "session/revoke_reminder":
            result = await _revoke(serve, params)
        elif method in CONTROL_METHODS:
            result = await _control(serve, method, params)
        elif method in ("notifications/reminder", "notifications/message"):
            # Sent with an `id` it is a request like any other: `{}` once applied (SPEC §8).
            await _notification(serve, method, params)
            result = {}
        else:
            raise RpcError(METHOD_NOT_FOUND, "Method not found")
    except RpcError as exc:
        if notification:
            log.warning("notification refused", extra={"op": str(method)[:64], "code": exc.code})
            return None
        return _response(request_id, error=exc)
    return None if notification else _response(request_id, result=result)


def _response(
    request_id: object, *, result: dict[str, Any] | None = None, error: RpcError | None = None
) -> dict[str, Any]:
    response: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        response["error"] = error.to_wire()
    else:
        response["result"] = result
    return response


def rpc_error_response(request_id: object, reply: dict[str, Any]) -> dict[str, Any]:
    """A failed bus reply as the JSON-RPC response to request `request_id` (SPEC §8)."""
    return _response(request_id, error=_reply_error(reply))
