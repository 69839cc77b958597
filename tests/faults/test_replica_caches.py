"""Found by the history checker with two gateway replicas (issue #23): a command that appends
nothing is decided on the replica's cached session without a look at the log, so a replica
whose cache is behind answers from a state missing a write another replica acked before the
command was sent — a `render` that says nothing is due while an acked reminder is pending.

Deterministic: two in-process gateways (each its own session cache) on one server; the
checker must find no stale read.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from nats.aio.client import Client

from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from tests.faults.checker import check
from tests.faults.history import History, logs_of, status_of


async def test_a_no_op_on_one_replica_sees_a_write_acked_by_another(
    nc: Client, provisioned: Settings, tmp_path: Path
) -> None:
    committers = [GroupCommitter(nc), GroupCommitter(nc)]
    replicas = []
    for committer in committers:
        committer.start()
        replicas.append(CommandService(nc, provisioned, committer))
    history = History(tmp_path / "history.jsonl")
    steps: list[tuple[int, str, dict[str, object]]] = [
        (1, "render", {"turn": 0}),  # replica B caches the empty session
        (0, "inject", {"reminder": {"body": "run the tests"}}),  # replica A appends
        (1, "render", {"turn": 0}),  # B must render it (or at least see session_seq 1)
    ]
    try:
        for n, (replica, op, extra) in enumerate(steps):
            payload: dict[str, object] = {
                "session_id": "two-replicas",
                "request_id": f"r{n}",
                **extra,
            }
            record = history.invoke(f"c{replica}", op, "two-replicas", f"r{n}", payload)
            reply = await replicas[replica].handle(op, orjson.dumps(payload))
            history.complete(record, status_of(reply), reply)
    finally:
        history.close()
        for committer in committers:
            await committer.stop()
    logs, _ = await logs_of(nc, provisioned.stream)
    report = check(history.ops, logs)
    assert report.anomalies == [], report.summary()
    assert history.ops[-1].reply.get("envelope") is not None
