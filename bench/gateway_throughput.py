"""Commands per second through a real gateway process, against raw nats-py baselines.

    python -m bench.gateway_throughput [--sessions 200] [--commands 4000] [--concurrency 200]

Baselines measured in the same run on the same server: single-message atomic batches sent
one after another with raw nats-py (what the gateway would do without group commit), and
plain `js.publish` without batches or expectations (no atomicity, no OCC).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import nats

from bench.common import embedded_server, emit, rate
from cli.provision import provision_all
from cli.supervisor import spawn_service, stop_all, wait_ready
from client.sdk import ReminderClient
from contracts.events import Event
from contracts.state import SessionState
from core import handle
from services.adapters.jetstream import SessionAppend, encode_event, publish_atomic
from services.adapters.settings import Settings
from tests.support import context_for


def inject_events(prefix: str, count: int) -> list[tuple[str, tuple[Event, ...]]]:
    """One decided inject per fresh session, prepared before any timing starts."""
    return [
        (
            f"{prefix}-{n}",
            handle(
                SessionState(),
                "inject",
                {"session_id": f"{prefix}-{n}", "reminder": {"body": "x"}},
                context_for(n + 1),
            ).events,
        )
        for n in range(count)
    ]


async def raw_baselines(url: str, count: int) -> dict[str, float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    batches, plain_events = inject_events("raw", count), inject_events("plain", count)
    started = time.perf_counter()
    for session_id, events in batches:
        await publish_atomic(nc, [SessionAppend(session_id, 0, events)], f"batch-{session_id}")
    atomic = rate(count, time.perf_counter() - started)
    started = time.perf_counter()
    for session_id, events in plain_events:
        await js.publish(f"transcript.reminder.injected.{session_id}", encode_event(events[0]))
    plain = rate(count, time.perf_counter() - started)
    await nc.close()
    return {"raw_atomic_batch_per_command_per_s": atomic, "raw_plain_publish_per_s": plain}


async def drive(url: str, sessions: int, commands: int, concurrency: int) -> dict[str, float]:
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=30)
    semaphore = asyncio.Semaphore(concurrency)
    failures = 0

    async def one(n: int) -> None:
        nonlocal failures
        async with semaphore:
            reply = await client.request(
                "inject",
                {"session_id": f"s{n % sessions}", "reminder": {"body": f"b{n}", "ttl_turns": 3}},
            )
            failures += 0 if reply["ok"] else 1

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(commands)))
    seconds = time.perf_counter() - started
    await nc.close()
    return {"gateway_commands_per_s": rate(commands, seconds), "failed_commands": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--commands", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--baseline-commands", type=int, default=500)
    args = parser.parse_args()
    with embedded_server() as server:
        settings = Settings(nats_url=server.url, rate_limit_per_second=1_000_000)

        async def prepare() -> None:
            nc = await nats.connect(server.url)
            await provision_all(nc, settings)
            await nc.close()

        asyncio.run(prepare())
        with tempfile.TemporaryDirectory() as logs:
            gateway = spawn_service(
                "gateway",
                settings,
                Path(logs) / "gateway.log",
                {"REMINDERS_RATE_LIMIT": "1000000"},
            )
            try:
                wait_ready([gateway])
                measured = asyncio.run(
                    drive(server.url, args.sessions, args.commands, args.concurrency)
                )
            finally:
                stop_all([gateway])
        baseline = asyncio.run(raw_baselines(server.url, args.baseline_commands))
    emit(
        "gateway_throughput",
        {
            "sessions": args.sessions,
            "commands": args.commands,
            "concurrency": args.concurrency,
            **measured,
            **baseline,
        },
    )


if __name__ == "__main__":
    main()
