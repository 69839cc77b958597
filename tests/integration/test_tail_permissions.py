"""`reminders tail` under the auditor's (`replay`) user with the shipped permissions (§10):
it reads and follows a session with nothing but direct gets and stream info, creates no
consumer, and draws no permission violation from the server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from cli.embedded import EmbeddedNats
from client.sdk import ReminderClient
from services.adapters.settings import Settings
from tests.e2e.test_tail import Lines
from tests.integration import test_permissions
from tests.integration.test_permissions import ROOT, as_user, connect_as
from tests.processes import ServiceRunner

#: The real server with the shipped users (the fixture of test_permissions.py).
secured_server = test_permissions.secured_server


def tail_argv(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "tail", *args, "--nats", url]


def run_tail(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tail_argv(url, *args),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        env={**os.environ, **as_user("replay")},
    )


async def inject(server: EmbeddedNats, session: str, *bodies: str) -> None:
    nc = await connect_as(server, "client")
    client = ReminderClient(nc)
    for body in bodies:
        await client.inject(session, body)
    await nc.close()


def test_tail_reads_and_follows_under_the_auditor_user_without_a_consumer(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    url = secured_server.url
    try:
        runner.start("gateway", extra_env=as_user("gateway"))
        started = datetime.now(UTC) - timedelta(seconds=1)
        asyncio.run(inject(secured_server, "watched", "first reminder", "second reminder"))

        # A one-shot read, from the start and from a time: every event, with its body.
        result = run_tail(url, "watched", "--format", "jsonl")
        assert result.returncode == 0, result.stderr
        records = [orjson.loads(line) for line in result.stdout.splitlines()]
        assert [r["kind"] for r in records] == ["injected", "injected"]
        assert [r["body"] for r in records] == ["first reminder", "second reminder"]
        since = run_tail(url, "--all", "--since", started.isoformat(), "--no-bodies")
        assert since.returncode == 0, since.stderr
        assert since.stdout.count("injected") == 2
        assert "first" not in since.stdout and "second" not in since.stdout
        for done in (result, since):
            assert "violation" not in done.stderr.lower() and "Traceback" not in done.stderr

        # Following from the stream's end: a new event shows up; Ctrl-C ends it quietly.
        follower = subprocess.Popen(
            tail_argv(url, "watched", "--follow", "--since", "now"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, **as_user("replay"), "PYTHONUNBUFFERED": "1"},
        )
        try:
            time.sleep(2.0)  # connected and caught up
            asyncio.run(inject(secured_server, "watched", "third reminder"))
            assert follower.stdout is not None
            shown = Lines(follower.stdout).until("third reminder", timeout_s=30)
            assert "first reminder" not in shown
        finally:
            follower.send_signal(signal.SIGINT)
            _, err = follower.communicate(timeout=20)
        assert follower.returncode == 130, err
        assert "Traceback" not in err and "violation" not in err.lower(), err

        async def consumers() -> set[str]:
            operator = await connect_as(secured_server, "operator")
            try:
                infos = await operator.jetstream().consumers_info("REMINDERS")
                return {info.name for info in infos}
            finally:
                await operator.close()

        # Nothing was left on (or made on) the server.
        assert asyncio.run(consumers()) == {"projector", "propagator", "observer"}
    finally:
        runner.stop_all()
