"""One checked run: a 3-node R3 cluster behind route proxies, service processes, a recorded
workload, a nemesis while it runs, then the history checker, `verify-projection --all` and
`replay --verify` of every session. Shared by the CI form, the long form and the soak.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from cli.provision import provision_all
from cli.supervisor import ServiceProcess, SupervisorError, spawn_service, wait_ready
from client.sdk import ReminderClient
from services.adapters.connection import connect
from services.adapters.settings import Settings
from tests.faults.checker import Report
from tests.faults.history import History, Workload, check_run
from tests.faults.nemesis import Faults, ProxiedCluster, stream_leader
from tests.processes import ServiceRunner

#: What the clients wait for an answer: the gateway's deadline (5 s) and some slack.
CLIENT_TIMEOUT_S = 8.0


@dataclass
class Services:
    """Service processes by label (`gateway-a`), each restartable on its port with its env."""

    runner: ServiceRunner
    settings: Settings
    procs: dict[str, tuple[str, dict[str, str], ServiceProcess]] = field(default_factory=dict)

    def start(self, label: str, name: str, env: dict[str, str] | None = None) -> None:
        """Start `reminders serve NAME` as `label`; wait until ready."""
        env = {"REMINDERS_REPLICAS": str(self.settings.replicas), **(env or {})}
        self.procs[label] = (name, env, self.runner.start(name, extra_env=env))

    async def kill_and_restart(self, label: str, down_s: float = 0.5, bound_s: float = 90) -> None:
        """SIGKILL, then start again on the same port and log; like a supervisor, start it
        again while it exits at start-up (its checks can time out while the cluster heals)."""
        name, env, old = self.procs[label]
        await asyncio.to_thread(self.runner.kill, old)
        await asyncio.sleep(down_s)
        deadline = time.monotonic() + bound_s
        while True:
            new = spawn_service(name, self.settings, old.log_path, env, http_port=old.http_port)
            self.runner.running.append(new)
            self.procs[label] = (name, env, new)
            try:
                await asyncio.to_thread(wait_ready, [new], max(1.0, deadline - time.monotonic()))
                return
            except SupervisorError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1.0)

    def pids(self) -> dict[str, int]:
        """Each live service's pid, by label."""
        return {label: proc.process.pid for label, (_, _, proc) in self.procs.items()}

    def scrape(self) -> dict[str, dict[str, float]]:
        """Each service's /metrics samples (`scrape_samples`) by label, for those that
        answered."""
        scraped = {label: scrape_samples(proc) for label, (_, _, proc) in self.procs.items()}
        return {label: samples for label, samples in scraped.items() if samples}


def cache_fill(scraped: dict[str, dict[str, float]]) -> dict[str, float]:
    """How full each service's session cache is (bytes over bound), by label, for the
    services that have one."""
    fill = {}
    for label, samples in scraped.items():
        cached = samples.get("reminders_session_cache_bytes")
        bound = samples.get("reminders_session_cache_bound_bytes")
        if cached is not None and bound:
            fill[label] = cached / bound
    return fill


def cache_evictions(scraped: dict[str, dict[str, float]]) -> dict[str, float]:
    """How many sessions each service's cache has evicted so far, by label, for the services
    that have one: once any, the cache is full."""
    return {
        label: samples["reminders_session_cache_evictions_total"]
        for label, samples in scraped.items()
        if "reminders_session_cache_evictions_total" in samples
    }


def scrape_samples(proc: ServiceProcess) -> dict[str, float]:
    """A service's /metrics samples (empty when it does not answer), each by its name, and
    by `name{label=value,…}` when it has labels beside the scope's."""
    try:
        status, text = proc.get("/metrics")
    except OSError:
        return {}
    if status != 200:
        return {}
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(
                f"{k}={v}"
                for k, v in sorted(sample.labels.items())
                if not k.startswith("otel_scope_")
            )
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


async def provisioned(settings: Settings) -> None:
    """Provision the streams at the settings' replicas (waits for a forming cluster)."""
    nc = await connect(settings, "faults-provision")
    try:
        await provision_all(nc, settings, wait_s=90)
    finally:
        await nc.close()


@dataclass
class Ctx:
    """What a nemesis acts on."""

    cluster: ProxiedCluster
    services: Services
    nc: Client
    settings: Settings
    history: History
    faults: Faults
    rng: random.Random
    #: The workload's connections (the first is `nc`), one per client connection.
    connections: list[Client] = field(default_factory=list)

    async def fault(self, kind: str, act: Callable[[], Awaitable[None]]) -> None:
        """Run one fault, noting when it started and how long it lasted."""
        start = self.history.now()
        await act()
        self.faults.done.append((kind, start, self.history.now() - start))

    async def leader(self) -> int:
        """The event stream's leader node."""
        return await stream_leader(self.nc, self.settings.stream, self.cluster)


# --------------------------------------------------------------------------- the nemeses


async def isolate_leader(ctx: Ctx, hold_s: float = 6.0) -> None:
    """Cut every route of the stream leader for `hold_s`, then heal."""
    index = await ctx.leader()

    async def act() -> None:
        ctx.cluster.isolate(index)
        await asyncio.sleep(hold_s)
        ctx.cluster.heal()

    await ctx.fault("partition: isolate leader", act)


async def split_two_one(ctx: Ctx, hold_s: float = 6.0) -> None:
    """A 2/1 split with a follower alone in the minority, then heal."""
    leader = await ctx.leader()
    minority = ctx.rng.choice([i for i in range(len(ctx.cluster.nodes)) if i != leader])

    async def act() -> None:
        ctx.cluster.split(minority)
        await asyncio.sleep(hold_s)
        ctx.cluster.heal()

    await ctx.fault("partition: split 2/1", act)


async def pause_leader(ctx: Ctx, hold_s: float | None = None) -> None:
    """SIGSTOP the stream leader for 1–10 s, then SIGCONT."""
    index = await ctx.leader()
    hold = hold_s if hold_s is not None else ctx.rng.uniform(1.0, 10.0)

    async def act() -> None:
        ctx.cluster.pause(index)
        try:
            await asyncio.sleep(hold)
        finally:
            ctx.cluster.resume(index)

    await ctx.fault("pause leader", act)


async def kill_node(ctx: Ctx, leader: bool = True, down_s: float = 3.0) -> None:
    """kill -9 a node (the stream leader, or a follower), restart it on its store."""
    index = await ctx.leader()
    if not leader:
        index = ctx.rng.choice([i for i in range(len(ctx.cluster.nodes)) if i != index])

    async def act() -> None:
        ctx.cluster.kill(index)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(ctx.cluster.restart, index)

    await ctx.fault("kill -9 leader" if leader else "kill -9 follower", act)


async def kill_service(ctx: Ctx, label: str | None = None) -> None:
    """kill -9 a service process and restart it as a supervisor would."""
    target = label or ctx.rng.choice(sorted(ctx.services.procs))
    await ctx.fault(
        f"kill -9 {target.split('-')[0]}", lambda: ctx.services.kill_and_restart(target)
    )


NEMESES: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "isolate_leader": isolate_leader,
    "split": split_two_one,
    "pause_leader": pause_leader,
    "kill_leader": kill_node,
    "kill_follower": lambda ctx: kill_node(ctx, leader=False),
    "kill_service": kill_service,
}


# --------------------------------------------------------------------------- one run


@dataclass
class RunShape:
    """How big a run is and what its nemesis does."""

    sessions: int
    clients_per_session: int = 2
    warmup_s: float = 3.0
    quiet_s: float = 3.0
    #: Stop starting faults once the history holds this many ops (0: no target), or once
    #: `max_s` passed (0: after the first round).
    target_ops: int = 0
    max_s: float = 60.0
    gateways: Sequence[dict[str, str]] = ({},)
    pause_s: float = 0.02
    #: The workload's operation weights (None: `history.MIX`).
    mix: dict[str, int] | None = None
    #: How long a client waits for an answer, its resends included.
    client_timeout_s: float = CLIENT_TIMEOUT_S
    #: The workload's NATS connections (the clients use them in turn); the first is the
    #: checker's.
    client_connections: int = 1


async def run_checked(
    cluster: ProxiedCluster,
    settings: Settings,
    out: Path,
    shape: RunShape,
    nemesis: Callable[[Ctx], Awaitable[None]],
    watch: Callable[[Ctx], Awaitable[None]] | None = None,
) -> tuple[Report, History, Faults]:
    """Start the services, run the workload under `nemesis` (and `watch`, cancelled at the
    end), heal, check. The history is at `out/history.jsonl`; the figures at
    `out/figures.json`."""
    runner = ServiceRunner(settings, out / "service-logs")
    services = Services(runner, settings)
    try:
        for n, env in enumerate(shape.gateways):
            services.start(f"gateway-{chr(97 + n)}", "gateway", env)
        services.start("projector-a", "projector")
        services.start("propagator-a", "propagator")
        nc = await connect(settings, "faults-checker")
        connections = [nc]
        try:
            for k in range(1, shape.client_connections):
                connections.append(await connect(settings, f"faults-client-{k}"))
            return await _drive(
                cluster, settings, out, shape, nemesis, services, connections, watch
            )
        finally:
            for connection in connections:
                await connection.close()
    finally:
        runner.stop_all()


async def _drive(
    cluster: ProxiedCluster,
    settings: Settings,
    out: Path,
    shape: RunShape,
    nemesis: Callable[[Ctx], Awaitable[None]],
    services: Services,
    connections: list[Client],
    watch: Callable[[Ctx], Awaitable[None]] | None,
) -> tuple[Report, History, Faults]:
    history = History(out / "history.jsonl")
    print(f"history: {history.path}")
    nc = connections[0]
    clients = [ReminderClient(c, timeout_s=shape.client_timeout_s) for c in connections]
    client = clients[0]
    sessions = [f"h{i}" for i in range(shape.sessions)]
    workload = Workload(
        clients, history, sessions, shape.clients_per_session, pause_s=shape.pause_s
    )
    if shape.mix is not None:
        workload.mix = dict(shape.mix)
    ctx = Ctx(cluster, services, nc, settings, history, Faults(), random.Random(23), connections)
    stop = asyncio.Event()
    load = asyncio.create_task(workload.run(stop))
    watching = asyncio.ensure_future(watch(ctx)) if watch is not None else None
    started = time.monotonic()
    try:
        await asyncio.sleep(shape.warmup_s)
        while True:
            await nemesis(ctx)
            await asyncio.sleep(shape.quiet_s)
            done_ops = shape.target_ops > 0 and len(history.ops) >= shape.target_ops
            if done_ops or time.monotonic() - started > shape.max_s or load.done():
                break
    finally:
        cluster.heal()
        for index in range(len(cluster.nodes)):
            cluster.resume(index)
        await asyncio.sleep(shape.quiet_s)  # recovered: the last ops must be acked
        stop.set()
        if watching is not None:
            watching.cancel()
        await asyncio.wait_for(load, timeout=60)
    report = await check_run(nc, client, settings.stream, settings.kv_bucket, history)
    figures = summarize(report, history, ctx.faults)
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))
    return report, history, ctx.faults


def rss_mib(pid: int) -> float | None:
    """Resident memory of a process, MiB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def longest_unavailable_s(history: History, start: float, end: float) -> float:
    """The longest time without an acked write in [start, end] (history time)."""
    acks = sorted(
        op.completed
        for op in history.ops
        if op.status == "ok"
        and op.request_id is not None
        and op.completed is not None
        and start <= op.completed <= end
    )
    points = [start, *acks, end]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def summarize(report: Report, history: History, faults: Faults) -> dict[str, Any]:
    """The figures a run prints and writes: ops, outcomes, faults, anomalies, unavailability."""
    worst: dict[str, float] = {}
    for kind, start, lasted in faults.done:
        gap = longest_unavailable_s(history, start, start + lasted + 10.0)
        worst[kind] = round(max(worst.get(kind, 0.0), gap), 2)
    return {
        "operations": len(history.ops),
        "outcomes": {k: v for k, v in report.counts.items() if k in {"ok", "fail", "info"}},
        "applied_writes": report.counts.get("applied", 0),
        "events": report.counts.get("events", 0),
        "sessions": report.counts.get("sessions", 0),
        "stale_flagged_reads": report.counts.get("stale_flagged", 0),
        "faults": faults.by_kind(),
        "longest_unavailable_s": worst,
        "anomalies": report.by_kind(),
        "history": str(history.path),
        "pid": os.getpid(),
    }
