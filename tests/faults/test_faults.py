"""Fault suite (issue #10): crashes under a steady command load lose nothing and duplicate
nothing, the projection stays a replay of the log, and the service keeps answering.

Two scenarios, each in a short form (unmarked, runs in CI) and a long form (`pytest -m
faults`, which also writes `bench/results/faults.json`):

- **single node**: SIGKILL nats-server (R1 file store) and restart it on the same store; SIGKILL
  the gateway, the projector and the propagator, restarted as a supervisor would.
- **cluster**: three nats-servers with routes, streams at R3; SIGKILL the stream leader,
  restart it, then SIGKILL the new leader once the first is back.

What is asserted is behaviour, never timing: every acked command's events are in the log
exactly once (its acked `session_seq` is its last event's), `session_seq` is contiguous in
every session, every handoff reached its child once, `verify-projection --all` is clean, no
command was answered `conflict` (one writer per session: any conflict is a misclassified
fault), every `unavailable` carries `retry_after_ms`, and each session's last command — sent
after the faults — is acked. Error budget, stated generously for a loaded 2-core machine: at
least half of all commands of a run are acked; the rest are `unavailable` (a reply) or got no
answer from a gateway that was killed or a connection that was cut, and none of those was
applied twice or half. The figures (acks, the longest time without one, the outcomes in the
5 s after each kill) are printed, and written by the long form.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from client.sdk import ReminderClient
from services.adapters.connection import connect
from services.adapters.settings import Settings
from tests.conftest import NatsUnderTest
from tests.faults.harness import (
    Cluster,
    Load,
    Supervised,
    check_log,
    handoffs_inherited,
    projection_clean,
    provision_cluster,
)
from tests.processes import ServiceRunner

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "faults.json"
WORKERS = ("gateway", "projector", "propagator")


@dataclass
class Shape:
    """How big a run is."""

    sessions: int
    rounds: int
    long: bool
    per_session: int = 2000  # the hard bound; the load stops once the faults are done


SHORT = Shape(sessions=4, rounds=1, long=False)
LONG = Shape(sessions=8, rounds=3, long=True)


@dataclass
class Run:
    """One scenario under load: the kills, then the checks."""

    nc: Client
    settings: Settings
    load: Load
    kills: list[tuple[str, float]] = field(default_factory=list)

    async def kill(self, label: str, action: Callable[[], Awaitable[None]]) -> None:
        """Note the time, then crash and restart something."""
        self.kills.append((label, time.monotonic()))
        await action()


async def drive(run: Run, faults: Callable[[Run], Awaitable[None]], warmup_s: float = 2.0) -> None:
    """Run the load, inject the faults while it runs, let it finish its tail."""
    stop = asyncio.Event()
    load_task = asyncio.create_task(run.load.run(stop))
    try:
        await asyncio.sleep(warmup_s)
        await faults(run)
        await asyncio.sleep(2.0)
    finally:
        stop.set()
    await asyncio.wait_for(load_task, timeout=180)


async def check(run: Run, patient: ReminderClient) -> dict[str, Any]:
    """Every behavioural assertion of the suite; returns the scenario's figures."""
    load = run.load
    missing: list[str] = []
    for _ in range(120):  # bounded: 60 s for the propagator to work through its backlog
        missing = await handoffs_inherited(run.nc, run.settings, load)
        if not missing:
            break
        await asyncio.sleep(0.5)
    log = await check_log(run.nc, run.settings, load)
    checked, mismatches = await projection_clean(run.nc, patient, run.settings, load)
    kinds = load.kinds()
    figures: dict[str, Any] = {
        "commands": len(load.outcomes),
        "acked": log.acked,
        "outcomes": kinds,
        "events": log.events,
        "lost": len(log.lost),
        "duplicated": len(log.duplicated),
        "sessions_checked": checked,
        "handoffs_not_inherited": len(missing),
        "projection_mismatches": len(mismatches),
        "longest_without_ack_s": round(load.longest_gap_s(), 3),
        "kills": [
            {
                "what": label,
                "at_s": round(at - load.started_at, 3),
                "next_5s": load.window(at),
                # from this kill to the next one (or to the last ack)
                "longest_without_ack_s": round(load.longest_gap_s(at, until), 3),
            }
            for (label, at), until in zip(
                run.kills, [*(at for _, at in run.kills[1:]), None], strict=True
            )
        ],
    }
    print(json.dumps(figures, indent=2))
    assert log.lost == [], f"acked but not in the log: {log.lost[:10]}"
    assert log.duplicated == [], f"applied twice: {log.duplicated[:10]}"
    assert log.gaps == [], f"session_seq not contiguous: {log.gaps[:10]}"
    assert log.wrong_seq == [], f"acked session_seq is not the command's: {log.wrong_seq[:10]}"
    assert missing == [], f"handoffs never inherited: {missing[:10]}"
    assert mismatches == [], f"verify-projection: {mismatches[:10]}"
    assert kinds.get("conflict", 0) == 0, f"a fault was answered as a conflict: {kinds}"
    unexplained = set(kinds) - {"ok", "unavailable", "no_answer"}
    assert not unexplained, f"unexpected answers: {kinds}"
    assert all(
        o.retry_after_ms is not None and o.retry_after_ms > 0
        for o in load.outcomes
        if o.kind == "unavailable"
    ), "an unavailable answer without retry_after_ms"
    assert load.last_acked() == [], f"not recovered: {load.last_acked()}"
    assert log.acked * 2 >= len(load.outcomes), f"error budget (≥ 50% acked) exceeded: {kinds}"
    return figures


def record(scenario: str, figures: dict[str, Any]) -> None:
    """Long form only: merge this scenario's figures into bench/results/faults.json."""
    results: dict[str, Any] = {}
    if RESULTS.exists():
        with contextlib.suppress(ValueError):
            results = json.loads(RESULTS.read_text(encoding="utf-8"))
    results.setdefault("benchmark", "faults")
    results.setdefault("command", ".venv/bin/python -m pytest -m faults tests/faults -q -s")
    results.setdefault("scenarios", {})[scenario] = figures
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- single node


async def single_node(
    shape: Shape, nats_server: NatsUnderTest, settings: Settings, services: ServiceRunner
) -> dict[str, Any]:
    embedded = nats_server.embedded
    if embedded is None:
        pytest.skip("needs the embedded server to kill it (REMINDERS_TEST_NATS_URL is set)")
    supervised = Supervised(services, settings, {})
    for name in WORKERS:
        supervised.start(name)
    nc = await connect(settings, "faults-checker")
    client = ReminderClient(nc, timeout_s=10)
    patient = ReminderClient(nc, timeout_s=15)
    sessions = [f"single-{i}" for i in range(shape.sessions)]
    run = Run(nc, settings, Load(client, sessions, shape.per_session, handoffs=True))

    async def restart_nats() -> None:
        embedded.kill()
        await asyncio.sleep(1.0)
        await asyncio.to_thread(embedded.start)

    async def faults(run: Run) -> None:
        for _ in range(shape.rounds):
            await run.kill("nats-server", restart_nats)
            await asyncio.sleep(3.0)
            for name in WORKERS:
                await run.kill(name, lambda name=name: supervised.kill_and_restart(name))
                await asyncio.sleep(2.0)

    try:
        await drive(run, faults)
        return await check(run, patient)
    finally:
        await nc.close()


async def test_single_node_faults_short(
    nats_server: NatsUnderTest, provisioned: Settings, services: ServiceRunner
) -> None:
    await single_node(SHORT, nats_server, provisioned, services)


@pytest.mark.faults
async def test_single_node_faults_long(
    nats_server: NatsUnderTest, provisioned: Settings, services: ServiceRunner
) -> None:
    record("single_node_r1", await single_node(LONG, nats_server, provisioned, services))


# --------------------------------------------------------------------------- cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three nats-servers on loopback with routes to each other."""
    nodes = Cluster(tmp_path / "cluster")
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
async def cluster_settings(cluster: Cluster) -> AsyncIterator[Settings]:
    """Settings naming all three nodes, streams provisioned at R3."""
    settings = Settings.from_env({}, nats_url=cluster.url, replicas=3)
    await provision_cluster(settings, "faults-provision")
    return settings


async def stream_leader(nc: Client, settings: Settings, cluster: Cluster) -> int:
    """Index of the node leading the event stream."""
    for _ in range(60):  # bounded: 30 s for an election
        with contextlib.suppress(Exception):
            info = await nc.jetstream().stream_info(settings.stream)
            leader = info.cluster.leader if info.cluster else None
            for index, node in enumerate(cluster.nodes):
                if node.name == leader:
                    return index
        await asyncio.sleep(0.5)
    raise AssertionError("the event stream has no leader")


async def clustered(
    shape: Shape, cluster: Cluster, settings: Settings, tmp_path: Path
) -> dict[str, Any]:
    services = ServiceRunner(settings, tmp_path / "service-logs")
    try:
        supervised = Supervised(services, settings, {"REMINDERS_REPLICAS": "3"})
        for name in WORKERS:
            supervised.start(name)
        nc = await connect(settings, "faults-checker")
        client = ReminderClient(nc, timeout_s=10)
        patient = ReminderClient(nc, timeout_s=15)
        sessions = [f"cluster-{i}" for i in range(shape.sessions)]
        run = Run(nc, settings, Load(client, sessions, shape.per_session, handoffs=True))

        async def faults(run: Run) -> None:
            for _ in range(2 if shape.long else 1):
                index = await stream_leader(nc, settings, cluster)

                async def crash(index: int = index) -> None:
                    cluster.kill(index)
                    await asyncio.sleep(5.0)  # the election happens under load
                    await asyncio.to_thread(cluster.restart, index)

                await run.kill(f"stream leader {cluster.nodes[index].name}", crash)
                await asyncio.sleep(3.0)

        try:
            await drive(run, faults)
            return await check(run, patient)
        finally:
            await nc.close()
    finally:
        services.stop_all()


async def test_cluster_leader_loss_short(
    cluster: Cluster, cluster_settings: Settings, tmp_path: Path
) -> None:
    await clustered(SHORT, cluster, cluster_settings, tmp_path)


@pytest.mark.faults
async def test_cluster_leader_loss_long(
    cluster: Cluster, cluster_settings: Settings, tmp_path: Path
) -> None:
    record("cluster_r3", await clustered(LONG, cluster, cluster_settings, tmp_path))
