"""The gateway's tenant check (SPEC §10.1): scope a command to its caller's tenant, bound it.

The server already let the caller publish only on its tenant's subjects; the gateway checks
again, from the subject alone (no I/O): the tenant must be `default` or configured, a
tenant's host may send host commands only, and its session ids are namespaced to it
(`@<tenant>/<id>`), so a foreign session cannot be addressed at all and an unknown one is
all a prober ever sees. A `default` host may not name a namespaced id. Then the tenant's
bounds: commands per second, live sessions and queries in flight (per gateway replica),
body bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from contracts.commands import (
    Command,
    EventsQuery,
    Forget,
    Handoff,
    Inherit,
    PendingInjectionsQuery,
    SessionsQuery,
    StateQuery,
)
from contracts.errors import ErrorCode
from contracts.replies import ErrorReply
from contracts.subjects import EVALUATE_OP
from contracts.tenants import (
    DEFAULT_TENANT,
    is_reserved_session_id,
    scoped_session_id,
    split_session_id,
)
from services.adapters.tenants_config import TenantBounds, TenantsFile

SERVICE_OPS = frozenset({Inherit.op, EVALUATE_OP, Forget.op})
"""Ops only fleet services and operators send (the server denies them to hosts)."""
QUERIES = (StateQuery, PendingInjectionsQuery, EventsQuery, SessionsQuery)
"""The read-only queries: counted against the tenant's queries in flight."""
"""Ops only fleet services and operators send (the server denies them to hosts)."""
LIVE_WINDOW_S = 300.0
"""A session is live while it sent a command within this window."""
QUERY_RETRY_AFTER_MS = 100
"""What a query refused for its tenant's queries in flight is told to wait."""


def _error(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    return ErrorReply.model_validate(
        {"error": {"code": code, "message": message, "details": details}}
    ).to_wire()


class TenantRate:
    """A token bucket per tenant: `limit` commands per second, bursts of `limit`."""

    __slots__ = ("_at", "_limit", "_tokens")

    def __init__(self, limit: int, now: float) -> None:
        self._limit = float(limit)
        self._tokens = float(limit)
        self._at = now

    def retry_after_ms(self, now: float) -> int:
        """0 when a command may go now (and takes its token), else how long to wait."""
        self._tokens = min(self._limit, self._tokens + (now - self._at) * self._limit)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0
        return max(1, int((1.0 - self._tokens) / self._limit * 1000))


class Tenancy:
    """Scopes and bounds commands per tenant; all of it in memory, per gateway replica."""

    def __init__(self, tenants: TenantsFile, max_body_bytes: int) -> None:
        self._tenants = tenants
        self._max_body_bytes = max_body_bytes
        self._bounds: dict[str, TenantBounds] = {}
        self._rates: dict[str, TenantRate] = {}
        self._live: dict[str, OrderedDict[str, float]] = {}
        self._queries: dict[str, int] = {}

    def _bounds_of(self, tenant: str) -> TenantBounds:
        bounds = self._bounds.get(tenant)
        if bounds is None:
            bounds = self._bounds[tenant] = self._tenants.bounds(tenant)
        return bounds

    def refuse_caller(self, tenant: str, op: str) -> dict[str, Any] | None:
        """The reply refusing a caller before its command is parsed, or None to go on: an
        unknown tenant, or a tenant's host sending a service's op (the same answer as an
        op that does not exist, so nothing is learned)."""
        if tenant == DEFAULT_TENANT:
            return None
        if not self._tenants.knows(tenant) or op in SERVICE_OPS:
            return _error(ErrorCode.INVALID_REQUEST, f"unknown op: {op[:64]}", op=op[:64])
        return None

    def max_body_bytes(self, tenant: str) -> int:
        """The body bound of the tenant's commands (never above the deployment's)."""
        own = self._bounds_of(tenant).max_body_bytes
        return self._max_body_bytes if own is None else min(own, self._max_body_bytes)

    def scope(self, tenant: str, command: Command) -> Command | dict[str, Any]:
        """The command on the tenant's sessions, or the reply refusing it."""
        if isinstance(command, SessionsQuery):
            return command  # names no session: the listing is of the caller's tenant
        if tenant == DEFAULT_TENANT:
            if command.op in SERVICE_OPS:
                return command  # services carry namespaced ids; the server lets only them
            named = [command.session_id]
            if isinstance(command, Handoff):
                named.append(command.child_session_id)
            if any(is_reserved_session_id(session_id) for session_id in named):
                return _error(
                    ErrorCode.INVALID_REQUEST,
                    "session ids of the form @<tenant>/... are reserved",
                    field="session_id",
                )
            return command
        update = {"session_id": scoped_session_id(tenant, command.session_id)}
        if isinstance(command, Handoff):
            update["child_session_id"] = scoped_session_id(tenant, command.child_session_id)
        return command.model_copy(update=update)

    def admit(self, tenant: str, command: Command, now: float) -> dict[str, Any] | None:
        """The reply refusing a command past the tenant's bounds, or None (then `done` must
        follow once it is served): a query counts against the tenant's queries in flight, a
        decided command against its rate and live sessions, `forget` against nothing."""
        if isinstance(command, QUERIES):
            return self._admit_query(tenant)
        if isinstance(command, Forget):
            return None
        return self._admit_command(tenant, command.session_id, now)

    def done(self, tenant: str, command: Command) -> None:
        """A command `admit` let through was served (a query leaves the tenant's in-flight)."""
        if isinstance(command, QUERIES) and tenant in self._queries:
            self._queries[tenant] -= 1

    def _admit_query(self, tenant: str) -> dict[str, Any] | None:
        limit = self._bounds_of(tenant).queries_in_flight
        if limit is None:
            return None
        in_flight = self._queries.get(tenant, 0)
        if in_flight >= limit:
            return _error(
                ErrorCode.RATE_LIMITED,
                "too many queries of this tenant are waiting; retry later",
                retry_after_ms=QUERY_RETRY_AFTER_MS,
            )
        self._queries[tenant] = in_flight + 1
        return None

    def _admit_command(self, tenant: str, session_id: str, now: float) -> dict[str, Any] | None:
        bounds = self._bounds_of(tenant)
        if bounds.commands_per_second is not None:
            rate = self._rates.get(tenant)
            if rate is None:
                rate = self._rates[tenant] = TenantRate(bounds.commands_per_second, now)
            wait_ms = rate.retry_after_ms(now)
            if wait_ms:
                return _error(
                    ErrorCode.RATE_LIMITED,
                    "too many commands for this tenant; retry later",
                    retry_after_ms=wait_ms,
                )
        if bounds.live_sessions is not None:
            live = self._live.setdefault(tenant, OrderedDict())
            horizon = now - LIVE_WINDOW_S
            while live and next(iter(live.values())) < horizon:
                live.popitem(last=False)
            if session_id not in live and len(live) >= bounds.live_sessions:
                return _error(
                    ErrorCode.TOO_MANY,
                    "this tenant has too many live sessions",
                    limit=bounds.live_sessions,
                )
            live[session_id] = now
            live.move_to_end(session_id)
        return None


def unscope_reply(tenant: str, reply: dict[str, Any]) -> dict[str, Any]:
    """A reply as the tenant's host knows its sessions: `@<tenant>/s1` is `s1` again."""
    if tenant == DEFAULT_TENANT:
        return reply
    state = reply.get("state")
    if isinstance(state, orjson.Fragment):
        # The stored canonical bytes (orjson writes a fragment out as it is).
        reply["state"] = orjson.Fragment(_unscope_bytes(tenant, orjson.dumps(state)))
    elif isinstance(state, dict) and isinstance(state.get("session_id"), str):
        state["session_id"] = split_session_id(state["session_id"])[1]
    return reply


def _unscope_bytes(tenant: str, data: bytes) -> bytes:
    needle = b'"session_id":"@' + tenant.encode("ascii") + b"/"
    return data.replace(needle, b'"session_id":"')
