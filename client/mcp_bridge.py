"""Host-side MCP bridge: reminders that an MCP server sends become ledger reminders.

An MCP server that follows the reminders proposal sends `notifications/reminder` (the reminder
in camelCase under `params.reminder`), or the fallback `notifications/message` carrying
`params._meta.harn.reminder`. The host taps the transport's read stream with
`McpReminderBridge.tap`, so those notifications reach the ledger whatever the MCP session does
with them (the SDK's `ClientSession` only knows the core MCP notifications, and would log an
unknown one in full, body included):

    async with await McpReminderBridge.connect(url, default_session_id="s1") as bridge:
        async with stdio_client(server) as (read, write), bridge.tap(read) as tapped:
            async with ClientSession(tapped, write) as session:
                await session.initialize()
                ...

Each reminder goes to the gateway as a JSON-RPC `session/remind` request on `reminders.v1.rpc`
(SPEC §8), which maps the fields exactly as the notification adapters do (camelCase,
`source: bridge`, `mode` default `finish_step`) and, being a request, answers with the reminder
id or a coded error. The session is `params._meta.sessionId` (for `notifications/message` also
`params._meta.harn.sessionId`), else the bridge's `default_session_id`. Forwarding runs in one
background task, in arrival order, so a slow or absent gateway never stalls the MCP session.
`notifications/reminder` is consumed by the bridge; `notifications/message` (a core MCP
logging notification) is forwarded and also passed on to the session. Logs carry methods and
codes only, never a reminder body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import nats
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCMessage, JSONRPCNotification
from nats.aio.client import Client
from nats.errors import Error as NatsError

log = logging.getLogger("reminders.mcp_bridge")

RPC_SUBJECT = "reminders.v1.rpc"
REMINDER_METHOD = "notifications/reminder"
MESSAGE_METHOD = "notifications/message"

#: What an MCP transport's read stream yields.
ReadItem = SessionMessage | Exception


@dataclass(frozen=True)
class Forwarded:
    """The outcome of one forwarded reminder: its id, or the ledger's error code."""

    method: str
    session_id: str | None
    reminder_id: str | None = None
    error_code: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the ledger accepted the reminder."""
        return self.reminder_id is not None


def _meta_session(meta: object) -> str | None:
    if not isinstance(meta, dict):
        return None
    session = meta.get("sessionId")
    if session is None and isinstance(meta.get("harn"), dict):
        session = meta["harn"].get("sessionId")
    return session if isinstance(session, str) and session else None


def remind_params(
    method: str, params: dict[str, Any] | None, default_session_id: str | None = None
) -> dict[str, Any] | None:
    """The `session/remind` params for one MCP server notification.

    None when the notification carries no reminder (any other method, or a
    `notifications/message` without `_meta.harn.reminder`). `sessionId` is left out when
    neither `_meta` nor the default names a session.
    """
    params = params or {}
    meta = params.get("_meta")
    if method == REMINDER_METHOD:
        reminder = params.get("reminder")
    elif method == MESSAGE_METHOD:
        harn = meta.get("harn") if isinstance(meta, dict) else None
        if not isinstance(harn, dict) or "reminder" not in harn:
            return None
        reminder = harn["reminder"]
    else:
        return None
    remind: dict[str, Any] = {"reminder": reminder}
    session_id = _meta_session(meta) or default_session_id
    if session_id is not None:
        remind["sessionId"] = session_id
    if "mode" in params:
        remind["mode"] = params["mode"]
    if meta is not None and not isinstance(meta, dict):
        remind["_meta"] = meta  # let the adapter refuse it with its own code (HARN-RMD-002)
    return remind


def _outcome(method: str, session_id: str | None, reply: dict[str, Any]) -> Forwarded:
    result = reply.get("result")
    if isinstance(result, dict) and isinstance(result.get("reminderId"), str):
        return Forwarded(method, session_id, reminder_id=result["reminderId"])
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    assert isinstance(error, dict)
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    assert isinstance(data, dict)
    code = data.get("code") or data.get("reason") or error.get("code") or "invalid_request"
    return Forwarded(method, session_id, error_code=str(code))


class McpReminderBridge:
    """Forwards the reminder notifications an MCP server sends into the ledger."""

    def __init__(
        self,
        nc: Client,
        *,
        default_session_id: str | None = None,
        timeout_s: float = 10.0,
        max_queued: int = 1000,
        on_forwarded: Callable[[Forwarded], None] | None = None,
        owns_connection: bool = False,
    ) -> None:
        self._nc = nc
        self.default_session_id = default_session_id
        self._timeout_s = timeout_s
        self._on_forwarded = on_forwarded
        self._owns_connection = owns_connection
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(max_queued)
        self._worker: asyncio.Task[None] | None = None
        self._request_id = 0
        #: The latest outcomes (ids and codes only), newest last.
        self.forwarded: deque[Forwarded] = deque(maxlen=256)
        #: Reminders dropped because the queue was full.
        self.dropped = 0

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        default_session_id: str | None = None,
        timeout_s: float = 10.0,
        on_forwarded: Callable[[Forwarded], None] | None = None,
    ) -> McpReminderBridge:
        """A bridge with a NATS connection of its own (closed with the bridge)."""
        nc = await nats.connect(url, name="reminders-mcp-bridge", max_reconnect_attempts=3)
        return cls(
            nc,
            default_session_id=default_session_id,
            timeout_s=timeout_s,
            on_forwarded=on_forwarded,
            owns_connection=True,
        )

    async def __aenter__(self) -> McpReminderBridge:
        self._worker = asyncio.create_task(self._work(), name="reminders-mcp-bridge")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, drain_timeout_s: float = 10.0) -> None:
        """Forward what is still queued (bounded), then stop."""
        if self._worker is not None:
            with contextlib.suppress(TimeoutError):
                await self.flush(drain_timeout_s)
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        if self._owns_connection:
            await self._nc.drain()

    async def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every reminder offered so far has been answered by the ledger."""
        await asyncio.wait_for(self._queue.join(), timeout_s)

    def offer(self, message: JSONRPCMessage | dict[str, Any]) -> bool:
        """Queue the message for the ledger if it carries a reminder; True when it does."""
        raw = message.root if isinstance(message, JSONRPCMessage) else message
        if isinstance(raw, JSONRPCNotification):
            method, params = raw.method, raw.params
        elif isinstance(raw, dict) and "id" not in raw and isinstance(raw.get("method"), str):
            method, params = raw["method"], raw.get("params")
        else:
            return False
        remind = remind_params(
            method, params if isinstance(params, dict) else None, self.default_session_id
        )
        if remind is None:
            return False
        try:
            self._queue.put_nowait((method, remind))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("reminder dropped: bridge queue full", extra={"op": method})
        return True

    @contextlib.asynccontextmanager
    async def tap(
        self, read_stream: MemoryObjectReceiveStream[ReadItem]
    ) -> AsyncIterator[MemoryObjectReceiveStream[ReadItem]]:
        """A read stream for the MCP session with the reminders taken out on the way."""
        send, receive = anyio.create_memory_object_stream[ReadItem](0)
        async with anyio.create_task_group() as group:
            group.start_soon(self._pump, read_stream, send)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()

    async def _pump(
        self,
        source: MemoryObjectReceiveStream[ReadItem],
        sink: MemoryObjectSendStream[ReadItem],
    ) -> None:
        async with sink:
            async for item in source:
                if isinstance(item, SessionMessage) and self.offer(item.message):
                    root = item.message.root
                    if isinstance(root, JSONRPCNotification) and root.method == REMINDER_METHOD:
                        continue  # not a core MCP notification: the session has no use for it
                await sink.send(item)

    async def _work(self) -> None:
        while True:
            method, remind = await self._queue.get()
            try:
                outcome = await self._forward(method, remind)
                self.forwarded.append(outcome)
                if outcome.ok:
                    log.info("reminder forwarded", extra={"op": method, "outcome": "ok"})
                else:
                    log.warning(
                        "reminder refused",
                        extra={"op": method, "outcome": "error", "code": outcome.error_code},
                    )
                if self._on_forwarded is not None:
                    self._on_forwarded(outcome)
            except Exception as exc:  # neither a host callback nor a surprise stops the bridge
                log.warning("bridge forward failed", extra={"error": type(exc).__name__})
            finally:
                self._queue.task_done()

    async def _forward(self, method: str, remind: dict[str, Any]) -> Forwarded:
        session_id = remind.get("sessionId")
        if session_id is None:
            return Forwarded(method, None, error_code="no_session")
        self._request_id += 1
        request = {
            "jsonrpc": "2.0",
            "id": self._request_id,
            "method": "session/remind",
            "params": remind,
        }
        try:
            reply = await self._nc.request(
                RPC_SUBJECT, orjson.dumps(request), timeout=self._timeout_s
            )
            decoded = orjson.loads(reply.data)
        except (NatsError, TimeoutError, orjson.JSONDecodeError) as exc:
            log.warning("ledger unavailable", extra={"op": method, "error": type(exc).__name__})
            return Forwarded(method, session_id, error_code="unavailable")
        if not isinstance(decoded, dict):
            return Forwarded(method, session_id, error_code="invalid_request")
        return _outcome(method, session_id, decoded)
