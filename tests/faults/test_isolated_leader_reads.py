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
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import orjson
from nats.aio.client import Client

from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from tests.faults.checker import check
from tests.faults.history import History, logs_of, status_of
from tests.faults.nemesis import ProxiedCluster, stream_leader
from tests.faults.runs import provisioned

SESSION = "isolated-reads"


class RecordedGateways:
    """Calls through the in-process gateways of `pinned_gateways`, every one recorded in
    one history."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._count = 0

    async def send(
        self, gateway: CommandService, client: str, op: str, **fields: Any
    ) -> dict[str, Any]:
        """One command or query through `gateway`, recorded as `client`'s."""
        self._count += 1
        payload = {"session_id": SESSION, "request_id": f"{client}-{self._count}", **fields}
        if op == "state":
            payload = {"session_id": SESSION, "min_seq": 0, "timeout_ms": 500}
        record = self.history.invoke(client, op, SESSION, payload.get("request_id"), payload)
        reply = await gateway.handle(op, orjson.dumps(payload))
        self.history.complete(record, status_of(reply), reply)
        return reply

    async def trusted_while_healthy(self, gateway: CommandService) -> None:
        """Cache the session with a no-op, then wait (bounded: the bucket's stream may still
        be electing its leader) until `gateway`'s `state` is trusted."""
        assert (await self.send(gateway, "iso", "render", turn=0))["ok"]
        until = time.monotonic() + 30
        healthy = await self.send(gateway, "iso", "state")
        while not (healthy["ok"] and healthy["stale"] is False) and time.monotonic() < until:
            await asyncio.sleep(0.5)
            healthy = await self.send(gateway, "iso", "state")
        assert healthy["ok"] and healthy["stale"] is False, healthy

    async def acked_by_majority(self, gateway: CommandService) -> int:
        """Inject through the majority's gateway until a new leader acknowledges it."""
        until = time.monotonic() + 40
        while time.monotonic() < until:
            reply = await self.send(gateway, "maj", "inject", reminder={"body": "after the cut"})
            if reply.get("ok"):
                return int(reply["session_seq"])
        raise AssertionError("the majority never elected a leader")

    async def never_below(self, gateway: CommandService) -> None:
        """At once after the majority's ack: the cut-off gateway neither answers a query as
        current nor confirms a command that appends nothing."""
        read = await self.send(gateway, "iso", "state")
        no_op = await self.send(gateway, "iso", "render", turn=0)
        assert not (read.get("ok") and read["stale"] is False), read
        assert not no_op.get("ok"), no_op


@contextlib.asynccontextmanager
async def pinned_gateways(
    settings: Settings, proxied: ProxiedCluster, cut_off: int, majority: int, history: Path
) -> AsyncIterator[tuple[RecordedGateways, CommandService, CommandService]]:
    """A gateway on node `cut_off` and one on node `majority`, each with its own connection
    and committer, their calls recorded in the history at `history`; on the way out the
    gateways stop, every route heals and the history is closed."""
    recorded = RecordedGateways(History(history))
    # Each pinned to its node, as a gateway whose server is cut off stays connected to it.
    connections = [
        await nats.connect(servers=[proxied.nodes[index].url], max_reconnect_attempts=0)
        for index in (cut_off, majority)
    ]
    committers = [GroupCommitter(connections[0], timeout_s=1.0), GroupCommitter(connections[1])]
    for committer in committers:
        committer.start()
    try:
        yield (
            recorded,
            CommandService(connections[0], settings, committers[0]),
            CommandService(connections[1], settings, committers[1]),
        )
    finally:
        for committer in committers:
            await committer.stop()
        for nc in connections:
            await nc.close()
        proxied.heal()
        recorded.history.close()


async def checked_history(
    proxied: ProxiedCluster, admin: Client, stream: str, history: History
) -> None:
    """Once every node is current again (a rejoining one may serve reads), the recorded
    history shows no anomaly against the log."""
    for node in proxied.nodes:
        await asyncio.to_thread(node.wait_healthy, 60.0)
    logs, _ = await logs_of(admin, stream)
    report = check(history.ops, logs)
    assert report.anomalies == [], report.summary()


async def test_a_gateway_on_an_isolated_leader_never_answers_below_an_acked_write(
    proxied: ProxiedCluster, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=proxied.url, replicas=3)
    await provisioned(settings)
    urls = [node.url for node in proxied.nodes]
    admin = await nats.connect(servers=urls)
    leader = await stream_leader(admin, settings.stream, proxied)
    history = tmp_path / "history.jsonl"
    async with pinned_gateways(settings, proxied, leader, (leader + 1) % 3, history) as (
        gateways,
        isolated,
        majority,
    ):
        await gateways.trusted_while_healthy(isolated)
        proxied.isolate(leader)
        await gateways.acked_by_majority(majority)
        # At once, while the cut-off leader still believes it leads.
        await gateways.never_below(isolated)
    await checked_history(proxied, admin, settings.stream, gateways.history)
    await admin.close()


async def test_a_leader_that_never_heard_from_a_follower_does_not_count_it(
    proxied: ProxiedCluster, tmp_path: Path
) -> None:
    """A leader elected while one follower was cut off has never heard from it, and its
    `STREAM.INFO` says so with `active: 0`, the same figure as a peer heard this instant.
    Cut that leader off in turn, and let the never-heard follower rejoin the third node: the
    two elect a new leader and acknowledge writes, while the cut-off leader, counting the
    never-heard follower as heard, still answers its reads (measured: for about 7 s after
    the majority's first ack). Its gateway must not call them current."""
    settings = Settings.from_env({}, nats_url=proxied.url, replicas=3)
    await provisioned(settings)
    urls = [node.url for node in proxied.nodes]
    probe = await nats.connect(servers=urls)
    first = await stream_leader(probe, settings.stream, proxied)
    await probe.close()
    never_heard, cut_off = (first + 1) % 3, (first + 2) % 3
    # Steered through the first leader's node, which stays with the majority throughout.
    admin = await nats.connect(servers=[urls[first]], max_reconnect_attempts=0)
    proxied.isolate(never_heard)
    await leader_moved_to(admin, settings.stream, proxied, cut_off)
    history = tmp_path / "history.jsonl"
    async with pinned_gateways(settings, proxied, cut_off, first, history) as (
        gateways,
        isolated,
        majority,
    ):
        await gateways.trusted_while_healthy(isolated)
        # The case this test is for: the leader reports the follower it never heard from
        # with the `active` of a peer heard this instant.
        peers = await leader_peers(admin, settings.stream)
        assert peers.get(proxied.nodes[never_heard].name) == 0, peers
        proxied.proxies.cut([(cut_off, first), (cut_off, never_heard)])
        proxied.proxies.mend([(never_heard, first)])
        await gateways.acked_by_majority(majority)
        await gateways.never_below(isolated)
    await checked_history(proxied, admin, settings.stream, gateways.history)
    await admin.close()


async def leader_peers(admin: Client, stream: str) -> dict[str, int]:
    """Each follower's `active` in the stream leader's `STREAM.INFO`."""
    reply = await admin.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
    replicas = (orjson.loads(reply.data).get("cluster") or {}).get("replicas") or []
    return {str(peer["name"]): int(peer.get("active", 0)) for peer in replicas}


async def leader_moved_to(
    admin: Client, stream: str, proxied: ProxiedCluster, target: int, bound_s: float = 40
) -> None:
    """Step the stream's leader down until `target` leads it (the only other node that can
    win, with the third cut off), bounded."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if await stream_leader(admin, stream, proxied) == target:
            return
        with contextlib.suppress(Exception):
            await admin.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
        await asyncio.sleep(1.0)
    raise AssertionError(f"{stream}'s leader never moved to node {target}")
