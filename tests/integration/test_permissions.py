"""Each service under its own NATS user with the shipped least-privilege permissions (§10)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import orjson
import pytest

from cli.embedded import EmbeddedNats
from client.sdk import ReminderClient
from contracts.subjects import session_token
from services.adapters.projection import BucketReader
from services.adapters.session_read import leader_first_after, leader_messages_between
from services.adapters.settings import Settings
from tests.processes import ServiceRunner

ROOT = Path(__file__).resolve().parents[2]
#: Every user of the auth file (each worker's, and admin, client, replay, operator).
USERS = tuple(
    re.findall(r"user:\s*(\w+)\s*,", (ROOT / "k8s/base/nats-auth.conf").read_text("utf-8"))
)


def shipped_tenant_users() -> list[str]:
    """The example tenants' users in the shipped auth config (docs/tenants.md)."""
    text = (ROOT / "k8s/base/nats-auth.conf").read_text(encoding="utf-8")
    return [user for user in re.findall(r"user:\s*(\w+)\s*,", text) if user not in USERS]


def password(user: str) -> str:
    return f"{user}-secret-pw"


@pytest.fixture
def secured_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNats]:
    """A real nats-server with JetStream and exactly the users of k8s/base/nats-auth.conf."""
    yield from shipped_auth_server(tmp_path, monkeypatch)


def shipped_auth_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNats]:
    """Start the server of `secured_server` (also for other modules' fixtures)."""
    shutil.copy(ROOT / "k8s/base/nats-auth.conf", tmp_path / "nats-auth.conf")
    config = tmp_path / "nats.conf"
    config.write_text('include "nats-auth.conf"\n', encoding="utf-8")
    for user in (*USERS, *shipped_tenant_users()):
        monkeypatch.setenv(f"{user.upper()}_PASSWORD", password(user))
    server = EmbeddedNats(tmp_path / "store", config_file=config)
    server.start()
    try:
        provision_as_admin(server.url)
        yield server
    finally:
        server.kill()


def provision_as_admin(url: str) -> None:
    """`reminders provision` under the admin user, as the compose one-shot and k8s Job do."""
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "provision", "--nats", url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        env={**os.environ, **as_user("admin")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "REMINDERS/projector: created" in result.stdout


def as_user(user: str) -> dict[str, str]:
    return {"REMINDERS_NATS_USER": user, "REMINDERS_NATS_PASSWORD": password(user)}


def reminders(server: EmbeddedNats, user: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`reminders ARGUMENTS --nats URL` as `user`, the way an operator or auditor runs it."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *arguments, "--nats", server.url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        env={**os.environ, **as_user(user)},
    )


async def connect_as(server: EmbeddedNats, user: str) -> nats.aio.client.Client:
    errors: list[Exception] = []

    async def record(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(
        server.url,
        user=user,
        password=password(user),
        error_cb=record,
        max_reconnect_attempts=2,
        inbox_prefix=f"_INBOX.{user}",
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
        for service in ("gateway", "projector", "propagator", "observer"):
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
        # Whether a gap's missing events are in the log: the projector asks the leader.
        assert await leader_first_after(projector, "REMINDERS", "transcript.reminder.*.secure", 0)
        # And reads the missing events from it to fill the gap.
        assert await leader_messages_between(
            projector, "REMINDERS", "transcript.reminder.*.secure", 0, 10**9, 2
        )
        assert not violations(projector)
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


async def test_the_fleet_auditor_verifies_the_whole_projection_and_creates_no_durable(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    try:
        for service in ("gateway", "projector"):
            runner.start(service, extra_env=as_user(service))
        client_nc = await connect_as(secured_server, "client")
        client = ReminderClient(client_nc)
        for session_id in ("audited", "second"):
            await client.inject(session_id, "verify me", ttl_turns=2)
            state = await client.call("state", {"session_id": session_id})
            assert state["stale"] is False
        # Beside the projected sessions: a projection without events (a copy of one under
        # another key), a deleted key and a purged one, written by the operator.
        operator = await connect_as(secured_server, "operator")
        bucket = await operator.jetstream().key_value(settings.kv_bucket)
        projected = (await bucket.get(session_token("audited"))).value
        assert projected
        for key in ("orphan", "deleted", "purged"):
            await bucket.put(key, projected)
        await bucket.delete("deleted")
        await bucket.purge("purged")

        # The fleet auditor lists the bucket by direct gets: it finds the orphan, and only it.
        found = reminders(secured_server, "replay", "verify-projection", "--all")
        assert found.returncode == 1, found.stderr
        assert found.stderr.splitlines()[0].startswith("MISMATCH orphan: projection differs")
        assert "deleted" not in found.stderr and "purged" not in found.stderr
        assert "1 of 3 session(s) differ from a replay" in found.stderr
        await bucket.delete("orphan")
        verified = reminders(secured_server, "replay", "verify-projection", "--all")
        assert verified.returncode == 0, verified.stderr
        assert verified.stderr == "ok: 2 session(s) equal to a replay of the log\n"

        # ...and still may create no consumer, durable or ephemeral, on the log or the bucket.
        auditor = await connect_as(secured_server, "replay")
        for stream in ("REMINDERS", f"KV_{settings.kv_bucket}"):
            for subject in (
                f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.rogue",
                f"$JS.API.CONSUMER.CREATE.{stream}.rogue",
                f"$JS.API.CONSUMER.CREATE.{stream}",
            ):
                assert await denied(auditor, subject), subject
        durables = {info.name for info in await operator.jetstream().consumers_info("REMINDERS")}
        assert durables == {"projector", "propagator", "observer"}
        on_bucket = await operator.jetstream().consumers_info(f"KV_{settings.kv_bucket}")
        assert [info.name for info in on_bucket if info.config.durable_name] == []
        for connection in (client_nc, operator, auditor):
            await connection.close()
    finally:
        runner.stop_all()


def test_a_service_authenticates_with_a_token_from_configuration(tmp_path: Path) -> None:
    config = tmp_path / "token.conf"
    config.write_text('authorization { token: "s3cret-token" }\n', encoding="utf-8")
    server = EmbeddedNats(tmp_path / "store", config_file=config)
    server.start()
    runner = ServiceRunner(Settings.from_env({}, nats_url=server.url), tmp_path / "logs")
    try:
        provisioned = subprocess.run(
            [sys.executable, "-m", "cli.main", "provision", "--nats", server.url],
            capture_output=True,
            timeout=60,
            cwd=ROOT,
            check=False,
            env={**os.environ, "REMINDERS_NATS_TOKEN": "s3cret-token"},
        )
        assert provisioned.returncode == 0, provisioned.stderr
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


async def denied(nc: nats.aio.client.Client, subject: str, body: bytes = b"{}") -> bool:
    """Whether a request on `subject` was refused by the server (a permissions violation,
    and so no answer)."""
    before = len(violations(nc))
    with contextlib.suppress(Exception):
        await nc.request(subject, body, timeout=0.5)
    await nc.flush()
    await asyncio.sleep(0.1)
    return len(violations(nc)) > before


async def test_every_denial_of_the_least_privilege_rules_holds_on_a_real_server(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    try:
        for service in ("gateway", "projector", "observer"):
            runner.start(service, extra_env=as_user(service))
        operator = await connect_as(secured_server, "operator")
        spy = await connect_as(secured_server, "client")
        client_nc = await connect_as(secured_server, "client")
        client = ReminderClient(client_nc)

        # Replies cannot be sniffed: nobody may subscribe to another user's inbox.
        sniffed: list[bytes] = []

        async def sniff(msg: nats.aio.msg.Msg) -> None:
            sniffed.append(msg.data)

        for pattern in ("_INBOX.>", "_INBOX.gateway.>", "_INBOX.projector.>"):
            await spy.subscribe(pattern, cb=sniff)
        await spy.flush()
        await asyncio.sleep(0.2)
        assert len(violations(spy)) >= 3
        await client.inject("private", "a secret body", id="p1")
        await client.call("state", {"session_id": "private"})
        await asyncio.sleep(0.3)
        assert sniffed == []

        # Only the observer publishes ACP notifications; only the propagator sends inherit;
        # only the operator forgets; nobody but the providers service evaluates.
        for subject in (
            "reminders.v1.acp.private",
            "reminders.v1.inherit",
            "reminders.v1.forget",
            "reminders.v1.evaluate",
        ):
            assert await denied(client_nc, subject), subject

        # No service holds $JS.API.>: none can purge or delete a stream, or a durable.
        events_before = await count(operator)
        for user in ("projector", "propagator", "observer", "gateway"):
            nc = await connect_as(secured_server, user)
            for subject in (
                "$JS.API.STREAM.DELETE.REMINDERS",
                "$JS.API.STREAM.UPDATE.REMINDERS",
                "$JS.API.CONSUMER.DELETE.REMINDERS.projector",
                "$JS.API.CONSUMER.CREATE.REMINDERS.rogue",
                "$JS.API.STREAM.CREATE.ROGUE",
            ):
                assert await denied(nc, subject), (user, subject)
            # No service may purge (`forget` purges under the operator, docs/tenants.md).
            assert await denied(nc, "$JS.API.STREAM.PURGE.REMINDERS"), user
            await nc.close()
        assert await count(operator) == events_before

        # The auditor: no durable consumer created or deleted, no stream changed.
        auditor = await connect_as(secured_server, "replay")
        for subject in (
            "$JS.API.CONSUMER.DELETE.REMINDERS.projector",
            "$JS.API.CONSUMER.CREATE.REMINDERS.rogue",
            "$JS.API.CONSUMER.DURABLE.CREATE.REMINDERS.rogue",
            "$JS.API.CONSUMER.CREATE.REMINDERS",
            "$JS.API.STREAM.PURGE.REMINDERS",
        ):
            assert await denied(auditor, subject), subject
        # ...nor a push consumer, which would make the server deliver on any subject it names.
        push = orjson.dumps(
            {"stream_name": "REMINDERS", "config": {"deliver_subject": "reminders.v1.inject"}}
        )
        assert await denied(auditor, "$JS.API.CONSUMER.CREATE.REMINDERS", push)
        names = await operator.jetstream().consumers_info("REMINDERS")
        assert {info.name for info in names} == {"projector", "propagator", "observer"}
        for connection in (operator, spy, client_nc, auditor):
            await connection.close()
    finally:
        runner.stop_all()


async def test_the_providers_service_works_under_its_own_user_and_no_more(
    secured_server: EmbeddedNats, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, nats_url=secured_server.url)
    runner = ServiceRunner(settings, tmp_path / "logs")
    try:
        for service in ("gateway", "projector", "providers"):
            runner.start(service, extra_env=as_user(service))
        client_nc = await connect_as(secured_server, "client")
        client = ReminderClient(client_nc)
        # A host publishes a runtime event; the providers service turns it into a reminder.
        await client.publish_runtime_event(
            "secure-rt",
            "tool_result",
            {"tool_name": "bash", "truncated": True},
            turn=1,
            event_id="rt-secure",
        )
        for _ in range(200):
            state = (await client.call("state", {"session_id": "secure-rt"}))["state"]
            if state["counters"].get("provider_evaluated", 0) >= 2:
                break
            await asyncio.sleep(0.1)
        assert [row["spec"]["tags"] for row in state["pending"]] == [["truncation"]]
        # The providers user may evaluate and read the bucket, and wait on its one watch of
        # the bucket, and nothing else of note (its view comes from the projection, not the
        # `state` query).
        providers = await connect_as(secured_server, "providers")
        reads = BucketReader(providers, settings.kv_bucket, 8, 4)
        seen = state["session_seq"]
        waiting = asyncio.create_task(
            reads.until(session_token("secure-rt"), lambda r: r.session_seq > seen, 10)
        )
        await asyncio.sleep(0.3)
        await client.inject("secure-rt", "a later write", tags=["later"])
        record, stale = await waiting
        assert not stale and record.session_seq > seen
        await reads.watch.stop()
        for subject in (
            "transcript.reminder.injected.secure-rt",
            "reminders.v1.inject",
            "reminders.v1.state",
            "reminders.v1.inherit",
            "reminders.v1.forget",
            "reminders.v1.acp.secure-rt",
            "agent.events.budget.secure-rt",
            "$JS.API.STREAM.DELETE.AGENT_EVENTS",
            "$JS.API.STREAM.PURGE.AGENT_EVENTS",
            "$JS.API.CONSUMER.DELETE.AGENT_EVENTS.providers",
            "$JS.API.CONSUMER.CREATE.AGENT_EVENTS.rogue",
            "$JS.API.CONSUMER.MSG.NEXT.REMINDERS.projector",
        ):
            assert await denied(providers, subject), subject
        for pattern in ("_INBOX.gateway.>", "_INBOX.client.>", "agent.events.>"):
            await providers.subscribe(pattern)
        await providers.flush()
        await asyncio.sleep(0.2)
        assert len(violations(providers)) >= 3
        # Nobody else evaluates, and other services cannot read runtime events.
        assert await denied(client_nc, "reminders.v1.evaluate")
        observer = await connect_as(secured_server, "observer")
        assert await denied(observer, "$JS.API.CONSUMER.MSG.NEXT.AGENT_EVENTS.providers")
        for connection in (client_nc, providers, observer):
            await connection.close()
    finally:
        runner.stop_all()
