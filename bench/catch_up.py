"""The read side over a big interleaved stream, beside raw nats-py reads of the same stream.

One fresh stream is filled with `bench.traffic` (many sessions interleaved in time, one long
session spread through it), then, in the same run on the same server:
- baseline `fetch+ack`: a raw pull consumer on a fresh durable, `fetch(1000)` and `ack` of every
  message (no decoding), the least a durable consumer costs;
- baseline `ordered`: a raw ordered push consumer reading every message;
- the projector: a real `reminders serve projector` process from zero until its durable
  consumer has nothing pending or unacknowledged (timed from its readiness, over the events
  still unsettled then; the start-up is reported apart), its peak RSS (VmHWM,
  read before it stops), then `verify_projection` over every session (mismatch count);
- replay locality: the long session read and replayed as `reminders replay` does it
  (`replay.source.rows_from_nats` + `replay.engine.replay`) inside the big stream, against the
  same events alone in a fresh stream.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bench.common import (
    embedded_server,
    measured_command,
    peak_rss_mib,
    provision_server,
    rate,
)
from bench.stages import PROJECTOR_STAGES, stage_profile
from bench.traffic import LONG_SESSION, MAX_BATCH, Plan, Traffic, append_all, generate
from cli.supervisor import spawn_service, stop_all, wait_ready
from replay.engine import replay
from replay.rebuild import verify_projection
from replay.source import rows_from_nats
from services.adapters.append import SessionAppend, publish_atomic
from services.adapters.provisioning import consumer_info
from services.adapters.settings import Settings
from services.adapters.stages import PROFILE_ENV

STREAM = "REMINDERS"
SUBJECTS = "transcript.reminder.>"
#: Upper bound of any one phase (a read, the catch-up, the verification).
PHASE_TIMEOUT_S = 1800.0


#: Work on a whole fetched batch before its messages are acked (`bench.projector_floor`'s
#: bucket layers).
BatchWork = Callable[[list[Msg]], Awaitable[None]]
#: What makes a read's `BatchWork`, once per read, with the read's connection.
BatchWorkFactory = Callable[[Client], Awaitable[BatchWork]]


async def fetch_and_ack(
    url: str,
    total: int,
    work: Callable[[Msg], None] | None = None,
    durable: str = "bench-fetch",
    batch_work: BatchWorkFactory | None = None,
) -> float:
    """Baseline: messages/s of fetch(1000) + ack of every message on a fresh durable (with
    `work` done on each message before its ack, and `batch_work` on each fetched batch
    before any of its acks: `bench.projector_floor`'s layers)."""
    nc = await nats.connect(url)
    try:
        settle = None if batch_work is None else await batch_work(nc)
        return await _fetch_loop(nc.jetstream(), total, work, durable, settle)
    finally:
        await nc.close()


async def _fetch_loop(
    js: JetStreamContext,
    total: int,
    work: Callable[[Msg], None] | None,
    durable: str,
    settle: BatchWork | None,
) -> float:
    """`fetch_and_ack`'s loop: each message's work then its ack, or with `settle`, every
    message's work, `settle` on the batch, then the acks, as a projector writes a batch's
    sessions before it acks them."""
    subscription = await js.pull_subscribe(
        SUBJECTS,
        durable=durable,
        stream=STREAM,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=-1),
    )
    read = 0
    started = time.perf_counter()
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while read < total and time.monotonic() < deadline:
        messages = await subscription.fetch(1000, timeout=10)
        for message in messages:
            if work is not None:
                work(message)
            if settle is None:
                await message.ack()
        if settle is not None:
            await settle(messages)
            for message in messages:
                await message.ack()
        read += len(messages)
    seconds = time.perf_counter() - started
    await subscription.unsubscribe()
    await js.delete_consumer(STREAM, durable)
    return rate(read, seconds)


async def ordered_read(url: str, total: int) -> float:
    """Baseline: messages/s of a raw ordered push consumer reading every message."""
    nc = await nats.connect(url)
    # The client's default pending limits (256 MiB) are smaller than a big stream: past them
    # it drops messages as a slow consumer and the ordered consumer restarts, which stalls the
    # read under load. The baseline is meant to read, not to measure that.
    subscription = await nc.jetstream().subscribe(
        SUBJECTS,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
        pending_msgs_limit=4 * 1024 * 1024,
        pending_bytes_limit=4 * 1024 * 1024 * 1024,
    )
    started = time.perf_counter()
    for _ in range(total):
        await subscription.next_msg(timeout=60)
    seconds = time.perf_counter() - started
    await subscription.unsubscribe()
    await nc.close()
    return rate(total, seconds)


async def _settled(url: str) -> None:
    """Return once the projector's durable has nothing pending or unacknowledged."""
    nc = await nats.connect(url)
    try:
        while True:
            info = await consumer_info(nc, STREAM, "projector")
            if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                return
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def _pending(url: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await consumer_info(nc, STREAM, "projector")
        return int(info["num_pending"]) + int(info["num_ack_pending"])
    finally:
        await nc.close()


def projector_catch_up(url: str) -> tuple[float, float, float, dict[str, float]]:
    """A projector process from zero to caught up: (events/s from its readiness over what was
    still unsettled then, seconds from spawn to ready, peak RSS MiB, CPU µs per event by
    stage: `stage_profile`). The process start is left out of the rate: it is a constant,
    not a cost per event."""
    settings = Settings(nats_url=url)
    with tempfile.TemporaryDirectory() as logs:
        profile_path = Path(logs) / "stages.json"
        projector = spawn_service(
            "projector",
            settings,
            Path(logs) / "projector.log",
            {PROFILE_ENV: str(profile_path)},
        )
        try:
            spawned = time.perf_counter()
            wait_ready([projector], timeout_s=120)
            ready = time.perf_counter()
            pending = asyncio.run(_pending(url))
            asyncio.run(asyncio.wait_for(_settled(url), PHASE_TIMEOUT_S))
            seconds = time.perf_counter() - ready
            peak = peak_rss_mib(projector.process.pid)
        finally:
            stop_all([projector])
        stages = stage_profile(profile_path, "events", PROJECTOR_STAGES)
    return rate(pending, seconds), round(ready - spawned, 2), peak, stages


async def verify(url: str) -> tuple[int, int]:
    """(sessions checked, mismatches) of `verify_projection` over every session."""
    nc = await nats.connect(url)
    try:
        checked, mismatches = await asyncio.wait_for(
            verify_projection(nc, STREAM, Settings(nats_url=url).kv_bucket), PHASE_TIMEOUT_S
        )
    finally:
        await nc.close()
    return checked, len(mismatches)


#: Rounds of the replay-locality measurement; the worst is reported.
LOCALITY_ROUNDS = 3


async def replay_ms(url: str, session_id: str, repeats: int = 5) -> tuple[float, int]:
    """Best of `repeats`: milliseconds to read one session by its subject filter and replay it
    (what `reminders replay` does), and how many events it has."""
    nc = await nats.connect(url)
    best, events = float("inf"), 0
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            rows = await rows_from_nats(nc, STREAM, session_id)
            replay(rows)
            best = min(best, time.perf_counter() - started)
            events = len(rows)
    finally:
        await nc.close()
    return round(best * 1000, 2), events


async def append_alone(url: str, traffic: Traffic, session_id: str) -> None:
    """One session's events alone in a fresh stream, in batches of up to MAX_BATCH messages."""
    events = traffic.session_events(session_id)
    nc = await nats.connect(url)
    last = 0
    try:
        for start in range(0, len(events), MAX_BATCH):
            part = events[start : start + MAX_BATCH]
            last = await publish_atomic(
                nc, [SessionAppend(session_id, last, part)], f"alone-{start}", timeout_s=30
            )
    finally:
        await nc.close()


def replay_alone_ms(traffic: Traffic) -> float:
    """The long session replayed from a fresh stream that holds only its events."""
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        asyncio.run(append_alone(server.url, traffic, LONG_SESSION))
        return asyncio.run(replay_ms(server.url, LONG_SESSION))[0]


def rebuild_run(url: str, events: int) -> dict[str, Any]:
    """`reminders rebuild` over the whole stream in its own process: events/s (wall, start-up
    included), CPU µs per event and peak RSS."""
    started = time.perf_counter()
    cpu_s, peak = measured_command(["rebuild", "--nats", url], PHASE_TIMEOUT_S * 4)
    seconds = time.perf_counter() - started
    return {
        "rebuild_events_per_s": rate(events, seconds),
        "rebuild_cpu_us_per_event": round(cpu_s / max(1, events) * 1e6, 1),
        "rebuild_peak_rss_mib": round(peak, 1),
    }


def big_stream(
    plan: Plan,
    *,
    catch_up: bool = True,
    locality: bool = True,
    rebuild: bool = False,
    partial: Callable[[dict[str, Any]], object] = lambda _: None,
) -> dict[str, Any]:
    """Fill one stream per `plan`; measure the long session's replay against it alone
    (`locality`), then the read baselines and the projector (`catch_up`). `partial` gets the
    result so far after each part, the quick ones first, so a long run stopped late keeps them."""
    started = time.perf_counter()
    traffic = generate(plan)
    result: dict[str, Any] = {
        "sessions": plan.sessions,
        "commands_per_session": plan.commands_per_session,
        "events": traffic.events,
        "mean_event_bytes": traffic.mean_event_bytes(),
        "generate_s": round(time.perf_counter() - started, 1),
    }
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        started = time.perf_counter()
        total = asyncio.run(append_all(server.url, traffic, plan))
        result["append_s"] = round(time.perf_counter() - started, 1)
        result["stream_messages"] = total
        if locality:
            # Rounds, each the read inside the stream then alone, best of its repeats: the
            # ratio moves between rounds (the server still writing its blocks out just after
            # the append), so the worst round is the figure.
            rounds: list[tuple[float, float, float]] = []
            for _ in range(LOCALITY_ROUNDS):
                inside, events = asyncio.run(replay_ms(server.url, LONG_SESSION))
                alone = replay_alone_ms(traffic)
                rounds.append((round(inside / alone, 2), inside, alone))
            ratio, inside, alone = max(rounds)
            result["long_session_events"] = events
            result["replay_in_stream_ms"] = inside
            result["replay_alone_ms"] = alone
            result["replay_locality_ratio"] = ratio
            result["replay_locality_ratios"] = [each[0] for each in rounds]
            partial(result)
        if catch_up:
            result["raw_fetch_ack_msgs_per_s"] = asyncio.run(fetch_and_ack(server.url, total))
            result["raw_ordered_msgs_per_s"] = asyncio.run(ordered_read(server.url, total))
            partial(result)
            events_per_s, start_s, peak, stages = projector_catch_up(server.url)
            result["projector_events_per_s"] = events_per_s
            result["projector_start_s"] = start_s
            result["projector_peak_rss_mib"] = peak
            result["projector_stages_us_per_event"] = stages
            partial(result)
            started = time.perf_counter()
            checked, mismatches = asyncio.run(verify(server.url))
            result["verify_events_per_s"] = rate(total, time.perf_counter() - started)
            result["verified_sessions"] = checked
            result["verify_mismatches"] = mismatches
            partial(result)
        if rebuild:
            if "raw_ordered_msgs_per_s" not in result:
                result["raw_ordered_msgs_per_s"] = asyncio.run(ordered_read(server.url, total))
            result.update(rebuild_run(server.url, total))
    return result
