"""Recorded histories checked per session (issue #23), on a 3-node R3 cluster whose routes run
through proxies the test cuts.

- CI form (unmarked, < 3 min on 2 cores): a leader isolation and a kill -9 of the leader.
- Long form (`-m faults`): every nemesis in turn — partitions (isolate the leader, 2/1 split),
  SIGSTOP of the leader for 1–10 s, kill -9 of the leader, of a follower and of every service
  process — until the history holds `REMINDERS_FAULTS_OPS` operations (default 50,000), with
  `REMINDERS_FAULTS_GATEWAYS` gateway replicas (default 2).
- Leader pause (unmarked): SIGSTOP for 8 s of the stream leader, moved to the gateway's
  node; every operation answered, within the gateway's deadline unless it was held inside
  the frozen node (then within the client's resend and the deadline).
- Clock skew: two gateway replicas 30 s apart (`REMINDERS_CLOCK_OFFSET_MS`); a session's
  recorded time must never go backwards (SPEC §12.4).

Each run writes its history as JSON Lines (path printed) and figures.json next to it; an
anomaly fails the test with its kind and the first operations involved.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from client.sdk import RESEND_AFTER_S
from services.adapters.settings import Settings
from tests.faults.nemesis import ProxiedCluster, move_leader, node_serving, reconnect_to
from tests.faults.runs import (
    NEMESES,
    Ctx,
    RunShape,
    isolate_leader,
    kill_node,
    pause_leader,
    provisioned,
    run_checked,
)


@pytest.fixture
async def r3(proxied: ProxiedCluster) -> Settings:
    """Settings naming all three nodes, everything provisioned at R3."""
    settings = Settings.from_env({}, nats_url=proxied.url, replicas=3)
    await provisioned(settings)
    return settings


def assert_clean(report_text: str, anomalies: int, history: Path) -> None:
    assert anomalies == 0, f"history {history}\n{report_text}"


async def test_history_under_a_partition_and_a_leader_kill(
    proxied: ProxiedCluster, r3: Settings, tmp_path: Path
) -> None:
    async def nemesis(ctx: Ctx) -> None:
        await isolate_leader(ctx, hold_s=10.0)  # past the election timeout
        await kill_node(ctx, leader=True, down_s=2.0)

    shape = RunShape(sessions=6, clients_per_session=2, quiet_s=3.0, max_s=0)
    report, history, faults = await run_checked(proxied, r3, tmp_path / "run", shape, nemesis)
    assert set(faults.by_kind()) == {"partition: isolate leader", "kill -9 leader"}
    assert history.acked() > 100, "the workload hardly ran"
    assert_clean(report.summary(), len(report.anomalies), history.path)


@pytest.mark.faults
async def test_history_under_every_nemesis(
    proxied: ProxiedCluster, r3: Settings, tmp_path: Path
) -> None:
    order = list(NEMESES)
    turn = 0

    async def nemesis(ctx: Ctx) -> None:
        nonlocal turn
        await NEMESES[order[turn % len(order)]](ctx)
        turn += 1

    target = int(os.environ.get("REMINDERS_FAULTS_OPS", "50000"))
    bound = float(os.environ.get("REMINDERS_FAULTS_MAX_S", "3600"))
    gateways = int(os.environ.get("REMINDERS_FAULTS_GATEWAYS", "2"))
    shape = RunShape(
        sessions=16,
        clients_per_session=2,
        quiet_s=4.0,
        target_ops=target,
        max_s=bound,
        gateways=tuple({} for _ in range(gateways)),
    )
    report, history, faults = await run_checked(proxied, r3, tmp_path / "run", shape, nemesis)
    assert len(faults.by_kind()) >= len(NEMESES) or turn < len(NEMESES)
    assert_clean(report.summary(), len(report.anomalies), history.path)
    assert len(history.ops) >= target, f"only {len(history.ops)} ops within {bound}s"


async def test_skewed_gateway_clocks_never_move_a_session_back_in_time(
    proxied: ProxiedCluster, r3: Settings, tmp_path: Path
) -> None:
    """Two gateways 30 s apart share the sessions; with SPEC §12.4's rule no session's
    recorded time goes backwards (until the core applies it, this reports exactly that).

    Only commands that always append, and reads: a command that appends nothing is answered
    from a replica's cached session, which two replicas make stale (the long form with two
    gateways reports that as a stale read); here the clock alone is on trial."""

    async def nemesis(ctx: Ctx) -> None:
        await kill_node(ctx, leader=False, down_s=1.0)

    shape = RunShape(
        sessions=4,
        clients_per_session=2,
        warmup_s=6.0,
        quiet_s=2.0,
        max_s=0,
        gateways=({"REMINDERS_CLOCK_OFFSET_MS": "30000"}, {"REMINDERS_CLOCK_OFFSET_MS": "0"}),
        mix={"inject": 6, "inject_queued": 2, "handoff": 1, "state": 3, "pending_injections": 1},
    )
    report, history, _ = await run_checked(proxied, r3, tmp_path / "run", shape, nemesis)
    assert history.acked() > 50
    assert_clean(report.summary(), len(report.anomalies), history.path)


#: How long after a node froze every connection has left it: a client's or a service's
#: connection notices within ping interval × (outstanding pings + 1) (1 s × 3), the other
#: nodes drop their routes to it within 1 s × (3 + 1) (`ROUTE_PINGS`), and a reconnection
#: takes well under a second.
LEAVE_FROZEN_NODE_S = 5.0


async def test_answers_within_the_deadline_while_the_leader_is_paused(
    proxied: ProxiedCluster, r3: Settings, tmp_path: Path
) -> None:
    """SIGSTOP for 8 s of the stream leader, made the node the gateway and half the clients
    are connected to (the worst case: the gateway's commits, its reads and its connection
    stall at once, and so do those clients' connections; the other half's requests and
    replies pass through the frozen node on their way to and from the gateway).

    Every operation is answered by a gateway — `ok`, a definite error, or `unavailable` with
    `retry_after_ms`; none is left to the client's timeout — and the history stays clean.
    Every operation invoked while no connection had to leave the frozen node is answered
    within the gateway's deadline plus 1 s. One in flight through the node as it froze (or
    sent before its connections left it) is held inside it, where nothing can answer it:
    the client library sends it again — at once when its own connection is replaced, after
    `RESEND_AFTER_S` of silence from its first send and sooner after that while silence
    goes on, soon after "no responders" while the gateway moves — and the gateway answers
    that within its deadline, so within `RESEND_AFTER_S` + the deadline + 1 s.
    docs/reliability.md."""
    deadline_s = r3.request_timeout_s
    paused: list[float] = []

    async def nemesis(ctx: Ctx) -> None:
        gateway = await asyncio.to_thread(node_serving, ctx.cluster, "reminders-gateway")
        await move_leader(ctx.nc, ctx.settings.stream, ctx.cluster, gateway)
        # Half the clients on the node that will freeze, half on another.
        await reconnect_to(ctx.connections[0], ctx.cluster, gateway)
        await reconnect_to(ctx.connections[1], ctx.cluster, (gateway + 1) % 3)
        await asyncio.sleep(1.0)  # the workload settles
        paused.append(ctx.history.now())
        await pause_leader(ctx, hold_s=8.0)

    resent_bound = RESEND_AFTER_S + deadline_s + 1.0
    shape = RunShape(
        sessions=6,
        clients_per_session=2,
        quiet_s=3.0,
        max_s=0,
        client_timeout_s=resent_bound,
        client_connections=2,
    )
    report, history, _ = await run_checked(proxied, r3, tmp_path / "run", shape, nemesis)
    assert_clean(report.summary(), len(report.anomalies), history.path)
    unanswered = [
        op.brief()
        for op in history.ops
        if op.completed is None
        or (op.reply.get("error") or {}).get("code") in {"no_answer", "connection_lost"}
    ]
    assert unanswered == [], f"{len(unanswered)} left to the client's timeout: {unanswered[:5]}"
    refused = [
        op.brief()
        for op in history.ops
        if op.status == "info"
        and not ((op.reply.get("error") or {}).get("details") or {}).get("retry_after_ms")
    ]
    assert refused == [], f"{len(refused)} indeterminate answers without retry_after_ms"
    frozen = (paused[0] - deadline_s - 1.0, paused[0] + LEAVE_FROZEN_NODE_S)

    def bound(invoked: float) -> float:
        return resent_bound if frozen[0] <= invoked <= frozen[1] else deadline_s + 1.0

    for inside in (True, False):
        waits = [
            op.completed - op.invoked
            for op in history.ops
            if op.completed is not None and (frozen[0] <= op.invoked <= frozen[1]) == inside
        ]
        where = "in flight as the node froze" if inside else "the rest"
        print(f"{where}: {len(waits)} ops, longest answer {max(waits, default=0):.2f}s")
    late = [
        f"{op.brief()} after {op.completed - op.invoked:.2f}s"
        for op in history.ops
        if op.completed is not None and op.completed - op.invoked > bound(op.invoked)
    ]
    assert late == [], f"{len(late)} answers later than their bound: {late[:5]}"
