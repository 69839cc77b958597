"""Events per second through the projector and the replay tool, against raw nats-py reads.

    python -m bench.projection_throughput [--sessions 200] [--turns 10]

Fills a fresh stream with realistic sessions (inject, render, end_turn per turn, decided by
the core and appended in 1000-message atomic batches), then measures in the same run:
- baseline: a raw nats-py ordered push consumer reading every message (no decoding);
- replay: reading the whole stream with the replay tool's ordered consumer and folding every
  session with the core (what `reminders rebuild` does before writing);
- one session: `rows_from_nats` + fold of a single session among all the others;
- projector: a real `reminders serve projector` process catching up from zero (KV written).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import DeliverPolicy

from bench.common import embedded_server, emit, max_rss_mib, rate
from cli.provision import provision_all
from cli.supervisor import spawn_service, stop_all, wait_ready
from contracts.events import Event
from contracts.state import SessionState
from core import fold_all, handle
from replay.engine import replay
from replay.rebuild import read_all_sessions
from replay.source import rows_from_nats
from services.adapters.jetstream import SessionAppend, consumer_info, publish_atomic
from services.adapters.settings import Settings
from tests.support import context_for


def session_appends(sessions: int, turns: int) -> list[SessionAppend]:
    """Every session's events, one append per session (expectation 0: a fresh stream)."""
    appends = []
    for number in range(sessions):
        session_id = f"bench-{number}"
        state, n = SessionState(), 0
        events: list[Event] = []
        for turn in range(turns):
            for op, fields in (
                (
                    "inject",
                    {
                        "reminder": {
                            "body": f"turn {turn} note",
                            "ttl_turns": 2,
                            "dedupe_key": f"k{turn % 3}",
                        }
                    },
                ),
                ("render", {"turn": turn}),
                ("end_turn", {"turn": turn}),
            ):
                n += 1
                decision = handle(state, op, {"session_id": session_id, **fields}, context_for(n))
                state = fold_all(state, decision.events)
                events.extend(decision.events)
        appends.append(SessionAppend(session_id, 0, tuple(events)))
    return appends


async def fill(url: str, appends: list[SessionAppend]) -> int:
    nc = await nats.connect(url)
    await provision_all(nc, Settings(nats_url=url))
    total, size = 0, 0
    group: list[SessionAppend] = []
    for append in appends:
        if size + len(append.events) > 1000 and group:
            await publish_atomic(nc, group, f"fill-{total}")
            group, size = [], 0
        group.append(append)
        size += len(append.events)
        total += len(append.events)
    if group:
        await publish_atomic(nc, group, f"fill-{total}")
    await nc.close()
    return total


async def raw_read(url: str, total: int) -> float:
    nc = await nats.connect(url)
    subscription = await nc.jetstream().subscribe(
        "transcript.reminder.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
    )
    started = time.perf_counter()
    for _ in range(total):
        await subscription.next_msg(timeout=10)
    seconds = time.perf_counter() - started
    await subscription.unsubscribe()
    await nc.close()
    return rate(total, seconds)


async def replay_all(url: str, total: int) -> float:
    nc = await nats.connect(url)
    started = time.perf_counter()
    sessions = await read_all_sessions(nc, "REMINDERS")
    for rows in sessions.values():
        replay(rows)
    seconds = time.perf_counter() - started
    await nc.close()
    return rate(total, seconds)


async def replay_one(url: str) -> tuple[float, int]:
    nc = await nats.connect(url)
    started = time.perf_counter()
    rows = await rows_from_nats(nc, "REMINDERS", "bench-7")
    replay(rows)
    seconds = time.perf_counter() - started
    await nc.close()
    return round(seconds * 1000, 2), len(rows)


async def projector_catch_up(url: str, total: int) -> float:
    settings = Settings(nats_url=url)
    with tempfile.TemporaryDirectory() as logs:
        projector = spawn_service("projector", settings, Path(logs) / "projector.log")
        try:
            started = time.perf_counter()
            wait_ready([projector])
            nc = await nats.connect(url)
            while True:
                info = await consumer_info(nc, "REMINDERS", "projector")
                if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                    break
                await asyncio.sleep(0.02)
            seconds = time.perf_counter() - started
            await nc.close()
        finally:
            stop_all([projector])
    return rate(total, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    appends = session_appends(args.sessions, args.turns)
    with embedded_server() as server:
        total = asyncio.run(fill(server.url, appends))
        baseline = asyncio.run(raw_read(server.url, total))
        replayed = asyncio.run(replay_all(server.url, total))
        one_ms, one_events = asyncio.run(replay_one(server.url))
        projected = asyncio.run(projector_catch_up(server.url, total))
    emit(
        "projection_throughput",
        {
            "sessions": args.sessions,
            "events": total,
            "raw_ordered_consumer_msgs_per_s": baseline,
            "replay_read_and_fold_events_per_s": replayed,
            "projector_catch_up_events_per_s": projected,
            "replay_one_session_ms": one_ms,
            "replay_one_session_events": one_events,
            "bench_process_max_rss_mib": max_rss_mib(),
        },
    )


if __name__ == "__main__":
    main()
