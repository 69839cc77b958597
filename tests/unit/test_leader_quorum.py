"""A leader's answer is trusted only while it has heard from a quorum (issue #23's long run:
a leader cut off from its cluster answered a `state` query's last sequence from a log the new
leader had written past, and the query said `stale: false`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson

from services.adapters.leader_quorum import (
    HEARD_WITHIN_S,
    MAX_AGE_S,
    LeaderQuorum,
    leader_in_quorum,
)

SECOND_NS = 1_000_000_000


def info(*active_s: float, leader: str | None = "n1", **peer: Any) -> dict[str, Any]:
    replicas = [
        {"name": f"n{n + 2}", "current": True, "active": int(a * SECOND_NS), **peer}
        for n, a in enumerate(active_s)
    ]
    return {"cluster": {"leader": leader, "replicas": replicas}}


def test_a_leader_is_in_quorum_while_it_heard_from_a_majority_lately() -> None:
    assert leader_in_quorum(info(0.2, 0.4), 3)
    assert leader_in_quorum(info(0.2, 30.0), 3)  # one follower away: still a majority
    assert not leader_in_quorum(info(HEARD_WITHIN_S, 30.0), 3)  # cut off from both
    assert not leader_in_quorum(info(0.1, 0.1, leader=None), 3)
    assert not leader_in_quorum(info(0.1, 0.1, offline=True), 3)
    assert not leader_in_quorum({"error": {"code": 503}, **info(0.1, 0.1)}, 3)
    assert leader_in_quorum(info(0.1, 0.1, 9.0, 9.0), 5)
    assert not leader_in_quorum(info(0.1, 9.0, 9.0, 9.0), 5)
    assert leader_in_quorum(info(), 1)


def test_a_follower_the_leader_never_heard_from_does_not_count() -> None:
    # nats-server reports `active: 0` for a peer it has no time for: never heard from.
    assert not leader_in_quorum(info(0.0, 30.0), 3)
    assert not leader_in_quorum(info(0.0, 0.0), 3)
    assert leader_in_quorum(info(0.0, 0.3), 3)  # the other follower is a majority with it
    never = {"cluster": {"leader": "n1", "replicas": [{"name": "n2"}, {"name": "n3"}]}}
    assert not leader_in_quorum(never, 3)


class FakeNats:
    def __init__(self, answers: list[dict[str, Any]], delay_s: float = 0.0) -> None:
        self.answers = answers
        self.asked = 0
        self.delay_s = delay_s

    async def request(self, subject: str, payload: bytes, timeout: float) -> Any:
        assert subject == "$JS.API.STREAM.INFO.S"
        self.asked += 1
        await asyncio.sleep(self.delay_s)
        answer = self.answers.pop(0)

        class Reply:
            data = orjson.dumps(answer)

        return Reply()


def test_one_answer_serves_every_reader_for_its_age_then_it_is_asked_again() -> None:
    now = [100.0]
    nc = FakeNats([info(0.1, 0.1), info(5.0, 5.0)])
    quorum = LeaderQuorum(cast(Any, nc), "S", 3, clock=lambda: now[0])

    async def run() -> list[bool]:
        first = await asyncio.gather(*(quorum.confirmed(1.0) for _ in range(10)))
        now[0] += MAX_AGE_S
        within = await quorum.confirmed(1.0)
        now[0] += 0.01
        after = await quorum.confirmed(1.0)
        return [*first, within, after]

    results = asyncio.run(run())
    assert results == [True] * 11 + [False]
    assert nc.asked == 2


def test_no_answer_in_time_is_no_confirmation_and_one_replica_needs_none() -> None:
    nc = FakeNats([info(0.1, 0.1)], delay_s=0.2)
    quorum = LeaderQuorum(cast(Any, nc), "S", 3)
    assert asyncio.run(quorum.confirmed(0.05)) is False
    alone = LeaderQuorum(cast(Any, FakeNats([])), "S", 1)
    assert asyncio.run(alone.confirmed(0.05)) is True


def test_a_failed_request_is_no_confirmation() -> None:
    class Failing:
        async def request(self, subject: str, payload: bytes, timeout: float) -> Any:
            raise TimeoutError

    quorum = LeaderQuorum(cast(Any, Failing()), "S", 3)
    assert asyncio.run(quorum.confirmed(0.5)) is False
