"""Runtime events per second through the providers service, beside the gateway's own rate
for the commands the service sends, in the same run on the same server.

    python -m bench.providers_throughput [--events 2000] [--sessions 500] [--concurrency 256]

- `gateway_evaluate_commands_per_s`: single-evaluation `evaluate` commands (each firing one
  reminder: `injected` + `provider_evaluated`), sent straight to a gateway process by
  `--concurrency` concurrent requesters over `--sessions` sessions — the ceiling the providers
  service could reach.
- `runtime_events_per_s`: `session_idle` runtime events (one subscribed provider, idle_nudge,
  which fires) published to AGENT_EVENTS over `--sessions` sessions, timed from the first
  publish until every event's `provider_evaluated` is stored in REMINDERS — through the
  providers process (view read from the projection bucket, evaluation, one evaluate per
  event), the gateway and the projector, each its own process.
- `ratio`: runtime_events_per_s / gateway_evaluate_commands_per_s (reported only).
- `null_providers_runtime_events_per_s` and `cpu_ms_per_runtime_event_null_providers`: the
  same, with the providers service stopped and the null providers (`bench.null_providers`:
  the messaging alone, on stock nats-py) in its place, on fresh sessions: its `providers`
  column is the floor the service's own CPU per runtime event stands beside.
- `cpu_ms_per_evaluate_command` and `cpu_ms_per_runtime_event`: CPU milliseconds each
  process (gateway, projector, providers, the nats-server and this load process) spent per
  command / runtime event in each phase, and their total. Every process shares the same
  cores, so when the machine is saturated the two rates stand in the inverse ratio of the
  totals: `cpu_bound_ratio` = total per command / total per runtime event is the ratio the
  CPU accounting predicts, beside the measured one.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import nats
import orjson
from nats.aio.client import Client as NATS

from bench.common import (
    CpuMeter,
    embedded_server,
    emit,
    null_process,
    process_pids,
    provision_server,
    rate,
    running_services,
)
from cli.supervisor import ServiceProcess, stop_all
from client.sdk import ReminderClient
from core.providers import evaluation_request_id
from services.adapters.settings import Settings

#: Pause after each phase before its CPU is read, so the projector's last writes count in it.
SETTLE_S = 0.5


def evaluate_command(session_id: str, runtime_event_id: str, turn: int) -> dict[str, object]:
    """One single-evaluation `evaluate` firing `idle_nudge`, as the providers service sends
    for the benchmark's `session_idle` events (and the null providers in its place)."""
    return {
        "session_id": session_id,
        "request_id": evaluation_request_id(runtime_event_id),
        "turn": turn,
        "runtime_event_id": runtime_event_id,
        "view_seq": 0,
        "evaluations": [
            {
                "provider_id": "idle_nudge",
                "event": "session_idle",
                "fired": True,
                "reason": "fired",
                "reminder": {
                    "body": "The session has been idle for 120 seconds.",
                    "tags": ["idle"],
                    "dedupe_key": "idle_nudge",
                    "ttl_turns": 1,
                    "propagate": "none",
                    "source": "stdlib_provider",
                },
            }
        ],
    }


async def gateway_rate(url: str, events: int, sessions: int, concurrency: int) -> tuple[float, int]:
    nc = await nats.connect(url)
    failed = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(events):
        queue.put_nowait(n)

    async def worker() -> None:
        nonlocal failed
        while not queue.empty():
            n = queue.get_nowait()
            command = evaluate_command(f"direct-{n % sessions}", f"direct-{n}", 1)
            response = await nc.request("reminders.v1.evaluate", orjson.dumps(command), timeout=30)
            failed += 0 if orjson.loads(response.data).get("ok") else 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    await nc.close()
    return rate(events, elapsed), failed


async def evaluated(nc: NATS, stream: str, request: bytes, prefix: str) -> int:
    """How many provider_evaluated events the sessions named `prefix…` have stored."""
    reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=30)
    subjects: dict[str, int] = orjson.loads(reply.data)["state"].get("subjects") or {}
    return sum(n for subject, n in subjects.items() if subject.rsplit(".", 1)[1].startswith(prefix))


async def providers_rate(
    url: str, settings: Settings, events: int, sessions: int, prefix: str = "rt-"
) -> float:
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=30)
    started = time.perf_counter()
    pending = []
    for n in range(events):
        pending.append(
            client.publish_runtime_event(
                f"{prefix}{n % sessions}",
                "session_idle",
                {"idle_seconds": 120},
                turn=n // sessions,
                event_id=f"{prefix}{n}",
            )
        )
        if len(pending) >= 256:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    # Done when every runtime event has its provider_evaluated stored (exactly one each: one
    # subscribed provider, and a redelivery has no second effect). Counted with one stream
    # info request per poll, so the benchmark's own polling does not compete for the CPU with
    # the services it measures (a get per session per poll did).
    request = orjson.dumps({"subjects_filter": "transcript.reminder.provider_evaluated.>"})
    while await evaluated(nc, settings.stream, request, prefix) < events:
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await nc.close()
    return rate(events, elapsed)


@dataclass(frozen=True)
class ProvidersStack:
    """A provisioned embedded server with gateway, projector and providers processes ready,
    and the pid of every process the CPU accounting reads (this one as `load`)."""

    url: str
    settings: Settings
    services: dict[str, ServiceProcess]
    pids: dict[str, int]


@asynccontextmanager
async def providers_stack() -> AsyncIterator[ProvidersStack]:
    """The three services a runtime event goes through, on a fresh embedded server."""
    with embedded_server() as server:
        settings = Settings.from_env({}, nats_url=server.url)
        await provision_server(server.url, settings)
        with running_services(server.url, ("gateway", "projector", "providers")) as services:
            yield ProvidersStack(server.url, settings, services, process_pids(server, services))


async def metered_providers_rate(
    stack: ProvidersStack, events: int, sessions: int, prefix: str = "rt-"
) -> tuple[float, dict[str, float]]:
    """`providers_rate` on the stack, and the CPU milliseconds each process (`stack.pids`, as
    they are when it starts) spent per runtime event, the projector's last writes included."""
    meter = CpuMeter(stack.pids)
    runtime = await providers_rate(stack.url, stack.settings, events, sessions, prefix)
    await asyncio.sleep(SETTLE_S)
    return runtime, meter.ms_per(events)


async def measure(events: int, sessions: int, concurrency: int) -> dict[str, object]:
    async with providers_stack() as stack:
        url, pids = stack.url, stack.pids
        await gateway_rate(url, 200, sessions, concurrency)  # warm-up
        meter = CpuMeter(pids)
        gateway, failed = await gateway_rate(url, events, sessions, concurrency)
        await asyncio.sleep(SETTLE_S)  # the projector's last writes belong to this phase
        per_command = meter.ms_per(events)
        runtime, per_runtime_event = await metered_providers_rate(stack, events, sessions)
        stop_all([stack.services["providers"]])  # the null providers take its place
        with null_process("bench.null_providers", url) as null:
            pids["providers"] = null.pid
            null_rate, per_null_event = await metered_providers_rate(stack, events, sessions, "nl-")
    return {
        "events": events,
        "sessions": sessions,
        "concurrency": concurrency,
        "gateway_evaluate_commands_per_s": gateway,
        "gateway_failed_commands": failed,
        "runtime_events_per_s": runtime,
        "ratio": round(runtime / gateway, 2) if gateway else 0.0,
        "cpu_ms_per_evaluate_command": per_command,
        "cpu_ms_per_runtime_event": per_runtime_event,
        "null_providers_runtime_events_per_s": null_rate,
        "cpu_ms_per_runtime_event_null_providers": per_null_event,
        "cpu_bound_ratio": round(per_command["total"] / per_runtime_event["total"], 2)
        if per_runtime_event["total"]
        else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    emit("providers_throughput", asyncio.run(measure(args.events, args.sessions, args.concurrency)))


if __name__ == "__main__":
    main()
