"""`reminders up` as a newcomer runs it: embedded NATS, services as processes, the demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def reminders_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


def test_up_with_the_demo_drives_a_session_through_the_bus_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        reminders_argv("up", "--demo", "--exit-after-demo", "--data-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "140"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "starting nats-server with JetStream" in out
    assert "gateway" in out and "/healthz" in out
    assert "event log of demo-session in stream REMINDERS (21 events)" in out
    for kind in ("injected", "queued", "fired", "delivered", "expired", "compacted", "handed_off"):
        assert kind in out
    assert '<context-directives speaker="harness">' in out
    assert "projected state of demo-session (session_seq 21" in out
    assert "pending injections of demo-session (1)" in out
    assert "status-1" in out
    assert "projected state of demo-child" in out and "inherited" in out
    assert "stopping" in out
    assert (tmp_path / "nats").is_dir()


def test_up_stops_every_process_on_ctrl_c(tmp_path: Path) -> None:
    process = subprocess.Popen(
        reminders_argv("up", "--data-dir", str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "press Ctrl-C" in line or not line:
            break
    assert any("press Ctrl-C" in line for line in lines), "".join(lines)
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(lines) + rest
    assert "stopping" in rest
    assert "Traceback" not in rest


def test_up_against_an_unreachable_server_fails_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        reminders_argv("up", "--nats-url", "nats://127.0.0.1:9", "--data-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 1
    assert "cannot reach NATS at nats://127.0.0.1:9" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr + result.stdout
