"""`reminders up` as a newcomer runs it: embedded NATS, services as processes, the demo."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cli.embedded import EmbeddedNats
from client import ReminderClient, ReminderError

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
    # Did the reminders work (SPEC §12.3, §12.4, §12.6): acted, dismissed by the model through
    # the MCP tool, expired at its deadline, and the session's effect report.
    assert "the host acknowledged effect-tests as acted → ok" in out
    assert "the model dismissed effect-naming through the MCP tool acknowledge_reminder → ok" in out
    assert "expired at its deadline: effect-deploy" in out
    assert "effect report of demo-session" in out
    report = out[out.index("effect report of demo-session") :]
    assert "hook · — · tests" in report and "in_pipeline · — · style" in report
    assert "all reminders" in report
    assert "stopping" in out
    assert (tmp_path / "nats").is_dir()


def test_up_with_the_demo_twice_on_one_data_dir_drives_a_fresh_session_each_time(
    tmp_path: Path,
) -> None:
    def run_demo() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            reminders_argv("up", "--demo", "--exit-after-demo", "--data-dir", str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
            env={**os.environ, "COLUMNS": "200"},
            check=False,
        )

    first, second = run_demo(), run_demo()
    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert "demo session: demo-session (sub-agent session demo-child)" in first.stdout
    assert "demo session: demo-session-2 (sub-agent session demo-child-2)" in second.stdout
    out = second.stdout
    # Its own session, with the same counts as the first run, and nothing of the old one.
    assert "event log of demo-session-2 in stream REMINDERS (21 events)" in out
    assert "projected state of demo-session-2 (session_seq 21" in out
    assert "pending injections of demo-session-2 (1)" in out
    assert "projected state of demo-child-2" in out
    assert "reminders replay demo-session-2" in out
    for leftover in ("stale_turn", "HARN-RMD-001", "already live", "demo-session ", "demo-child "):
        assert leftover not in out, leftover
    assert '"ok":false' not in out.replace(" ", "")
    assert "Traceback" not in second.stderr
    # Provisioning is listed readably, not as a dict; a reminder without TTL shows ∞.
    assert "provisioned:" in first.stdout and "created: REMINDERS" in first.stdout
    assert "unchanged: REMINDERS" in out
    assert "{'" not in first.stdout + out
    assert "∞" in out


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


async def inject_when_answered(url: str) -> dict[str, Any]:
    """One inject, retried while the gateway reconnects (bounded: 20 tries)."""
    async with await ReminderClient.connect(url, timeout_s=2) as client:
        for _ in range(20):
            try:
                return await client.request(
                    "inject", {"session_id": "after", "reminder": {"body": "still here"}}
                )
            except ReminderError:  # no gateway answered yet
                await asyncio.sleep(0.5)
    raise AssertionError("no gateway answered within 20 tries")


def read_until(
    process: subprocess.Popen[str], marker: str, lines: list[str], timeout_s: float
) -> str:
    """Read `up`'s output until a line holds `marker` (bounded in time)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return line
    raise AssertionError(f"no line with {marker!r} in:\n{''.join(lines)}")


def test_up_restarts_a_crashed_worker_and_rides_out_a_nats_restart(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "store")
    server.start()
    process = subprocess.Popen(
        reminders_argv("up", "--nats-url", server.url, "--data-dir", str(tmp_path / "data")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    lines: list[str] = []
    try:
        projector = read_until(process, "projector ", lines, 60)
        pid = int(projector.split("pid")[1].split()[0])
        read_until(process, "press Ctrl-C", lines, 60)

        os.kill(pid, signal.SIGKILL)
        read_until(process, "projector exited with", lines, 15)
        read_until(process, "projector restarted", lines, 15)

        server.kill()
        time.sleep(1.5)
        server.start()
        time.sleep(5)  # every worker reconnects; none exits
        assert process.poll() is None, "".join(lines)

        reply = asyncio.run(inject_when_answered(server.url))
        assert reply["ok"] is True, reply
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
        server.kill()
    output = "".join(lines) + rest
    assert process.returncode == 0, output
    assert "exited with" not in rest, output  # nothing crashed after the projector's kill
    assert "Traceback" not in output


def test_an_idle_system_logs_no_error_and_services_import_no_faststream(tmp_path: Path) -> None:
    """The services once logged FastStream error lines on an idle system. They no longer use
    FastStream at all; an idle `up` must log no error (8 s here, REMINDERS_IDLE_SECONDS to
    watch longer, e.g. 50)."""
    import ast

    for path in (ROOT / "services").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(name.split(".")[0] == "faststream" for name in names), path

    idle_s = float(os.environ.get("REMINDERS_IDLE_SECONDS", "8"))
    process = subprocess.Popen(
        reminders_argv("up", "--data-dir", str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    try:
        read_until(process, "press Ctrl-C", lines, 60)
        time.sleep(idle_s)
        assert process.poll() is None, "".join(lines)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    logs = sorted((tmp_path / "logs").glob("*.log"))
    assert {log.stem for log in logs} >= {"gateway", "projector", "propagator", "observer"}
    for log in logs:
        errors = [line for line in log.read_text().splitlines() if '"level":"error"' in line]
        assert errors == [], (log.name, errors[:3])
