"""The `reminders` command as a user runs it: a real process, its exit code and output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
