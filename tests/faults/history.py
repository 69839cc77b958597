"""A recorded history: concurrent clients on many sessions, every operation written as it is
invoked and as it completes, as JSON Lines, then checked against the log.

Each client runs one session's mix of commands (`inject` with and without a mode, `clear`,
`revoke`, `render`, `end_turn`, `checkpoint`, `handoff`, each with its own `request_id`) and
reads (`state` with `min_seq` = the highest `session_seq` the client has seen,
`pending_injections`). Several clients may share a session, so real-time order matters. A
command is never retried: its outcome is `ok`, `fail` (a definite error) or `info`
(indeterminate: a timeout, `unavailable`, a lost connection).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from nats.aio.client import Client

from client.sdk import ReminderClient
from contracts.errors import ReminderError
from contracts.stored import StoredEvent
from contracts.subjects import last_token
from replay.rebuild import verify_projection
from replay.source import EVENT_FILTER, iterate_stream
from replay.verify import verify
from services.adapters.leader_quorum import heard_lately
from services.projector.partitions import DURABLE as PROJECTOR_DURABLE
from tests.faults.checker import INDETERMINATE_CODES, Anomaly, Event, Op, Report, check

#: How often each operation is picked (relative weights).
MIX: dict[str, int] = {
    "inject": 30,
    "inject_queued": 8,
    "clear": 4,
    "revoke": 5,
    "render": 10,
    "end_turn": 8,
    "checkpoint": 6,
    # A long session's context is compacted now and then, as an agent's is: it clears the
    # delivered history, which otherwise grows with every render for the whole run.
    "compact": 1,
    "handoff": 2,
    "state": 20,
    "pending_injections": 7,
}


class Requester(Protocol):
    """What a client of the workload needs: `ReminderClient.request`'s shape."""

    async def request(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one command or query; the reply as a dict."""
        ...


class History:
    """The operations of a run, in memory and as JSON Lines at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self.ops: list[Op] = []
        self.started = time.monotonic()

    def now(self) -> float:
        """Seconds since the history started (monotonic)."""
        return time.monotonic() - self.started

    def _write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")

    def invoke(
        self, client: str, op: str, session_id: str, request_id: str | None, payload: dict[str, Any]
    ) -> Op:
        """Record the start of an operation."""
        record = Op(len(self.ops), client, op, session_id, request_id, self.now(), payload)
        self.ops.append(record)
        self._write(
            {
                "type": "invoke",
                "op_id": record.op_id,
                "client": client,
                "op": op,
                "session_id": session_id,
                "request_id": request_id,
                "t": record.invoked,
                "payload": payload,
            }
        )
        return record

    def complete(self, record: Op, status: str, reply: dict[str, Any]) -> None:
        """Record how an operation ended: `ok`, `fail` or `info`."""
        record.completed, record.status, record.reply = self.now(), status, reply
        self._write({"type": status, "op_id": record.op_id, "t": record.completed, "reply": reply})

    def close(self) -> None:
        """Flush the file (the ops stay in memory)."""
        self._file.close()

    def acked(self) -> int:
        """Operations answered ok."""
        return sum(1 for op in self.ops if op.status == "ok")


def _kept(op: str, reply: dict[str, Any]) -> dict[str, Any]:
    """What the history keeps of a reply: everything the checker reads, no bodies."""
    if not reply.get("ok"):
        return reply
    if op == "state":
        state = reply.get("state") or {}
        return {
            "ok": reply.get("ok"),
            "stale": reply.get("stale"),
            "state": {"session_seq": state.get("session_seq", 0)},
        }
    if op == "pending_injections":
        return {"ok": reply.get("ok"), "pendingCount": reply.get("pendingCount")}
    if op == "render":
        envelope = reply.get("envelope")
        kept = {k: v for k, v in reply.items() if k not in {"envelope", "summary"}}
        kept["envelope"] = None if envelope is None else {"ids": envelope.get("directive_ids")}
        return kept
    return reply


def status_of(reply: dict[str, Any]) -> str:
    """`ok`, `fail` (definite) or `info` (indeterminate) for a reply."""
    if reply.get("ok"):
        return "ok"
    code = (reply.get("error") or {}).get("code")
    return "info" if code in INDETERMINATE_CODES else "fail"


@dataclass
class SessionScript:
    """What the clients of one session share: its turn and its queued reminders."""

    session_id: str
    turn: int = 0
    queued: list[str] = field(default_factory=list)
    children: int = 0


@dataclass
class Workload:
    """Clients × sessions, each client picking operations from `MIX` until `stop` is set
    (or `ops_per_client` ran). `clients` are the connections used, round robin."""

    clients: Sequence[Requester]
    history: History
    sessions: Sequence[str]
    clients_per_session: int = 2
    pause_s: float = 0.02
    ops_per_client: int = 1_000_000
    seed: int = 23
    mix: dict[str, int] = field(default_factory=lambda: dict(MIX))
    children: list[str] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        """Run every client until `stop`."""
        scripts = [SessionScript(s) for s in self.sessions]
        tasks = [
            self._client(f"{script.session_id}/c{k}", script, index * 7 + k, stop)
            for index, script in enumerate(scripts)
            for k in range(self.clients_per_session)
        ]
        await asyncio.gather(*tasks)

    async def _client(self, name: str, script: SessionScript, n: int, stop: asyncio.Event) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        client = self.clients[n % len(self.clients)]
        seen = 0
        names, weights = list(self.mix), list(self.mix.values())
        for i in range(self.ops_per_client):
            if stop.is_set():
                return
            choice = rng.choices(names, weights)[0]
            op, payload = self._command(choice, script, rng, seen)
            request_id = f"{name}-{i}" if op not in {"state", "pending_injections"} else None
            if request_id is not None:
                payload["request_id"] = request_id
            record = self.history.invoke(name, op, script.session_id, request_id, payload)
            try:
                reply = await client.request(op, payload)
            except ReminderError as exc:
                self.history.complete(
                    record, "info", {"error": {"code": "no_answer", "message": str(exc)}}
                )
                await asyncio.sleep(0.1)
                continue
            except Exception as exc:  # the connection itself is reconnecting
                self.history.complete(
                    record, "info", {"error": {"code": "connection_lost", "message": repr(exc)}}
                )
                await asyncio.sleep(0.1)
                continue
            status = status_of(reply)
            self.history.complete(record, status, _kept(op, reply))
            if status == "ok":
                seen = max(seen, _seq_in(op, reply))
                self._learn(op, payload, reply, script)
            await asyncio.sleep(self.pause_s)

    def _command(
        self, choice: str, script: SessionScript, rng: random.Random, seen: int
    ) -> tuple[str, dict[str, Any]]:
        session_id = script.session_id
        base: dict[str, Any] = {"session_id": session_id}
        if choice in {"inject", "inject_queued"}:
            reminder: dict[str, Any] = {
                "body": f"check the build #{rng.randrange(10_000)}",
                "tags": [f"t{rng.randrange(3)}"],
                "ttl_turns": rng.choice([None, 1, 3]),
                "propagate": "all",
            }
            if rng.random() < 0.5:
                reminder["dedupe_key"] = f"k{rng.randrange(4)}"
            payload = {**base, "reminder": {k: v for k, v in reminder.items() if v is not None}}
            if choice == "inject_queued":
                payload["mode"] = rng.choice(["finish_step", "interrupt_immediate"])
            return "inject", payload
        if choice == "clear":
            return "clear", {**base, "selector": {"tag": f"t{rng.randrange(3)}"}}
        if choice == "revoke":
            target = rng.choice(script.queued) if script.queued else "never-seen"
            return "revoke", {**base, "reminder_id": target}
        if choice == "compact":
            return "compact", {**base, "turn": script.turn}
        if choice in {"render", "checkpoint"}:
            extra = {"seam": "iteration_start"} if choice == "checkpoint" else {}
            return choice, {**base, "turn": script.turn, **extra}
        if choice == "end_turn":
            script.turn += 1
            return "end_turn", {**base, "turn": script.turn - 1}
        if choice == "handoff":
            script.children += 1
            child = f"{session_id}-child{script.children}"
            self.children.append(child)
            return "handoff", {**base, "child_session_id": child}
        if choice == "state":
            return "state", {**base, "min_seq": seen, "timeout_ms": 2000}
        return "pending_injections", base

    @staticmethod
    def _learn(
        op: str, payload: dict[str, Any], reply: dict[str, Any], script: SessionScript
    ) -> None:
        if op == "inject" and payload.get("mode") and reply.get("reminder_id"):
            script.queued = [*script.queued[-20:], str(reply["reminder_id"])]


def _seq_in(op: str, reply: dict[str, Any]) -> int:
    if op == "state":
        return 0 if reply.get("stale") else int((reply.get("state") or {}).get("session_seq", 0))
    seq = reply.get("session_seq")
    return seq if isinstance(seq, int) else 0


# --------------------------------------------------------------------------- the check


async def replicas_current(nc: Client, stream: str, bound_s: float = 90.0) -> None:
    """Wait (bounded) until the stream's leader has heard from every replica lately and
    sees each current: the log is read with direct gets, which the replica nearest the
    reader answers, and a node that rejoins after a partition answers from its own store
    until it caught up (found in CI: an inject the majority had acked looked "lost" when the
    read came from the isolated former leader, whose /healthz already passed). Asked of
    such a node before it has rejoined, `STREAM.INFO` still names itself leader and its
    followers current; only how long ago it heard from them (`active`, the rule of
    `services.adapters.leader_quorum`) tells, so that is checked too."""
    deadline = time.monotonic() + bound_s
    seen = "no answer"
    passed: tuple[str, int] | None = None  # (leader, last seq) of the last answer that passed
    while time.monotonic() < deadline:
        try:
            reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=2.0)
            info = json.loads(reply.data)
        except Exception as exc:  # an election in progress: ask again
            seen = type(exc).__name__
        else:
            if isinstance(info, dict) and "error" not in info and "cluster" not in info:
                return  # a single server: nothing to wait for
            cluster = (info.get("cluster") if isinstance(info, dict) else None) or {}
            peers = cluster.get("replicas") or []
            if cluster.get("leader") and all(
                peer.get("current") and heard_lately(peer) for peer in peers
            ):
                # Twice in a row, the same: a former leader whose routes just came back
                # hears from its followers a moment before it learns it was replaced.
                now = (str(cluster["leader"]), int((info.get("state") or {}).get("last_seq", 0)))
                if passed == now:
                    return
                passed = now
                await asyncio.sleep(0.5)
                continue
            passed = None
            seen = f"{info}"[:400]
        await asyncio.sleep(0.2)
    raise AssertionError(f"stream {stream} never had every replica current: {seen}")


async def logs_of(
    nc: Client, stream: str
) -> tuple[dict[str, list[Event]], dict[str, list[StoredEvent]]]:
    """Every session's events (checker form, and as stored), read from the stream once
    every replica is current (`replicas_current`)."""
    await replicas_current(nc, stream)
    stored: dict[str, list[StoredEvent]] = {}
    async for row in iterate_stream(nc, stream, EVENT_FILTER):
        stored.setdefault(last_token(row.subject), []).append(row)
    logs: dict[str, list[Event]] = {}
    by_session: dict[str, list[StoredEvent]] = {}
    for rows in stored.values():
        session_id = str(rows[0].envelope["session_id"])
        logs[session_id] = [Event.of(row.envelope, row.stream_seq) for row in rows]
        by_session[session_id] = rows
    return logs, by_session


async def caught_up(
    client: ReminderClient, sessions: Sequence[str], bound_s: float = 90
) -> list[str]:
    """Wait (bounded) until the projection applied every session's last event; returns the
    sessions still stale at the bound."""
    deadline = time.monotonic() + bound_s
    behind = list(sessions)
    while behind and time.monotonic() < deadline:
        still: list[str] = []
        for session_id in behind:
            try:
                reply = await client.request(
                    "state", {"session_id": session_id, "timeout_ms": 5000}
                )
            except ReminderError:
                still.append(session_id)
                continue
            if not (reply.get("ok") and reply.get("stale") is False):
                still.append(session_id)
        behind = still
    return behind


async def check_run(
    nc: Client, client: ReminderClient, stream: str, bucket: str, history: History
) -> Report:
    """The checker over the history and the log, plus: the projection equals a replay for
    every session (`verify-projection --all`) and `replay --verify` is clean for each."""
    history.close()
    logs, stored = await logs_of(nc, stream)
    report = check(history.ops, logs)
    behind = await caught_up(client, sorted(stored))
    consumer = await _projector_consumer(nc, stream) if behind else ""
    for session_id in behind:
        rows = stored[session_id]
        last = (
            f"log {rows[-1].envelope.get('session_seq')}@{rows[-1].stream_seq}"
            if rows
            else "log empty"
        )
        projected = await _projected(client, session_id)
        report.anomalies.append(
            Anomaly(
                "projection behind",
                session_id,
                f"never caught up: {last}, projected {projected}; {consumer}",
            )
        )
    # The bucket is read by direct gets too: from a replica that is current, as the log is.
    await replicas_current(nc, f"KV_{bucket}")
    _, mismatches = await verify_projection(nc, stream, bucket)
    for mismatch in mismatches:
        report.anomalies.append(Anomaly("projection differs", mismatch.token, mismatch.reason))
    for session_id, rows in stored.items():
        problem = verify(rows)
        if problem is not None:
            report.anomalies.append(Anomaly("replay --verify", session_id, problem))
    report.counts["sessions"] = len(stored)
    return report


async def _projected(client: ReminderClient, session_id: str) -> str:
    """`session_seq@stream_seq` of the session's projection as a `state` query sees it."""
    try:
        reply = await client.request("state", {"session_id": session_id, "timeout_ms": 0})
    except ReminderError as exc:
        return f"unreadable ({exc.code})"
    state = reply.get("state") or {}
    degraded = state.get("degraded")
    return f"{state.get('session_seq')}@{state.get('stream_seq')}" + (
        f" degraded {degraded}" if degraded else ""
    )


async def _projector_consumer(nc: Client, stream: str) -> str:
    """The projector's durable as the server sees it, for a run whose projection stalled."""
    try:
        info = await nc.jetstream().consumer_info(stream, PROJECTOR_DURABLE)
    except Exception as exc:  # a diagnostic only: the anomaly stands without it
        return f"consumer info failed: {type(exc).__name__}"
    return (
        f"consumer pending {info.num_pending}, ack pending {info.num_ack_pending}, "
        f"redelivered {info.num_redelivered}, waiting {info.num_waiting}, "
        f"delivered {info.delivered.stream_seq}, ack floor {info.ack_floor.stream_seq}"
    )
