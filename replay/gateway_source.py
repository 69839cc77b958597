"""Reading the log through the gateway, as a tenant's auditor does (SPEC §7.1, §10.1).

A tenant's auditor may not read the log or the bucket itself (no permission can limit a
direct get by sequence to one tenant), so it asks the gateway on its tenant's subjects:
`events` pages one session's stored events, each exactly as stored, and `sessions` pages the
tenant's session ids; `state` gives a session's projected state. The rows are the same
`StoredEvent`s a direct read gives (`replay.source.rows_from_nats`), so replay, `--verify`,
export, stats and verify-projection print the same bytes either way.

Session ids are given as the tenant's hosts know them (`s1`): the gateway scopes them to the
caller's tenant, whose subjects alone its credentials may use.
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import orjson
from nats.aio.client import Client

from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import session_token
from contracts.tenants import scoped_session_id, tenant_command_subject
from replay.errors import ReplayError
from replay.rebuild import Mismatch, project
from replay.source import check_schema
from services.adapters.record_codec import decode_record, encode_state

#: How long one page may take to come back.
PAGE_TIMEOUT_S = 10.0
#: How often a read the gateway refused as busy (`rate_limited`) is tried again.
BUSY_RETRIES = 50


class GatewaySource:
    """One tenant's sessions, read through the gateway's `events`, `sessions` and `state`."""

    def __init__(self, nc: Client, tenant: str) -> None:
        self._nc = nc
        self.tenant = tenant

    async def _ask(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """The gateway's reply to one read; a busy gateway is asked again after the wait it
        names, any other error is one `ReplayError` line."""
        subject = tenant_command_subject(self.tenant, op)
        for _ in range(BUSY_RETRIES):
            try:
                message = await self._nc.request(
                    subject, orjson.dumps(body), timeout=PAGE_TIMEOUT_S
                )
            except nats.errors.NoRespondersError:
                raise ReplayError(f"no gateway answers on {subject}") from None
            except nats.errors.TimeoutError:
                raise ReplayError(f"the gateway did not answer on {subject} in time") from None
            reply = orjson.loads(message.data)
            if not isinstance(reply, dict):
                raise ReplayError(f"the gateway's reply on {subject} is not an object")
            if reply.get("ok"):
                return reply
            error = reply.get("error") or {}
            if error.get("code") in ("rate_limited", "unavailable"):
                wait_ms = (error.get("details") or {}).get("retry_after_ms", 100)
                await asyncio.sleep(min(max(int(wait_ms), 10), 2000) / 1000)
                continue
            raise ReplayError(
                f"the gateway answered {error.get('code')} on {subject}: "
                f"{str(error.get('message'))[:200]}"
            )
        raise ReplayError(f"the gateway stayed busy on {subject}; try again later")

    async def rows(self, session_id: str) -> list[StoredEvent]:
        """One session's stored events in order, page after page (none: unknown)."""
        rows: list[StoredEvent] = []
        after = 0
        while True:
            reply = await self._ask("events", {"session_id": session_id, "after_stream_seq": after})
            for item in reply["events"]:
                envelope = item["event"] if isinstance(item["event"], dict) else {"schema": None}
                row = StoredEvent(envelope, int(item["stream_seq"]), str(item["subject"]))
                check_schema(envelope, f"stream_seq {row.stream_seq}")
                rows.append(row)
            next_after = reply.get("next_after_stream_seq")
            if next_after is None:
                return rows
            after = int(next_after)

    async def session_ids(self) -> list[str]:
        """The tenant's session ids (as its hosts know them), in the bucket's order."""
        seen: dict[str, None] = {}
        after = 0
        while True:
            reply = await self._ask("sessions", {"after": after})
            for session_id in reply["session_ids"]:
                seen.setdefault(str(session_id), None)
            next_after = reply.get("next_after")
            if next_after is None:
                return list(seen)
            after = int(next_after)

    async def all_rows(self) -> list[StoredEvent]:
        """Every event of the tenant's listed sessions, in stream order (as a whole-stream
        read scoped to the tenant gives them)."""
        rows = [
            row for session_id in await self.session_ids() for row in await self.rows(session_id)
        ]
        return sorted(rows, key=lambda row: row.stream_seq)

    async def projected_state(self, session_id: str) -> dict[str, Any]:
        """The session's projected state as the gateway answers `state` (once the projection
        covers every stored event), with the session named as stored (`@<tenant>/<id>`)."""
        reply = await self._ask("state", {"session_id": session_id})
        state: dict[str, Any] = reply["state"]
        if state.get("session_id"):
            state["session_id"] = scoped_session_id(self.tenant, str(state["session_id"]))
        return state


async def verify_through_gateway(
    source: GatewaySource, session_ids: list[str]
) -> tuple[int, list[Mismatch]]:
    """verify-projection through the gateway: each session's projected state (`state`)
    against the fold of its events up to that state's `stream_seq`, as `verify_projection`
    judges a direct read; returns how many were checked and the mismatches by token."""
    mismatches: list[Mismatch] = []
    for session_id in session_ids:
        rows = await source.rows(session_id)
        current = decode_record(orjson.dumps(await source.projected_state(session_id)))
        token = session_token(scoped_session_id(source.tenant, session_id))
        if not isinstance(current, SessionState) or current.stream_seq == 0:
            if rows:
                mismatches.append(Mismatch(token, f"{len(rows)} event(s) but no projection"))
            continue
        expected = project(None, [row for row in rows if row.stream_seq <= current.stream_seq])
        if not isinstance(expected, SessionState) or encode_state(expected) != encode_state(
            current
        ):
            reason = f"projection differs from a replay up to {current.stream_seq}"
            mismatches.append(Mismatch(token, reason))
    mismatches.sort(key=lambda mismatch: mismatch.token)
    return len(session_ids), mismatches
