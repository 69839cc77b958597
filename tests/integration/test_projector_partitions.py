"""Partitioned projectors (docs/scaling.md): N processes, one partition each, on one server.

The view `REMINDERS_PARTITIONED` sources `REMINDERS` through `partition(N, 2)` on the session
token; each projector process pulls its own partition's durable. Correctness is what it is
with one projector: every session's projection equals a replay of the log (`verify-projection
--all` is clean), a state query sees every command replied before it (so the projection
records `REMINDERS` sequences, not the view's), and a killed partition heals on restart.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from cli.doctor import run_checks
from cli.embedded import EmbeddedNats
from cli.provision import provision_all
from client.sdk import ReminderClient
from contracts.records import Tombstone
from services.adapters.partitions import partition_durable, partition_stream
from services.adapters.provisioning import ProvisionError, consumer_info
from services.adapters.settings import Settings
from tests.integration.read_side import projected, wait_projected_equal
from tests.integration.test_permissions import as_user, connect_as, secured_server
from tests.processes import ServiceRunner

PARTITIONS = 3
__all__ = ["secured_server"]  # the fixture: a server with the users of k8s nats-auth.conf
UNLIMITED = {"REMINDERS_RATE_LIMIT": "100000"}


def partition_env(partition: int, partitions: int = PARTITIONS) -> dict[str, str]:
    """What makes `reminders serve projector` run one partition."""
    return {
        "REMINDERS_PROJECTOR_PARTITIONS": str(partitions),
        "REMINDERS_PROJECTOR_PARTITION": str(partition),
    }


@pytest.fixture
async def partitioned(nc: Client, settings: Settings) -> Settings:
    """Everything `reminders provision` makes with REMINDERS_PROJECTOR_PARTITIONS=3."""
    wanted = settings.model_copy(update={"projector_partitions": PARTITIONS})
    await provision_all(nc, wanted)
    return wanted


async def test_the_default_layout_has_no_partition_view(nc: Client, settings: Settings) -> None:
    done = await provision_all(nc, settings)
    assert partition_stream(settings) not in done
    assert f"{settings.stream}/projector" in done
    with pytest.raises(nats.js.errors.NotFoundError):
        await nc.jetstream().stream_info(partition_stream(settings))


async def test_provisioning_partitions_is_idempotent_and_refuses_a_new_count(
    nc: Client, partitioned: Settings
) -> None:
    again = await provision_all(nc, partitioned)
    view = partition_stream(partitioned)
    assert again[view] == "unchanged"
    assert {f"{view}/{partition_durable(p)}" for p in range(PARTITIONS)} <= set(again)
    assert f"{partitioned.stream}/projector" not in again
    with pytest.raises(ProvisionError, match="hand-over"):
        await provision_all(nc, partitioned.model_copy(update={"projector_partitions": 4}))


async def test_partitioned_projectors_equal_a_replay_and_a_killed_one_heals(
    nc: Client, partitioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env=UNLIMITED)
    projectors = [services.start("projector", extra_env=partition_env(p)) for p in range(3)]
    client = ReminderClient(nc)
    sessions = [f"part-{n}" for n in range(24)]

    async def turn(number: int) -> None:
        # Every session's commands interleave with every other's in the log.
        await asyncio.gather(
            *(client.inject(s, f"{s} turn {number}", ttl_turns=2, tags=["t"]) for s in sessions)
        )
        await asyncio.gather(*(client.render(s, number) for s in sessions))
        await asyncio.gather(*(client.end_turn(s, number) for s in sessions))

    for number in range(3):
        await turn(number)
    services.kill(projectors[1])
    for number in range(3, 6):
        await turn(number)
    services.start("projector", extra_env=partition_env(1))
    for number in range(6, 8):
        await turn(number)

    # A query answers only once the projection has applied the session's last REMINDERS
    # sequence, so `stale: false` everywhere means each partition recorded origin sequences.
    for session_id in sessions:
        reply = await client.request("state", {"session_id": session_id, "timeout_ms": 10_000})
        assert reply["ok"] and reply["stale"] is False, (session_id, reply)
    await wait_projected_equal(nc, partitioned, sessions)

    verified = subprocess.run(
        [sys.executable, "-m", "cli.main", "verify-projection", "--all"],
        env={"REMINDERS_NATS_URL": partitioned.nats_url, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stderr
    assert f"ok: {len(sessions)} session(s)" in verified.stderr

    view = partition_stream(partitioned)
    delivered = []
    for p in range(PARTITIONS):
        # What the killed process had fetched stays unacked until its ack wait ends and the
        # server redelivers it (then acked as duplicates): wait for that, bounded.
        for _ in range(150):
            info = await consumer_info(nc, view, partition_durable(p))
            if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                break
            await asyncio.sleep(0.2)
        assert info["num_pending"] == 0 and info["num_ack_pending"] == 0, info
        delivered.append(info["delivered"]["stream_seq"])
    # The sessions really were split: every partition projected some of them.
    assert all(seq > 0 for seq in delivered), delivered
    # A work queue: what every partition acked is gone from the view.
    assert (await nc.jetstream().stream_info(view)).state.messages == 0
    # `reminders doctor` checks each partition's durable where it checked `projector`.
    rows = {check.name: check for check in await run_checks(partitioned)}
    assert "consumer projector" not in rows
    for p in range(PARTITIONS):
        row = rows[f"consumer {partition_durable(p)}"]
        assert row.ok, row


async def test_partitioned_projectors_run_under_the_projector_user(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    provisioned = subprocess.run(
        [sys.executable, "-m", "cli.main", "provision", "--nats", secured_server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **as_user("admin"), **partition_env(0, 2)},
    )
    assert provisioned.returncode == 0, provisioned.stdout + provisioned.stderr
    assert "REMINDERS_PARTITIONED/projector_p1: created" in provisioned.stdout
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    try:
        runner.start("gateway", extra_env=as_user("gateway"))
        for p in range(2):
            runner.start("projector", extra_env={**as_user("projector"), **partition_env(p, 2)})
        client_nc = await connect_as(secured_server, "client")
        client = ReminderClient(client_nc)
        for n in range(6):
            await client.inject(f"secure-{n}", "hello", id="h1")
        for n in range(6):
            state = await client.call("state", {"session_id": f"secure-{n}"})
            assert state["stale"] is False and state["state"]["session_seq"] == 1
        await client_nc.close()
    finally:
        runner.stop_all()
    assert not any("violation" in service.log().lower() for service in runner.running)


async def test_a_forgotten_sessions_queued_copies_are_skipped_and_leave_the_view(
    nc: Client, partitioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    client = ReminderClient(nc)
    for n in range(5):
        await client.inject("lag", f"b{n}")
    await client.inject("other", "o")
    view = partition_stream(partitioned)
    for _ in range(100):  # bounded: the source copies within moments
        if (await nc.jetstream().stream_info(view)).state.messages == 6:
            break
        await asyncio.sleep(0.1)
    reply = await client.call("forget", {"session_id": "lag"})
    assert reply["ok"] is True
    # The partitions start behind, with the forgotten session's copies still queued.
    for p in range(PARTITIONS):
        services.start("projector", extra_env=partition_env(p))
    await wait_projected_equal(nc, partitioned, ["other"])
    assert isinstance(await projected(nc, partitioned, "lag"), Tombstone)
    for _ in range(100):  # bounded: acked copies leave the work queue
        if (await nc.jetstream().stream_info(view)).state.messages == 0:
            break
        await asyncio.sleep(0.1)
    assert (await nc.jetstream().stream_info(view)).state.messages == 0
