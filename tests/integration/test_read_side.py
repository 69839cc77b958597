"""Queries, the projector's durability and the propagator, with services as processes."""

from __future__ import annotations

import asyncio

import orjson
from nats.aio.client import Client

from client.sdk import ReminderClient
from core.canonical import event_subject
from services.adapters.settings import Settings
from tests.integration.read_side import canonical, projected, replayed, wait_projected_equal
from tests.processes import ServiceRunner

UNLIMITED = {"REMINDERS_RATE_LIMIT": "100000"}


async def test_a_state_query_sees_every_command_replied_before_it(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    client = ReminderClient(nc)
    for n in range(20):
        await client.inject("q", f"body {n}", ttl_turns=3)
        reply = await client.call("state", {"session_id": "q"})
        assert reply["stale"] is False
        assert reply["state"]["session_seq"] == n + 1
    state = (await client.call("state", {"session_id": "q"}))["state"]
    assert (
        canonical(await replayed(nc, provisioned, "q"))
        == orjson.dumps(state, option=orjson.OPT_SORT_KEYS).decode()
    )


async def test_an_unknown_session_reads_as_an_empty_state(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    reply = await ReminderClient(nc).call("state", {"session_id": "nobody"})
    assert reply["state"]["session_seq"] == 0
    assert reply["state"]["pending"] == []
    assert reply["stale"] is False


async def test_min_seq_beyond_the_log_answers_stale_after_the_timeout(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    client = ReminderClient(nc)
    await client.inject("m", "x")
    assert (await client.call("state", {"session_id": "m"}))["stale"] is False
    reply = await client.call("state", {"session_id": "m", "min_seq": 5, "timeout_ms": 300})
    assert reply["stale"] is True
    assert reply["state"]["session_seq"] == 1


async def test_without_a_projector_a_query_waits_then_answers_stale(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    client = ReminderClient(nc)
    await client.inject("lonely", "x")
    reply = await client.call("state", {"session_id": "lonely", "timeout_ms": 300})
    assert reply["stale"] is True
    assert reply["state"]["session_seq"] == 0
    projector = services.start("projector")
    reply = await client.call("state", {"session_id": "lonely", "timeout_ms": 10_000})
    assert reply["stale"] is False and reply["state"]["session_seq"] == 1
    assert projector.get("/readyz")[0] == 200


async def test_pending_injections_lists_queued_reminders_in_the_camel_case_shape(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    client = ReminderClient(nc)
    await client.inject("p", "first", mode="steer", id="one", tags=["t"], ttl_turns=2)
    await client.inject("p", "second", mode="interrupt", id="two", dedupe_key="k")
    reply = await client.call("pending_injections", {"session_id": "p"})
    assert reply["pendingCount"] == 2
    first, second = reply["injections"]
    assert first == {
        "kind": "reminder",
        "id": "one",
        "reminderId": "one",
        "mode": "finish_step",
        "position": 1,
        "body": "first",
        "tags": ["t"],
        "dedupeKey": None,
        "ttlTurns": 2,
        "preserveOnCompact": False,
        "propagate": "session",
        "roleHint": "system",
        "authority": "contract",
        "source": "in_pipeline",
        "firedAtTurn": 0,
        "originatingAgentId": None,
    }
    assert (second["reminderId"], second["mode"], second["position"]) == (
        "two",
        "interrupt_immediate",
        2,
    )


async def test_two_projector_replicas_survive_the_active_one_being_killed(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env=UNLIMITED)
    first = services.start("projector")
    second = services.start("projector")
    client = ReminderClient(nc)
    sessions = [f"r{n}" for n in range(12)]

    async def traffic(rounds: int, offset: int) -> None:
        for turn in range(offset, offset + rounds):
            await asyncio.gather(
                *(client.inject(s, f"{s} turn {turn}", ttl_turns=2) for s in sessions)
            )
            await asyncio.gather(*(client.end_turn(s, turn) for s in sessions))

    await traffic(4, 0)
    # Kill whichever replica is consuming; with two, killing both in turn covers it.
    services.kill(first)
    await traffic(4, 4)
    await wait_projected_equal(nc, provisioned, sessions)
    services.start("projector")
    services.kill(second)
    await traffic(3, 8)
    await wait_projected_equal(nc, provisioned, sessions)


async def test_a_projector_killed_mid_stream_catches_up_to_the_replay(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env=UNLIMITED)
    projector = services.start("projector")
    client = ReminderClient(nc)
    sessions = [f"k{n}" for n in range(20)]

    async def burst(turn: int) -> None:
        await asyncio.gather(*(client.inject(s, f"t{turn}", ttl_turns=1) for s in sessions))
        await asyncio.gather(*(client.render(s, turn) for s in sessions))
        await asyncio.gather(*(client.end_turn(s, turn) for s in sessions))

    writer = asyncio.ensure_future(burst(0))
    await asyncio.sleep(0.05)
    services.kill(projector)
    await writer
    for turn in range(1, 4):
        await burst(turn)
    services.start("projector")
    await wait_projected_equal(nc, provisioned, sessions)


async def test_a_poison_message_lands_in_the_dlq_and_the_next_good_event_is_applied(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    projector = services.start("projector")
    client = ReminderClient(nc)
    await client.inject("victim", "fine")
    js = nc.jetstream()
    ack = await js.publish(event_subject("injected", "victim"), b'{"schema": "garbage"')
    await client.inject("bystander", "after the poison")
    await wait_projected_equal(nc, provisioned, ["bystander"])
    for _ in range(100):
        state = await projected(nc, provisioned, "victim")
        if state is not None and getattr(state, "degraded", None) is not None:
            break
        await asyncio.sleep(0.1)
    assert state is not None and state.degraded is not None  # type: ignore[union-attr]
    assert state.degraded.stream_seq == ack.seq  # type: ignore[union-attr]
    dlq = await js.get_last_msg(provisioned.dlq_stream, "reminders.dlq.projector.victim")
    assert dlq.data == b'{"schema": "garbage"'
    assert dlq.headers is not None
    assert dlq.headers["Reminders-Error-Code"] == "undecodable"
    assert dlq.headers["Reminders-Stream-Seq"] == str(ack.seq)
    _, metrics = projector.get("/metrics")
    assert "reminders_dlq_messages" in metrics


async def test_a_duplicate_publish_changes_nothing_in_the_projection(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    client = ReminderClient(nc)
    await client.inject("twice", "x")
    js = nc.jetstream()
    original = await js.get_msg(provisioned.stream, 1)
    assert original.headers is not None
    ack = await js.publish(
        original.subject or "",
        original.data or b"",
        headers={"Nats-Msg-Id": original.headers["Nats-Msg-Id"]},
    )
    assert ack.duplicate is True
    await client.inject("twice", "y")
    await wait_projected_equal(nc, provisioned, ["twice"])
    state = await projected(nc, provisioned, "twice")
    assert state is not None and state.session_seq == 2  # type: ignore[union-attr]
