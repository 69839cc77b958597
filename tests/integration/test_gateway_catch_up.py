"""A gateway whose cached session fell behind the log (another replica appended) catches
it up from the events after it — it does not read the session's whole history again — and
ends with exactly the state a whole read folds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from contracts import session_index
from contracts.decode import decode
from contracts.state import SessionState
from contracts.subjects import session_subject_filter
from core import fold_all
from services.adapters import session_read
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.gateway import service as gateway_service
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService

SESSION = "behind"


async def inject(replica: CommandService, n: int) -> dict[str, Any]:
    """The n-th inject of the session, with its own request_id, through `replica`."""
    payload = {"session_id": SESSION, "request_id": f"r{n}", "reminder": {"body": f"n{n}"}}
    return await replica.handle("inject", orjson.dumps(payload))


def count_whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sessions the gateway reads whole from now on (`session_messages`), in order."""
    whole_reads: list[str] = []
    original = gateway_service.session_messages

    async def counted(nc: Client, stream: str, session_id: str, **kw: Any) -> Any:
        whole_reads.append(session_id)
        return await original(nc, stream, session_id, **kw)

    monkeypatch.setattr(gateway_service, "session_messages", counted)
    return whole_reads


@asynccontextmanager
async def replicas(
    nc: Client, settings: Settings, count: int
) -> AsyncIterator[list[CommandService]]:
    """`count` gateway command services on one connection, their committers running."""
    committers = [GroupCommitter(nc) for _ in range(count)]
    for committer in committers:
        committer.start()
    try:
        yield [CommandService(nc, settings, c) for c in committers]
    finally:
        for committer in committers:
            await committer.stop()


async def assert_cached_as_folded(nc: Client, settings: Settings, replica: CommandService) -> None:
    """The replica's cached session is exactly what a whole read of the log folds."""
    rows = await read_session(nc, settings.stream, SESSION, timeout_s=5)
    folded = fold_all(SessionState(), [(decode(r.envelope), r.stream_seq) for r in rows])
    cached = replica._ports.cache.get(SESSION)
    assert cached is not None and cached.state == folded
    assert cached.last_stream_seq == rows[-1].stream_seq


async def behind_after_five(replica: CommandService) -> None:
    """Five injects through `replica`, then its cached session marked behind the log."""
    for n in range(5):
        assert (await inject(replica, n))["ok"]
    replica._ports.cache.mark_behind(SESSION)


def assert_unavailable_nothing_sent(reply: dict[str, Any]) -> None:
    """`unavailable` with `retry_after_ms`, and nothing sent (no `maybe_applied`)."""
    assert reply["ok"] is False and reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"]["retry_after_ms"] > 0
    assert "maybe_applied" not in reply["error"]["details"]


async def test_a_replica_behind_the_log_catches_up_from_its_cached_state(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with replicas(nc, provisioned, 2) as (a, b):
        for n in range(20):  # B reads the session once and caches it as it writes
            assert (await inject(b, n))["ok"]
        for n in range(20, 25):  # A appends behind B's back
            assert (await inject(a, n))["ok"]
        whole_reads = count_whole_reads(monkeypatch)
        reply = await inject(b, 25)  # conflicts on B's stale cache, then catches up
        assert reply["ok"] and reply["session_seq"] == 26
        assert whole_reads == []
    await assert_cached_as_folded(nc, provisioned, b)


async def test_a_tail_from_a_replica_behind_is_read_again_not_the_whole_session(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with replicas(nc, provisioned, 2) as (a, b):
        for n in range(10):
            assert (await inject(b, n))["ok"]
        for n in range(10, 13):  # A appends behind B's back
            assert (await inject(a, n))["ok"]
        whole_reads = count_whole_reads(monkeypatch)
        tails: list[int] = []
        original_tail = gateway_service.session_tail

        async def lagging_first(*args: Any) -> Any:
            answer = await original_tail(*args)
            tails.append(len(answer[0]))
            if len(tails) == 1:  # the first answer comes from a replica one message behind
                return answer[0][:-1], answer[1]
            return answer

        monkeypatch.setattr(gateway_service, "session_tail", lagging_first)
        reply = await inject(b, 13)  # conflicts on B's stale cache, then catches up twice
        assert reply["ok"] and reply["session_seq"] == 14
        assert whole_reads == []
        assert len(tails) == 2 and tails[0] == tails[1] == 3
    await assert_cached_as_folded(nc, provisioned, b)


async def test_a_shorter_log_from_a_leader_out_of_quorum_is_unavailable_not_read_whole(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader cut off from its cluster counts the session from its old log, fewer messages
    than the cached state has seen: a whole read now would fold a session behind what the
    gateway saw. While the leader is not confirmed in quorum the command is `unavailable`
    (retry); once it is, the same shorter count means a forgotten session, read whole."""
    async with replicas(nc, provisioned, 1) as (b,):
        await behind_after_five(b)
        ports = b._ports
        original_tail = gateway_service.session_tail

        async def old_leader(*args: Any) -> Any:
            answer = await original_tail(*args)
            return answer[0], answer[1] - 2  # counted from a log two messages behind

        async def not_in_quorum(timeout_s: float) -> bool:
            return False

        monkeypatch.setattr(gateway_service, "session_tail", old_leader)
        whole_reads = count_whole_reads(monkeypatch)
        monkeypatch.setattr(ports.quorum, "confirmed", not_in_quorum)
        reply = await inject(b, 5)  # until the deadline, the request timeout
        assert_unavailable_nothing_sent(reply)
        assert whole_reads == [] and ports.cache.behind(SESSION) is not None

        async def in_quorum(timeout_s: float) -> bool:
            return True

        monkeypatch.setattr(ports.quorum, "confirmed", in_quorum)
        reply = await inject(b, 5)  # the same request: now read whole, applied once
        assert reply["ok"] and reply["session_seq"] == 6
        assert whole_reads == [SESSION]


async def test_a_tail_the_server_will_not_count_is_unavailable_not_read_whole(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a cluster without a leader just then, the count of a session's messages comes back
    as an error (the server's `10008`): the catch-up cannot be checked, and a whole read
    would come from replicas unchecked and hold the session's whole history at once. The
    command is `unavailable` (retry); once the count comes, the session is caught up."""
    async with replicas(nc, provisioned, 1) as (b,):
        await behind_after_five(b)
        ports = b._ports
        original_tail = gateway_service.session_tail

        async def leaderless(*args: Any) -> Any:
            return None

        monkeypatch.setattr(gateway_service, "session_tail", leaderless)
        whole_reads = count_whole_reads(monkeypatch)
        reply = await inject(b, 5)  # until the deadline, the request timeout
        assert_unavailable_nothing_sent(reply)
        assert whole_reads == [] and ports.cache.behind(SESSION) is not None

        monkeypatch.setattr(gateway_service, "session_tail", original_tail)
        reply = await inject(b, 5)  # the same request: caught up, applied once
        assert reply["ok"] and reply["session_seq"] == 6
        assert whole_reads == []
    await assert_cached_as_folded(nc, provisioned, b)


async def test_each_replica_writes_the_index_whatever_way_it_learned_the_session(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Turn by turn through three replicas: each learns the session by a whole read first,
    # then by catching up after another's appends; a fan-out of two makes the index deep.
    monkeypatch.setattr(session_index, "FANOUT", 2)
    async with replicas(nc, provisioned, 3) as three:
        for n in range(14):
            assert (await inject(three[n % 3], n))["ok"]
    stream = provisioned.stream
    scanned = [
        raw.stream_seq
        async for raw in session_read.iterate_direct(nc, stream, session_subject_filter(SESSION))
    ]

    async def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("not read through the index")

    monkeypatch.setattr(session_read, "SCAN_SKIP_LIMIT", -1)
    monkeypatch.setattr(session_read, "iterate_direct", refuse)
    monkeypatch.setattr(session_read, "walk_session", refuse)
    messages, _ = await session_read.session_messages(nc, stream, SESSION)
    assert [raw.stream_seq for raw in messages] == scanned
