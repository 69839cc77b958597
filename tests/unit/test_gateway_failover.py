"""When a gateway's server has no reachable stream leader for longer than the election
timeout, the gateway reconnects elsewhere: the detector's rule, with a clock the test moves,
and the reconnection, against a fake connection."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

import orjson
import pytest

from services.adapters.append import SessionAppend
from services.adapters.settings import Settings
from services.gateway import failover
from services.gateway.committer import CommitConflict, CommitInProcess, GroupCommitter
from services.gateway.failover import Failover, LeaderWatch
from tests.support import Driver


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_leaderless_commits_fail_over_only_after_the_election_timeout() -> None:
    clock = Clock()
    watch = LeaderWatch(10.0, clock)
    assert watch.leaderless() is False  # the first failure starts the count
    clock.now = 9.9
    assert watch.leaderless() is False  # an ordinary election is ridden out
    clock.now = 10.0
    assert watch.leaderless() is True
    clock.now = 15.0
    assert watch.leaderless() is False  # the next server gets its own 10 s
    clock.now = 20.0
    assert watch.leaderless() is True


def test_any_answer_from_a_leader_starts_the_count_again() -> None:
    clock = Clock()
    watch = LeaderWatch(10.0, clock)
    watch.leaderless()
    clock.now = 8.0
    watch.answered()
    clock.now = 12.0
    assert watch.leaderless() is False
    clock.now = 21.9
    assert watch.leaderless() is False
    clock.now = 22.0
    assert watch.leaderless() is True


def test_zero_never_fails_over() -> None:
    clock = Clock()
    watch = LeaderWatch(0.0, clock)
    for clock.now in (0.0, 100.0, 10_000.0):
        assert watch.leaderless() is False


def test_the_setting_reads_its_variable_and_defaults_above_the_election_timeout() -> None:
    assert Settings.from_env({}).failover_after_s == 10.0
    assert Settings.from_env({"REMINDERS_FAILOVER_AFTER_S": "3.5"}).failover_after_s == 3.5


class Connection:
    """A client that reconnects to the servers of `picks` in turn."""

    def __init__(self, *picks: str) -> None:
        self.picks = list(picks)
        self.url = "nats://a:4222"
        self.is_connected = True
        self.forced = 0

    @property
    def connected_url(self) -> Any:
        return urlparse(self.url)

    async def force_reconnect(self) -> None:
        self.forced += 1
        self.is_connected = False
        self.url = self.picks.pop(0)
        asyncio.get_running_loop().call_later(0.01, setattr, self, "is_connected", True)


async def test_a_fail_over_reconnects_until_it_lands_on_another_server() -> None:
    nc = Connection("nats://a:4222", "nats://a:4222", "nats://c:4222")
    over = Failover(nc, 0.05)  # type: ignore[arg-type]
    over.leaderless()
    await asyncio.sleep(0.06)
    over.leaderless()
    await asyncio.sleep(0.2)
    assert nc.forced == 3 and nc.url == "nats://c:4222"
    assert over.failovers == 1
    await over.stop()


async def test_an_answer_in_time_keeps_the_connection(monkeypatch: Any) -> None:
    monkeypatch.setattr(failover, "RECONNECT_WAIT_S", 0.1)
    nc = Connection()
    over = Failover(nc, 0.05)  # type: ignore[arg-type]
    over.leaderless()
    await asyncio.sleep(0.03)
    over.answered()
    await asyncio.sleep(0.03)
    over.leaderless()
    await asyncio.sleep(0.02)
    assert nc.forced == 0 and over.failovers == 0


class RefusingConnection:
    """Answers every batch's commit with one JetStream error."""

    def __init__(self, err_code: int, description: str) -> None:
        self.error = {"code": 400, "err_code": err_code, "description": description}

    async def publish(self, subject: str, data: bytes, **_: Any) -> None:
        return None

    async def request(self, subject: str, data: bytes, timeout: float, **_: Any) -> Any:
        return SimpleNamespace(data=orjson.dumps({"error": self.error}))


class Watch:
    def __init__(self) -> None:
        self.said: list[str] = []

    def answered(self) -> None:
        self.said.append("answered")

    def leaderless(self) -> None:
        self.said.append("leaderless")


@pytest.mark.parametrize(
    ("err_code", "description", "said", "raised"),
    [
        (10071, "wrong last sequence: 4", "answered", CommitConflict),
        # A leader cut off from its quorum answers this for every session whose earlier
        # append it still holds: counting it as an answer kept the gateway there for good.
        (10164, "wrong last sequence", "leaderless", CommitInProcess),
    ],
)
async def test_only_a_settled_answer_tells_the_fail_over_a_leader_works(
    err_code: int, description: str, said: str, raised: type[Exception]
) -> None:
    watch = Watch()
    nc = RefusingConnection(err_code, description)
    committer = GroupCommitter(nc, failover=watch)  # type: ignore[arg-type]
    committer.start()
    try:
        events = Driver("s").run("inject", reminder={"body": "b"}).events
        with pytest.raises(raised):
            await committer.commit(SessionAppend("s", 0, events), 1.0)
    finally:
        await committer.stop()
    assert watch.said == [said]
