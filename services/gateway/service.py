"""The gateway's front: parse, route, rate-limit, then the command path (`command.py`).

One in-flight command per session (an asyncio lock per session id) lets group commit put
many sessions in one batch without two commands of one session racing each other. The
session cache is optimistic: a stale entry only costs a conflict, after which the session is
re-read from the log and the command decided again (bounded, with jittered backoff).
`NatsCommandPorts` wires the command path to the cache, the log and group commit.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import orjson
from nats.aio.client import Client
from nats.errors import Error as NatsError

from contracts.commands import (
    DECIDED_COMMANDS,
    Command,
    EventsQuery,
    Forget,
    PendingInjectionsQuery,
    SessionsQuery,
    StateQuery,
    parse_command,
)
from contracts.decode import decode
from contracts.errors import ErrorCode, ReminderError
from contracts.events import Event
from contracts.replies import ErrorReply
from contracts.session_index import IndexBuilder
from contracts.state import SessionState
from contracts.tenants import DEFAULT_TENANT
from core import CommandContext, Decision, fold_all
from services.adapters import stages
from services.adapters.append import SessionAppend
from services.adapters.ids import fresh_context
from services.adapters.jetstream import JetStreamApiError
from services.adapters.leader_quorum import LeaderQuorum
from services.adapters.session_read import (
    READ_ATTEMPT_S,
    NotYetStored,
    RawStored,
    session_messages,
    session_tail,
    stored_reply_at,
    trusted_last_session_seq,
)
from services.adapters.settings import Settings
from services.adapters.telemetry import GatewayMetrics, inject_traceparent
from services.gateway.audit_reads import AuditReads, too_busy_reply
from services.gateway.command import CachedSession, Deadline, LogUnavailable, run_command
from services.gateway.committer import GroupCommitter
from services.gateway.forget import Forgetter
from services.gateway.pacing import RateLimiter, SessionLocks
from services.gateway.queries import ProjectionReader, QueryBusy, pending_injections
from services.gateway.replies import RETRY_AFTER_MS, error_reply, unavailable_reply
from services.gateway.rpc import handle_rpc_bytes
from services.gateway.session_cache import ReplicaBehind, SessionCache, ShorterLog, caught_up
from services.gateway.tenancy import Tenancy, unscope_reply

log = logging.getLogger("reminders.gateway")

Read = TypeVar("Read")

DECIDED_OPS = frozenset(command.op for command in DECIDED_COMMANDS)
QUERY_OPS = frozenset(
    {StateQuery.op, PendingInjectionsQuery.op, EventsQuery.op, SessionsQuery.op, Forget.op}
)
#: Of a command's `request_timeout_s`, the last part is kept to encode and send the reply,
#: so that an answer never leaves after the deadline the caller was promised.
REPLY_MARGIN_S = 0.1
#: Reads of a cached session's tail before it is read whole, while each comes from a
#: replica behind the log (`ReplicaBehind`), and the pause between two.
CATCH_UP_ATTEMPTS = 3
CATCH_UP_PAUSE_S = 0.05


#: The per-command check of the caller (`CommandPorts.check_caller`).
CallerCheck = Callable[[Command, SessionState], dict[str, Any] | None]


async def _from_log(read: Callable[[], Awaitable[Read]], timeout_s: float) -> Read:
    """A read of the log bounded by `timeout_s`, its failures (no answer in time, no
    responders, an error status) as `LogUnavailable`. `read` makes the awaitable only once
    there is time left for it: one made and never awaited is a warning on stderr."""
    if timeout_s <= 0:
        raise LogUnavailable("no time left")
    try:
        return await asyncio.wait_for(read(), timeout_s)
    except (TimeoutError, NatsError, JetStreamApiError) as exc:
        raise LogUnavailable(f"{type(exc).__name__}: {exc}") from exc


class NatsCommandPorts:
    """The command path's ports on NATS: the session cache, log reads, group commit."""

    def __init__(
        self,
        nc: Client,
        settings: Settings,
        committer: GroupCommitter,
        metrics: GatewayMetrics | None = None,
        caller_check: CallerCheck | None = None,
    ) -> None:
        self._nc = nc
        self._settings = settings
        self._committer = committer
        self._metrics = metrics
        self._caller_check = caller_check
        self.cache = SessionCache(settings.cache_sessions, settings.gateway_cache_bytes)
        self._last_seq = trusted_last_session_seq(settings.replicas)
        self.quorum = LeaderQuorum(nc, settings.stream, settings.replicas)
        self.core = settings.core
        self.conflict_retries = settings.conflict_retries

    def clock(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Wait between attempts."""
        await asyncio.sleep(seconds)

    def jitter(self) -> float:
        """Uniform in [0, 1)."""
        return random.random()

    def new_context(self) -> CommandContext:
        """Fresh ids and the current time."""
        return fresh_context()

    async def load(self, session_id: str, timeout_s: float) -> CachedSession:
        """The cached session, or the session folded from the log."""
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        cached = self.cache.get(session_id)
        if cached is not None:
            if profile is not None:
                profile.add("session_cached", since)
                profile.count("cache_hits")
            return cached
        entry, _ = await self.read(session_id, timeout_s, None)
        return entry

    async def stored_reply(
        self, session_id: str, session_seq: int, timeout_s: float
    ) -> dict[str, Any] | None:
        """The reply on the session's event at `session_seq`, walked back to from its last."""
        attempt_s = min(timeout_s, self._settings.request_timeout_s, READ_ATTEMPT_S)
        stream = self._settings.stream
        try:
            return await _from_log(
                lambda: stored_reply_at(self._nc, stream, session_id, session_seq, attempt_s),
                timeout_s,
            )
        except NotYetStored as exc:  # a replica behind answered: the next attempt retries
            raise LogUnavailable(str(exc)) from exc

    async def last_stream_seq(self, session_id: str, timeout_s: float) -> int:
        """The stream seq of the session's last event: a direct get of the last message on
        its subjects, or on a replicated stream the leader's answer (a direct get may be
        served by a replica still catching up, the very read this check must not trust),
        taken only while that leader has heard from a quorum (`LeaderQuorum`); one attempt
        (`READ_ATTEMPT_S`): the command path tries again."""
        attempt_s = min(timeout_s, self._settings.request_timeout_s, READ_ATTEMPT_S)
        seq, trusted = await _from_log(
            lambda: self.quorum.read(
                self._last_seq(self._nc, self._settings.stream, session_id, attempt_s), attempt_s
            ),
            attempt_s,
        )
        if not trusted:
            # A leader cut off from its cluster answers from a log others may have written past.
            raise LogUnavailable("the stream's leader has not heard from a quorum lately")
        return seq

    async def read(
        self, session_id: str, timeout_s: float, events_after: int | None
    ) -> tuple[CachedSession, list[tuple[Event, int]]]:
        """Fold the session from its events in the log (and cache it), with the events stored
        after stream seq `events_after` (none for None); each direct get is one attempt
        (`READ_ATTEMPT_S`), after which the command path tries again."""
        attempt_s = min(timeout_s, self._settings.request_timeout_s, READ_ATTEMPT_S)
        behind = self.cache.behind(session_id)
        if behind is not None:
            caught = await self._catch_up(session_id, behind, timeout_s, events_after)
            if caught is not None:
                return caught
        self._count_read("whole")
        messages, _ = await _from_log(
            lambda: session_messages(
                self._nc, self._settings.stream, session_id, timeout_s=attempt_s
            ),
            # The whole read (a long session takes several batches) within the deadline.
            timeout_s,
        )
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        last = messages[-1].stream_seq if messages else 0
        kept: list[tuple[Event, int]] = []
        builder = IndexBuilder()
        state = fold_all(SessionState(), _decoded(messages, events_after, kept, builder))
        entry = CachedSession(state, last, builder.index())
        self.cache.put(session_id, entry)
        if profile is not None:
            # The read's messages and its wait are not in it: only decoding and folding.
            profile.add("session_read", since)
            profile.count("session_reads")
        return entry, kept

    async def _catch_up(
        self, session_id: str, base: CachedSession, timeout_s: float, events_after: int | None
    ) -> tuple[CachedSession, list[tuple[Event, int]]] | None:
        """The cached entry behind the log, with what follows it in the log folded on
        (`caught_up`); None when the session must be read whole. A tail from a replica behind
        the log (`ReplicaBehind`) is read again, up to `CATCH_UP_ATTEMPTS` reads; a log
        shorter than what was seen (`ShorterLog`) is read whole only while the leader is in
        quorum (a forgotten session), else `LogUnavailable` (a leader cut off)."""
        after = (
            base.last_stream_seq
            if events_after is None
            else min(base.last_stream_seq, events_after)
        )
        started = time.monotonic()
        for attempt in range(1, CATCH_UP_ATTEMPTS + 1):
            left = timeout_s - (time.monotonic() - started)
            try:
                caught = await self._catch_up_once(session_id, base, after, left, events_after)
            except ReplicaBehind:
                self._count_read("replica_behind")
                if attempt < CATCH_UP_ATTEMPTS:
                    await asyncio.sleep(min(CATCH_UP_PAUSE_S, max(0.0, left)))
                continue
            except ShorterLog as exc:
                attempt_s = min(left, self._settings.request_timeout_s, READ_ATTEMPT_S)
                if not await self.quorum.confirmed(max(0.0, attempt_s)):
                    # A leader cut off from its cluster counted from its old log: a whole
                    # read now would fold a session behind what this gateway already saw.
                    self._count_read("leader_behind")
                    raise LogUnavailable(f"the leader is not in quorum: {exc}") from exc
                caught = None  # a forgotten session: read whole
            self._count_read("caught_up" if caught is not None else "tail_refused")
            return caught
        return None

    async def _catch_up_once(
        self,
        session_id: str,
        base: CachedSession,
        after: int,
        timeout_s: float,
        events_after: int | None,
    ) -> tuple[CachedSession, list[tuple[Event, int]]] | None:
        """One read of the log after stream seq `after`, folded onto `base` (`caught_up`)."""
        attempt_s = min(timeout_s, self._settings.request_timeout_s, READ_ATTEMPT_S)
        profile = stages.PROFILE
        tail = await _from_log(
            lambda: session_tail(self._nc, self._settings.stream, session_id, after, attempt_s),
            timeout_s,
        )
        if tail is None:
            # The server answered the count with an error: in a cluster, no leader (of the
            # stream or of the cluster's metadata) just now. A whole read would be served by
            # replicas, unchecked against any count, and hold the session's whole history
            # at once (the soak's gateway kept the memory of those reads): wait instead.
            self._count_read("no_count")
            raise LogUnavailable("the stream will not count the session's messages just now")
        since = 0.0 if profile is None else profile.now()
        try:
            caught = caught_up(base, tail[0], tail[1], events_after)
        finally:
            if profile is not None:
                profile.add("session_caught_up", since)
                profile.count("session_catch_ups")
        if caught is not None:
            entry, _ = caught
            self.cache.put(session_id, entry, entry.state.session_seq - base.state.session_seq)
        return caught

    def _count_read(self, how: str) -> None:
        if self._metrics is not None:
            self._metrics.session_reads.add(1, {"how": how})

    async def commit(self, append: SessionAppend, timeout_s: float) -> list[int]:
        """Group-commit the append, carrying the command's trace context."""
        traced = replace(append, headers=inject_traceparent())
        return await self._committer.commit(traced, timeout_s)

    def check_caller(self, command: Command, state: SessionState) -> dict[str, Any] | None:
        """The configured per-command check of the caller; none lets every command through."""
        return None if self._caller_check is None else self._caller_check(command, state)

    def remember(self, entry: CachedSession, decision: Decision, seqs: list[int]) -> None:
        """Cache the state after the decision's stored events and count them."""
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        # The decision folded its events as it made them: no second fold.
        state = decision.state_after(entry.state, seqs[-1])
        index = None if entry.index is None else entry.index.after(seqs[0], len(seqs))
        events = decision.events
        self.cache.put(state.session_id, CachedSession(state, seqs[-1], index), len(events))
        if self._metrics is not None:
            for event in events:
                self._metrics.events.add(1, {"kind": event.kind})
        if profile is not None:
            profile.add("fold", since)

    def forget_cached(self, session_id: str, conflict: bool) -> None:
        """Mark the cached session behind the log (the next read catches it up); count a
        conflict."""
        self.cache.mark_behind(session_id)
        if conflict and self._metrics is not None:
            self._metrics.conflicts.add(1)


def _decoded(
    messages: list[RawStored],
    events_after: int | None,
    kept: list[tuple[Event, int]],
    builder: IndexBuilder | None = None,
) -> Iterator[tuple[Event, int]]:
    """Each stored message decoded, in order, for one fold; `kept` gets those after
    `events_after`, `builder` each one's command id and stream seq (the session's index for
    its next append). A long session is folded one event at a time, each message and event
    let go once folded: its decoded history all at once is many times its stored bytes,
    which a gateway would otherwise hold whenever it reads a session it has not cached."""
    messages.reverse()
    while messages:
        raw = messages.pop()
        event = decode(raw.data)
        if events_after is not None and raw.stream_seq > events_after:
            kept.append((event, raw.stream_seq))
        if builder is not None:
            builder.add(event.command_id, raw.stream_seq)
        yield event, raw.stream_seq


#: The window of the active-sessions gauge (seconds).
ACTIVE_WINDOW_S = 300.0


class CommandService:
    """Turns one request into a reply: queries, `forget`, and commands (`run_command`)."""

    def __init__(
        self,
        nc: Client,
        settings: Settings,
        committer: GroupCommitter,
        metrics: GatewayMetrics | None = None,
        caller_check: CallerCheck | None = None,
    ) -> None:
        self._settings = settings
        self._committer = committer
        self._metrics = metrics
        self._ports = NatsCommandPorts(nc, settings, committer, metrics, caller_check)
        self._rate = RateLimiter(settings.rate_limit_per_second)
        self._locks = SessionLocks()
        self._reader = ProjectionReader(nc, settings, self._ports.quorum)
        self._forgetter = Forgetter(nc, settings)
        self._audit = AuditReads(
            nc, settings.stream, settings.kv_bucket, settings.core.max_payload_bytes
        )
        # Audit reads hold up to a page each: a bound of their own, a tenth of the waiting
        # queries' (each tenant's are in its `queries_in_flight` as well).
        self._audit_slots = max(1, settings.max_waiting_queries // 10)
        self._audit_in_flight = 0
        self._last_seen: OrderedDict[str, float] = OrderedDict()
        # Tenants (SPEC §10.1): scope and bound each command by its caller's tenant.
        self._tenancy = Tenancy(settings.tenants(), settings.core.max_body_bytes)

    def active_sessions(self, window_s: float = ACTIVE_WINDOW_S) -> int:
        """Sessions that sent a command within the window (the gauge of SPEC §10)."""
        self._forget_inactive(time.monotonic() - window_s)
        return len(self._last_seen)

    def cached_bytes(self) -> int:
        """Encoded bytes of the session states this gateway caches (against its bound)."""
        return self._ports.cache.cached_bytes

    def cache_evictions(self) -> int:
        """Sessions this gateway's cache evicted beyond its bounds so far."""
        return self._ports.cache.evictions

    def _seen(self, session_id: str, now: float) -> None:
        """Note a session's command; forget those quiet for longer than the gauge's window
        here too, since nothing else trims them while no one reads the gauge."""
        self._last_seen[session_id] = now
        self._last_seen.move_to_end(session_id)
        self._forget_inactive(now - ACTIVE_WINDOW_S)

    def _forget_inactive(self, horizon: float) -> None:
        while self._last_seen and next(iter(self._last_seen.values())) < horizon:
            self._last_seen.popitem(last=False)

    async def handle_rpc(self, data: bytes, tenant: str = DEFAULT_TENANT) -> dict[str, Any] | None:
        """One JSON-RPC message (SPEC §8) of a caller of `tenant`; None for a notification."""
        return await handle_rpc_bytes(partial(self.handle_value, tenant=tenant), data)

    async def handle(self, op: str, data: bytes, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
        """Serve one command or query as received on `reminders.v1.<op>` (or a tenant's
        command subject); never raises."""
        started = time.perf_counter()
        try:
            profile = stages.PROFILE
            since = 0.0 if profile is None else profile.now()
            raw = orjson.loads(data)
            if profile is not None:
                profile.add("decode_validate", since)
            reply = await self.handle_value(op, raw, tenant)
            since = 0.0 if profile is None else profile.now()
        except orjson.JSONDecodeError:
            reply = error_reply(ErrorCode.INVALID_REQUEST, "the request is not valid JSON")
            profile, since = None, 0.0
        except Exception:  # the reply must go out whatever broke; the error is logged
            log.exception("command failed", extra={"op": op})
            reply = error_reply(
                ErrorCode.UNAVAILABLE,
                "the gateway could not complete the command",
                retry_after_ms=RETRY_AFTER_MS,
            )
            profile, since = None, 0.0
        outcome = "ok" if reply.get("ok") else str(reply["error"]["code"])
        if self._metrics is not None:
            known = op in DECIDED_OPS or op in QUERY_OPS or op == "rpc"
            attributes = {"op": op if known else "other", "outcome": outcome}
            self._metrics.commands.add(1, attributes)
            self._metrics.latency.record(time.perf_counter() - started, attributes)
        if profile is not None:
            profile.add("reply", since)
        return reply

    async def handle_value(
        self, op: str, raw: object, tenant: str = DEFAULT_TENANT
    ) -> dict[str, Any]:
        """Serve one command or query given as a parsed JSON value, for a caller of `tenant`
        (the tenant of the subject it came on)."""
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        received = time.monotonic()
        if op not in DECIDED_OPS and op not in QUERY_OPS:
            return error_reply(ErrorCode.INVALID_REQUEST, f"unknown op: {op[:64]}", op=op[:64])
        # --- tenants (SPEC §10.1): the caller check, then the command scoped to its tenant.
        refused = self._tenancy.refuse_caller(tenant, op)
        if refused is not None:
            return refused
        try:
            parsed, warnings = parse_command(
                op,
                raw,
                max_body_bytes=self._tenancy.max_body_bytes(tenant),
                max_user_text_bytes=self._settings.core.max_user_text_bytes,
            )
        except ReminderError as exc:
            return ErrorReply(error=exc.to_body()).to_wire()
        scoped = self._tenancy.scope(tenant, parsed)
        if isinstance(scoped, dict):
            return scoped
        bounded = self._tenancy.admit(tenant, scoped, time.monotonic())
        if bounded is not None:
            return bounded
        if profile is not None:
            profile.add("decode_validate", since)
        try:
            if isinstance(scoped, EventsQuery | SessionsQuery):
                return await self._audit_read(tenant, scoped)
            return unscope_reply(tenant, await self._serve(scoped, warnings, received))
        finally:
            self._tenancy.done(tenant, scoped)
        # --- end tenants

    async def _audit_read(self, tenant: str, query: EventsQuery | SessionsQuery) -> dict[str, Any]:
        """An auditor's read of the log or the listing of its tenant's sessions (read-only;
        the events exactly as stored, so not renamed for the tenant)."""
        if self._audit_in_flight >= self._audit_slots:
            return too_busy_reply(RETRY_AFTER_MS)
        self._audit_in_flight += 1
        try:
            if isinstance(query, SessionsQuery):
                return await self._audit.sessions(tenant, query.after)
            return await self._audit.events(
                query.session_id, query.after_stream_seq, query.from_session_seq
            )
        finally:
            self._audit_in_flight -= 1

    async def _serve(
        self, command: Command, warnings: list[Any], received: float
    ) -> dict[str, Any]:
        """Serve one parsed command of any tenant (its session ids already scoped)."""
        if isinstance(command, StateQuery | PendingInjectionsQuery):
            return await self._query(command)
        if isinstance(command, Forget):
            async with self._locks.hold(command.session_id):
                reply = await self._forgetter.forget(command.session_id, command.request_id)
                self._ports.cache.drop(command.session_id)
                return reply
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        now = time.monotonic()
        self._seen(command.session_id, now)
        wait_ms = self._rate.retry_after_ms(command.session_id, now)
        if wait_ms:
            return error_reply(
                ErrorCode.RATE_LIMITED,
                "too many commands for this session; retry later",
                retry_after_ms=wait_ms,
            )
        deadline = Deadline(
            received + self._settings.request_timeout_s - REPLY_MARGIN_S, self._ports
        )
        if profile is not None:
            profile.add("decode_validate", since)
        try:
            async with self._locks.hold(command.session_id, max(deadline.left(), 0.0)):
                return await run_command(command, warnings, self._ports, deadline)
        except TimeoutError:  # from the lock only: the command path answers its own
            return unavailable_reply(maybe_applied=False)

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
        except (TimeoutError, NatsError, JetStreamApiError) as exc:
            # The stream or the bucket did not answer within the query's reads (a leader
            # election, a paused node): expected while the cluster heals, so no traceback.
            log.warning(
                "log unavailable for a query",
                extra={"op": query.op, "error": f"{type(exc).__name__}: {exc}"},
            )
            return unavailable_reply(maybe_applied=False)
        return {"ok": True, **pending_injections(state), "stale": stale}

    async def close(self) -> None:
        """Stop the shared watch of the bucket."""
        await self._reader.watch.stop()
