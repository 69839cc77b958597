"""Catch-up throughput of one projector against N partitioned projectors on one server.

    python -m bench.partitioned_projection [--sessions 2000] [--turns 6] [--partitions 2 4]

Builds one interleaved log — every session's turn t (inject, render, end_turn, decided by the
core) before any session's turn t+1, appended in 1000-message atomic batches — then, for each
layout on a fresh embedded nats-server filled with that same log:
- `single`: today's layout, one `reminders serve projector` on the durable `projector`;
- `partitions_N`: `reminders provision` with REMINDERS_PROJECTOR_PARTITIONS=N, the time the
  server takes to source the log into `REMINDERS_PARTITIONED`, then N projector processes
  (one partition each) catching up from zero;
- `filtering_N` (option (b), measured here only): N processes, each with its own durable over
  all of `REMINDERS`, applying the sessions whose token hashes to it and acking the rest.
Each projector runs in a session of its own (see `spawn_projector`). Catch-up is timed from
the moment every projector is ready until every consumer has nothing pending or unacked,
over the events still unacked at that moment (`timed_events`). Every process (server,
projectors, this script) shares the same machine; with 2 cores, N projectors compete with
nats-server for them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from bench.common import embedded_server, emit, rate
from bench.traffic import fake_context
from cli.embedded import free_port
from cli.provision import provision_all
from cli.supervisor import ServiceProcess, stop_all, wait_ready
from contracts.events import Event
from contracts.state import SessionState
from contracts.subjects import EVENT_SUBJECTS
from core import fold_all, handle
from services.adapters.append import SessionAppend, encode_event, publish_atomic
from services.adapters.partitions import partition_durable, partition_stream
from services.adapters.provisioning import DurableConsumer, consumer_info, ensure_consumer
from services.adapters.settings import Settings
from services.projector.adapters import NatsDelivery
from services.projector.app import ProjectorWorker
from services.projector.apply import token_of
from services.projector.consumer import pinned_consumer_config
from services.projector.partitions import ProjectorSource
from services.runtime import Runtime, serve


def session_turns(sessions: int, turns: int) -> list[list[tuple[Event, ...]]]:
    """For each turn, each session's events of that turn (a list per turn, in session order)."""
    by_turn: list[list[tuple[Event, ...]]] = [[] for _ in range(turns)]
    for number in range(sessions):
        session_id = f"bench-{number}"
        state, n = SessionState(), 0
        for turn in range(turns):
            events: list[Event] = []
            for op, fields in (
                ("inject", {"reminder": {"body": f"turn {turn} note", "ttl_turns": 2}}),
                ("render", {"turn": turn}),
                ("end_turn", {"turn": turn}),
            ):
                n += 1
                decision = handle(
                    state, op, {"session_id": session_id, **fields}, fake_context(session_id, n, n)
                )
                state = fold_all(state, decision.events)
                events.extend(decision.events)
            by_turn[turn].append(tuple(events))
    return by_turn


async def fill(nc: Client, by_turn: list[list[tuple[Event, ...]]]) -> int:
    """Append the log turn by turn, sessions interleaved; returns the number of events."""
    last_seq: dict[str, int] = {}
    total = 0
    group: list[SessionAppend] = []
    size = 0

    async def flush() -> None:
        nonlocal group, size
        last = await publish_atomic(nc, group, f"fill-{total}")
        seq = last - size
        for append in group:
            seq += len(append.events)
            last_seq[append.session_id] = seq
        group, size = [], 0

    for sessions in by_turn:
        for events in sessions:
            session_id = events[0].session_id
            if size + len(events) > 1000 and group:
                await flush()
            group.append(SessionAppend(session_id, last_seq.get(session_id, 0), events))
            size += len(events)
            total += len(events)
    if group:
        await flush()
    return total


FILTERING_DURABLE = "projector_all"


def filtering_consumer(settings: Settings, partition: int) -> DurableConsumer:
    """Option (b): partition `p` has a durable of its own over the whole of `REMINDERS`."""
    config = pinned_consumer_config(
        f"{FILTERING_DURABLE}{partition}", "projector", EVENT_SUBJECTS, priority_timeout_s=3.0
    )
    return DurableConsumer(settings.stream, config)


def owns(token: str, partitions: int, partition: int) -> bool:
    """Option (b)'s split: CRC-32 of the session token, modulo N."""
    return zlib.crc32(token.encode()) % partitions == partition


def serve_filtering(partitions: int, partition: int) -> None:
    """Option (b), measured only here: read every event, apply only this partition's
    sessions, ack the others unread."""
    settings = Settings.from_env()

    @dataclass
    class FilteringProjector(ProjectorWorker):
        def consumers(self) -> list[DurableConsumer]:
            return [filtering_consumer(settings, partition)]

        async def start(self, runtime: Runtime) -> None:
            await super().start(runtime)
            durable = f"{FILTERING_DURABLE}{partition}"
            self.source = ProjectorSource(settings.stream, durable, NatsDelivery)

        async def _project(self, deliveries: list[NatsDelivery]) -> None:
            mine = []
            for delivery in deliveries:
                if owns(token_of(delivery.subject), partitions, partition):
                    mine.append(delivery)
                else:
                    await delivery.ack()
            if mine:
                await super()._project(mine)

    serve(FilteringProjector(settings), settings)


def spawn_projector(
    settings: Settings, log_path: Path, env: dict[str, str], command: list[str] | None = None
) -> ServiceProcess:
    """`reminders serve projector` in a session of its own, as its own pod would be.

    Linux autogroup scheduling gives each session one fair CPU share when the machine is busy,
    so N projectors spawned in this script's session would split one share between them.
    """
    port = free_port()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command or [sys.executable, "-m", "cli.main", "serve", "projector"],
            env={
                **os.environ,
                "REMINDERS_NATS_URL": settings.nats_url,
                "REMINDERS_HTTP_PORT": str(port),
                **env,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return ServiceProcess("projector", port, process, log_path)


async def remaining(nc: Client, consumers: list[tuple[str, str]]) -> int:
    """Messages not yet acked by the consumers: pending plus delivered and unacked."""
    infos = [await consumer_info(nc, stream, durable) for stream, durable in consumers]
    return sum(int(i["num_pending"]) + int(i["num_ack_pending"]) for i in infos)


async def run_layout(
    url: str, by_turn: list[list[tuple[Event, ...]]], partitions: int, filtering: bool = False
) -> dict[str, Any]:
    """Fill a fresh server, provision `partitions`, time the projector(s) catching up."""
    settings = Settings(nats_url=url, projector_partitions=partitions)
    nc = await nats.connect(url)
    result: dict[str, Any] = {}
    try:
        await provision_all(nc, Settings(nats_url=url))  # the log first, as on a live system
        total = await fill(nc, by_turn)
        result["events"] = total
        commands: list[list[str] | None] = [None] * partitions
        if partitions == 1:
            consumers = [(settings.stream, "projector")]
            envs: list[dict[str, str]] = [{}]
        elif filtering:
            for p in range(partitions):
                await ensure_consumer(nc, filtering_consumer(settings, p))
            consumers = [(settings.stream, f"{FILTERING_DURABLE}{p}") for p in range(partitions)]
            envs = [{} for _ in range(partitions)]
            module = [sys.executable, "-m", "bench.partitioned_projection", "--serve-filtering"]
            commands = [[*module, f"{partitions}:{p}"] for p in range(partitions)]
        else:
            started = time.perf_counter()
            await provision_all(nc, settings)
            view = partition_stream(settings)
            while (await nc.jetstream().stream_info(view)).state.messages < total:
                await asyncio.sleep(0.02)
            result["sourcing_events_per_s"] = rate(total, time.perf_counter() - started)
            consumers = [(view, partition_durable(p)) for p in range(partitions)]
            envs = [
                {
                    "REMINDERS_PROJECTOR_PARTITIONS": str(partitions),
                    "REMINDERS_PROJECTOR_PARTITION": str(p),
                }
                for p in range(partitions)
            ]
        with tempfile.TemporaryDirectory() as logs:
            processes: list[ServiceProcess] = []
            try:
                for number, (env, command) in enumerate(zip(envs, commands, strict=True)):
                    log = Path(logs) / f"projector-{number}.log"
                    processes.append(spawn_projector(settings, log, env, command))
                wait_ready(processes)
                # Timed from when every process is ready, so interpreter start-up (seconds,
                # and N of them contend for the cores) is not counted as projection.
                started = time.perf_counter()
                left = await remaining(nc, consumers)
                while await remaining(nc, consumers):
                    await asyncio.sleep(0.05)
                seconds = time.perf_counter() - started
            finally:
                stop_all(processes)
        # Option (b) delivers every event to each of its N consumers: count log events.
        events = left // partitions if filtering else left
        result["timed_events"] = events
        result["catch_up_s"] = round(seconds, 2)
        result["catch_up_events_per_s"] = rate(events, seconds)
        bucket = await nc.jetstream().key_value(settings.kv_bucket)
        result["sessions_projected"] = (await bucket.status()).values
    finally:
        await nc.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--partitions", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--filtering", type=int, nargs="*", default=[2])
    parser.add_argument("--serve-filtering", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_filtering:
        count, _, partition = args.serve_filtering.partition(":")
        serve_filtering(int(count), int(partition))
        return
    by_turn = session_turns(args.sessions, args.turns)
    sizes = [len(encode_event(e)) for sessions in by_turn for events in sessions for e in events]
    layouts: dict[str, Any] = {}
    for partitions in [1, *args.partitions]:
        with embedded_server() as server:
            name = "single" if partitions == 1 else f"partitions_{partitions}"
            layouts[name] = asyncio.run(run_layout(server.url, by_turn, partitions))
    for partitions in args.filtering:
        with embedded_server() as server:
            name = f"filtering_{partitions}"
            layouts[name] = asyncio.run(run_layout(server.url, by_turn, partitions, True))
    single = layouts["single"]["catch_up_events_per_s"]
    for layout in layouts.values():
        layout["speedup_vs_single"] = round(layout["catch_up_events_per_s"] / single, 2)
    emit(
        "partitioned_projection",
        {
            "sessions": args.sessions,
            "turns_per_session": args.turns,
            "events": len(sizes),
            "event_bytes_mean": round(sum(sizes) / len(sizes)),
            "event_bytes_max": max(sizes),
            "cpus": os.cpu_count(),
            "shared_machine": "2 cores shared with nats-server and other engineers' runs",
            "log_order": "turn by turn, sessions interleaved",
            "layouts": layouts,
        },
    )


if __name__ == "__main__":
    main()
