"""Every command that talks to NATS, against a server nobody provisioned: one line on stderr
naming what is missing and `reminders provision`, exit 1 — never a traceback. The commands
that legitimately succeed there are `provision` itself, `up` (which provisions first) and
`mcp` (it only sends requests to the gateway; with its stdin closed it ends, exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from tests.conftest import NatsUnderTest

ROOT = Path(__file__).resolve().parents[2]

#: Commands that must refuse an unprovisioned server, by what they need.
REFUSING: list[tuple[str, ...]] = [
    ("replay", "s"),
    ("export", "s"),
    ("export", "--all"),
    ("rebuild",),
    ("verify-projection",),
    ("verify-projection", "--all"),
    ("verify-projection", "s"),
    ("tail", "s"),
    ("tail", "--all", "--follow"),
    ("doctor",),
    ("serve", "gateway"),
    ("serve", "projector"),
    ("serve", "propagator"),
    ("serve", "observer"),
]


def reminders(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("REMINDERS_")},
            "COLUMNS": "80",
        },
        stdin=subprocess.DEVNULL,
        check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_every_nats_command_against_an_unprovisioned_server(
    nats_server: NatsUnderTest, tmp_path: Path
) -> None:
    if os.environ.get("REMINDERS_TEST_NATS_URL"):
        pytest.skip("needs a server of its own to leave unprovisioned")
    url = nats_server.url
    for args in REFUSING:
        result = reminders(*args, "--nats", url)
        assert_one_line(result, "reminders provision")
        if args[0] != "doctor":
            assert "stream REMINDERS" in result.stderr, (args, result.stderr)

    mcp = reminders("mcp", "--nats", url)
    assert mcp.returncode == 0, mcp.stderr
    assert "Traceback" not in mcp.stderr

    up = reminders(
        "up",
        "--nats",
        url,
        "--demo",
        "--exit-after-demo",
        "--data-dir",
        str(tmp_path / "d"),
        timeout=180,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    provision = reminders("provision", "--nats", url)
    assert provision.returncode == 0, provision.stderr
    assert "Traceback" not in provision.stdout + provision.stderr


async def test_a_server_with_the_streams_but_no_bucket_is_named(
    nats_server: NatsUnderTest,
) -> None:
    if os.environ.get("REMINDERS_TEST_NATS_URL"):
        pytest.skip("needs a server of its own")
    assert reminders("provision", "--nats", nats_server.url).returncode == 0
    nc = await nats.connect(nats_server.url)
    try:
        await nc.jetstream().delete_key_value("REMINDER_SESSIONS")
    finally:
        await nc.close()
    for args in (("rebuild",), ("verify-projection",), ("verify-projection", "s")):
        result = reminders(*args, "--nats", nats_server.url)
        assert_one_line(result, "projection bucket REMINDER_SESSIONS", "reminders provision")
