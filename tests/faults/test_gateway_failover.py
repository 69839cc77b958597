"""A gateway connected to a node cut off from its cluster fails over to another node.

Three nats-servers on loopback whose routes all run through small TCP proxies, one per
ordered pair of nodes (each node advertises an address nobody listens on, so no route
bypasses them). The test finds the node the gateway is connected to, cuts every route to
and from it, and keeps sending commands: the gateway must answer each within its deadline
(`unavailable` with `retry_after_ms` while it cannot commit) and, once its commits have found
no leader for `failover_after_s`, reconnect elsewhere and commit again — while the
partition still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from contracts.decode import decode
from services.adapters.connection import connect
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.failover import Failover
from services.gateway.service import CommandService
from tests.faults.harness import ClusterNode, listen_port, provision_cluster

FAILOVER_AFTER_S = 2.0
TIMEOUT_S = 2.0


class Link:
    """A TCP proxy carrying one node's route to another; `cut` drops it and refuses more."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = listen_port()
        self.cut_off = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            _pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True
        )

    def cut(self) -> None:
        self.cut_off = True
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


Links = dict[tuple[int, int], Link]


class ProxiedNode(ClusterNode):
    """A cluster node that advertises a dead address, so its peers reach it only through
    the routes it was given (the proxies)."""

    def write_config(self) -> None:
        super().write_config()
        assert self.config_file is not None
        text = self.config_file.read_text(encoding="utf-8")
        text = text.replace("  routes:", '  advertise: "127.0.0.1:1"\n  routes:')
        self.config_file.write_text(text, encoding="utf-8")


@pytest.fixture
async def proxied_cluster(tmp_path: Path) -> AsyncIterator[tuple[list[ProxiedNode], Links]]:
    size = 3
    cluster_ports = [listen_port() for _ in range(size)]
    links = {(a, b): Link(cluster_ports[b]) for a in range(size) for b in range(size) if a != b}
    for link in links.values():
        await link.start()
    nodes = [
        ProxiedNode(
            f"n{a + 1}",
            tmp_path,
            cluster_ports[a],
            [f"nats-route://127.0.0.1:{links[a, b].port}" for b in range(size) if b != a],
        )
        for a in range(size)
    ]
    try:
        for node in nodes:
            node.write_config()
            node.spawn()
        for node in nodes:  # in threads: the proxies run on this loop
            await asyncio.to_thread(node.wait_healthy)
        yield nodes, links
    finally:
        for node in nodes:
            node.kill()
        for link in links.values():
            await link.stop()


def _node_of(nc: Client, nodes: list[ProxiedNode]) -> int:
    url = nc.connected_url
    assert url is not None
    return next(index for index, node in enumerate(nodes) if node.port == url.port)


async def test_a_gateway_on_an_isolated_node_fails_over_and_commits_again(
    proxied_cluster: tuple[list[ProxiedNode], Links],
) -> None:
    nodes, links = proxied_cluster
    settings = Settings.from_env(
        {},
        nats_url=",".join(node.url for node in nodes),
        replicas=3,
        request_timeout_s=TIMEOUT_S,
        failover_after_s=FAILOVER_AFTER_S,
    )
    await provision_cluster(settings, "failover-provision")
    nc = await connect(settings, "failover-gateway")
    failover = Failover(nc, settings.failover_after_s)
    committer = GroupCommitter(nc, timeout_s=TIMEOUT_S, failover=failover)
    committer.start()
    gateway = CommandService(nc, settings, committer)

    async def inject(n: int) -> tuple[dict[str, Any], float]:
        body = {"session_id": f"failover-{n % 4}", "reminder": {"body": f"reminder {n}"}}
        started = time.monotonic()
        reply = await gateway.handle("inject", orjson.dumps(body))
        return reply, time.monotonic() - started

    try:
        assert (await inject(0))[0]["ok"] is True
        isolated = _node_of(nc, nodes)
        for (a, b), link in links.items():
            if isolated in (a, b):
                link.cut()
        replies = []
        until = time.monotonic() + 60
        n = 1
        while time.monotonic() < until:
            reply, took = await inject(n)
            replies.append((reply, took))
            if reply["ok"] and failover.failovers:
                break
            n += 1
            await asyncio.sleep(0.1)
        assert replies[-1][0]["ok"] is True, replies[-3:]
        assert failover.failovers >= 1
        assert _node_of(nc, nodes) != isolated
        for reply, took in replies:
            assert took <= TIMEOUT_S + 0.5, (reply, took)
            if not reply["ok"]:
                assert reply["error"]["code"] == "unavailable", reply
                assert reply["error"]["details"]["retry_after_ms"] > 0
        acked = 1 + sum(1 for reply, _ in replies if reply["ok"])
        stored = [
            decode(item.envelope).command_id
            for n in range(4)
            for item in await read_session(nc, settings.stream, f"failover-{n}")
        ]
        assert len(stored) == len(set(stored)) >= acked  # none lost, none applied twice
    finally:
        await committer.stop()
        await failover.stop()
        await gateway.close()
        with contextlib.suppress(Exception):
            await nc.close()
