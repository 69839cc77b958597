"""The write path through real service processes, beside raw nats-py baselines from the same run.

- `write_gateway`: injects (with a dedupe key) from many sessions in parallel through a gateway
  process; baselines: OCC plain publish (`js.publish` with the last-subject-sequence
  expectation), as many sessions in parallel, one message per command; and the null gateway
  (`bench.null_gateway`) under the same load. Beside them, the null gateway sending what SPEC
  §3.4 asks of a gateway instead of its one plain publish (`--atomic`: each command's events
  group-committed as atomic batches, nothing decided).
- `write_all_services`: the same with every service running as `reminders up` runs them, and
  how far the projector is behind when the last reply arrives.
- `sequential_latency`: one session, one inject after another; baseline: one single-message
  atomic batch per inject, one after another. Beside it, what the latency is made of: the
  request and reply hops alone (`bench.null_gateway --echo`, one request after another) and
  the gateway's CPU per command, in all and by stage (a second pass with the stage profile).
- `inject_visible`: light load; from sending an inject to a `state` query with `min_seq` = the
  reply's session_seq returning through the gateway, with every service running; split at the
  inject's reply (what the commit took, what reading it back took). Baseline: one
  single-message atomic batch after another on the same server once the services are
  stopped, the part of the inject's reply no service can go below (an atomic commit of a
  stream of one replica is synced to disk before its PubAck).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats

from bench.common import (
    CpuMeter,
    embedded_server,
    null_process,
    percentile,
    process_pids,
    provision_server,
    rate,
    running_services,
)
from bench.stages import GATEWAY_STAGES, snapshot, stage_profile
from bench.traffic import decide_session, inject_payload
from cli.up import SERVICES
from client.sdk import ReminderClient
from contracts.subjects import event_subject, session_subject_filter
from services.adapters.append import SessionAppend, encode_event, publish_atomic
from services.adapters.jetstream import H_EXPECTED_SEQ, H_EXPECTED_SUBJECT
from services.adapters.provisioning import consumer_info
from services.adapters.settings import Settings
from services.adapters.stages import PROFILE_ENV

#: How long one phase may wait for replies or for the projector before giving up.
PHASE_TIMEOUT_S = 300.0


async def occ_plain_publish(url: str, sessions: int, per_session: int) -> float:
    """Baseline: messages/s of `js.publish` with the OCC expectation headers, `sessions`
    sessions in parallel, each publishing one message after another (expecting its last)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    # A real stored event's bytes: what one command of the gateway writes, less the batch.
    data = encode_event(decide_session("occ-template", [0])[0][0])

    async def lane(number: int) -> None:
        session_id = f"occ-{number}"
        subject = event_subject("injected", session_id)
        expected = {H_EXPECTED_SUBJECT: session_subject_filter(session_id)}
        last = 0
        for _ in range(per_session):
            ack = await js.publish(subject, data, headers={**expected, H_EXPECTED_SEQ: str(last)})
            last = ack.seq

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(lane(n) for n in range(sessions))), PHASE_TIMEOUT_S)
    seconds = time.perf_counter() - started
    await nc.close()
    return rate(sessions * per_session, seconds)


async def forget_baseline(url: str) -> None:
    """The event stream emptied of the OCC baseline's messages (one stored event's bytes under
    other sessions' subjects), before any service starts: each service reads the stream from
    its start, and would otherwise dead-letter every one of them while its figures are
    taken."""
    nc = await nats.connect(url)
    try:
        await nc.jetstream().purge_stream(Settings(nats_url=url).stream)
    finally:
        await nc.close()


async def drive_injects(
    url: str, prefix: str, sessions: int, per_session: int, in_flight: int = 1
) -> tuple[float, int, float]:
    """`sessions` lanes in parallel, each sending `per_session` injects to its own session with
    `in_flight` outstanding at once; returns (commands/s, failed replies, end time)."""
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=60)
    failed = 0

    async def lane(number: int) -> None:
        nonlocal failed
        session_id = f"{prefix}-{number}"
        queue = iter(range(per_session))

        async def sender() -> None:
            nonlocal failed
            for n in queue:
                reply = await client.request("inject", inject_payload(session_id, n))
                failed += 0 if reply.get("ok") else 1

        await asyncio.gather(*(sender() for _ in range(in_flight)))

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(lane(n) for n in range(sessions))), PHASE_TIMEOUT_S)
    ended = time.perf_counter()
    await nc.close()
    return rate(sessions * per_session, ended - started), failed, ended


async def warm_up(url: str, prefix: str = "warm") -> None:
    """A few commands first, so the measured run does not pay the gateway's first requests
    (on sessions named from `prefix`: a null gateway keeps no sessions it did not write)."""
    await drive_injects(url, prefix, 4, 5)


async def projector_lag(url: str, since: float) -> tuple[int, float]:
    """Events the projector has not settled now, and seconds from `since` (perf_counter) until
    it has none pending or unacknowledged (bounded by PHASE_TIMEOUT_S)."""
    nc = await nats.connect(url)
    try:
        info = await consumer_info(nc, "REMINDERS", "projector")
        lag = int(info["num_pending"]) + int(info["num_ack_pending"])
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while lag and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            info = await consumer_info(nc, "REMINDERS", "projector")
            if int(info["num_pending"]) + int(info["num_ack_pending"]) == 0:
                break
        return lag, round(time.perf_counter() - since, 3)
    finally:
        await nc.close()


@contextmanager
def null_gateway(url: str, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`python -m bench.null_gateway URL [FLAGS]` running and subscribed; stopped on exit."""
    with null_process("bench.null_gateway", url, *flags) as process:
        yield process


async def profile_mark(url: str) -> None:
    """One command after more than a second's pause: a profiled process rewrites its stage
    profile on the first unit counted a second after the last write, before it replies, so
    the file holds everything up to this command when the reply arrives."""
    await asyncio.sleep(1.1)
    await drive_injects(url, "mark", 1, 1)


def profiled_gateway(
    url: str,
    load: Callable[[], Coroutine[Any, Any, Any]],
    warm_prefix: str = "warm",
    argv: dict[str, list[str]] | None = None,
) -> dict[str, float]:
    """µs of CPU per command by stage over `load`, through a gateway started for it with its
    stage profile on (`argv`: a wrapper that serves it, as `running_services` takes one), after
    a warm-up: a pass of its own, apart from the measured one, as the profile's brackets cost
    CPU as well."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gateway-stages.json"
        with running_services(url, ["gateway"], {PROFILE_ENV: str(path)}, argv=argv):
            asyncio.run(warm_up(url, warm_prefix))
            asyncio.run(profile_mark(url))
            before = snapshot(path)
            asyncio.run(load())
            asyncio.run(profile_mark(url))
            return stage_profile(path, "commands", GATEWAY_STAGES, before)


def metered_injects(
    url: str, tag: str, pids: dict[str, int], sessions: int, per_session: int, in_flight: int = 1
) -> tuple[float, int, dict[str, float]]:
    """After a warm-up, `drive_injects` on sessions named from `tag` (each pass its own: a null
    gateway knows only the sessions it wrote): commands/s, failed replies, and the CPU ms per
    command of each of `pids` (`CpuMeter.ms_per`, with `total`)."""
    asyncio.run(warm_up(url, f"warm-{tag}"))
    meter = CpuMeter(pids)
    per_s, failed, _ = asyncio.run(drive_injects(url, tag, sessions, per_session, in_flight))
    return per_s, failed, meter.ms_per(sessions * per_session)


def null_pass(
    url: str, tag: str, sessions: int, per_session: int, in_flight: int, *flags: str
) -> tuple[float, int, float]:
    """The load through a null gateway started with `flags`, on sessions of its own (`tag`):
    commands/s, failed replies, its CPU µs per command."""
    with null_gateway(url, *flags) as process:
        per_s, failed, cpu_ms = metered_injects(
            url, tag, {tag: process.pid}, sessions, per_session, in_flight
        )
    return per_s, failed, round(cpu_ms[tag] * 1000, 1)


def write_gateway(sessions: int, per_session: int, in_flight: int) -> dict[str, Any]:
    """Commands/s through a gateway process alone, the null gateway (`bench.null_gateway`)
    with the same load, the null gateway sending what SPEC §3.4 asks instead (`--atomic`: each
    command's events group-committed as atomic batches), and the OCC plain-publish baseline;
    each process's CPU µs per command. Then the same load through a second gateway process
    with the stage profile on, for its CPU by stage between two marks around that phase (the
    profile's own cost stays out of the first figures)."""
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        baseline = asyncio.run(occ_plain_publish(server.url, sessions, per_session))
        null_rate, null_failed, null_cpu = null_pass(
            server.url, "null", sessions, per_session, in_flight
        )
        atomic_rate, atomic_failed, atomic_cpu = null_pass(
            server.url, "null-atomic", sessions, per_session, in_flight, "--atomic"
        )
        with running_services(server.url, ["gateway"]) as services:
            pids = {"gateway": services["gateway"].process.pid}
            measured, failed, cpu_ms = metered_injects(
                server.url, "gw", pids, sessions, per_session, in_flight
            )
            gateway_cpu = cpu_ms["gateway"]
        gateway_stages = profiled_gateway(
            server.url, lambda: drive_injects(server.url, "gwp", sessions, per_session, in_flight)
        )
    return {
        "sessions": sessions,
        "commands": sessions * per_session,
        "in_flight_per_session": in_flight,
        "commands_per_s": measured,
        "failed_commands": failed,
        "gateway_cpu_us_per_command": round(gateway_cpu * 1000, 1),
        "gateway_stages_us_per_command": gateway_stages,
        "occ_plain_publish_per_s": baseline,
        "null_gateway_per_s": null_rate,
        "null_gateway_failed": null_failed,
        "null_gateway_cpu_us_per_command": null_cpu,
        "null_atomic_gateway_per_s": atomic_rate,
        "null_atomic_gateway_failed": atomic_failed,
        "null_atomic_gateway_cpu_us_per_command": atomic_cpu,
    }


def write_all_services(sessions: int, per_session: int, in_flight: int) -> dict[str, Any]:
    """Commands/s with every service running; the projector's lag when the last reply came;
    each process's CPU µs per command (the load generator is this process)."""
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        baseline = asyncio.run(occ_plain_publish(server.url, sessions, per_session))
        asyncio.run(forget_baseline(server.url))
        with running_services(server.url, SERVICES) as services:
            asyncio.run(warm_up(server.url))
            meter = CpuMeter(process_pids(server, services))

            async def measure() -> tuple[float, int, int, float]:
                commands, failed, ended = await drive_injects(
                    server.url, "all", sessions, per_session, in_flight
                )
                lag, caught_up = await projector_lag(server.url, ended)
                return commands, failed, lag, caught_up

            measured, failed, lag, caught_up = asyncio.run(measure())
            # Until the projector caught up: its work for these commands is all in.
            cpu = meter.ms_per(sessions * per_session)
    return {
        "sessions": sessions,
        "commands": sessions * per_session,
        "in_flight_per_session": in_flight,
        "services": list(SERVICES),
        "commands_per_s": measured,
        "failed_commands": failed,
        "projector_lag_events_at_last_reply": lag,
        "projector_caught_up_after_last_reply_s": caught_up,
        "cpu_us_per_command": {name: round(ms * 1000, 1) for name, ms in cpu.items()},
        "occ_plain_publish_per_s": baseline,
    }


async def raw_sequential(url: str, count: int) -> list[float]:
    """Baseline: milliseconds of each single-message atomic batch, one after another, one
    session (each an inject decided by the core, expecting the session's last sequence)."""
    nc = await nats.connect(url)
    events = decide_session("raw-seq", list(range(count * 3)))[::3]  # the script's injects
    latencies = []
    last = 0
    for number, decided in enumerate(events):
        started = time.perf_counter()
        last = await publish_atomic(
            nc, [SessionAppend("raw-seq", last, decided[-1:])], f"seq-{number}"
        )
        latencies.append((time.perf_counter() - started) * 1000)
    await nc.close()
    return latencies


async def gateway_sequential(
    url: str, count: int, session_id: str = "seq"
) -> tuple[list[float], int]:
    """Milliseconds of each inject (with dedupe key) through the gateway, one after another."""
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=30)
    latencies, failed = [], 0
    for n in range(count):
        started = time.perf_counter()
        reply = await client.request("inject", inject_payload(session_id, n))
        latencies.append((time.perf_counter() - started) * 1000)
        failed += 0 if reply.get("ok") else 1
    await nc.close()
    return latencies, failed


def sequential_latency(count: int) -> dict[str, Any]:
    """Inject latency of one session, one command at a time, beside raw atomic batches; and
    its parts: the request and reply hops alone, the gateway's CPU per command (by stage in a
    second, profiled pass, so the profile's own cost stays out of the latency)."""
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        baseline = asyncio.run(raw_sequential(server.url, count))
        with null_gateway(server.url, "--echo"):
            hops, _ = asyncio.run(gateway_sequential(server.url, count, "echo"))
        with running_services(server.url, ["gateway"]) as services:
            asyncio.run(warm_up(server.url))
            meter = CpuMeter({"gateway": services["gateway"].process.pid})
            measured, failed = asyncio.run(gateway_sequential(server.url, count))
            gateway_cpu = meter.ms_per(count)["gateway"]
        gateway_stages = profiled_gateway(
            server.url, lambda: gateway_sequential(server.url, count, "seq-profiled")
        )
    return {
        "commands": count,
        "inject_p50_ms": percentile(measured, 0.5),
        "inject_p99_ms": percentile(measured, 0.99),
        "failed_commands": failed,
        "raw_atomic_batch_p50_ms": percentile(baseline, 0.5),
        "raw_atomic_batch_p99_ms": percentile(baseline, 0.99),
        "echo_round_trip_p50_ms": percentile(hops, 0.5),
        "gateway_cpu_us_per_command": round(gateway_cpu * 1000, 1),
        "gateway_stages_us_per_command": gateway_stages,
    }


@dataclass
class Visible:
    """One light-load run of inject → visible: per command, ms to the inject's reply and ms
    to the `state` reply (both from sending the inject)."""

    replies: list[float] = field(default_factory=list)
    visible: list[float] = field(default_factory=list)
    stale: int = 0
    failed: int = 0


async def visible_latencies(url: str, sessions: int, count: int) -> Visible:
    """Milliseconds from sending an inject to its reply and to its `state` (min_seq) reply,
    one command at a time over `sessions` sessions."""
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=30)
    run = Visible()
    for n in range(count):
        session_id = f"visible-{n % sessions}"
        started = time.perf_counter()
        reply = await client.request("inject", inject_payload(session_id, n))
        replied = time.perf_counter()
        if not reply.get("ok"):
            run.failed += 1
            continue
        state = await client.request(
            "state", {"session_id": session_id, "min_seq": reply["session_seq"]}
        )
        run.replies.append((replied - started) * 1000)
        run.visible.append((time.perf_counter() - started) * 1000)
        run.stale += 1 if state.get("stale") or not state.get("ok") else 0
    await nc.close()
    return run


def inject_visible(sessions: int, count: int) -> dict[str, Any]:
    """Inject → visible in `state` through the gateway with every service running, split at
    the inject's reply; beside it, single-message atomic batches on the same server."""
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        with running_services(server.url, SERVICES):
            asyncio.run(warm_up(server.url))
            run = asyncio.run(visible_latencies(server.url, sessions, count))
        # After the services stop, so no projector or observer shares the cores with it.
        baseline = asyncio.run(raw_sequential(server.url, count))
    after_reply = [visible - reply for visible, reply in zip(run.visible, run.replies, strict=True)]
    return {
        "sessions": sessions,
        "commands": count,
        "visible_p50_ms": percentile(run.visible, 0.5),
        "visible_p99_ms": percentile(run.visible, 0.99),
        "inject_reply_p50_ms": percentile(run.replies, 0.5),
        "inject_reply_p99_ms": percentile(run.replies, 0.99),
        "reply_to_visible_p50_ms": percentile(after_reply, 0.5),
        "reply_to_visible_p99_ms": percentile(after_reply, 0.99),
        "raw_atomic_batch_p50_ms": percentile(baseline, 0.5),
        "raw_atomic_batch_p99_ms": percentile(baseline, 0.99),
        "stale_answers": run.stale,
        "failed_commands": run.failed,
    }
