"""One `--nats URL` on every command that talks to NATS, and one readable line when the URL
cannot be reached (SPEC §11): refused, DNS, timeout or authorization, within 2 s."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from cli.embedded import EmbeddedNats
from services.adapters.connection import (
    CLI_CONNECT_TIMEOUT_S,
    NatsUnreachable,
    connect_url,
    describe_failure,
    url_problem,
)

ROOT = Path(__file__).resolve().parents[2]
REFUSED = "nats://127.0.0.1:9"
GOLDEN = "tests/golden/basic_turns.events.jsonl"

#: Every command that talks to NATS, with what it needs besides the URL.
NATS_COMMANDS: list[tuple[str, ...]] = [
    ("replay", "s"),
    ("export", "s"),
    ("export", "--all"),
    ("rebuild",),
    ("verify-projection",),
    ("verify-projection", "s"),
    ("tail", "s"),
    ("tail", "--all", "--follow"),
    ("doctor",),
    ("provision",),
    ("mcp",),
    ("up", "--data-dir", "{tmp}"),
]


def reminders(
    *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k != "REMINDERS_NATS_URL"},
            "COLUMNS": "80",
            **(env or {}),
        },
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return result, time.monotonic() - started


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("args", NATS_COMMANDS, ids=" ".join)
def test_every_nats_command_takes_nats_and_reports_a_refused_connection_in_one_line(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result, _ = reminders(*argv, "--nats", REFUSED)
    line = one_error_line(result)
    assert f"cannot reach NATS at {REFUSED}: connection refused" in line


@pytest.mark.parametrize("args", [("rebuild",), ("verify-projection",), ("export", "s")])
def test_the_url_comes_from_the_environment_when_no_flag_is_given(args: tuple[str, ...]) -> None:
    result, _ = reminders(*args, env={"REMINDERS_NATS_URL": REFUSED})
    assert f"cannot reach NATS at {REFUSED}" in one_error_line(result)


def test_without_flag_or_environment_the_default_url_is_used() -> None:
    result, _ = reminders("rebuild", env={"REMINDERS_NATS_URL": ""})
    if result.returncode == 1 and "cannot reach" in result.stderr:
        assert "nats://127.0.0.1:4222" in result.stderr
    assert "Missing option" not in result.stderr


def test_a_file_source_wins_over_the_environment() -> None:
    result, _ = reminders(
        "replay", "golden-1", "--from", GOLDEN, env={"REMINDERS_NATS_URL": REFUSED}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("{")
    both, _ = reminders("replay", "golden-1", "--from", GOLDEN, "--nats", REFUSED)
    assert "give exactly one source" in one_error_line(both)


def test_the_old_nats_url_spelling_still_works_but_is_not_advertised() -> None:
    for command in ("up", "doctor", "mcp"):
        result, _ = reminders(
            command,
            "--nats-url",
            REFUSED,
            *(["--data-dir", "/nonexistent"] if command == "up" else []),
        )
        assert f"cannot reach NATS at {REFUSED}" in one_error_line(result)
        shown, _ = reminders(command, "--help")
        assert "--nats-url" not in shown.stdout
        assert "--nats" in shown.stdout


def test_a_dns_failure_is_named_and_reported_within_two_seconds() -> None:
    result, elapsed = reminders("export", "--all", "--nats", "nats://no-such-host.invalid:4222")
    assert "DNS lookup failed" in one_error_line(result)
    assert elapsed < 6  # interpreter start-up included; the connection itself below


async def test_connect_classifies_each_cause_within_two_seconds(tmp_path: Path) -> None:
    config = tmp_path / "auth.conf"
    config.write_text('authorization { users = [ { user: "a", password: "right" } ] }\n')
    server = EmbeddedNats(tmp_path / "store", config_file=config)
    server.start()
    try:
        cases = {
            REFUSED: "connection refused",
            "nats://no-such-host.invalid:4222": "DNS lookup failed",
            server.url: "authorization failed",
        }
        for url, cause in cases.items():
            started = time.monotonic()
            with pytest.raises(NatsUnreachable) as caught:
                await connect_url(
                    url,
                    "t",
                    {"user": "a", "password": "wrong"},
                    startup_timeout_s=CLI_CONNECT_TIMEOUT_S,
                    fail_fast=True,
                )
            assert time.monotonic() - started < 2.0, url
            assert cause in str(caught.value) and url in str(caught.value)
    finally:
        server.kill()
    assert "timed out after" in describe_failure(None, 1.5)[0]
    assert "timed out after" in describe_failure(TimeoutError(), 1.5)[0]
    assert describe_failure(nats.errors.AuthorizationError(), 1.5)[1] is True


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("http://127.0.0.1:4222", "wrong scheme http://"),
        ("https://a:4222,nats://b:4222", "wrong scheme https://"),
        ("nats://host:port", "is not HOST:PORT"),
    ],
)
def test_a_url_that_is_no_nats_url_is_named_in_one_line_without_a_lookup(
    url: str, cause: str
) -> None:
    for command in (("export", "--all"), ("doctor",)):
        result, elapsed = reminders(*command, "--nats", url)
        line = one_error_line(result)
        assert line.startswith(f"error: invalid NATS URL {url}: ") and cause in line, line
        assert "DNS" not in line and "nats: invalid connect url option" not in line
        assert result.stdout == "", "doctor prints no table when it cannot connect"
        assert elapsed < 6


def test_url_problem_accepts_every_nats_scheme_and_a_bare_host_port() -> None:
    for url in ("nats://a:4222", "tls://a:4222", "ws://a:8080", "wss://a", "a:4222", "a"):
        assert url_problem(url) is None, url
    assert url_problem("nats://a:4222,nats://b:4222") is None
    assert "wrong scheme http://" in (url_problem("http://a:4222") or "")
