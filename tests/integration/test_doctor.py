"""`reminders doctor` against a real deployment: a row per check, non-zero on failure."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from nats.aio.client import Client

from client.sdk import ReminderClient
from core.canonical import event_subject
from services.adapters.settings import Settings
from services.workers import WORKERS
from tests.processes import ServiceRunner

ROOT = Path(__file__).resolve().parents[2]


def doctor(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "doctor", "--nats-url", url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )


async def test_doctor_passes_on_a_healthy_system_and_names_each_failure(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    missing = await asyncio.to_thread(doctor, provisioned.nats_url)
    assert missing.returncode == 1
    assert "consumer projector" in missing.stdout and "no worker is pulling" in missing.stdout
    for name in WORKERS:
        services.start(name)
    await ReminderClient(nc).inject("doc", "x")
    healthy = await asyncio.to_thread(doctor, provisioned.nats_url)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    for row in (
        "connectivity",
        "jetstream",
        "stream REMINDERS",
        "bucket REMINDER_SESSIONS",
        "consumer observer",
        "stream AGENT_EVENTS",
        "consumer providers",
        "dead letters",
    ):
        assert row in healthy.stdout
    await nc.jetstream().publish(event_subject("injected", "doc"), b"not json")
    for _ in range(100):
        if (await nc.jetstream().stream_info(provisioned.dlq_stream)).state.messages:
            break
        await asyncio.sleep(0.1)
    poisoned = await asyncio.to_thread(doctor, provisioned.nats_url)
    assert poisoned.returncode == 1
    assert "poison message(s) in REMINDERS_DLQ" in poisoned.stdout
    assert "check(s) failed: dead letters" in " ".join(poisoned.stderr.split())


def test_doctor_against_an_unreachable_server_fails_readably() -> None:
    result = doctor("nats://127.0.0.1:9")
    assert result.returncode == 1
    # One error line like every other command; no table of the checks it could not run.
    [line] = result.stderr.strip().splitlines()
    assert "cannot reach NATS at nats://127.0.0.1:9: connection refused" in line
    assert result.stdout == ""
    assert "Traceback" not in result.stdout + result.stderr
