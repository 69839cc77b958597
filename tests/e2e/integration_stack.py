"""A real `reminders up`, shared by the runtime adapters' end-to-end tests, and what they ask
of it: inject a reminder, read a session's state and its event counters."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.embedded import EmbeddedNats, free_port
from client import ReminderClient

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    """The running `reminders up` and the NATS URL it printed."""

    url: str
    process: subprocess.Popen[str]
    output: list[str]


def start_stack(data_dir: Path) -> Iterator[Stack]:
    """`reminders up` with every service, until the caller is done; then Ctrl-C. Its NATS
    server is started here on a free port rather than by `up` (which takes 4222 when free),
    so the stack, which lives until the test session ends, never answers on the default URL
    that other tests expect to be empty."""
    server = EmbeddedNats(data_dir / "nats", port=free_port())
    server.start()
    try:
        yield from _up(server.url, data_dir)
    finally:
        server.stop()


def _up(nats_url: str, data_dir: Path) -> Iterator[Stack]:
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "up", "--nats", nats_url, "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    assert process.stdout is not None
    lines: list[str] = []
    url = None
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("NATS at "):
                url = line.removeprefix("NATS at ").split(";")[0].strip()
            if "press Ctrl-C" in line:
                break
        assert url and any("press Ctrl-C" in line for line in lines), "".join(lines)
        yield Stack(url, process, lines)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def dead_nats_url() -> str:
    """A loopback URL where no server listens: the ledger is down."""
    return f"nats://127.0.0.1:{free_port()}"


async def _with_client(url: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    async with await ReminderClient.connect(url, timeout_s=10) as client:
        return await client.call(op, payload)


async def inject(url: str, session_id: str, body: str, **spec: Any) -> str:
    """Inject one reminder; returns its id."""
    reply = await _with_client(
        url, "inject", {"session_id": session_id, "reminder": {"body": body, **spec}}
    )
    return str(reply["reminder_id"])


async def session_state(url: str, session_id: str) -> dict[str, Any]:
    """The session's projected state (SPEC §6.2)."""
    reply = await _with_client(url, "state", {"session_id": session_id})
    state: dict[str, Any] = reply["state"]
    return state


async def wait_for_counters(
    url: str, session_id: str, minimum: dict[str, int], timeout_s: float = 30
) -> dict[str, int]:
    """The session's event counters once each kind in `minimum` reached its count (the
    providers evaluate runtime events asynchronously)."""
    deadline = time.monotonic() + timeout_s
    counters: dict[str, int] = {}
    while time.monotonic() < deadline:
        counters = dict((await session_state(url, session_id)).get("counters") or {})
        if all(counters.get(kind, 0) >= count for kind, count in minimum.items()):
            return counters
        await asyncio.sleep(0.3)
    raise AssertionError(f"counters of {session_id} stayed at {counters}, wanted {minimum}")
