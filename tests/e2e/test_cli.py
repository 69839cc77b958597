"""The `reminders` command as a user runs it: a real process, its exit code and output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from nats.aio.client import Client

from client.sdk import ReminderClient
from services.adapters.settings import Settings
from tests.processes import ServiceRunner

ROOT = Path(__file__).resolve().parents[2]


def reminders(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("reminders", path=str(Path(sys.executable).parent))
    command = [executable] if executable else [sys.executable, "-m", "cli.main"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120"},
        check=False,
    )


def test_help_lists_the_commands() -> None:
    result = reminders("--help")
    assert result.returncode == 0
    assert "demo" in result.stdout
    assert "schemas" in result.stdout


def test_the_demo_prints_commands_events_and_envelopes() -> None:
    result = reminders("demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("inject", "checkpoint", "render", "end_turn", "compact", "handoff"):
        assert expected in out
    for kind in ("injected", "queued", "fired", "delivered", "expired", "post_turn", "compacted"):
        assert kind in out
    assert '<context-directives speaker="harness">' in out
    assert '<system-reminder key="workspace">' in out
    assert "event log of demo-session" in out
    assert "Traceback" not in result.stderr


def test_schemas_check_passes_on_a_clean_checkout() -> None:
    result = reminders("schemas", "--check")
    assert result.returncode == 0, result.stderr


def test_help_is_whole_sentences_and_shows_flags_as_flags() -> None:
    from cli.main import app

    commands = [
        info.name or info.callback.__name__ for info in app.registered_commands if info.callback
    ]
    for info in app.registered_commands:
        assert info.short_help and "\n" not in info.short_help, info.name
    env = {**os.environ, "COLUMNS": "80"}
    for args in [(), *[(name.replace("_", "-"),) for name in commands]]:
        result = subprocess.run(
            [sys.executable, "-m", "cli.main", *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
            check=False,
        )
        assert result.returncode == 0, (args, result.stderr)
        assert "<bool>" not in result.stdout, args
        assert "--nats-url" not in result.stdout, args
    root = reminders("--help").stdout
    flat = " ".join(root.replace("│", " ").split())
    for info in app.registered_commands:
        assert info.short_help is not None
        assert " ".join(info.short_help.split()) in flat, info.short_help


async def test_export_rebuild_and_verify_projection_write_no_blank_line_on_stderr(
    nc: Client, provisioned: Settings, services: ServiceRunner, tmp_path: Path
) -> None:
    services.start("gateway")
    client = ReminderClient(nc)
    assert (await client.inject("quiet-s", "check the build", ttl_turns=2))["ok"]
    assert (await client.render("quiet-s", 0))["ok"]
    url = provisioned.nats_url
    runs = {
        "export": reminders("export", "quiet-s", "--nats", url, "-o", str(tmp_path / "s.jsonl")),
        "rebuild": reminders("rebuild", "--nats", url),
        "verify-projection": reminders("verify-projection", "--nats", url),
    }
    for command, result in runs.items():
        assert result.returncode == 0, f"{command}: {result.stderr}"
        lines = result.stderr.splitlines()
        assert lines and all(line.strip() for line in lines), f"{command}: {result.stderr!r}"
