"""The gateway's command path: parse, rate-limit, decide against the session, commit, reply.

One in-flight command per session (an asyncio lock per session id) lets group commit put
many sessions in one batch without two commands of one session racing each other. The
session cache is optimistic: a stale entry only costs a conflict, after which the session is
re-read from the log and the command decided again (bounded, with jittered backoff).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from nats.aio.client import Client
from nats.errors import Error as NatsError

from contracts.commands import (
    DECIDED_COMMANDS,
    Command,
    Forget,
    PendingInjectionsQuery,
    StateQuery,
    parse_command,
)
from contracts.decode import decode
from contracts.errors import ErrorCode, ReminderError
from contracts.events import Event
from contracts.replies import ErrorReply
from contracts.state import SessionState
from core import decide, fold_all
from core.clock import timed
from core.decide import with_unstored
from services.adapters.ids import fresh_context
from services.adapters.jetstream import JetStreamApiError, SessionAppend, read_session
from services.adapters.settings import Settings
from services.adapters.telemetry import GatewayMetrics, inject_traceparent
from services.gateway.committer import (
    CommitConflict,
    CommitFailed,
    CommitUnavailable,
    CommitUncertain,
    GroupCommitter,
)
from services.gateway.forget import Forgetter
from services.gateway.queries import ProjectionReader, QueryBusy, pending_injections
from services.gateway.rpc import PARSE_ERROR, SERVER_ERROR, handle_rpc

log = logging.getLogger("reminders.gateway")

DECIDED_OPS = frozenset(command.op for command in DECIDED_COMMANDS)
QUERY_OPS = frozenset({StateQuery.op, PendingInjectionsQuery.op, Forget.op})
#: What an `unavailable` answer tells the caller to wait before retrying.
RETRY_AFTER_MS = 1000


def error_reply(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    """The wire form of a coded error."""
    return ErrorReply.model_validate(
        {"error": {"code": code, "message": message, "details": details}}
    ).to_wire()


@dataclass
class CachedSession:
    """A session's folded state and the stream sequence of its last event."""

    state: SessionState
    last_stream_seq: int


class SessionCache:
    """Bounded LRU of folded sessions."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, CachedSession] = OrderedDict()

    def get(self, session_id: str) -> CachedSession | None:
        """The cached entry, freshened in LRU order."""
        entry = self._entries.get(session_id)
        if entry is not None:
            self._entries.move_to_end(session_id)
        return entry

    def put(self, session_id: str, entry: CachedSession) -> None:
        """Remember an entry, evicting the least recently used beyond capacity."""
        if self._capacity == 0:
            return
        self._entries[session_id] = entry
        self._entries.move_to_end(session_id)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def drop(self, session_id: str) -> None:
        """Forget a session (after a conflict)."""
        self._entries.pop(session_id, None)


class RateLimiter:
    """At most `limit` commands per second per session, per gateway replica (SPEC §4.1)."""

    def __init__(self, limit: int, max_sessions: int = 100_000) -> None:
        self._limit = limit
        self._max_sessions = max_sessions
        self._windows: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after_ms(self, session_id: str, now: float) -> int:
        """0 when the command may go now (and counts it), else how long to wait."""
        window = self._windows.setdefault(session_id, deque())
        self._windows.move_to_end(session_id)
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= self._limit:
            return max(1, int((1.0 - (now - window[0])) * 1000))
        window.append(now)
        while len(self._windows) > self._max_sessions:
            self._windows.popitem(last=False)
        return 0


class SessionLocks:
    """One asyncio lock per session id, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Serialize commands of one session within this process."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


class CommandService:
    """Turns one request's bytes into a reply, appending the decided events durably."""

    def __init__(
        self,
        nc: Client,
        settings: Settings,
        committer: GroupCommitter,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self._nc = nc
        self._settings = settings
        self._committer = committer
        self._metrics = metrics
        self._cache = SessionCache(settings.cache_sessions)
        self._rate = RateLimiter(settings.rate_limit_per_second)
        self._locks = SessionLocks()
        self._reader = ProjectionReader(nc, settings)
        self._forgetter = Forgetter(nc, settings)
        self._last_seen: OrderedDict[str, float] = OrderedDict()

    def active_sessions(self, window_s: float = 300.0) -> int:
        """Sessions that sent a command within the window (the gauge of SPEC §10)."""
        horizon = time.monotonic() - window_s
        while self._last_seen and next(iter(self._last_seen.values())) < horizon:
            self._last_seen.popitem(last=False)
        return len(self._last_seen)

    async def handle_rpc(self, data: bytes) -> dict[str, Any] | None:
        """One JSON-RPC message (SPEC §8); None for a notification."""
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError:
            return {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": PARSE_ERROR, "message": "Parse error"},
            }
        try:
            return await handle_rpc(self.handle_value, raw)
        except Exception:  # the caller must get an answer whatever broke; logged, no body
            log.exception("rpc failed")
            if isinstance(raw, dict) and "id" not in raw:
                return None  # a notification: nobody waits for an answer
            return {
                "jsonrpc": "2.0",
                "id": raw.get("id") if isinstance(raw, dict) else None,
                "error": {
                    "code": SERVER_ERROR,
                    "message": "unavailable",
                    "data": {"code": "unavailable"},
                },
            }

    async def handle(self, op: str, data: bytes) -> dict[str, Any]:
        """Decide and commit one command; never raises."""
        started = time.perf_counter()
        try:
            reply = await self._handle(op, data)
        except Exception:  # the reply must go out whatever broke; the error is logged
            log.exception("command failed", extra={"op": op})
            reply = error_reply(
                ErrorCode.UNAVAILABLE,
                "the gateway could not complete the command",
                retry_after_ms=RETRY_AFTER_MS,
            )
        outcome = "ok" if reply.get("ok") else str(reply["error"]["code"])
        if self._metrics is not None:
            known = op in DECIDED_OPS or op in QUERY_OPS or op == "rpc"
            attributes = {"op": op if known else "other", "outcome": outcome}
            self._metrics.commands.add(1, attributes)
            self._metrics.latency.record(time.perf_counter() - started, attributes)
        return reply

    async def _handle(self, op: str, data: bytes) -> dict[str, Any]:
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError:
            return error_reply(ErrorCode.INVALID_REQUEST, "the request is not valid JSON")
        return await self.handle_value(op, raw)

    async def handle_value(self, op: str, raw: object) -> dict[str, Any]:
        """Serve one command or query given as a parsed JSON value."""
        if op not in DECIDED_OPS and op not in QUERY_OPS:
            return error_reply(ErrorCode.INVALID_REQUEST, f"unknown op: {op[:64]}", op=op[:64])
        try:
            command, warnings = parse_command(
                op,
                raw,
                max_body_bytes=self._settings.core.max_body_bytes,
                max_user_text_bytes=self._settings.core.max_user_text_bytes,
            )
        except ReminderError as exc:
            return ErrorReply(error=exc.to_body()).to_wire()
        if isinstance(command, StateQuery | PendingInjectionsQuery):
            return await self._query(command)
        if isinstance(command, Forget):
            async with self._locks.hold(command.session_id):
                reply = await self._forgetter.forget(command.session_id, command.request_id)
                self._cache.drop(command.session_id)
                return reply
        now = time.monotonic()
        self._last_seen[command.session_id] = now
        self._last_seen.move_to_end(command.session_id)
        wait_ms = self._rate.retry_after_ms(command.session_id, now)
        if wait_ms:
            return error_reply(
                ErrorCode.RATE_LIMITED,
                "too many commands for this session; retry later",
                retry_after_ms=wait_ms,
            )
        async with self._locks.hold(command.session_id):
            return await self._decide_and_commit(command, warnings)

    async def _query(self, query: StateQuery | PendingInjectionsQuery) -> dict[str, Any]:
        try:
            if isinstance(query, StateQuery):
                return await self._reader.state_reply(
                    query.session_id, query.min_seq or 0, query.timeout_ms
                )
            state, stale = await self._reader.session_state(query.session_id, 0, query.timeout_ms)
        except QueryBusy as busy:
            return error_reply(
                ErrorCode.RATE_LIMITED,
                "too many queries are waiting; retry later",
                retry_after_ms=busy.retry_after_ms,
            )
        return {"ok": True, **pending_injections(state), "stale": stale}

    async def close(self) -> None:
        """Stop the shared watch of the bucket."""
        await self._reader.watch.stop()

    async def _decide_and_commit(self, command: Command, warnings: list[Any]) -> dict[str, Any]:
        """Decide against the session and append, until stored or the deadline passes.

        Three failures, three answers. A wrong expected sequence (the session moved on) is a
        conflict: re-read and decide again, at most `conflict_retries` times. The stream being
        away — a leader election, no responders, "JetStream not available", a log read that
        timed out — says nothing about the session: retry with backoff until the command's
        deadline (`request_timeout_s`), then answer `unavailable` with `retry_after_ms`. A
        commit whose outcome is unknown (lost PubAck, timeout) may land even later, so from
        then on every re-read first looks for this command's id after the state it was
        decided on, and answers from the log if it is there.
        """
        context = fresh_context()
        session_id = command.session_id
        deadline = time.monotonic() + self._settings.request_timeout_s
        conflicts = 0
        waits = 0
        unsure_after: int | None = None  # this command may be stored after this stream seq
        while True:
            try:
                if unsure_after is None:
                    entry = self._cache.get(session_id) or await self._load(session_id)
                else:
                    entry, events = await self._read(session_id)
                    stored = _stored_reply(command, context.command_id, events, unsure_after)
                    if stored is not None:
                        return stored
            except (TimeoutError, NatsError, JetStreamApiError) as exc:
                pause = _backoff(waits, deadline)
                if pause is None:
                    return self._unavailable(command, exc, unsure_after is not None)
                waits += 1
                await asyncio.sleep(pause)
                continue
            # The session's recorded time never goes backwards (SPEC §12.4).
            timed_context = timed(context, entry.state)
            decision = decide(entry.state, command, timed_context, self._settings.core, warnings)
            if not decision.events:
                return decision.reply
            append = SessionAppend(
                session_id,
                entry.last_stream_seq,
                decision.events,
                inject_traceparent(),
                decision.encoded,
            )
            try:
                stream_seqs = await self._committer.commit(append)
            except CommitConflict:
                if self._metrics is not None:
                    self._metrics.conflicts.add(1)
                self._cache.drop(session_id)
                conflicts += 1
                if conflicts > self._settings.conflict_retries:
                    return error_reply(
                        ErrorCode.CONFLICT,
                        "the session kept changing; optimistic concurrency gave up",
                        retries=self._settings.conflict_retries,
                    )
                await asyncio.sleep(random.uniform(0, 0.005 * 2 ** (conflicts - 1)))
                continue
            except CommitUncertain as exc:
                self._cache.drop(session_id)
                first = unsure_after is None
                unsure_after = (
                    entry.last_stream_seq
                    if unsure_after is None
                    else min(unsure_after, entry.last_stream_seq)
                )
                if first:
                    continue  # a lost PubAck: look in the log at once
                pause = _backoff(waits, deadline)
                if pause is None:
                    return self._unavailable(command, exc, maybe_stored=True)
                waits += 1
                await asyncio.sleep(pause)
                continue
            except CommitUnavailable as exc:
                pause = _backoff(waits, deadline)
                if pause is None:
                    return self._unavailable(command, exc, unsure_after is not None)
                waits += 1
                await asyncio.sleep(pause)
                continue
            except CommitFailed as exc:
                log.error("batch refused", extra={"op": command.op, "error": str(exc)})
                return error_reply(ErrorCode.UNAVAILABLE, "the log refused the append")
            self._remember(entry, decision.events, stream_seqs)
            if self._metrics is not None:
                for event in decision.events:
                    self._metrics.events.add(1, {"kind": event.kind})
            return decision.reply

    def _unavailable(
        self, command: Command, exc: BaseException, maybe_stored: bool
    ) -> dict[str, Any]:
        """Past the deadline with the stream still away: tell the caller when to retry."""
        log.warning(
            "log unavailable past the command deadline",
            extra={"op": command.op, "error": f"{type(exc).__name__}: {str(exc)[:200]}"},
        )
        details: dict[str, Any] = {"retry_after_ms": RETRY_AFTER_MS}
        if maybe_stored:
            details["maybe_applied"] = True
        return error_reply(
            ErrorCode.UNAVAILABLE,
            "the event log is not available right now (e.g. a leader election); retry "
            "after retry_after_ms"
            + (" with the same request_id: it may yet be applied" if maybe_stored else ""),
            **details,
        )

    def _remember(
        self, entry: CachedSession, events: tuple[Event, ...], stream_seqs: list[int]
    ) -> None:
        state = fold_all(entry.state, list(zip(events, stream_seqs, strict=True)))
        self._cache.put(state.session_id, CachedSession(state, stream_seqs[-1]))

    async def _load(self, session_id: str) -> CachedSession:
        """Fold the session from its events in the log (subject-filtered reads only)."""
        entry, _ = await self._read(session_id)
        return entry

    async def _read(self, session_id: str) -> tuple[CachedSession, list[tuple[Event, int]]]:
        stored = await read_session(
            self._nc, self._settings.stream, session_id, timeout_s=self._settings.request_timeout_s
        )
        events = [(decode(item.envelope), item.stream_seq) for item in stored]
        entry = CachedSession(
            fold_all(SessionState(), events), stored[-1].stream_seq if stored else 0
        )
        self._cache.put(session_id, entry)
        return entry, events


def _stored_reply(
    command: Command, command_id: str, events: list[tuple[Event, int]], read_through: int
) -> dict[str, Any] | None:
    """After an uncertain commit: the reply, if this command's events did land.

    Other writers may have appended after them, so look at everything stored since the
    state the command was decided on, not only at the last event.
    """
    for event, stream_seq in reversed(events):
        if stream_seq <= read_through:
            break
        if event.command_id == command_id and event.reply is not None:
            return with_unstored(command, event.reply)
    return None


def _backoff(waits: int, deadline: float) -> float | None:
    """How long to wait before the next attempt (jittered, doubling from 25 ms to 500 ms),
    or None when that would pass the command's deadline."""
    pause: float = min(0.025 * 2.0**waits, 0.5) * random.uniform(0.5, 1.0)
    if time.monotonic() + pause >= deadline:
        return None
    return pause
