"""The nemeses: kill -9 and restart a node or a service, SIGSTOP/SIGCONT the stream leader, cut
cluster routes through a TCP proxy per route (isolate a node, split 2/1, heal), and skewed
gateway clocks (`REMINDERS_CLOCK_OFFSET_MS`, read by services/adapters/ids.py).

Each route `a → b` of the cluster goes through its own proxy, which runs in a thread with its
own event loop (so the load's loop never delays cluster traffic). Cutting `a ↔ b` closes both
directions' connections and refuses new ones until healed. The nodes advertise a dead cluster
address, so gossip never teaches one to dial another around the proxies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client

from tests.faults.harness import Cluster, ClusterNode, listen_port

# --------------------------------------------------------------------------- route proxies


@dataclass
class _Route:
    """One proxy: listens on `port`, forwards to `target`."""

    port: int
    target: int
    cut: bool = False
    writers: set[asyncio.StreamWriter] = field(default_factory=set)


class RouteProxies:
    """Proxies for every ordered pair of nodes, served by one background event loop."""

    def __init__(self) -> None:
        self.routes: dict[tuple[int, int], _Route] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []

    def add(self, source: int, target: int, target_port: int) -> int:
        """A proxy for the route `source → target`; returns its port."""
        route = _Route(listen_port(), target_port)
        self.routes[(source, target)] = route
        return route.port

    def start(self) -> None:
        """Listen on every proxy's port."""
        self._thread.start()
        for route in self.routes.values():
            future = asyncio.run_coroutine_threadsafe(self._serve(route), self._loop)
            self._servers.append(future.result(timeout=10))

    async def _serve(self, route: _Route) -> asyncio.Server:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if route.cut:
                writer.close()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", route.target)
            except OSError:
                writer.close()
                return
            route.writers |= {writer, up_writer}
            await asyncio.gather(
                _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
            )
            route.writers -= {writer, up_writer}

        return await asyncio.start_server(accept, "127.0.0.1", route.port)

    def _set(self, pairs: Iterable[tuple[int, int]], cut: bool) -> None:
        async def apply() -> None:
            for pair in pairs:
                for key in (pair, (pair[1], pair[0])):
                    route = self.routes[key]
                    route.cut = cut
                    if cut:
                        for writer in list(route.writers):
                            writer.transport.abort()
                        route.writers.clear()

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(timeout=10)

    def cut(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Cut both directions of each pair of nodes."""
        self._set(list(pairs), True)

    def heal(self) -> None:
        """Let every route through again."""
        self._set([pair for pair in self.routes if pair[0] < pair[1]], False)

    def mend(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Let both directions of each pair of nodes through again (the others stay cut)."""
        self._set(list(pairs), False)

    def stop(self) -> None:
        """Close every proxy and stop the loop."""

        async def close() -> None:
            for server in self._servers:
                server.close()
            for route in self.routes.values():
                for writer in list(route.writers):
                    writer.transport.abort()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


# --------------------------------------------------------------------------- the cluster


class ProxiedNode(ClusterNode):
    """A cluster node whose routes go through proxies and whose advertised route is dead."""

    dead_port: int = 0

    def write_config(self) -> None:
        """The harness's config, with `advertise` pointing nowhere (no gossip around proxies)."""
        super().write_config()
        assert self.config_file is not None
        text = self.config_file.read_text(encoding="utf-8")
        text = text.replace(
            f'  listen: "{self.host}:{self.cluster_port}"\n',
            f'  listen: "{self.host}:{self.cluster_port}"\n'
            f'  advertise: "127.0.0.1:{self.dead_port}"\n'
            f"  connect_retries: 120\n",
        )
        self.config_file.write_text(text, encoding="utf-8")


class ProxiedCluster(Cluster):
    """Three nodes whose six routes each run through a proxy the test can cut."""

    def __init__(self, root: Path, size: int = 3, sync: str | None = None) -> None:
        self.proxies = RouteProxies()
        cluster_ports = [listen_port() for _ in range(size)]
        dead = listen_port()  # nothing listens there
        self.nodes = []
        for index in range(size):
            routes = [
                f"nats-route://127.0.0.1:{self.proxies.add(index, other, cluster_ports[other])}"
                for other in range(size)
                if other != index
            ]
            node = ProxiedNode(f"n{index + 1}", root, cluster_ports[index], routes)
            node.dead_port = dead
            self.nodes.append(node)
        self.sync = sync

    def start(self) -> None:
        """Start the proxies, then the nodes."""
        self.proxies.start()
        super().start()

    def stop(self) -> None:
        """Kill every node and close the proxies."""
        super().stop()
        self.proxies.stop()

    def isolate(self, index: int) -> None:
        """Cut every route of one node (it forms the minority alone)."""
        self.proxies.cut((index, other) for other in range(len(self.nodes)) if other != index)

    def split(self, minority: int) -> None:
        """A 2/1 split: `minority` alone on one side (routes from it cut)."""
        self.isolate(minority)

    def heal(self) -> None:
        """Every route through again."""
        self.proxies.heal()

    def pause(self, index: int) -> None:
        """SIGSTOP one node."""
        process = self.nodes[index].process
        assert process is not None
        os.kill(process.pid, signal.SIGSTOP)

    def resume(self, index: int) -> None:
        """SIGCONT one node."""
        process = self.nodes[index].process
        if process is not None:
            os.kill(process.pid, signal.SIGCONT)


async def stream_leader(nc: Client, stream: str, cluster: Cluster, bound_s: float = 30) -> int:
    """Index of the node leading `stream` (bounded wait for an election)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            info = await nc.jetstream().stream_info(stream)
            leader = info.cluster.leader if info.cluster else None
            for index, node in enumerate(cluster.nodes):
                if node.name == leader:
                    return index
        await asyncio.sleep(0.5)
    raise AssertionError(f"{stream} has no leader after {bound_s}s")


def connection_names(node: ClusterNode) -> list[str]:
    """The names of the client connections a node serves (its monitor's /connz)."""
    url = f"http://{node.host}:{node.monitor_port}/connz?limit=1024"
    with urllib.request.urlopen(url, timeout=2) as response:
        connections = json.loads(response.read()).get("connections") or []
    return [str(connection.get("name") or "") for connection in connections]


def node_serving(cluster: Cluster, name: str) -> int:
    """Index of the node the connection named `name` is connected to."""
    for index, node in enumerate(cluster.nodes):
        if name in connection_names(node):
            return index
    raise AssertionError(f"no node serves a connection named {name}")


async def move_leader(
    nc: Client, stream: str, cluster: Cluster, index: int, bound_s: float = 30
) -> None:
    """Make node `index` the stream's leader: step the leader down with that node preferred,
    until it leads (bounded)."""
    deadline = time.monotonic() + bound_s
    request = json.dumps({"placement": {"preferred": cluster.nodes[index].name}}).encode()
    while await stream_leader(nc, stream, cluster) != index:
        if time.monotonic() > deadline:
            raise AssertionError(f"{stream}'s leader did not move to node {index}")
        with contextlib.suppress(Exception):
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request, timeout=5)
        await asyncio.sleep(1.0)


async def reconnect_to(nc: Client, cluster: Cluster, index: int, bound_s: float = 30) -> None:
    """Move a connection to node `index` (nats-py reconnects to the next server of its
    pool each time it is told to)."""
    deadline = time.monotonic() + bound_s
    port = cluster.nodes[index].port
    while not (nc.is_connected and nc.connected_url and nc.connected_url.port == port):
        if time.monotonic() > deadline:
            raise AssertionError(f"the connection did not move to node {index}")
        if nc.is_connected:
            await nc.force_reconnect()
        await asyncio.sleep(0.2)


@dataclass
class Faults:
    """What a run's nemesis did: (kind, started at, lasted) in history time."""

    done: list[tuple[str, float, float]] = field(default_factory=list)

    def by_kind(self) -> dict[str, int]:
        """Faults injected per kind."""
        counts: dict[str, int] = {}
        for kind, _, _ in self.done:
            counts[kind] = counts.get(kind, 0) + 1
        return counts
