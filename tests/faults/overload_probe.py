"""The overload run's latency probe, a process of its own: one client that sends one recorded
`inject` at a time at a low rate until it is sent SIGTERM, and writes its history as JSON
Lines (`tests/faults/history.py`), the monotonic time its history started beside it.

Why a process: the load at twice the saturation rate is generated, recorded and timed in the
test process, whose event loop is then itself saturated; every latency it measures includes
the time a reply waited in its own socket buffer for its loop. The probe's loop is idle
between its commands, so what it measures is what a well-behaved client of an overloaded
gateway sees: the network, the gateway's queue and the commit.

`python -m tests.faults.overload_probe NATS_URL HISTORY.jsonl [INTERVAL_S]`
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Any

from client.sdk import ReminderClient
from contracts.errors import ReminderError
from tests.faults.history import History, status_of

#: The probe's sessions: few, so each stays far under its own rate limit at the probe's rate.
SESSIONS = 4


def inject(session_id: str, n: int) -> dict[str, Any]:
    """The overload run's command: an inject with a `request_id` and a dedupe key."""
    return {
        "session_id": session_id,
        "request_id": f"{session_id}-{n}",
        "reminder": {"body": f"overload #{n}", "ttl_turns": 3, "dedupe_key": f"k{n % 3}"},
    }


async def send(
    client: ReminderClient, history: History, name: str, payload: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """One recorded inject; returns its latency (s) and its reply."""
    record = history.invoke(name, "inject", payload["session_id"], payload["request_id"], payload)
    sent = time.monotonic()
    try:
        reply = await client.request("inject", payload)
    except ReminderError as exc:
        reply = {"error": {"code": "no_answer", "message": str(exc)}}
        history.complete(record, "info", reply)
        return time.monotonic() - sent, reply
    history.complete(record, status_of(reply), reply)
    return time.monotonic() - sent, reply


def retry_after_s(reply: dict[str, Any]) -> float:
    """How long a refused command's caller is asked to wait before it retries (0 if not)."""
    details = (reply.get("error") or {}).get("details") or {}
    return float(details.get("retry_after_ms") or 0) / 1000


async def probe(url: str, path: Path, interval_s: float) -> None:
    """Send, record and wait `interval_s` between commands until SIGTERM."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    client = await ReminderClient.connect(url, timeout_s=10.0)
    history = History(path)
    path.with_suffix(".start").write_text(repr(time.monotonic() - history.now()), "utf-8")
    n = 0
    try:
        while not stop.is_set():
            await send(client, history, "probe", inject(f"probe{n % SESSIONS}", n))
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
    finally:
        history.close()
        await client.close()


def main(argv: list[str]) -> int:
    """Run the probe (see the module's docstring)."""
    interval_s = float(argv[2]) if len(argv) > 2 else 0.02
    asyncio.run(probe(argv[0], Path(argv[1]), interval_s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
