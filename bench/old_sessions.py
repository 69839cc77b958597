"""The providers on sessions that have lived: each holds a full window of remembered replies.

    python -m bench.old_sessions [--sessions 100] [--prefill 250] [--events 2000] [--output F]

`bench.providers_throughput` measures young sessions (a few runtime events each), whose
bucket values are a few kilobytes. A session that has lived holds the gateway's replies to
its last 256 request ids, and its value grows with them. Here each of `--sessions` sessions
first gets `--prefill` injects sent with request ids through the gateway (one dedupe key, so
one reminder stays live), then `--events` `session_idle` runtime events go through the
providers service (`bench.providers_throughput.metered_providers_rate`), and the CPU
milliseconds each process spent per runtime event are reported (`cpu_ms_per_runtime_event`),
with the size of one such session's bucket value (`value_bytes`). Written to
`bench/results/old_sessions.json`, or only to `--output` when given.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import nats

from bench.common import emit
from bench.providers_throughput import SETTLE_S, metered_providers_rate, providers_stack
from client.sdk import ReminderClient
from contracts.subjects import session_token
from services.adapters.records import read_last_value
from services.adapters.settings import Settings

#: The sessions' names (`providers_rate` names them `<prefix><n>`).
PREFIX = "old-"


async def prefill(url: str, sessions: int, commands: int) -> None:
    """`commands` injects per session, each with its own request id, sessions in parallel."""
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=30)

    async def lane(number: int) -> None:
        for k in range(commands):
            reply = await client.request(
                "inject",
                {
                    "session_id": f"{PREFIX}{number}",
                    "request_id": f"prefill-{number}-{k}",
                    "reminder": {"body": f"note {k}", "dedupe_key": "note"},
                },
            )
            if not reply.get("ok"):
                raise RuntimeError(f"the prefill was refused: {reply.get('error')}")

    try:
        await asyncio.gather(*(lane(number) for number in range(sessions)))
    finally:
        await nc.close()


async def value_bytes(url: str, settings: Settings) -> int:
    """The size of the first session's bucket value."""
    nc = await nats.connect(url)
    try:
        value = await read_last_value(nc, settings.kv_bucket, session_token(f"{PREFIX}0"))
        return len(value or b"")
    finally:
        await nc.close()


async def measure(sessions: int, prefill_commands: int, events: int) -> dict[str, Any]:
    """Prefill, then the providers' CPU per runtime event on those sessions."""
    async with providers_stack() as stack:
        await prefill(stack.url, sessions, prefill_commands)
        await asyncio.sleep(SETTLE_S * 4)  # the projector's writes of the prefill
        size = await value_bytes(stack.url, stack.settings)
        runtime, per_event = await metered_providers_rate(stack, events, sessions, PREFIX)
    return {
        "sessions": sessions,
        "prefill_commands_per_session": prefill_commands,
        "events": events,
        "value_bytes": size,
        "runtime_events_per_s": runtime,
        "cpu_ms_per_runtime_event": per_event,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--prefill", type=int, default=250)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--output", type=Path, help="write here instead of bench/results/")
    args = parser.parse_args()
    emit(
        "old_sessions", asyncio.run(measure(args.sessions, args.prefill, args.events)), args.output
    )


if __name__ == "__main__":
    main()
