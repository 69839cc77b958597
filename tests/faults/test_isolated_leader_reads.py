"""Found by the history checker's long form (issue #23): a stream leader cut off from its
cluster keeps answering `STREAM.MSG.GET` until it notices the lost quorum (about 10 s), from
a log the new leader, elected on the other side, has written past. A gateway connected to
that node took the session's last sequence from it, so a `state` query answered
`stale: false` below a write the majority had acknowledged a second before, and a command
that appends nothing was confirmed on the same stale answer.

Here, on a proxied 3-node R3 cluster: one in-process gateway on the leader's node, one on
another node; the leader is isolated, the second gateway's injects are acknowledged by the
new leader, and the first gateway's reads right after must not miss them: a query answers
`stale: true` (or not at all), a no-op command `unavailable`. The recorded history is
checked like every other (no stale read).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nats
import orjson

from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from tests.faults.checker import check
from tests.faults.history import History, logs_of, status_of
from tests.faults.nemesis import ProxiedCluster, stream_leader
from tests.faults.runs import provisioned

SESSION = "isolated-reads"


async def test_a_gateway_on_an_isolated_leader_never_answers_below_an_acked_write(
    proxied: ProxiedCluster, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=proxied.url, replicas=3)
    await provisioned(settings)
    urls = [f"nats://127.0.0.1:{node.port}" for node in proxied.nodes]
    admin = await nats.connect(servers=urls)
    leader = await stream_leader(admin, settings.stream, proxied)
    other = (leader + 1) % len(urls)
    # Each gateway pinned to one node, as a gateway whose server is cut off stays connected.
    on_leader = await nats.connect(servers=[urls[leader]], max_reconnect_attempts=0)
    on_other = await nats.connect(servers=[urls[other]], max_reconnect_attempts=0)
    committers = [GroupCommitter(on_leader, timeout_s=1.0), GroupCommitter(on_other)]
    for committer in committers:
        committer.start()
    isolated, majority = (
        CommandService(nc, settings, committer)
        for nc, committer in zip((on_leader, on_other), committers, strict=True)
    )
    history = History(tmp_path / "history.jsonl")
    count = 0

    async def send(gateway: CommandService, client: str, op: str, **fields: Any) -> dict[str, Any]:
        nonlocal count
        count += 1
        payload = {"session_id": SESSION, "request_id": f"{client}-{count}", **fields}
        if op == "state":
            payload = {"session_id": SESSION, "min_seq": 0, "timeout_ms": 500}
        record = history.invoke(client, op, SESSION, payload.get("request_id"), payload)
        reply = await gateway.handle(op, orjson.dumps(payload))
        history.complete(record, status_of(reply), reply)
        return reply

    try:
        assert (await send(isolated, "iso", "render", turn=0))["ok"]  # caches the session
        # Healthy, the leader's answers are trusted (the bucket's stream may still be
        # electing its leader just after provisioning: a bounded wait for that).
        until = time.monotonic() + 30
        healthy = await send(isolated, "iso", "state")
        while not (healthy["ok"] and healthy["stale"] is False) and time.monotonic() < until:
            await asyncio.sleep(0.5)
            healthy = await send(isolated, "iso", "state")
        assert healthy["ok"] and healthy["stale"] is False, healthy

        proxied.isolate(leader)
        acked = None
        until = time.monotonic() + 40
        while acked is None and time.monotonic() < until:
            reply = await send(majority, "maj", "inject", reminder={"body": "after the cut"})
            acked = reply.get("session_seq") if reply.get("ok") else None
        assert acked is not None, "the majority never elected a leader"
        # At once, while the cut-off leader still believes it leads.
        read = await send(isolated, "iso", "state")
        no_op = await send(isolated, "iso", "render", turn=0)
        assert not (read.get("ok") and read["stale"] is False), read
        assert not no_op.get("ok"), no_op
    finally:
        proxied.heal()
        history.close()
        for committer in committers:
            await committer.stop()
        for nc in (on_leader, on_other):
            await nc.close()
    # The log is read once every node is current again (a rejoining one may serve reads).
    for node in proxied.nodes:
        await asyncio.to_thread(node.wait_healthy, 60.0)
    logs, _ = await logs_of(admin, settings.stream)
    await admin.close()
    report = check(history.ops, logs)
    assert report.anomalies == [], report.summary()
