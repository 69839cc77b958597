"""Queries served from the projection (SPEC §4.10); `forget` (§4.11) is `forget.py`.

A query must see every command whose reply was sent before it arrived: read the session's
last stream sequence (one direct get; from the stream's leader on a replicated stream, and
only while that leader has heard from a quorum, `LeaderQuorum` — else the answer is
`stale: true` at once), then
wait — on the replica's one shared watch of the bucket (`ProjectionWatch` in
`services/adapters/projection.py`), not a poll and not a watcher per query — until the
projection has applied it (or `min_seq`), up to `timeout_ms`; past that, answer from the
projection with `stale: true`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from nats.aio.client import Client

from contracts.state import SessionState
from contracts.subjects import session_token
from services.adapters.leader_quorum import LeaderQuorum
from services.adapters.projection import BucketReader, Projected, TooManyWaiting
from services.adapters.session_read import READ_ATTEMPT_S, trusted_last_session_seq
from services.adapters.settings import Settings

DEFAULT_TIMEOUT_MS = 2000


def _caught_up(record: Projected, last_seq: int, min_seq: int) -> bool:
    if record.purged_through is not None:
        return last_seq <= record.purged_through and min_seq == 0
    return record.stream_seq >= last_seq and record.session_seq >= min_seq


async def _both(first: Awaitable[int], second: Awaitable[Projected]) -> tuple[int, Projected]:
    """Await both at once; if either fails, raise its error once both are done (so neither
    is left running with an error nobody reads)."""
    last_seq, record = await asyncio.gather(first, second, return_exceptions=True)
    if isinstance(last_seq, BaseException):
        raise last_seq
    if isinstance(record, BaseException):
        raise record
    return last_seq, record


class QueryBusy(Exception):
    """Too many queries wait already; the caller should retry after `retry_after_ms`."""

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__(retry_after_ms)
        self.retry_after_ms = retry_after_ms


class ProjectionReader:
    """Reads session states from the bucket, waiting on the shared watch for the projection
    to catch up."""

    def __init__(self, nc: Client, settings: Settings, quorum: LeaderQuorum | None = None) -> None:
        self._nc = nc
        self._settings = settings
        # The leader's answer is trusted only while it speaks for its cluster.
        self._quorum = quorum or LeaderQuorum(nc, settings.stream, settings.replicas)
        self._bucket = BucketReader(
            nc,
            settings.kv_bucket,
            max_waiting=settings.max_waiting_queries,
            # One session's flood may take a tenth of the places, never all of them.
            max_waiting_per_session=max(1, settings.max_waiting_queries // 10),
        )
        self.watch = self._bucket.watch
        # A replicated stream's direct gets may be answered by a replica still catching up
        # (after a heal, a restart), and a query that took its last seq from one would
        # answer `stale: false` below a write acked before it was asked. The value itself
        # may come from any replica: the query then waits on the bucket's watch, which the
        # leader feeds, until it covers that seq.
        self._last_seq = trusted_last_session_seq(settings.replicas)

    async def projected(
        self, session_id: str, min_seq: int = 0, timeout_ms: int | None = None
    ) -> tuple[Projected, bool]:
        """The projected value once it covers every stored event; and whether it is stale.

        Raises `QueryBusy` when the query would have to wait and every place is taken.
        """
        timeout_s = (DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000
        token = session_token(session_id)
        # Both reads at once: the order does not matter, since the value is only taken once
        # it covers the last sequence read after the query arrived.
        (last_seq, record), trusted = await self._quorum.read(
            self._read(session_id, token), READ_ATTEMPT_S
        )
        if not trusted:
            # A leader cut off from its cluster may name a last sequence the new leader has
            # written past: whatever the projection holds, it cannot be called current.
            return record, True

        def ready(record: Projected) -> bool:
            return _caught_up(record, last_seq, min_seq)

        if not ready(record) and timeout_s > 0:
            # Not held while waiting: a waiting query keeps no value (`BucketReader.wait`).
            del record
            record = await self._wait(token, ready, timeout_s)
        return record, not ready(record)

    async def _read(self, session_id: str, token: str) -> tuple[int, Projected]:
        """The session's last stream seq and its projected value, each attempt bounded by
        `READ_ATTEMPT_S` and tried again (another replica answers a direct get that a frozen
        one held) until the gateway's request timeout."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._settings.request_timeout_s - READ_ATTEMPT_S
        while True:
            try:
                return await _both(
                    self._last_seq(self._nc, self._settings.stream, session_id, READ_ATTEMPT_S),
                    self._bucket.get(token, READ_ATTEMPT_S),
                )
            except TimeoutError:
                if loop.time() >= give_up:
                    raise

    async def session_state(
        self, session_id: str, min_seq: int = 0, timeout_ms: int | None = None
    ) -> tuple[SessionState, bool]:
        """The projected state once it covers every stored event; and whether it is stale.

        Raises `QueryBusy` when the query would have to wait and every place is taken.
        """
        record, stale = await self.projected(session_id, min_seq, timeout_ms)
        return record.session_state() or SessionState(session_id=session_id), stale

    async def state_reply(
        self, session_id: str, min_seq: int = 0, timeout_ms: int | None = None
    ) -> dict[str, Any]:
        """The `state` reply (SPEC §4.10): `{ok, state, stale}`.

        A value the current projector wrote is the canonical JSON of exactly the state's
        `model_dump(mode="json")`, so it goes into the reply as it is stored (an
        `orjson.Fragment`), not through the model and back. Anything else (an empty key, a
        tombstone, a value of another shape) goes through the model as before.
        """
        record, stale = await self.projected(session_id, min_seq, timeout_ms)
        state: Any
        if record.is_state and record.current:
            state = orjson.Fragment(record.value)
        else:
            model = record.session_state() or SessionState(session_id=session_id)
            state = model.model_dump(mode="json")
        return {"ok": True, "state": state, "stale": stale}

    async def _wait(
        self,
        token: str,
        ready: Callable[[Projected], bool],
        timeout_s: float,
    ) -> Projected:
        try:
            return await self._bucket.wait(token, ready, timeout_s)
        except TooManyWaiting:
            raise QueryBusy(retry_after_ms=min(1000, int(timeout_s * 1000))) from None


def pending_injections(state: SessionState) -> dict[str, Any]:
    """The §4.10 camelCase shape of the queued reminders, in FIFO order."""
    rows = []
    for row in state.queued:
        spec = row.reminder
        rows.append(
            {
                "kind": "reminder",
                "id": spec.id,
                "reminderId": spec.id,
                "mode": row.mode,
                "position": row.position,
                "body": spec.body,
                "tags": list(spec.tags),
                "dedupeKey": spec.dedupe_key,
                "ttlTurns": spec.ttl_turns,
                "preserveOnCompact": spec.preserve_on_compact,
                "propagate": spec.propagate,
                "roleHint": spec.role_hint,
                "authority": spec.authority,
                "source": spec.source,
                "firedAtTurn": spec.fired_at_turn,
                "originatingAgentId": spec.originating_agent_id,
            }
        )
    return {"pendingCount": len(rows), "injections": rows}
