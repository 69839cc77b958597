"""A tenant's auditor audits its own sessions through the gateway (SPEC §7.1, §10.1), under
the shipped auth config on a real server: replay, export, verify-projection and stats print
exactly what the fleet auditor's direct read prints for that tenant; another tenant's auditor
gets for a foreign session the very bytes it gets for an unknown one; the listing names only
the tenant's sessions; and a session larger than one reply is read page after page.
"""

from __future__ import annotations

import asyncio

import orjson

from cli.embedded import EmbeddedNats
from client.sdk import ReminderClient
from contracts.errors import ReminderError
from tests.integration.test_permissions import connect_as, denied
from tests.integration.test_tenants import (  # noqa: F401 (fixtures)
    fleet,
    host,
    raw_request,
    reminders,
    same_apart_from_ids,
    secured_server,
    state_of,
)
from tests.processes import ServiceRunner

#: Enough 4000-byte reminders that one session's events exceed one reply (1 MiB).
LONG_SESSION_INJECTS = 280


async def fill_past_one_page(client: ReminderClient, session_id: str) -> None:
    """Inject past a reply's worth of events, clearing now and then (the session's live
    bytes are bounded) and waiting out the per-session rate."""
    body = "audit me " * 444

    async def patiently(op: str, payload: dict[str, object]) -> None:
        while True:
            try:
                await client.call(op, {"session_id": session_id, **payload})
                return
            except ReminderError as exc:
                if exc.code != "rate_limited":
                    raise
                await asyncio.sleep(0.05)

    for n in range(LONG_SESSION_INJECTS):
        await patiently("inject", {"reminder": {"body": body, "tags": ["bulk"]}})
        if n % 40 == 39:
            await patiently("clear", {"selector": {"tag": "bulk"}})


async def test_a_tenant_auditor_audits_its_sessions_through_the_gateway_as_the_fleet_does(
    secured_server: EmbeddedNats,  # noqa: F811
    fleet: ServiceRunner,  # noqa: F811
) -> None:
    acme = await host(secured_server, "acme_host", "acme")
    globex = await host(secured_server, "globex_host", "globex")
    await acme.inject("audited", "acme body", id="a1")
    await acme.call("render", {"session_id": "audited", "turn": 1})
    await acme.inject("second", "acme again", id="a2")
    await globex.inject("audited", "globex body", id="g1")
    await globex.inject("globex-only", "globex alone", id="g2")
    await fill_past_one_page(acme, "long")
    for session_id in ("audited", "second", "long"):
        await state_of(acme, session_id)  # the projection has caught up with the log

    for command in (
        ["replay", "audited", "--verify"],
        ["replay", "long", "--format", "text"],
        ["export", "long"],
        ["export", "--all"],
        ["stats", "--all", "--format", "json"],
        ["stats", "audited", "--format", "json"],
        ["verify-projection", "--all"],
        ["verify-projection", "long"],
    ):
        direct = reminders(secured_server, "replay", *command, "--tenant", "acme")
        through = reminders(
            secured_server, "acme_auditor", *command, "--tenant", "acme", "--through-gateway"
        )
        assert direct.returncode == 0, (command, direct.stderr)
        assert through.returncode == 0, (command, through.stderr)
        assert through.stdout == direct.stdout, command
        if command[0] in ("export", "verify-projection"):
            assert through.stderr == direct.stderr, command
    exported = reminders(secured_server, "replay", "export", "--all", "--tenant", "acme")
    sessions = {orjson.loads(line)["session_id"] for line in exported.stdout.splitlines()}
    assert sessions == {"@acme/audited", "@acme/second", "@acme/long"}

    # A page boundary: the long session does not fit one reply.
    auditor = await host(secured_server, "acme_auditor", "acme")
    first = await auditor.call("events", {"session_id": "long"})
    assert first["next_after_stream_seq"] is not None
    assert len(orjson.dumps(first)) <= 1024 * 1024

    # The listing names only the tenant's own sessions.
    listed = await auditor.call("sessions", {})
    assert sorted(listed["session_ids"]) == ["audited", "long", "second"]
    other = await host(secured_server, "globex_auditor", "globex")
    assert sorted((await other.call("sessions", {}))["session_ids"]) == ["audited", "globex-only"]

    # globex's auditor: acme's session and an unknown one answer alike, through every read.
    for op, body in (("events", {}), ("state", {}), ("events", {"after_stream_seq": 3})):
        foreign = await raw_request(
            other, "reminders.v1.t.globex." + op, {"session_id": "long", **body}
        )
        unknown = await raw_request(
            other, "reminders.v1.t.globex." + op, {"session_id": "nobody", **body}
        )
        assert same_apart_from_ids(foreign, "long", unknown, "nobody"), op
    for command in (["replay", "long"], ["export", "long"], ["stats", "long"]):
        refused = reminders(
            secured_server, "globex_auditor", *command, "--tenant", "globex", "--through-gateway"
        )
        assert refused.returncode == 1 and "unknown session" in refused.stderr, command
        assert "long" in refused.stderr and "acme" not in refused.stderr

    # The server: auditors ask only their tenant's reads; hosts none of the audit reads.
    assert await denied(other.connection, "reminders.v1.t.acme.events")
    assert await denied(other.connection, "reminders.v1.t.acme.sessions")
    assert await denied(acme.connection, "reminders.v1.t.acme.events")
    assert await denied(acme.connection, "reminders.v1.t.acme.sessions")
    client = await connect_as(secured_server, "client")
    assert await denied(client, "reminders.v1.events")
    assert await denied(client, "reminders.v1.sessions")
    for connection in (acme.connection, globex.connection, auditor.connection):
        await connection.close()
    await other.connection.close()
    await client.close()
