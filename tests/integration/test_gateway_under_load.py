"""Concurrency and crashes through real gateway processes (SPEC §3.4, §4.1)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
from nats.aio.client import Client

from client.sdk import ReminderClient
from contracts.decode import decode
from contracts.errors import ReminderError
from contracts.state import SessionState
from core import fold_all
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from tests.processes import ServiceRunner

#: No rate limit and no load shedding: these tests are about order and exactly-once, with
#: every command let in.
UNLIMITED = {"REMINDERS_RATE_LIMIT": "100000", "REMINDERS_MAX_IN_FLIGHT": "1000"}


async def folded(nc: Client, settings: Settings, session_id: str) -> tuple[SessionState, list[Any]]:
    stored = await read_session(nc, settings.stream, session_id)
    events = [decode(item.envelope) for item in stored]
    return fold_all(SessionState(), events), events


async def test_two_gateways_hammering_one_session_apply_every_command_once_in_one_order(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env=UNLIMITED)
    services.start("gateway", extra_env=UNLIMITED)
    client = ReminderClient(nc)
    commands = 120

    async def one(n: int) -> dict[str, Any]:
        return await client.request(
            "inject",
            {
                "session_id": "hot",
                "request_id": f"req-{n}",
                "reminder": {"body": f"b{n}", "id": f"r{n}"},
            },
        )

    replies = await asyncio.gather(*(one(n) for n in range(commands)))
    accepted = [n for n, reply in enumerate(replies) if reply["ok"]]
    refused = [reply["error"]["code"] for reply in replies if not reply["ok"]]
    assert set(refused) <= {"conflict"}
    assert len(accepted) >= commands * 0.9
    state, events = await folded(nc, provisioned, "hot")
    assert [event.session_seq for event in events] == list(range(1, len(events) + 1))
    assert sorted(event.request_id for event in events) == sorted(f"req-{n}" for n in accepted)
    assert {row.spec.id for row in state.pending} == {f"r{n}" for n in accepted}
    # Each accepted reply names the session_seq its event got: one serial order.
    seqs = sorted(replies[n]["session_seq"] for n in accepted)
    assert seqs == list(range(1, len(accepted) + 1))


async def test_many_sessions_at_once_are_each_applied_exactly_once(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    gateway = services.start("gateway")
    client = ReminderClient(nc)
    sessions, per_session = 40, 5

    async def drive(session: int) -> None:
        for turn in range(per_session):
            await client.call(
                "inject",
                {"session_id": f"m{session}", "reminder": {"body": f"t{turn}", "ttl_turns": 2}},
            )

    await asyncio.gather(*(drive(session) for session in range(sessions)))
    for session in range(sessions):
        state, events = await folded(nc, provisioned, f"m{session}")
        assert [event.kind for event in events] == ["injected"] * per_session
        assert state.session_seq == per_session
    _, metrics = gateway.get("/metrics")
    assert "reminders_group_commit_commands" in metrics


async def test_a_gateway_killed_mid_load_loses_no_acknowledged_command_and_applies_none_twice(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    victim = services.start("gateway", extra_env=UNLIMITED)
    services.start("gateway", extra_env=UNLIMITED)
    client = ReminderClient(nc, timeout_s=5)
    acknowledged: dict[str, int] = {}
    rng = random.Random(7)

    async def producer(worker: int) -> None:
        for n in range(25):
            request_id = f"w{worker}-{n}"
            session = f"k{rng.randrange(6)}"
            for _attempt in range(5):
                try:
                    reply = await client.request(
                        "inject",
                        {
                            "session_id": session,
                            "request_id": request_id,
                            "reminder": {"body": request_id},
                        },
                    )
                except ReminderError:
                    await asyncio.sleep(0.2)
                    continue
                if reply["ok"]:
                    acknowledged[request_id] = reply["session_seq"]
                    break
                await asyncio.sleep(0.05)

    async def killer() -> None:
        await asyncio.sleep(0.3)
        services.kill(victim)

    await asyncio.gather(*(producer(worker) for worker in range(8)), killer())
    assert victim.process.returncode == -9
    logged: dict[str, int] = {}
    for session in range(6):
        _, events = await folded(nc, provisioned, f"k{session}")
        for event in events:
            assert event.request_id not in logged, "a command was applied twice"
            logged[event.request_id or ""] = event.session_seq
    for request_id in acknowledged:
        assert request_id in logged, f"{request_id} was acknowledged but is not in the log"


async def test_a_stale_cache_costs_a_conflict_then_the_command_is_decided_again(
    nc: Client, provisioned: Settings
) -> None:
    def gateway() -> tuple[CommandService, GroupCommitter]:
        committer = GroupCommitter(nc)
        committer.start()
        return CommandService(nc, provisioned, committer), committer

    (first, first_committer), (second, second_committer) = gateway(), gateway()
    try:
        body = {"session_id": "stale", "reminder": {"body": "a", "dedupe_key": "k"}}
        assert (await first.handle("inject", orjson.dumps(body)))["session_seq"] == 1
        body["reminder"]["body"] = "b"  # type: ignore[index]
        assert (await second.handle("inject", orjson.dumps(body)))["session_seq"] == 3
        # `first` still caches the session at seq 1: its append conflicts, it re-reads,
        # decides again and dedupes `b`, which it never saw.
        body["reminder"]["body"] = "c"  # type: ignore[index]
        reply = await first.handle("inject", orjson.dumps(body))
        assert reply["ok"] and reply["session_seq"] == 5 and reply["deduped_count"] == 1
    finally:
        await first_committer.stop()
        await second_committer.stop()
    state, events = await folded(nc, provisioned, "stale")
    assert [event.kind for event in events] == [
        "injected",
        "deduped",
        "injected",
        "deduped",
        "injected",
    ]
    assert [row.spec.body for row in state.pending] == ["c"]
