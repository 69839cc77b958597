"""What every runtime adapter shares: one `ReminderClient` per process, the session's turn
counter, and the rule that the ledger being down costs the agent its reminders, nothing else.

The client lives on a background event loop of its own (one daemon thread per process), so
every runtime reaches the same connection whatever loop it runs on — pydantic-ai's, a
LangChain graph's sync `invoke`, a test's per-function loop — and a connection never outlives
the loop it was opened on. Every call returns `None` (or `False`) when the ledger cannot
answer: the first failure logs ONE warning line (the operation and the error's type, never a
body), later failures stay quiet until a call succeeds again, and for `RETRY_AFTER_S` after a
failure calls are skipped at once, so an agent is not slowed by a server that is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import nats

from client.sdk import ReminderClient
from contracts.errors import ErrorCode, ReminderError

log = logging.getLogger("reminder_ledger.integrations")

T = TypeVar("T")

DEFAULT_NATS_URL: Final = "nats://127.0.0.1:4222"
#: Seconds one command may take before the adapter gives up on it for this call.
REQUEST_TIMEOUT_S: Final = 2.0
#: After a failure, calls are skipped (no reminders) for this long before the next try, so a
#: model call never waits on a dead server more than once per interval.
RETRY_AFTER_S: Final = 5.0
#: Bound on one blocking call from synchronous code (connect + request + margin).
SYNC_WAIT_S: Final = 10.0


@dataclass(frozen=True)
class Rendered:
    """What `render` gave for this model call."""

    text: str
    """The envelope text (SPEC §5.1/§5.4)."""
    turn: int
    """The turn it was rendered for."""
    directive_ids: tuple[str, ...]
    """The reminders it delivered."""
    inline: dict[str, Any] | None = None
    """`{text, range}` when `user_text` was given (§5.5)."""


async def _ignore(*_args: Any) -> None:
    """nats-py's default callbacks log every reconnect error; one warning line is enough."""


class _BackgroundLoop:
    """A daemon thread running one event loop for the process's ledger traffic."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule `coro` on the background loop (started on first use)."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="reminder-ledger", daemon=True
                ).start()
                self._loop = loop
            return asyncio.run_coroutine_threadsafe(coro, self._loop)


_BACKGROUND = _BackgroundLoop()


class Ledger:
    """The adapters' one handle on the reminder service (see the module docstring).

    Methods are coroutines for async runtimes; `sync(...)` runs one from synchronous code.
    Every state it keeps (the client, turns, the outage latch) is touched only on the
    background loop, so no lock is needed around it.
    """

    def __init__(self, url: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client: ReminderClient | None = None
        self._turns: dict[str, int] = {}
        self._down = False
        self._retry_at = 0.0
        self._refusals_logged: set[tuple[str, str]] = set()

    # -- running ---------------------------------------------------------------------------

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the background loop from any loop."""
        return await asyncio.wrap_future(_BACKGROUND.submit(coro))

    def sync(self, coro: Coroutine[Any, Any, T], default: T) -> T:
        """Run `coro` on the background loop and wait for it (for synchronous runtimes);
        `default` if it has not finished within `SYNC_WAIT_S`."""
        future = _BACKGROUND.submit(coro)
        try:
            return future.result(timeout=SYNC_WAIT_S)
        except FutureTimeout:
            future.cancel()
            self._outage("sync call", "TimeoutError")
            return default

    async def _connected(self) -> ReminderClient:
        if self._client is not None and not self._client.connection.is_closed:
            return self._client
        nc = await nats.connect(
            self.url,
            name="reminders-adapter",
            connect_timeout=self.timeout_s,
            # One quick try at (re)connecting; a closed connection is reopened on a later call.
            max_reconnect_attempts=1,
            reconnect_time_wait=0.5,
            error_cb=_ignore,
            disconnected_cb=_ignore,
            reconnected_cb=_ignore,
            closed_cb=_ignore,
        )
        # No gateway subscribed: the agent carries on at once rather than wait for one.
        self._client = ReminderClient(
            nc, self.timeout_s, owns_connection=True, wait_for_gateway=False
        )
        return self._client

    async def _guarded(self, op: str, action: Callable[[ReminderClient], Awaitable[T]]) -> T | None:
        """`action` with the process's client, or `None` when the ledger cannot answer."""
        if self._down and time.monotonic() < self._retry_at:
            return None
        try:
            result = await action(await self._connected())
        except ReminderError as exc:
            if exc.code is ErrorCode.UNAVAILABLE:
                self._outage(op, exc.code.value)
            else:
                self._refused(op, exc.code.value)
            return None
        except Exception as exc:  # never into the agent loop: the reminders are optional
            self._outage(op, type(exc).__name__)
            return None
        if self._down:
            self._down = False
            log.info("reminder ledger at %s answers again", self.url)
        return result

    def _outage(self, op: str, reason: str) -> None:
        self._retry_at = time.monotonic() + RETRY_AFTER_S
        if not self._down:
            self._down = True
            log.warning(
                "reminder ledger unreachable at %s (%s: %s); the agent runs without reminders "
                "until it answers",
                self.url,
                op,
                reason,
            )

    def _refused(self, op: str, code: str) -> None:
        if (op, code) not in self._refusals_logged:  # once per kind of refusal, not per call
            self._refusals_logged.add((op, code))
            log.warning("reminder ledger refused %s: %s", op, code)

    # -- turns -----------------------------------------------------------------------------

    async def _turn(self, client: ReminderClient, session_id: str) -> int:
        """The session's current turn: known in this process, else read from its state once
        (a session that already ended its last turn goes on with the next one)."""
        known = self._turns.get(session_id)
        if known is not None:
            return known
        turn, _ = await self._turn_from_state(client, session_id)
        self._turns[session_id] = turn
        return turn

    @staticmethod
    async def _turn_from_state(client: ReminderClient, session_id: str) -> tuple[int, bool]:
        """(current turn, whether it is open: begun and not ended) from the session's state."""
        reply = await client.call("state", {"session_id": session_id})
        state = reply.get("state") or {}
        turn = int(state.get("turn") or 0)
        last_ended = state.get("last_ended_turn")
        if last_ended is not None and int(last_ended) >= turn:
            return int(last_ended) + 1, False
        return turn, int(state.get("session_seq") or 0) > 0

    # -- the calls an adapter makes ----------------------------------------------------------

    async def render(
        self,
        session_id: str,
        *,
        max_tokens: int | None = None,
        format: str | None = None,
        user_text: str | None = None,
    ) -> Rendered | None:
        """Render the session's reminders for this model call; `None` when nothing is due or
        the ledger is down."""

        async def action(client: ReminderClient) -> Rendered | None:
            turn = await self._turn(client, session_id)
            reply = await client.render(
                session_id, turn, format=format, user_text=user_text, max_tokens=max_tokens
            )
            envelope = reply.get("envelope")
            if not envelope:
                return None
            return Rendered(
                text=str(envelope["text"]),
                turn=turn,
                directive_ids=tuple(envelope.get("directive_ids") or ()),
                inline=reply.get("inline"),
            )

        return await self._guarded("render", action)

    async def publish(
        self,
        session_id: str,
        kind: str,
        payload: dict[str, Any],
        *,
        agent_id: str | None = None,
        event_id: str | None = None,
    ) -> bool:
        """Publish one runtime event for the providers (SPEC §9.1) at the current turn."""

        async def action(client: ReminderClient) -> bool:
            turn = await self._turn(client, session_id)
            await client.publish_runtime_event(
                session_id, kind, payload, turn=turn, agent_id=agent_id, event_id=event_id
            )
            return True

        return bool(await self._guarded(f"publish {kind}", action))

    async def end_turn(self, session_id: str) -> int | None:
        """Close the session's current turn (TTLs age) and move to the next; returns the
        turn ended. The local counter moves on even when the ledger is down: the agent's
        turn did end."""

        known = self._turns.get(session_id)
        if known is not None:
            self._turns[session_id] = known + 1

        async def action(client: ReminderClient) -> int:
            turn = known if known is not None else await self._turn(client, session_id)
            self._turns[session_id] = turn + 1
            await client.end_turn(session_id, turn)
            return turn

        return await self._guarded("end_turn", action)

    async def compact(self, session_id: str) -> dict[str, Any] | None:
        """The host compacts its transcript (SPEC §4.8). During a turn it is that turn's (its
        TTL pass happens here); between turns it belongs to the turn that ended, so a
        compaction between two prompts does not age the reminders a second time."""

        async def action(client: ReminderClient) -> dict[str, Any]:
            turn, open_turn = await self._turn_from_state(client, session_id)
            if not open_turn and turn > 0:
                turn -= 1
            return await client.compact(session_id, turn)

        return await self._guarded("compact", action)

    async def sanitize(
        self, session_id: str, text: str, *, tool_name: str | None = None
    ) -> dict[str, Any] | None:
        """Neutralise forged directive tags in a tool's output (SPEC §12.5): the reply
        `{text, neutralized}`, or `None` when the ledger cannot answer."""

        async def action(client: ReminderClient) -> dict[str, Any]:
            turn = await self._turn(client, session_id)
            return await client.sanitize(session_id, text, turn=turn, tool_name=tool_name)

        return await self._guarded("sanitize", action)

    async def close(self) -> None:
        """Close the connection (tests; a process normally keeps it until exit)."""
        if self._client is not None:
            client, self._client = self._client, None
            try:
                await client.close()
            except Exception as exc:  # closing a broken connection is not worth a failure
                log.debug("closing the ledger connection failed: %s", type(exc).__name__)


_LEDGERS: dict[str, Ledger] = {}
_LEDGERS_LOCK = threading.Lock()


def shared_ledger(url: str | None = None) -> Ledger:
    """The process's `Ledger` for `url` (default `REMINDERS_NATS_URL`, else the local
    server); created on first use, connected on its first call."""
    resolved = url or os.environ.get("REMINDERS_NATS_URL") or DEFAULT_NATS_URL
    with _LEDGERS_LOCK:
        ledger = _LEDGERS.get(resolved)
        if ledger is None:
            ledger = _LEDGERS[resolved] = Ledger(resolved)
        return ledger


def render_budget(max_tokens: int | None) -> int | None:
    """The render budget to send: the adapter's own, else `REMINDERS_RENDER_MAX_TOKENS` in
    the host's environment, else none (the session default of the gateway applies)."""
    if max_tokens is not None:
        return max_tokens
    raw = os.environ.get("REMINDERS_RENDER_MAX_TOKENS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


#: `user_text` a render may carry (SPEC §4.1.1); a longer user turn gets the envelope as a
#: separate part of the same turn instead of folded into its text.
INLINE_USER_TEXT_MAX_BYTES: Final = 64 * 1024


def foldable(user_text: object) -> str | None:
    """`user_text` when the ledger can fold the envelope into it (§5.5), else `None`."""
    if isinstance(user_text, str) and len(user_text.encode("utf-8")) <= INLINE_USER_TEXT_MAX_BYTES:
        return user_text
    return None


#: How much of a tool's output goes into a `tool_result` event's `output_tail`: enough for a
#: verifier's failure lines (grounded_review reads them), far below the field's 64 KiB bound.
OUTPUT_TAIL_CHARS: Final = 8192


@dataclass(frozen=True)
class ReminderOptions:
    """What a host may set on any adapter; every field is optional."""

    session_id: str | None = None
    """The ledger session; default: the runtime's own session, thread or conversation id."""
    agent_id: str | None = None
    """The agent; default: the runtime's agent name where it has one."""
    max_tokens: int | None = None
    """The render budget (SPEC §12.1); default `REMINDERS_RENDER_MAX_TOKENS`, else none."""
    context_window: int | None = None
    """The model's context window, for `budget` readings (none are published without it)."""
    format: str | None = None
    """`context-directives` (the gateway's default) or `system-reminder`."""
    nats_url: str | None = None
    """The NATS server; default `REMINDERS_NATS_URL`, else the local one."""

    def ledger(self) -> Ledger:
        """The process's shared ledger handle for these options."""
        return shared_ledger(self.nats_url)

    def budget(self) -> int | None:
        """The render budget to send with each render."""
        return render_budget(self.max_tokens)


def tool_result_payload(
    tool_name: str, output: str, *, exit_code: int | None = None
) -> dict[str, Any]:
    """A `tool_result` payload for a tool whose whole output reached the model."""
    size = len(output.encode("utf-8"))
    payload: dict[str, Any] = {
        "tool_name": (tool_name or "tool")[:256],
        "truncated": False,
        "original_bytes": size,
        "shown_bytes": size,
        "output_tail": output[-OUTPUT_TAIL_CHARS:],
    }
    if exit_code is not None:
        payload["exit_code"] = exit_code
    return payload


def budget_payload(used_tokens: int | None, context_window: int | None) -> dict[str, Any] | None:
    """A `budget` payload, or `None` when either number is unknown."""
    if used_tokens is None or not context_window or context_window < 1:
        return None
    return {"used_tokens": max(0, int(used_tokens)), "context_window": int(context_window)}
