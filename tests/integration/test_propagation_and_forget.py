"""Handoff chains through the propagator (SPEC §4.9) and forget (§4.11), as processes."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from nats.aio.client import Client

from cli.provision import provision_all
from client.sdk import ReminderClient
from contracts.records import Tombstone
from contracts.state import SessionState
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.integration.read_side import projected, replayed, wait_projected_equal
from tests.processes import ServiceRunner


async def live_ids(client: ReminderClient, session_id: str, expected_seq: int) -> list[str]:
    reply = await client.call(
        "state", {"session_id": session_id, "min_seq": expected_seq, "timeout_ms": 20_000}
    )
    assert reply["stale"] is False, reply
    return [row["spec"]["id"] for row in reply["state"]["pending"]]


async def wait_for_events(nc: Client, settings: Settings, session_id: str, count: int) -> None:
    for _ in range(200):  # bounded: 20 s
        if len(await read_session(nc, settings.stream, session_id)) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{session_id} never reached {count} events")


@pytest.mark.parametrize(
    ("propagate", "child_has", "grandchild_has"),
    [("all", True, True), ("session", True, False), ("none", False, False)],
)
async def test_handoff_chains_parent_child_grandchild_by_propagate_value(
    nc: Client,
    provisioned: Settings,
    services: ServiceRunner,
    propagate: str,
    child_has: bool,
    grandchild_has: bool,
) -> None:
    services.start("gateway")
    services.start("projector")
    services.start("propagator")
    client = ReminderClient(nc)
    await client.inject("parent", "rule", id="rule", propagate=propagate, ttl_turns=4)
    await client.inject("parent", "anchor", id="anchor", propagate="all")
    await client.handoff("parent", "child", sub_agent_id="sub-1")
    # child: anchor (+ rule), each injected + inherited
    child_events = 4 if child_has else 2
    await wait_for_events(nc, provisioned, "child", child_events)
    child_ids = await live_ids(client, "child", child_events)
    assert ("rule" in child_ids) is child_has
    assert "anchor" in child_ids
    await client.handoff("child", "grandchild", sub_agent_id="sub-2")
    grandchild_events = 4 if grandchild_has else 2
    await wait_for_events(nc, provisioned, "grandchild", grandchild_events)
    grandchild_ids = await live_ids(client, "grandchild", grandchild_events)
    assert ("rule" in grandchild_ids) is grandchild_has
    assert "anchor" in grandchild_ids
    state = (await client.call("state", {"session_id": "grandchild"}))["state"]
    anchor = next(row for row in state["pending"] if row["spec"]["id"] == "anchor")
    assert anchor["spec"]["source"] == "inherited"
    assert anchor["spec"]["originating_agent_id"] == "parent"
    assert len(state["inherited_from"]) == 1


async def test_a_redelivered_handoff_has_no_second_effect(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    propagator = services.start("propagator")
    client = ReminderClient(nc)
    await client.inject("p", "x", id="x", propagate="all")
    await client.handoff("p", "c")
    await wait_for_events(nc, provisioned, "c", 2)
    # Crash and restart the propagator, then replay the consumer from the start.
    services.kill(propagator)
    await nc.jetstream().delete_consumer(provisioned.stream, "propagator")
    await provision_all(nc, provisioned)  # the operator recreates it: delivered from the start
    services.start("propagator")
    await asyncio.sleep(2.0)
    assert len(await read_session(nc, provisioned.stream, "c")) == 2


async def test_forget_purges_tombstones_and_audits_without_any_body(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    client = ReminderClient(nc)
    await client.inject("gone", "secret-body-9931", ttl_turns=2)
    await client.inject("kept", "stays")
    await wait_projected_equal(nc, provisioned, ["gone", "kept"])
    reply = await client.call("forget", {"session_id": "gone"})
    assert reply["ok"] is True and reply["session_token"] == "gone"
    assert await read_session(nc, provisioned.stream, "gone") == []
    assert len(await read_session(nc, provisioned.stream, "kept")) == 1
    assert isinstance(await projected(nc, provisioned, "gone"), Tombstone)
    audit = await nc.jetstream().get_last_msg(provisioned.audit_stream, "reminders.audit.forgotten")
    record = orjson.loads(audit.data or b"{}")
    assert record["session_token"] == "gone"
    assert record["purged_through"] == reply["purged_through"]
    assert b"secret-body-9931" not in (audit.data or b"")
    state = (await client.call("state", {"session_id": "gone"}))["state"]
    assert state["session_seq"] == 0
    # A new life of the same id starts from scratch.
    again = await client.inject("gone", "new life")
    assert again["session_seq"] == 1
    await wait_projected_equal(nc, provisioned, ["gone"])


async def test_a_lagging_projector_does_not_bring_a_forgotten_session_back(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    client = ReminderClient(nc)
    for n in range(5):
        await client.inject("lag", f"b{n}")
    await client.inject("other", "o")
    await client.call("forget", {"session_id": "lag"})
    services.start("projector")  # it starts behind, after the purge
    await wait_projected_equal(nc, provisioned, ["other"])
    assert isinstance(await projected(nc, provisioned, "lag"), Tombstone)
    assert await replayed(nc, provisioned, "lag") == SessionState()
