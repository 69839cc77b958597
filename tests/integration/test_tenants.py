"""Two tenants on one deployment, under the shipped auth config on a real server (SPEC §10.1).

Each tenant's host tries every route into the other's sessions: sniffing inboxes and ACP
notifications, watching or reading the projection bucket, reading the log, forging runtime
events, and plain commands and queries on the other's session ids. None gets through, and a
foreign session answers exactly as an unknown one does. No service user may purge the log.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest

from cli.embedded import EmbeddedNats
from client.sdk import ReminderClient
from contracts.tenants import scoped_session_id
from services.adapters.settings import Settings
from services.workers import WORKERS
from tests.integration.test_permissions import (
    as_user,
    connect_as,
    count,
    denied,
    reminders,
    shipped_auth_server,
    violations,
)
from tests.processes import ServiceRunner

#: globex is the small tenant: its bounds are what the load test drives past.
TENANTS_TOML = """
[tenants.acme]
commands_per_second = 1000
max_body_bytes = 4096

[tenants.globex]
commands_per_second = 20
live_sessions = 4
max_body_bytes = 64
queries_in_flight = 2
"""


@pytest.fixture
def secured_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNats]:
    """The shipped auth config on a real server, the example tenants' users included."""
    yield from shipped_auth_server(tmp_path, monkeypatch)


@pytest.fixture
async def fleet(secured_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[ServiceRunner]:
    """Gateway (with the tenants file), projector, observer and providers, each as itself."""
    tenants_file = tmp_path / "tenants.toml"
    tenants_file.write_text(TENANTS_TOML, encoding="utf-8")
    runner = ServiceRunner(Settings.from_env({}, nats_url=secured_server.url), tmp_path / "logs")
    try:
        runner.start(
            "gateway",
            extra_env={**as_user("gateway"), "REMINDERS_TENANTS_FILE": str(tenants_file)},
        )
        for service in ("projector", "observer", "providers"):
            runner.start(service, extra_env=as_user(service))
        yield runner
    finally:
        runner.stop_all()


async def host(server: EmbeddedNats, user: str, tenant: str) -> ReminderClient:
    return ReminderClient(await connect_as(server, user), tenant=tenant)


async def state_of(client: ReminderClient, session_id: str) -> dict[str, Any]:
    state: dict[str, Any] = (await client.call("state", {"session_id": session_id}))["state"]
    return state


def same_apart_from_ids(a: bytes, a_id: str, b: bytes, b_id: str) -> bool:
    return a.replace(a_id.encode(), b"<id>") == b.replace(b_id.encode(), b"<id>")


async def raw_request(client: ReminderClient, subject: str, body: dict[str, Any]) -> bytes:
    reply = await client.connection.request(subject, orjson.dumps(body), timeout=10)
    return bytes(reply.data)


async def until(check: Any, timeout_s: float = 20.0) -> Any:
    for _ in range(int(timeout_s / 0.1)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("timed out")


async def test_each_tenant_sees_only_its_own_sessions_and_ids_cannot_be_probed(
    secured_server: EmbeddedNats, fleet: ServiceRunner
) -> None:
    acme = await host(secured_server, "acme_host", "acme")
    globex = await host(secured_server, "globex_host", "globex")
    default = await host(secured_server, "client", "default")
    # The same session id in two tenants (and in `default`) names three sessions.
    await acme.inject("shared", "acme's secret plan", id="a1", ttl_turns=2)
    await globex.inject("shared", "globex's own note", id="g1", ttl_turns=2)
    await default.inject("shared", "the default tenant's note", id="d1", ttl_turns=2)
    await acme.inject("acme-only", "acme alone", id="a2")
    for client, mine in ((acme, "a1"), (globex, "g1"), (default, "d1")):
        state = await state_of(client, "shared")
        assert state["session_id"] == "shared"
        assert [row["spec"]["id"] for row in state["pending"]] == [mine]

    # A foreign session and an unknown one answer byte for byte alike, apart from the id:
    # queries, JSON-RPC, and commands that fail on it.
    for op, body in (
        ("state", {}),
        ("pending_injections", {}),
        ("revoke", {"reminder_id": "a2"}),
    ):
        foreign = await raw_request(
            globex, f"reminders.v1.t.globex.{op}", {"session_id": "acme-only", **body}
        )
        unknown = await raw_request(
            globex, f"reminders.v1.t.globex.{op}", {"session_id": "never-seen", **body}
        )
        assert same_apart_from_ids(foreign, "acme-only", unknown, "never-seen"), op
    rpc = {"jsonrpc": "2.0", "id": 7, "method": "session/pending_injections"}
    foreign = await raw_request(
        globex, "reminders.v1.t.globex.rpc", {**rpc, "params": {"sessionId": "acme-only"}}
    )
    unknown = await raw_request(
        globex, "reminders.v1.t.globex.rpc", {**rpc, "params": {"sessionId": "never-seen"}}
    )
    assert same_apart_from_ids(foreign, "acme-only", unknown, "never-seen")
    # ...and acme's session was not touched by any of it.
    assert (await state_of(acme, "acme-only"))["session_seq"] == 1

    # A `default` host cannot name a tenant's session in its namespaced form.
    reserved = await default.request("state", {"session_id": scoped_session_id("acme", "shared")})
    assert reserved["error"]["code"] == "invalid_request"
    refused = await default.request(
        "inject", {"session_id": "@acme/shared", "reminder": {"body": "x"}}
    )
    assert refused["error"]["code"] == "invalid_request"
    assert (await state_of(acme, "shared"))["session_seq"] == 1
    for client in (acme, globex, default):
        await client.connection.close()


async def test_no_route_of_the_server_leads_into_another_tenant(
    secured_server: EmbeddedNats, fleet: ServiceRunner
) -> None:
    acme = await host(secured_server, "acme_host", "acme")
    globex = await host(secured_server, "globex_host", "globex")
    default = await host(secured_server, "client", "default")
    seen: list[bytes] = []

    async def record(msg: nats.aio.msg.Msg) -> None:
        seen.append(msg.data)

    # Every subscription that could carry acme's replies, notifications, events or state.
    sniffing = (
        "_INBOX.>",
        "_INBOX.*.>",
        "_INBOX.acme_host.>",
        "reminders.v1.t.acme.acp.*",
        "reminders.v1.t.*.acp.*",
        "reminders.v1.t.acme.>",
        "reminders.v1.>",
        "transcript.reminder.>",
        "agent.events.>",
        "$KV.REMINDER_SESSIONS.>",
        ">",
    )
    # (`default` may watch `reminders.v1.acp.>`: the default tenant's own notifications, and
    # no tenant's, whose subjects are `reminders.v1.t.<tenant>.acp.<token>`.)
    for spy, extra in ((globex.connection, ("reminders.v1.acp.>",)), (default.connection, ())):
        before = len(violations(spy))
        for pattern in (*sniffing, *extra):
            await spy.subscribe(pattern, cb=record)
        await spy.flush()
        await asyncio.sleep(0.3)
        refused = violations(spy)[before:]
        assert len(refused) == len(sniffing) + len(extra), "\n".join(map(str, refused))
    await default.connection.subscribe("reminders.v1.acp.>", cb=record)

    # acme's own ACP notifications reach acme, naming the session as acme knows it.
    acp: list[dict[str, Any]] = []

    async def on_acp(msg: nats.aio.msg.Msg) -> None:
        acp.append(orjson.loads(msg.data))

    await acme.connection.subscribe(acme.acp_subject("live"), cb=on_acp)
    globex_acp: list[bytes] = []

    async def on_globex_acp(msg: nats.aio.msg.Msg) -> None:
        globex_acp.append(msg.data)

    await globex.connection.subscribe("reminders.v1.t.globex.acp.*", cb=on_globex_acp)
    await acme.inject("live", "acme's secret body", id="s1", ttl_turns=2)
    await acme.render("live", turn=1)
    for _ in range(200):
        if len(acp) >= 2:
            break
        await asyncio.sleep(0.1)
    assert {note["params"]["sessionId"] for note in acp} == {"live"}
    assert seen == [] and globex_acp == []

    # Publishing into acme: its commands, its runtime events, the log, the bucket (gets and
    # watches), a replay's reads, and the operator's and services' ops.
    token = "=" + "0" * 40
    for subject in (
        "reminders.v1.t.acme.state",
        "reminders.v1.t.acme.inject",
        "reminders.v1.t.acme.rpc",
        "reminders.v1.state",
        "reminders.v1.inject",
        "agent.events.t.acme.tool_result.live",
        "agent.events.tool_result.live",
        "transcript.reminder.injected.live",
        f"$KV.REMINDER_SESSIONS.{token}",
        f"$JS.API.DIRECT.GET.KV_REMINDER_SESSIONS.$KV.REMINDER_SESSIONS.{token}",
        "$JS.API.CONSUMER.CREATE.KV_REMINDER_SESSIONS",
        "$JS.API.DIRECT.GET.REMINDERS",
        f"$JS.API.DIRECT.GET.REMINDERS.transcript.reminder.*.{token}",
        "$JS.API.STREAM.PURGE.REMINDERS",
        "reminders.v1.t.globex.forget",
        "reminders.v1.t.globex.inherit",
        "reminders.v1.t.globex.evaluate",
        "reminders.v1.t.globex.acp.live",
    ):
        assert await denied(globex.connection, subject), subject
    for subject in (
        "reminders.v1.t.acme.inject",
        "reminders.v1.t.globex.state",
        "agent.events.t.acme.tool_result.live",
    ):
        assert await denied(default.connection, subject), subject

    # A forged runtime event: globex names acme's session id on its own subject and gets its
    # own session; `default` names acme's namespaced id and is dead-lettered.
    await globex.publish_runtime_event(
        "live", "tool_result", {"tool_name": "bash", "truncated": True}, turn=1, event_id="f1"
    )
    await default.publish_runtime_event(
        "@acme/live", "tool_result", {"tool_name": "bash", "truncated": True}, turn=1
    )

    async def globex_evaluated() -> bool:
        state = await state_of(globex, "live")
        return bool(state["counters"].get("provider_evaluated"))

    await until(globex_evaluated)
    await asyncio.sleep(0.5)
    assert "provider_evaluated" not in (await state_of(acme, "live"))["counters"]
    assert seen == [] and globex_acp == []
    for client in (acme, globex, default):
        await client.connection.close()


async def test_tenant_auditors_read_only_their_tenant(
    secured_server: EmbeddedNats, fleet: ServiceRunner
) -> None:
    acme = await host(secured_server, "acme_host", "acme")
    await acme.inject("audited", "acme body", id="a1")
    auditor = await host(secured_server, "acme_auditor", "acme")
    state = await state_of(auditor, "audited")
    assert [row["spec"]["id"] for row in state["pending"]] == ["a1"]
    for subject in (
        "reminders.v1.t.acme.inject",
        "reminders.v1.t.globex.state",
        "reminders.v1.state",
        "$JS.API.DIRECT.GET.REMINDERS",
        "$JS.API.DIRECT.GET.KV_REMINDER_SESSIONS",
    ):
        assert await denied(auditor.connection, subject), subject
    # The fleet auditor scopes its reads to one tenant, naming sessions as its hosts do.
    globex = await host(secured_server, "globex_host", "globex")
    await globex.inject("audited", "globex body", id="g1")
    await acme.inject("second", "acme again", id="a2")

    def audit(*arguments: str) -> subprocess.CompletedProcess[str]:
        return reminders(secured_server, "replay", *arguments)

    exported = audit("export", "--all", "--tenant", "acme")
    assert exported.returncode == 0, exported.stderr
    sessions = {orjson.loads(line)["session_id"] for line in exported.stdout.splitlines()}
    assert sessions == {"@acme/audited", "@acme/second"}
    replayed = audit("replay", "audited", "--tenant", "globex", "--verify")
    assert replayed.returncode == 0, replayed.stderr
    assert [row["spec"]["id"] for row in orjson.loads(replayed.stdout)["pending"]] == ["g1"]
    assert audit("replay", "second", "--tenant", "globex").returncode == 1  # not globex's
    for client in (acme, auditor, globex):
        await client.connection.close()


async def test_no_service_may_purge_and_the_operator_forgets_one_tenants_session(
    secured_server: EmbeddedNats, fleet: ServiceRunner
) -> None:
    acme = await host(secured_server, "acme_host", "acme")
    globex = await host(secured_server, "globex_host", "globex")
    await acme.inject("doomed", "acme body", id="a1")
    await globex.inject("doomed", "globex body", id="g1")
    operator = await connect_as(secured_server, "operator")
    before = await count(operator)
    for user in [*(worker.nats_user for worker in WORKERS.values()), "replay"]:
        nc = await connect_as(secured_server, user)
        assert await denied(nc, "$JS.API.STREAM.PURGE.REMINDERS", b"{}"), user
        filtered = orjson.dumps({"filter": "transcript.reminder.*.doomed"})
        assert await denied(nc, "$JS.API.STREAM.PURGE.REMINDERS", filtered), user
        await nc.close()
    assert await count(operator) == before

    forgot = reminders(secured_server, "operator", "forget", "doomed", "--tenant", "acme")
    assert forgot.returncode == 0, forgot.stdout + forgot.stderr
    assert "1 events purged" in forgot.stdout
    assert await count(operator) == before - 1
    assert (await state_of(acme, "doomed"))["pending"] == []
    assert [row["spec"]["id"] for row in (await state_of(globex, "doomed"))["pending"]] == ["g1"]
    for connection in (acme.connection, globex.connection, operator):
        await connection.close()


async def test_a_tenant_past_its_bounds_does_not_slow_or_refuse_another(
    secured_server: EmbeddedNats, fleet: ServiceRunner
) -> None:
    acme = await host(secured_server, "acme_host", "acme")
    globex = await host(secured_server, "globex_host", "globex")

    async def flood() -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = []
        for burst in range(5):
            replies += await asyncio.gather(
                *(
                    globex.request(
                        "inject",
                        {"session_id": f"g{i % 3}", "reminder": {"body": f"load {burst} {i}"}},
                    )
                    for i in range(60)
                )
            )
        return replies

    async def steady() -> list[dict[str, Any]]:
        replies = []
        for i in range(40):
            replies.append(
                await acme.request(
                    "inject", {"session_id": f"a{i % 8}", "reminder": {"body": f"work {i}"}}
                )
            )
        return replies

    flooded, steady_replies = await asyncio.gather(flood(), steady())
    codes = [reply.get("error", {}).get("code") for reply in flooded]
    assert codes.count("rate_limited") > len(flooded) // 2, codes
    assert all(reply["ok"] for reply in steady_replies), steady_replies

    # Live sessions and body bytes are globex's alone too.
    await asyncio.sleep(1.1)  # the rate bucket refills
    live = [
        await globex.request("inject", {"session_id": f"s{i}", "reminder": {"body": "x"}})
        for i in range(5)
    ]
    # g0-g2 are live from the flood: s0 is the fourth and last live session globex may have.
    assert [reply.get("error", {}).get("code") for reply in live] == [None] + ["too_many"] * 4
    for i in range(6):
        assert (await acme.request("inject", {"session_id": f"n{i}", "reminder": {"body": "x"}}))[
            "ok"
        ]
    body = "y" * 100
    big = await globex.request("inject", {"session_id": "g0", "reminder": {"body": body}})
    assert big["error"]["code"] == "too_large"
    assert (await acme.request("inject", {"session_id": "a0", "reminder": {"body": body}}))["ok"]

    # Queries in flight: globex's long waits (for a session_seq that never comes) fill its two
    # places, and its third query is refused; acme's queries are answered meanwhile.
    wait = {"session_id": "g0", "min_seq": 10**6, "timeout_ms": 3000}
    waits = [asyncio.create_task(globex.request("state", wait)) for _ in range(2)]
    await asyncio.sleep(0.5)
    third = await globex.request("state", {"session_id": "g1"})
    assert third["error"]["code"] == "rate_limited", third
    for i in range(5):
        assert (await acme.request("state", {"session_id": f"a{i}"}))["ok"]
    assert all(reply["ok"] and reply["stale"] for reply in await asyncio.gather(*waits))
    assert (await globex.request("state", {"session_id": "g1"}))["ok"]  # places free again
    await acme.connection.close()
    await globex.connection.close()
