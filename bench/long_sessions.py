"""The gateway's memory and rate as its cached sessions grow long, in one run.

    python -m bench.long_sessions [--sessions 64] [--checkpoints 500,1000,2500,5000] [--output F]

`write_gateway` measures sessions of 50–150 commands. A session that has lived longer holds
thousands of ids in its state (each inject's reminder id is seen once and kept, SPEC §4.6),
and the gateway's cached state of it carries the sets of those ids from command to command
(docs/scaling.md, "Sessions with a long history"). Here one gateway
(`reminders serve gateway`, `bench.common.UNLIMITED_ENV`) takes the `write_gateway` load —
`--sessions` sessions in parallel, one inject with a dedupe key after another in each — in
steps, up to each of `--checkpoints` commands per session. After each step it reports the
step's commands/s and the gateway's resident memory now (VmRSS) and at its peak (VmHWM),
with the encoded bytes its session cache counts against its bound
(`reminders_session_cache_bytes`). Results go to bench/results/long_sessions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    UNLIMITED_ENV,
    embedded_server,
    emit,
    peak_rss_mib,
    provision_server,
    rss_mib,
)
from bench.write_path import drive_injects, warm_up
from cli.supervisor import ServiceProcess, spawn_service, stop_all, wait_ready
from services.adapters.settings import Settings

#: The metric the session cache's bytes are exposed as.
CACHE_BYTES_METRIC = "reminders_session_cache_bytes"


def memory_mib(pid: int) -> dict[str, float]:
    """A live process's resident memory now (`rss_mib`) and at its peak (`peak_rss_mib`)."""
    return {"rss_mib": rss_mib(pid), "peak_rss_mib": peak_rss_mib(pid)}


def cache_bytes(exposition: str) -> float | None:
    """The session cache's bytes from a Prometheus text exposition; None when absent."""
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == CACHE_BYTES_METRIC:
                return float(sample.value)
    return None


def _step(url: str, gateway: ServiceProcess, sessions: int, commands: int) -> dict[str, Any]:
    """`commands` more injects in each session; the rate and the gateway's memory after."""
    rate, failed, _ = asyncio.run(drive_injects(url, "long", sessions, commands))
    if failed:
        raise RuntimeError(f"{failed} commands failed")
    _, exposition = gateway.get("/metrics")
    return {
        "commands_per_s": round(rate, 1),
        **memory_mib(gateway.process.pid),
        "cache_bytes": cache_bytes(exposition),
    }


def run(sessions: int, checkpoints: list[int]) -> dict[str, Any]:
    """The load in steps up to each checkpoint, on one fresh server and one gateway."""
    steps: list[dict[str, Any]] = []
    with embedded_server() as server, tempfile.TemporaryDirectory() as logs:
        asyncio.run(provision_server(server.url))
        settings = Settings(nats_url=server.url)
        gateway = spawn_service("gateway", settings, Path(logs) / "gateway.log", UNLIMITED_ENV)
        try:
            wait_ready([gateway], timeout_s=60)
            asyncio.run(warm_up(server.url))
            done = 0
            for checkpoint in checkpoints:
                step = _step(server.url, gateway, sessions, checkpoint - done)
                done = checkpoint
                steps.append({"commands_per_session": done, **step})
                print(steps[-1], flush=True)
        finally:
            stop_all([gateway])
    return {"sessions": sessions, "steps": steps}


def main() -> None:
    """Parse the arguments, run, write bench/results/long_sessions.json (or `--output`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--checkpoints", default="500,1000,2500,5000")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    checkpoints = sorted(int(value) for value in args.checkpoints.split(","))
    emit("long_sessions", run(args.sessions, checkpoints), args.output)


if __name__ == "__main__":
    main()
