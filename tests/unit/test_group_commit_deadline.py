"""Group commit never keeps a command past its deadline: one queued behind a batch in flight
is withdrawn unsent, one in flight is told its outcome is unknown; a batch waits for its
PubAck no longer than its latest command; a fault no handler expects leaves its own group
uncertain and the next one committed. Against fake connections."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from services.adapters.append import SessionAppend
from services.gateway.committer import CommitUnavailable, CommitUncertain, GroupCommitter
from services.gateway.pacing import SessionLocks
from tests.support import Driver


class HangingConnection:
    """Takes the batches' first messages; the commit request of each waits until released."""

    def __init__(self) -> None:
        self.requests: list[float] = []
        self.released = asyncio.Event()

    async def publish(self, subject: str, data: bytes, **_: Any) -> None:
        return None

    async def request(self, subject: str, data: bytes, timeout: float, **_: Any) -> Any:
        self.requests.append(timeout)
        await asyncio.wait_for(self.released.wait(), timeout)
        raise AssertionError("released commits are not part of these tests")


def append(session_id: str) -> SessionAppend:
    driver = Driver(session_id)
    events = driver.run("inject", reminder={"body": "b"}).events
    return SessionAppend(session_id, 0, events)


@pytest.fixture
async def committer_on_hanging() -> Any:
    nc = HangingConnection()
    committer = GroupCommitter(nc, timeout_s=5.0)  # type: ignore[arg-type]
    committer.start()
    yield committer, nc
    await committer.stop()


async def test_in_flight_is_uncertain_and_queued_behind_it_is_withdrawn_unsent(
    committer_on_hanging: Any,
) -> None:
    committer, nc = committer_on_hanging
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.create_task(committer.commit(append("a"), 0.3))
    await asyncio.sleep(0.05)  # the first batch is in flight now
    with pytest.raises(CommitUnavailable):
        await committer.commit(append("b"), 0.1)
    with pytest.raises(CommitUncertain):
        await first
    assert loop.time() - started < 0.5
    # the batch waited for its PubAck no longer than its command did, not the 5 s
    assert nc.requests == [pytest.approx(0.3, abs=0.05)]
    await asyncio.sleep(0.35)
    assert len(nc.requests) == 1, "the withdrawn command was sent after all"


async def test_a_session_lock_is_waited_for_only_until_the_deadline() -> None:
    locks = SessionLocks()
    async with locks.hold("s", 1.0):
        with pytest.raises(TimeoutError):
            async with locks.hold("s", 0.05):
                raise AssertionError("held twice")
    async with locks.hold("s", 0.05):
        pass  # released, and usable again


async def test_a_command_out_of_time_is_refused_unsent(committer_on_hanging: Any) -> None:
    committer, nc = committer_on_hanging
    for left in (0.0, -0.2):
        with pytest.raises(CommitUnavailable):
            await committer.commit(append("late"), left)
    await asyncio.sleep(0.05)
    assert nc.requests == [], "a command with no time left was sent"


async def test_a_caller_that_stops_waiting_is_never_sent(committer_on_hanging: Any) -> None:
    committer, nc = committer_on_hanging
    first = asyncio.create_task(committer.commit(append("a"), 0.3))
    await asyncio.sleep(0.05)  # the first batch is in flight now
    queued = asyncio.create_task(committer.commit(append("b"), 5.0))
    await asyncio.sleep(0.01)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    with pytest.raises(CommitUncertain):
        await first
    await asyncio.sleep(0.1)
    assert len(nc.requests) == 1, "the command whose caller left was sent after all"


class FaultyOnceConnection:
    """The first batch's commit fails with an error the client does not wrap; every later
    one is stored, each PubAck naming the next stream sequence."""

    def __init__(self) -> None:
        self.commits = 0
        self.stored = 0

    async def publish(self, subject: str, data: bytes, **_: Any) -> None:
        self.stored += 1

    async def request(self, subject: str, data: bytes, timeout: float, **_: Any) -> Any:
        self.commits += 1
        if self.commits == 1:
            raise RuntimeError("a fault no handler expects")
        self.stored += 1
        return SimpleNamespace(data=orjson.dumps({"stream": "s", "seq": self.stored}))


async def test_an_unexpected_fault_leaves_its_group_uncertain_and_the_committer_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nc = FaultyOnceConnection()
    committer = GroupCommitter(nc, timeout_s=5.0)  # type: ignore[arg-type]
    committer.start()
    try:
        with pytest.raises(CommitUncertain, match="RuntimeError"):
            await committer.commit(append("a"), 1.0)
        # The loop outlived the fault: the next command is committed, not left queued
        # behind a batch that never settles.
        after = append("b")
        seqs = await committer.commit(after, 1.0)
    finally:
        await committer.stop()
    assert seqs == list(range(nc.stored - len(after.events) + 1, nc.stored + 1))
    assert [record.getMessage() for record in caplog.records] == ["group commit failed"]
