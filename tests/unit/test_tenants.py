"""Tenants without a server (SPEC §10.1): the name rule, namespaced sessions, tenant subjects,
the gateway's check and bounds, the tenants file and the NATS users generated from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.agent_events import WrongRuntimeSubject, decode_runtime_event
from contracts.commands import parse_command
from contracts.subjects import session_token
from contracts.tenants import (
    DEFAULT_TENANT,
    agent_event_tenant,
    command_tenant,
    is_reserved_session_id,
    is_tenant_name,
    scoped_session_id,
    split_session_id,
    tenant_acp_subject,
    tenant_agent_event_subject,
    tenant_command_subject,
)
from services.adapters.tenant_auth import with_tenants
from services.adapters.tenants_config import (
    TenantBounds,
    TenantsFile,
    TenantsFileError,
    dump_tenants,
    load_tenants,
)
from services.gateway.tenancy import LIVE_WINDOW_S, Tenancy, unscope_reply
from services.observer.app import ObserverMetrics, handle_event
from tests.unit.test_worker_handlers import Published, fired_event

ROOT = Path(__file__).resolve().parents[2]
tenant_names = st.from_regex(r"^[a-z0-9][a-z0-9-]{0,31}$", fullmatch=True).filter(
    lambda name: name != DEFAULT_TENANT
)
session_ids = st.text(
    st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=64
).filter(lambda sid: not is_reserved_session_id(sid))


@given(tenant_names, session_ids)
def test_a_scoped_session_id_splits_back_into_its_tenant_and_id(tenant: str, sid: str) -> None:
    scoped = scoped_session_id(tenant, sid)
    assert split_session_id(scoped) == (tenant, sid)
    assert is_reserved_session_id(scoped)
    assert split_session_id(sid) == (DEFAULT_TENANT, sid)
    assert scoped_session_id(DEFAULT_TENANT, sid) == sid


@given(tenant_names, tenant_names, session_ids)
def test_one_id_in_two_tenants_is_two_sessions_with_two_tokens(a: str, b: str, sid: str) -> None:
    if a != b:
        assert session_token(scoped_session_id(a, sid)) != session_token(scoped_session_id(b, sid))


def test_the_tenant_name_rule() -> None:
    for name in ("acme", "a", "team-7", "0" * 32):
        assert is_tenant_name(name)
    for name in ("", "Acme", "-x", "a_b", "a.b", "0" * 33, "a*", ">"):
        assert not is_tenant_name(name)


def test_command_subjects_name_the_tenant_and_the_op() -> None:
    assert tenant_command_subject("default", "inject") == "reminders.v1.inject"
    assert tenant_command_subject("acme", "inject") == "reminders.v1.t.acme.inject"
    assert command_tenant("reminders.v1.inject") == ("default", "inject")
    assert command_tenant("reminders.v1.t.acme.rpc") == ("acme", "rpc")
    assert command_tenant("reminders.v1.t.ACME.rpc") is None
    assert command_tenant("reminders.v1.x.acme.rpc") is None


def test_acp_and_runtime_event_subjects_of_a_tenant() -> None:
    assert tenant_acp_subject("s1") == ("reminders.v1.acp.s1", "s1")
    assert tenant_acp_subject("@acme/s1") == ("reminders.v1.t.acme.acp.s1", "s1")
    subject = tenant_agent_event_subject("acme", "budget", "s1")
    assert subject == "agent.events.t.acme.budget.s1"
    assert agent_event_tenant(subject) == ("acme", "agent.events.budget.s1")
    assert agent_event_tenant("agent.events.budget.s1") == ("default", "agent.events.budget.s1")
    assert agent_event_tenant("agent.events.t.acme.budget") is None
    assert agent_event_tenant("agent.events.t.ACME.budget.s1") is None


def runtime_event(session_id: str) -> dict[str, Any]:
    return {
        "schema": "reminder-ledger.agent-event/v1",
        "event_id": "e1",
        "kind": "session_idle",
        "session_id": session_id,
        "turn": 1,
        "occurred_at": "2026-12-01T00:00:00.000Z",
        "payload": {"idle_seconds": 90},
    }


def test_a_tenants_runtime_event_reaches_only_that_tenants_session() -> None:
    data = orjson.dumps(runtime_event("s1"))
    event = decode_runtime_event(data, "agent.events.t.acme.session_idle.s1")
    assert event.session_id == "@acme/s1"
    assert decode_runtime_event(data, "agent.events.session_idle.s1").session_id == "s1"
    # A default host naming a tenant's session, and a malformed tenant subject, are poison.
    forged = orjson.dumps(runtime_event("@acme/s1"))
    with pytest.raises(WrongRuntimeSubject):
        decode_runtime_event(forged, f"agent.events.session_idle.{session_token('@acme/s1')}")
    with pytest.raises(WrongRuntimeSubject):
        decode_runtime_event(data, "agent.events.t.acme.x.session_idle.s1")
    with pytest.raises(WrongRuntimeSubject):
        decode_runtime_event(data, "agent.events.t.acme.session_idle.other")


async def test_the_observer_notifies_a_tenants_session_on_the_tenants_subject() -> None:
    published = Published()
    await handle_event(fired_event("@acme/s1"), ObserverMetrics.create(), published)
    assert {subject for subject, _ in published.messages} == {"reminders.v1.t.acme.acp.s1"}
    for _, body in published.messages:
        assert orjson.loads(body)["params"]["sessionId"] == "s1"


TENANTS = TenantsFile(
    defaults=TenantBounds(commands_per_second=100),
    tenants={
        "acme": TenantBounds(commands_per_second=2, live_sessions=2, max_body_bytes=10),
        "globex": TenantBounds(),
    },
)


def inject(session_id: str, body: str = "x") -> Any:
    command, _ = parse_command("inject", {"session_id": session_id, "reminder": {"body": body}})
    return command


def test_the_gateway_refuses_unknown_tenants_and_service_ops_from_hosts() -> None:
    tenancy = Tenancy(TENANTS, 16384)
    assert tenancy.refuse_caller("default", "forget") is None  # the server guards `default`
    assert tenancy.refuse_caller("acme", "inject") is None
    for tenant, op in (("initech", "inject"), ("", "inject"), ("acme", "forget")):
        refused = tenancy.refuse_caller(tenant, op)
        assert refused is not None and refused["error"]["code"] == "invalid_request"
    # An unknown op and a service op of a tenant read the same.
    assert tenancy.refuse_caller("acme", "evaluate") == tenancy.refuse_caller("nope", "evaluate")


def test_the_gateway_scopes_a_tenants_sessions_and_keeps_default_ones_as_they_are() -> None:
    tenancy = Tenancy(TENANTS, 16384)
    assert tenancy.scope("default", inject("s1")) == inject("s1")
    scoped = tenancy.scope("acme", inject("s1"))
    assert not isinstance(scoped, dict) and scoped.session_id == "@acme/s1"
    handoff, _ = parse_command("handoff", {"session_id": "p", "child_session_id": "c"})
    scoped = tenancy.scope("acme", handoff)
    assert not isinstance(scoped, dict)
    assert (scoped.session_id, getattr(scoped, "child_session_id", None)) == ("@acme/p", "@acme/c")
    refused = tenancy.scope("default", inject("@acme/s1"))
    assert isinstance(refused, dict) and refused["error"]["code"] == "invalid_request"
    reserved_child, _ = parse_command("handoff", {"session_id": "p", "child_session_id": "@a/c"})
    assert isinstance(tenancy.scope("default", reserved_child), dict)
    # Fleet services carry namespaced ids on the plain subjects.
    inherit = {"session_id": "@acme/c", "parent_session_id": "@acme/p", "handoff_event_id": "e"}
    command, _ = parse_command(
        "inherit", {**inherit, "parent_agent_id": "p", "sub_agent_id": "c", "reminders": []}
    )
    assert tenancy.scope("default", command) == command


def test_each_tenants_bounds_hold_for_it_alone() -> None:
    tenancy = Tenancy(TENANTS, 16384)
    assert tenancy.max_body_bytes("acme") == 10
    assert tenancy.max_body_bytes("globex") == 16384
    now = 1000.0
    assert tenancy.admit("acme", inject("@acme/a"), now) is None
    assert tenancy.admit("acme", inject("@acme/a"), now) is None
    limited = tenancy.admit("acme", inject("@acme/a"), now)
    assert limited is not None and limited["error"]["code"] == "rate_limited"
    assert 0 < limited["error"]["details"]["retry_after_ms"] <= 500
    assert tenancy.admit("globex", inject("@globex/a"), now) is None  # another tenant
    assert tenancy.admit("acme", inject("@acme/b"), now + 1) is None
    too_many = tenancy.admit("acme", inject("@acme/c"), now + 2)
    assert too_many is not None and too_many["error"]["code"] == "too_many"
    # A session is live for a window after its last command, then makes room.
    assert tenancy.admit("acme", inject("@acme/c"), now + 2 + LIVE_WINDOW_S) is None


def test_a_tenants_queries_in_flight_are_bounded_for_it_alone() -> None:
    bounded = TenantsFile(
        tenants={"acme": TenantBounds(queries_in_flight=2), "globex": TenantBounds()}
    )
    tenancy = Tenancy(bounded, 16384)
    query, _ = parse_command("state", {"session_id": "@acme/s"})
    assert tenancy.admit("acme", query, 0) is None
    assert tenancy.admit("acme", query, 0) is None
    refused = tenancy.admit("acme", query, 0)
    assert refused is not None and refused["error"]["code"] == "rate_limited"
    assert tenancy.admit("globex", query, 0) is None
    tenancy.done("acme", query)
    assert tenancy.admit("acme", query, 0) is None
    # Queries count against no command rate, and commands against no query bound.
    assert tenancy.admit("acme", inject("@acme/s"), 0) is None


def test_a_tenants_state_reply_names_its_session_as_the_host_does() -> None:
    stored = orjson.dumps({"session_id": "@acme/s1", "session_seq": 0})
    reply = unscope_reply("acme", {"ok": True, "state": orjson.Fragment(stored), "stale": False})
    assert orjson.loads(orjson.dumps(reply))["state"]["session_id"] == "s1"
    as_dict = unscope_reply("acme", {"ok": True, "state": {"session_id": "@acme/s2"}})
    assert as_dict["state"]["session_id"] == "s2"
    same = {"ok": True, "state": orjson.Fragment(stored)}
    assert unscope_reply("default", same) is same


def test_the_tenants_file_round_trips_and_refuses_bad_names(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(dump_tenants(TENANTS), encoding="utf-8")
    assert load_tenants(path) == TENANTS
    assert load_tenants(tmp_path / "missing.toml") == TenantsFile()
    assert TENANTS.bounds("globex").commands_per_second == 100  # from [defaults]
    path.write_text("[tenants.Bad_Name]\n", encoding="utf-8")
    with pytest.raises(TenantsFileError, match="tenants"):
        load_tenants(path)


def test_the_shipped_auth_config_has_the_users_of_the_shipped_tenants() -> None:
    tenants = load_tenants(ROOT / "k8s/base/tenants.toml")
    assert set(tenants.tenants) == {"acme", "globex"}
    auth = (ROOT / "k8s/base/nats-auth.conf").read_text(encoding="utf-8")
    assert with_tenants(auth, tenants) == auth, "run `reminders tenant auth-config`"
    assert "$JS.API.STREAM.PURGE" not in auth.split("user: gateway")[1].split("user:")[0]


def test_reminders_tenant_add_list_remove_and_auth_config(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    tenants, auth = tmp_path / "tenants.toml", tmp_path / "nats-auth.conf"
    auth.write_text((ROOT / "k8s/base/nats-auth.conf").read_text(encoding="utf-8"))
    runner = CliRunner()

    def run(*arguments: str) -> Any:
        return runner.invoke(app, [*arguments, "--file", str(tenants)])

    added = run("tenant", "add", "initech", "--commands-per-second", "5")
    assert added.exit_code == 0, added.output
    assert "initech_host" in added.output and "INITECH_HOST_PASSWORD" in added.output
    assert load_tenants(tenants).bounds("initech").commands_per_second == 5
    assert run("tenant", "add", "Bad_Name").exit_code == 1
    assert "initech" in run("tenant", "list").output
    stale = run("tenant", "auth-config", "--config", str(auth), "--check")
    assert stale.exit_code == 1 and "stale" in stale.output
    assert run("tenant", "auth-config", "--config", str(auth)).exit_code == 0
    text = auth.read_text(encoding="utf-8")
    assert "user: initech_host" in text and "user: acme_host" not in text
    assert run("tenant", "auth-config", "--config", str(auth), "--check").exit_code == 0
    assert run("tenant", "remove", "initech").exit_code == 0
    assert run("tenant", "remove", "initech").exit_code == 1
    assert load_tenants(tenants).tenants == {}
