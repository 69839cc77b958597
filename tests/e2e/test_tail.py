"""`reminders tail` as an operator runs it, against a running `reminders up --demo`: the demo
session's events one line each, JSON Lines, bad input in one line, and a follower that waits
for an unknown session and keeps going across a NATS restart without repeating an event."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import nats
import orjson
import pytest

from cli.embedded import EmbeddedNats
from client.sdk import ReminderClient
from contracts.events import PAYLOADS

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def reminders(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


def stop(process: subprocess.Popen[Any], timeout_s: float = 60) -> str:
    """Ctrl-C, wait, kill if it hangs; what it printed."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate(timeout=10)
    return str(out or "")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A NATS server the test owns, so it can restart it under `up`."""
    server = EmbeddedNats(tmp_path / "nats-store")
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def demo_up(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[str]:
    """`reminders up --demo --nats URL`, running until the test ends: the URL."""
    process = subprocess.Popen(
        reminders("up", "--demo", "--nats", nats_server.url, "--data-dir", str(tmp_path / "d")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "press Ctrl-C" in line or not line:
                break
        assert "press Ctrl-C" in "".join(lines), "".join(lines)
        yield nats_server.url
    finally:
        stop(process)


def tail(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        reminders("tail", *args, "--nats", url),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=ENV,
        check=False,
    )


async def inject(url: str, session: str, body: str, attempts: int = 100) -> None:
    """Inject once NATS and the gateway answer (they may be reconnecting)."""
    nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    client = ReminderClient(nc, timeout_s=2)
    try:
        for _ in range(attempts):
            try:
                await client.inject(session, body)
                return
            except Exception:
                await asyncio.sleep(0.2)
        pytest.fail(f"could not inject into {session}")
    finally:
        await nc.close()


class Lines:
    """A process's output lines, read by a thread, so a wait for one has a deadline (a bare
    readline would block for ever on a follower that prints nothing)."""

    def __init__(self, stream: IO[str]) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.queue.put(line)
        self.queue.put(None)

    def until(self, needle: str, timeout_s: float) -> str:
        """Every line up to the first one holding `needle`; fails after `timeout_s`."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                pytest.fail("the process exited; it printed:\n" + "".join(seen))
            seen.append(line)
            if needle in line:
                return "".join(seen)
        pytest.fail(f"no line with {needle!r} in {timeout_s} s; got:\n" + "".join(seen))

    def next_record(self, timeout_s: float) -> dict[str, Any]:
        """The next non-empty line, as a JSON Lines record."""
        line = self.until("{", timeout_s).splitlines()[-1]
        record: dict[str, Any] = orjson.loads(line)
        return record


def test_tail_prints_the_demo_session_and_refuses_bad_input_in_one_line(demo_up: str) -> None:
    table = tail(demo_up, "demo-session")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["seq", "turn", "kind", "reminder", "authority", "body"]
    # The header, then one line per event of the demo session, in order.
    everything = tail(demo_up, "demo-session", "--format", "jsonl").stdout.splitlines()
    assert len(everything) >= 21 and len(lines) == 1 + len(everything)
    assert [orjson.loads(line)["session_seq"] for line in everything] == list(
        range(1, len(everything) + 1)
    )
    assert re.match(r"\s+1\s+0\s+injected\s+\S+\s+corrective\s+Token budget", lines[1])
    assert any(" fired " in line and "Work only inside" in line for line in lines)

    jsonl = tail(demo_up, "demo-session", "--kind", "fired", "--format", "jsonl", "--since", "6")
    records = [orjson.loads(line) for line in jsonl.stdout.splitlines()]
    assert {r["kind"] for r in records} == {"fired"} and records[0]["stream_seq"] >= 6
    assert all(r["body"] and r["authority"] for r in records)

    redacted = subprocess.run(
        reminders("tail", "demo-session", "--nats", demo_up),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**ENV, "REMINDERS_REDACT": "1"},
        check=False,
    )
    assert redacted.returncode == 0 and "Work only inside" not in redacted.stdout

    unknown = tail(demo_up, "no-such-session")
    assert unknown.returncode == 0 and unknown.stdout == ""
    assert unknown.stderr.strip() == "no events of session no-such-session in REMINDERS"

    bad_kind = tail(demo_up, "--all", "--kind", "fired,bogus")
    assert bad_kind.returncode == 1 and len(bad_kind.stderr.strip().splitlines()) == 1
    assert "invalid_request" in bad_kind.stderr and "'bogus'" in bad_kind.stderr
    assert all(kind in bad_kind.stderr for kind in PAYLOADS)

    bad_since = tail(demo_up, "--all", "--since", "last tuesday")
    assert bad_since.returncode == 1 and len(bad_since.stderr.strip().splitlines()) == 1
    for done in (table, jsonl, unknown, bad_kind, bad_since):
        assert "Traceback" not in done.stderr


def test_tail_follow_waits_for_a_new_session_and_survives_a_nats_restart(
    demo_up: str, nats_server: EmbeddedNats
) -> None:
    follower = subprocess.Popen(
        reminders("tail", "late-session", "--follow", "--format", "jsonl", "--nats", demo_up),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    assert follower.stdout is not None
    lines = Lines(follower.stdout)
    try:
        time.sleep(2.0)  # an unknown session: it waits rather than exits
        assert follower.poll() is None
        asyncio.run(inject(demo_up, "other-session", "not for this follower"))
        time.sleep(1.5)  # a poll or two over the other session's event
        asyncio.run(inject(demo_up, "late-session", "before the restart"))
        before = lines.next_record(timeout_s=15)
        assert before["kind"] == "injected" and before["body"] == "before the restart"

        nats_server.kill()
        time.sleep(1.0)
        nats_server.start()
        asyncio.run(inject(demo_up, "late-session", "after the restart"))
        after = lines.next_record(timeout_s=30)
        assert after["body"] == "after the restart", after  # nothing repeated, nothing lost
        assert after["stream_seq"] > before["stream_seq"]
        assert after["session_seq"] == before["session_seq"] + 1
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=20)
    assert follower.returncode == 130, err
    assert "Traceback" not in err, err
