"""Each service under its own NATS user with the shipped least-privilege permissions (§10)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from cli.embedded import EmbeddedNats
from client.sdk import ReminderClient
from services.adapters.settings import Settings
from tests.processes import ServiceRunner

ROOT = Path(__file__).resolve().parents[2]
USERS = ("gateway", "projector", "propagator", "observer", "client", "replay", "operator")


def password(user: str) -> str:
    return f"{user}-secret-pw"


@pytest.fixture
def secured_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNats]:
    """A real nats-server with JetStream and exactly the users of k8s/base/nats-auth.conf."""
    shutil.copy(ROOT / "k8s/base/nats-auth.conf", tmp_path / "nats-auth.conf")
    config = tmp_path / "nats.conf"
    config.write_text('include "nats-auth.conf"\n', encoding="utf-8")
    for user in USERS:
        monkeypatch.setenv(f"{user.upper()}_PASSWORD", password(user))
    server = EmbeddedNats(tmp_path / "store", config_file=config)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def as_user(user: str) -> dict[str, str]:
    return {"REMINDERS_NATS_USER": user, "REMINDERS_NATS_PASSWORD": password(user)}


async def connect_as(server: EmbeddedNats, user: str) -> nats.aio.client.Client:
    errors: list[Exception] = []

    async def record(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(
        server.url, user=user, password=password(user), error_cb=record, max_reconnect_attempts=2
    )
    nc._test_errors = errors  # type: ignore[attr-defined]
    return nc


def violations(nc: nats.aio.client.Client) -> list[Exception]:
    """The permission errors the server sent this connection."""
    errors: list[Exception] = nc._test_errors  # type: ignore[attr-defined]
    return [e for e in errors if "permissions violation" in str(e).lower()]


async def count(operator: nats.aio.client.Client, stream: str = "REMINDERS") -> int:
    return int((await operator.jetstream().stream_info(stream)).state.messages)


async def test_every_service_works_under_its_own_user_and_no_more(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    try:
        for service in ("gateway", "projector", "propagator"):
            runner.start(service, extra_env=as_user(service))
        client_nc = await connect_as(secured_server, "client")
        client = ReminderClient(client_nc)
        await client.inject("secure", "hello", id="h1", propagate="all")
        await client.handoff("secure", "secure-child")
        state = await client.call("state", {"session_id": "secure"})
        assert state["stale"] is False and state["state"]["session_seq"] == 2
        for _ in range(100):
            child = await client.call("state", {"session_id": "secure-child"})
            if child["state"]["session_seq"] == 2:
                break
            await asyncio.sleep(0.1)
        assert [row["spec"]["id"] for row in child["state"]["pending"]] == ["h1"]
        # Clients may not forget or forge inheritance.
        with pytest.raises(Exception):  # noqa: B017 - denied publish: no responder answers
            await client_nc.request("reminders.v1.forget", b'{"session_id":"secure"}', timeout=1)

        operator = await connect_as(secured_server, "operator")
        before = await count(operator)
        projector = await connect_as(secured_server, "projector")
        await projector.publish("transcript.reminder.injected.secure", b"{}")
        await projector.flush()
        await asyncio.sleep(0.3)
        assert await count(operator) == before
        assert violations(projector)

        replay_nc = await connect_as(secured_server, "replay")
        for subject in (
            "transcript.reminder.injected.secure",
            "reminders.v1.inject",
            "$KV.REMINDER_SESSIONS.secure",
            "reminders.audit.forgotten",
        ):
            await replay_nc.publish(subject, b'{"session_id":"secure"}')
        await replay_nc.flush()
        await asyncio.sleep(0.3)
        assert await count(operator) == before
        assert len(violations(replay_nc)) >= 4
        for connection in (client_nc, operator, projector, replay_nc):
            await connection.close()
    finally:
        runner.stop_all()


def test_the_replay_user_can_replay_and_export_read_only(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    try:
        runner.start("gateway", extra_env=as_user("gateway"))

        async def write() -> None:
            nc = await connect_as(secured_server, "client")
            await ReminderClient(nc).inject("audited", "x", ttl_turns=1)
            await nc.close()

        asyncio.run(write())
    finally:
        runner.stop_all()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "replay",
            "audited",
            "--nats",
            secured_server.url,
            "--verify",
        ],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        env={**os.environ, **as_user("replay")},
    )
    assert result.returncode == 0, result.stderr
    assert b'"session_id":"audited"' in result.stdout


def test_a_service_authenticates_with_a_token_from_configuration(tmp_path: Path) -> None:
    config = tmp_path / "token.conf"
    config.write_text('authorization { token: "s3cret-token" }\n', encoding="utf-8")
    server = EmbeddedNats(tmp_path / "store", config_file=config)
    server.start()
    runner = ServiceRunner(Settings.from_env({}, nats_url=server.url), tmp_path / "logs")
    try:
        runner.start("gateway", extra_env={"REMINDERS_NATS_TOKEN": "s3cret-token"})

        async def use() -> dict[str, object]:
            nc = await nats.connect(server.url, token="s3cret-token")
            reply = await ReminderClient(nc).inject("tokened", "x")
            await nc.close()
            return reply

        assert asyncio.run(use())["ok"] is True
        refused = runner.start("gateway", wait=False, extra_env={"REMINDERS_NATS_TOKEN": "wrong"})
        assert refused.process.wait(timeout=30) == 1
        assert "cannot reach NATS" in refused.log() or "Authorization" in refused.log()
    finally:
        runner.stop_all()
        server.kill()
