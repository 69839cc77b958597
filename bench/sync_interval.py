"""What JetStream's `sync_interval: always` costs the write path, on R1 and on R3 (issue #23).

Four configurations, each a fresh nats-server (or three, clustered) on loopback with its own
config file: R1 and R3, each with the server's default `sync_interval` (the OS flushes; the
server fsyncs every 2 minutes) and with `always` (fsync before every ack). Against each, the
gateway's real write path runs in this process (`CommandService` and its `GroupCommitter`,
no service processes, no projector):

- `commands_per_s`: `sessions` sessions injecting in parallel (closed loop) for `seconds`;
- `sequential_ms`: one session, one inject after another: p50 and p99 of a command.

Bounded: each configuration takes under a minute. The machine it runs on is shared, so the
figures are indicative; rerun with `python -m bench.sync_interval`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bench.common import percentile
from cli.embedded import EmbeddedNats, free_port, nats_server_binary
from cli.provision import provision_all
from services.adapters.connection import connect
from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService

RESULTS = Path(__file__).resolve().parent / "results" / "sync_interval.json"


class ConfiguredNats(EmbeddedNats):
    """A nats-server started from its config file alone (names and ports in the file)."""

    def command(self) -> list[str]:
        """Only `-c FILE`: flags would override the file's cluster names."""
        assert self.config_file is not None
        return [nats_server_binary(), "-c", str(self.config_file)]

    def configure(self, sync: str | None, name: str, cluster: str = "") -> None:
        """Write the config: listen, monitor, JetStream (with `sync_interval`), cluster."""
        assert self.config_file is not None
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        sync_line = f"  sync_interval: {sync}\n" if sync else ""
        self.config_file.write_text(
            f'server_name: "{name}"\nlisten: "127.0.0.1:{self.port}"\n'
            f'http: "127.0.0.1:{self.monitor_port}"\n'
            f'jetstream {{\n  store_dir: "{self.store_dir}"\n{sync_line}}}\n{cluster}',
            encoding="utf-8",
        )


@contextmanager
def servers(root: Path, replicas: int, sync: str | None) -> Iterator[str]:
    """`replicas` nodes (clustered when more than one); yields the client URL list."""
    cluster_ports = [free_port() for _ in range(replicas)]
    routes = ", ".join(f'"nats-route://127.0.0.1:{port}"' for port in cluster_ports)
    nodes: list[ConfiguredNats] = []
    for index in range(replicas):
        node_root = root / f"n{index + 1}"
        node = ConfiguredNats(node_root / "store", config_file=node_root / "server.conf")
        cluster = (
            f'cluster {{\n  name: "bench"\n  listen: "127.0.0.1:{cluster_ports[index]}"\n'
            f"  routes: [{routes}]\n}}\n"
            if replicas > 1
            else ""
        )
        node.configure(sync, f"n{index + 1}", cluster)
        nodes.append(node)
    try:
        if replicas == 1:
            nodes[0].start()
        else:
            _start_cluster(nodes)
        yield ",".join(node.url for node in nodes)
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


def _start_cluster(nodes: list[ConfiguredNats], bound_s: float = 45.0) -> None:
    import subprocess

    for node in nodes:
        node.store_dir.mkdir(parents=True, exist_ok=True)
        with open(node.log_path, "ab") as log:
            node.process = subprocess.Popen(
                node.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
    deadline = time.monotonic() + bound_s
    while not all(node.healthy() for node in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster not healthy after {bound_s}s")
        time.sleep(0.2)


def _inject(session_id: str, n: int) -> bytes:
    return orjson.dumps(
        {"session_id": session_id, "reminder": {"body": f"note {n}", "ttl_turns": 3}}
    )


async def measure(url: str, replicas: int, sessions: int, seconds: float) -> dict[str, Any]:
    """Throughput and sequential latency of the write path against `url`."""
    settings = Settings.from_env(
        {"REMINDERS_RATE_LIMIT": "100000"}, nats_url=url, replicas=replicas
    )
    nc = await connect(settings, "bench-sync-interval")
    try:
        await provision_all(nc, settings, wait_s=30)
        committer = GroupCommitter(nc)
        committer.start()
        service = CommandService(nc, settings, committer)
        done = 0
        failed = 0
        stop_at = time.monotonic() + seconds

        async def lane(number: int) -> None:
            nonlocal done, failed
            n = 0
            while time.monotonic() < stop_at:
                reply = await service.handle("inject", _inject(f"tp-{number}", n))
                n += 1
                if reply.get("ok"):
                    done += 1
                else:
                    failed += 1

        started = time.monotonic()
        await asyncio.gather(*(lane(i) for i in range(sessions)))
        elapsed = time.monotonic() - started
        latencies: list[float] = []
        for n in range(200):
            sent = time.perf_counter()
            await service.handle("inject", _inject("sequential", n))
            latencies.append((time.perf_counter() - sent) * 1000)
        await committer.stop()
        return {
            "commands_per_s": round(done / elapsed, 1),
            "failed": failed,
            "sequential_ms": {
                "p50": round(percentile(latencies, 0.5), 2),
                "p99": round(percentile(latencies, 0.99), 2),
            },
        }
    finally:
        await nc.close()


def run(sessions: int = 64, seconds: float = 12.0) -> dict[str, Any]:
    """Every configuration, one after another."""
    results: dict[str, Any] = {}
    for replicas in (1, 3):
        for sync in (None, "always"):
            label = f"r{replicas}_{sync or 'default'}"
            with (
                tempfile.TemporaryDirectory(prefix=f"sync-{label}-") as root,
                servers(Path(root), replicas, sync) as url,
            ):
                results[label] = asyncio.run(measure(url, replicas, sessions, seconds))
            print(label, json.dumps(results[label]), flush=True)
    for replicas in (1, 3):
        default, always = results[f"r{replicas}_default"], results[f"r{replicas}_always"]
        results[f"r{replicas}_always_vs_default"] = round(
            always["commands_per_s"] / max(default["commands_per_s"], 1e-9), 2
        )
    return results


def main(argv: list[str]) -> int:
    """`python -m bench.sync_interval [SESSIONS [SECONDS]]`; writes results/sync_interval.json."""
    sessions = int(argv[0]) if argv else 64
    seconds = float(argv[1]) if len(argv) > 1 else 12.0
    results = {
        "benchmark": "sync_interval",
        "command": f"python -m bench.sync_interval {sessions} {seconds:g}",
        "note": "indicative: loopback, a shared 2-core machine",
        **run(sessions, seconds),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
