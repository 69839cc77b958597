"""What the fault suite drives and checks: a 3-node cluster on loopback, a bounded command load
that records every reply, supervisor-like restarts, and the log/projection checks.

Everything is bounded: a fixed number of commands per session, client timeouts, and waits with
deadlines. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from cli.embedded import EmbeddedNats, EmbeddedServerError, free_port, nats_server_binary
from cli.provision import provision_all
from cli.supervisor import ServiceProcess, spawn_service, wait_ready
from client.sdk import ReminderClient
from contracts.decode import decode
from contracts.errors import ReminderError
from contracts.events import HandedOff
from contracts.state import SessionState
from core import fold_all
from replay.rebuild import verify_projection
from services.adapters.connection import connect
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.processes import ServiceRunner

# --------------------------------------------------------------------------- the cluster


#: The route pings of k8s/base/nats.conf: a frozen node's routes (and the subscriptions
#: they carry, a gateway's queue subscription among them) are dropped within 3–4 s.
ROUTE_PINGS = '  ping_interval: "1s"\n  ping_max: 3\n'


#: A free port below the ephemeral range, for a server started later (see `free_port`).
listen_port = free_port


class ClusterNode(EmbeddedNats):
    """One nats-server of a loopback cluster, configured from its own file."""

    def __init__(self, name: str, root: Path, cluster_port: int, routes: list[str]) -> None:
        super().__init__(
            root / name / "store",
            port=listen_port(),
            monitor_port=listen_port(),
            config_file=root / name / "server.conf",
        )
        self.name = name
        self.cluster_port = cluster_port
        self.routes = routes

    def write_config(self) -> None:
        """`server_name`, `jetstream { store_dir }` and `cluster { name, listen, routes }`."""
        assert self.config_file is not None
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        routes = ", ".join(f'"{route}"' for route in self.routes)
        self.config_file.write_text(
            f'server_name: "{self.name}"\n'
            f'listen: "{self.host}:{self.port}"\n'
            f'http: "{self.host}:{self.monitor_port}"\n'
            f'jetstream {{ store_dir: "{self.store_dir}" }}\n'
            f"cluster {{\n"
            f'  name: "reminders-faults"\n'
            f'  listen: "{self.host}:{self.cluster_port}"\n'
            f"  routes: [{routes}]\n"
            f"{ROUTE_PINGS}"
            f"}}\n",
            encoding="utf-8",
        )

    def command(self) -> list[str]:
        """Only the config file: `-n`/`-sd` flags would override the cluster's names."""
        assert self.config_file is not None
        return [nats_server_binary(), "-c", str(self.config_file)]

    def spawn(self) -> None:
        """Start the process without waiting (a cluster is healthy only once peers meet)."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def last_log_lines(self, count: int = 3) -> str:
        """The end of the server's log (why it exited), for the error of a test that failed
        before any artefact of it could be kept."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "no log"
        return " | ".join(lines[-count:])

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Block until /healthz answers 200 (JetStream recovered and current)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise EmbeddedServerError(
                    f"{self.name} exited; see {self.log_path}: {self.last_log_lines()}"
                )
            if self.healthy():
                return
            time.sleep(0.1)
        raise EmbeddedServerError(f"{self.name} not healthy after {timeout_s}s; {self.log_path}")


class Cluster:
    """Three nats-server processes with cluster routes to each other, JetStream on each."""

    def __init__(self, root: Path, size: int = 3) -> None:
        cluster_ports = [listen_port() for _ in range(size)]
        routes = [f"nats-route://127.0.0.1:{port}" for port in cluster_ports]
        self.nodes = [
            ClusterNode(f"n{index + 1}", root, port, routes)
            for index, port in enumerate(cluster_ports)
        ]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what `REMINDERS_NATS_URL` takes)."""
        return ",".join(node.url for node in self.nodes)

    def start(self) -> None:
        """Start every node and wait until each is healthy."""
        for node in self.nodes:
            node.write_config()
            node.spawn()
        for node in self.nodes:
            node.wait_healthy()

    def kill(self, index: int) -> None:
        """SIGKILL one node."""
        self.nodes[index].stop(signal.SIGKILL)

    def restart(self, index: int) -> None:
        """Start a killed node again on the same store and ports; wait until healthy."""
        node = self.nodes[index]
        node.spawn()
        node.wait_healthy()

    def stop(self) -> None:
        """Kill every node (the test's store is thrown away)."""
        for node in self.nodes:
            node.stop(signal.SIGKILL)


# --------------------------------------------------------------------------- supervision


@dataclass
class Supervised:
    """Service processes restarted the way `reminders up` does: same port, same log."""

    runner: ServiceRunner
    settings: Settings
    extra_env: dict[str, str]
    by_name: dict[str, ServiceProcess] = field(default_factory=dict)

    def start(self, name: str) -> None:
        """Start one service and wait until it is ready."""
        self.by_name[name] = self.runner.start(name, extra_env=self.extra_env)

    async def kill_and_restart(self, name: str, down_s: float = 0.3) -> None:
        """SIGKILL the service, leave it down a moment, start it on the same port."""
        old = self.by_name[name]
        await asyncio.to_thread(self.runner.kill, old)
        await asyncio.sleep(down_s)
        new = spawn_service(
            name, self.settings, old.log_path, self.extra_env, http_port=old.http_port
        )
        self.runner.running.append(new)
        self.by_name[name] = new
        await asyncio.to_thread(wait_ready, [new], 60.0)


# --------------------------------------------------------------------------- the load


@dataclass
class Outcome:
    """One command sent by the load: when, what came back."""

    session_id: str
    request_id: str
    op: str
    sent_at: float
    answered_at: float
    kind: str  # ok | unavailable | conflict | no_answer | <other error code>
    session_seq: int | None = None
    retry_after_ms: int | None = None


@dataclass
class Load:
    """A bounded loop of commands from several concurrent sessions, every reply recorded.

    Each session sends `per_session` commands one after another: mostly `inject` with a
    rotating `dedupe_key` (two events per command once the key is live), every seventh an
    `end_turn`, and with `handoffs` every tenth a `handoff` to a new child session (which
    the propagator then fills through the gateway). Each command has its own `request_id`
    and is sent once; an answer that is not `ok` is recorded, not retried.
    """

    client: ReminderClient
    sessions: Sequence[str]
    per_session: int
    tail: int = 10
    pause_s: float = 0.03
    handoffs: bool = False
    children: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    started_at: float = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Run every session's loop: until `stop` is set, then `tail` more commands each
        (never more than `per_session` in all)."""
        self.started_at = time.monotonic()
        await asyncio.gather(*(self._session(session_id, stop) for session_id in self.sessions))

    async def _session(self, session_id: str, stop: asyncio.Event) -> None:
        turn = 0
        tail = self.tail
        for n in range(self.per_session):
            if stop.is_set():
                if tail == 0:
                    return
                tail -= 1
            request_id = f"{session_id}-{n}"
            payload: dict[str, Any]
            if n % 7 == 6:
                turn += 1
                op, payload = "end_turn", {"session_id": session_id, "turn": turn}
            elif self.handoffs and n % 10 == 9:
                child = f"{session_id}-child-{n}"
                self.children.append(child)
                op, payload = "handoff", {"session_id": session_id, "child_session_id": child}
            else:
                op = "inject"
                payload = {
                    "session_id": session_id,
                    "reminder": {
                        "body": f"{session_id} #{n}",
                        "dedupe_key": f"k{n % 4}",
                        "propagate": "all",
                    },
                }
            payload["request_id"] = request_id
            sent = time.monotonic()
            try:
                reply = await self.client.request(op, payload)
            except ReminderError:
                self.outcomes.append(
                    Outcome(session_id, request_id, op, sent, time.monotonic(), "no_answer")
                )
                await asyncio.sleep(0.2)
                continue
            except Exception:  # the client connection itself is reconnecting
                self.outcomes.append(
                    Outcome(session_id, request_id, op, sent, time.monotonic(), "no_answer")
                )
                await asyncio.sleep(0.2)
                continue
            answered = time.monotonic()
            if reply.get("ok"):
                self.outcomes.append(
                    Outcome(
                        session_id, request_id, op, sent, answered, "ok", int(reply["session_seq"])
                    )
                )
            else:
                error = reply.get("error") or {}
                details = error.get("details") or {}
                retry = details.get("retry_after_ms")
                self.outcomes.append(
                    Outcome(
                        session_id,
                        request_id,
                        op,
                        sent,
                        answered,
                        str(error.get("code")),
                        retry_after_ms=int(retry) if retry is not None else None,
                    )
                )
            await asyncio.sleep(self.pause_s)

    def last_acked(self) -> list[str]:
        """Sessions whose last command was not acked (empty once the service recovered)."""
        last: dict[str, str] = {}
        for outcome in self.outcomes:
            last[outcome.session_id] = outcome.kind
        return [session_id for session_id in self.sessions if last.get(session_id) != "ok"]

    def count(self, kind: str) -> int:
        """How many commands ended as `kind`."""
        return sum(1 for outcome in self.outcomes if outcome.kind == kind)

    def kinds(self) -> dict[str, int]:
        """Commands per outcome."""
        return dict(Counter(outcome.kind for outcome in self.outcomes))

    def window(self, start: float, length_s: float = 5.0) -> dict[str, int]:
        """Outcomes answered within `length_s` after `start` (a kill)."""
        return dict(
            Counter(
                outcome.kind
                for outcome in self.outcomes
                if start <= outcome.answered_at < start + length_s
            )
        )

    def longest_gap_s(self, start: float | None = None, end: float | None = None) -> float:
        """The longest time between two consecutive acks (or the run's edges) in [start, end]."""
        start = self.started_at if start is None else start
        acks = sorted(o.answered_at for o in self.outcomes if o.kind == "ok")
        end = (max(acks) if acks else start) if end is None else end
        points = [start, *(t for t in acks if start <= t <= end), end]
        return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


# --------------------------------------------------------------------------- the checks


@dataclass
class LogCheck:
    """What the log says about the load's commands."""

    acked: int
    lost: list[str]
    duplicated: list[str]
    gaps: list[str]
    wrong_seq: list[str]
    events: int


async def provision_cluster(settings: Settings, name: str) -> None:
    """Provision a cluster that may still be forming: `provision_all` itself retries, within
    its bound, while the meta leader is being elected (no suitable peers, timeouts)."""
    nc = await connect(settings, name)
    try:
        await provision_all(nc, settings)
    finally:
        await nc.close()


async def check_log(nc: Client, settings: Settings, load: Load) -> LogCheck:
    """Every acked command's events are in the log exactly once, with contiguous
    `session_seq` per session; the acked `session_seq` is its command's last event."""
    lost: list[str] = []
    duplicated: list[str] = []
    gaps: list[str] = []
    wrong_seq: list[str] = []
    total = 0
    for session_id in [*load.sessions, *load.children]:
        stored = await read_session(nc, settings.stream, session_id, timeout_s=10)
        events = [decode(item.envelope) for item in stored]
        total += len(events)
        seqs = [event.session_seq for event in events]
        if seqs != list(range(1, len(seqs) + 1)):
            gaps.append(f"{session_id}: session_seq {seqs[:5]}…")
        ids = Counter(event.event_id for event in events)
        duplicated += [f"event {event_id}" for event_id, n in ids.items() if n > 1]
        commands_of: dict[str, set[str]] = {}
        last_seq_of: dict[str, int] = {}
        for event in events:
            if event.request_id is not None:
                commands_of.setdefault(event.request_id, set()).add(event.command_id)
                last_seq_of[event.command_id] = event.session_seq
        for request_id, command_ids in commands_of.items():
            if len(command_ids) > 1:
                duplicated.append(f"{request_id} decided {len(command_ids)} times")
        for outcome in load.outcomes:
            if outcome.session_id != session_id or outcome.kind != "ok":
                continue
            command_ids = commands_of.get(outcome.request_id, set())
            if not command_ids:
                lost.append(outcome.request_id)
            elif outcome.session_seq not in {last_seq_of[c] for c in command_ids}:
                wrong_seq.append(f"{outcome.request_id} acked {outcome.session_seq}")
    return LogCheck(load.count("ok"), lost, duplicated, gaps, wrong_seq, total)


async def projection_clean(
    nc: Client, client: ReminderClient, settings: Settings, load: Load
) -> tuple[int, list[str]]:
    """Wait until the projector caught up with every session, then `verify-projection --all`."""
    for session_id in [*load.sessions, *load.children]:
        last: Any = None
        for _ in range(6):  # bounded: 6 × 10 s; the query waits for the log's last event
            last = await client.request("state", {"session_id": session_id, "timeout_ms": 10_000})
            if last.get("ok") and last["stale"] is False:
                break
        assert last is not None and last.get("ok") and last["stale"] is False, (session_id, last)
    checked, mismatches = await verify_projection(nc, settings.stream, settings.kv_bucket)
    return checked, [f"{m.token}: {m.reason}" for m in mismatches]


async def handoffs_inherited(nc: Client, settings: Settings, load: Load) -> list[str]:
    """Every `handed_off` event in the log was applied to its child exactly once (the child's
    state lists it in `inherited_from`); returns the handoffs that were not."""
    missing: list[str] = []
    for session_id in load.sessions:
        stored = await read_session(nc, settings.stream, session_id, timeout_s=10)
        for item in stored:
            event = decode(item.envelope)
            if not isinstance(event.payload, HandedOff):
                continue
            child = event.payload.child_session_id
            folded = fold_all(
                SessionState(),
                [
                    (decode(row.envelope), row.stream_seq)
                    for row in await read_session(nc, settings.stream, child, timeout_s=10)
                ],
            )
            if event.event_id not in folded.inherited_from:
                missing.append(f"{session_id} -> {child}")
    return missing
