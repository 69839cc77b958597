"""Whether the stream's leader, as this connection's server sees it, still speaks for its
cluster: a read the ledger trusts because the leader answered it is trusted only then.

A leader cut off from its cluster keeps its leadership until it notices the lost quorum
(about 10 s in nats-server), and until then it answers `STREAM.MSG.GET` from a log the new
leader — elected on the other side after an election timeout of at least 4 s — has since
written past. Measured on a proxied 3-node cluster (`docs/reliability.md`): the isolated
leader answered the last message of a subject with what it had before the isolation while
the majority had already acknowledged two newer ones. Its `STREAM.INFO` tells it apart: for
each follower, `active` is the time since the leader last heard from it, and it grows from
the moment the routes are cut.

So before a leader's answer is trusted, a `STREAM.INFO` at most `MAX_AGE_S` old must show
the leader has heard from a quorum within `HEARD_WITHIN_S`. The two add up to well under
the shortest election timeout: a leader that passes could not have been replaced yet when
the read was made. One request serves every read within `MAX_AGE_S`; concurrent readers
share the one in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from nats.aio.client import Client

Read = TypeVar("Read")

#: A follower counts towards the quorum when the leader heard from it this recently. The
#: leader hears from each follower at least once per heartbeat (1 s) while all is well.
HEARD_WITHIN_S = 2.0
#: How long one `STREAM.INFO`'s answer is trusted for reads (from when it was asked).
MAX_AGE_S = 1.0


def heard_lately(peer: dict[str, Any]) -> bool:
    """Whether a follower of a `STREAM.INFO` answer is online and its leader heard from it
    within `HEARD_WITHIN_S` (`active` is nanoseconds since then).

    An `active` of 0 (or none) is a follower the leader has never heard from: nats-server
    reports 0 when it has no time for a peer, which is the case for a leader elected while
    that follower was cut off. Counted as heard, it let a leader cut off in turn pass for one
    in quorum, and answer reads, after the other two had elected a new leader and acked
    writes (`tests/faults/test_isolated_leader_reads.py`).
    """
    active_s = float(peer.get("active") or 0) / 1e9
    return not peer.get("offline") and 0 < active_s < HEARD_WITHIN_S


def leader_in_quorum(info: dict[str, Any], replicas: int) -> bool:
    """Whether a `STREAM.INFO` answer shows a leader that heard from a quorum of the
    stream's `replicas` (itself included) within `HEARD_WITHIN_S`."""
    cluster = info.get("cluster") or {}
    if "error" in info or not cluster.get("leader"):
        return False
    heard = sum(1 for peer in cluster.get("replicas") or [] if heard_lately(peer))
    return 1 + heard > replicas // 2


class LeaderQuorum:
    """Whether the stream's leader was in quorum a moment ago (see the module docstring);
    on a stream of one replica, always (its leader is the stream)."""

    def __init__(
        self, nc: Client, stream: str, replicas: int, clock: Callable[[], float] | None = None
    ) -> None:
        self._nc = nc
        self._stream = stream
        self._replicas = replicas
        self._clock = clock or time.monotonic
        self._asked_at = float("-inf")
        self._in_quorum = False
        self._asking: asyncio.Task[None] | None = None

    async def confirmed(self, timeout_s: float) -> bool:
        """True when the leader had a quorum within `MAX_AGE_S` (asking it at most once per
        that age, however many readers ask); False when it had not, or did not say in time."""
        if self._replicas <= 1:
            return True
        if self._clock() - self._asked_at <= MAX_AGE_S:
            return self._in_quorum
        if self._asking is None or self._asking.done():
            self._asking = asyncio.create_task(self._ask(timeout_s))
        try:
            await asyncio.wait_for(asyncio.shield(self._asking), timeout_s)
        except TimeoutError:
            return False
        return self._in_quorum and self._clock() - self._asked_at <= MAX_AGE_S

    async def read(self, read: Awaitable[Read], timeout_s: float) -> tuple[Read, bool]:
        """`read` (a leader's answer) and, asked at the same time, whether it may be trusted
        (`confirmed`); on one replica the read alone, with no second task on its path."""
        if self._replicas <= 1:
            return await read, True
        answer, trusted = await asyncio.gather(read, self.confirmed(timeout_s))
        return answer, trusted

    async def _ask(self, timeout_s: float) -> None:
        asked_at = self._clock()
        try:
            reply = await self._nc.request(
                f"$JS.API.STREAM.INFO.{self._stream}", b"", timeout=timeout_s
            )
            answer = orjson.loads(reply.data)
            in_quorum = isinstance(answer, dict) and leader_in_quorum(answer, self._replicas)
        except Exception:  # no answer is no confirmation; the reader says so to its caller
            in_quorum = False
        self._asked_at, self._in_quorum = asked_at, in_quorum
