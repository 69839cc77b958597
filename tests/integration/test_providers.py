"""The providers service (SPEC §9) as processes against a real nats-server: runtime events in,
reminders and their trail in the log, redeliveries without a second effect, poison to the
DLQ, a bad configuration refusing to start, and a plug-in found through its entry point."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import orjson
from nats.aio.client import Client

from cli.provision import provision_all
from client.sdk import ReminderClient
from contracts.decode import decode
from contracts.events import Event, ProviderEvaluated
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.processes import ServiceRunner
from tests.unit.plugin_support import write_plugin_dist


async def events_of(nc: Client, settings: Settings, session_id: str) -> list[Event]:
    return [
        decode(stored.envelope) for stored in await read_session(nc, settings.stream, session_id)
    ]


async def wait_evaluated(
    nc: Client, settings: Settings, session_id: str, runtime_event_ids: set[str]
) -> list[Event]:
    """The session's events once every runtime event named has its trail (bounded: 20 s)."""
    for _ in range(200):
        events = await events_of(nc, settings, session_id)
        seen = {
            e.payload.runtime_event_id for e in events if isinstance(e.payload, ProviderEvaluated)
        }
        if runtime_event_ids <= seen:
            return events
        await asyncio.sleep(0.1)
    raise AssertionError(f"{session_id}: {runtime_event_ids} never evaluated")


def trail(events: list[Event]) -> list[tuple[str, str, bool, str]]:
    return [
        (e.payload.runtime_event_id, e.payload.provider_id, e.payload.fired, e.payload.reason)
        for e in events
        if isinstance(e.payload, ProviderEvaluated)
    ]


async def test_a_budget_crossing_becomes_a_reminder_in_state_with_its_trail(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    providers = services.start("providers")
    client = ReminderClient(nc)
    await client.publish_runtime_event(
        "s-budget",
        "budget",
        {"used_tokens": 172_000, "context_window": 200_000},
        turn=3,
        event_id="rt-1",
    )
    events = await wait_evaluated(nc, provisioned, "s-budget", {"rt-1"})
    assert [e.kind for e in events] == ["injected", "provider_evaluated", "provider_evaluated"]
    assert trail(events) == [
        ("rt-1", "token_pressure", True, "fired"),
        ("rt-1", "workspace_anchor", False, "predicate_false"),
    ]
    injected, evaluated = events[0], events[1]
    assert isinstance(evaluated.payload, ProviderEvaluated)
    assert evaluated.payload.reminder_id == injected.payload.reminder_id  # type: ignore[union-attr]
    assert evaluated.request_id == "evaluate:rt-1" and evaluated.command_id == injected.command_id
    state = (
        await client.call("state", {"session_id": "s-budget", "min_seq": 3, "timeout_ms": 10_000})
    )["state"]
    (row,) = state["pending"]
    assert (
        row["spec"]["tags"] == ["token_pressure"] and row["spec"]["dedupe_key"] == "token_pressure"
    )
    assert row["spec"]["ttl_turns"] == 2 and row["spec"]["role_hint"] == "developer"
    assert row["spec"]["source"] == "stdlib_provider" and row["spec"]["propagate"] == "session"
    assert state["providers"]["marks"]["token_pressure"]["level"] == 850
    envelope = (await client.render("s-budget", turn=3))["envelope"]
    assert "86% full" in envelope["text"]
    # Counted by provider and reason, never by session or reminder id (SPEC §10).
    with urllib.request.urlopen(f"http://127.0.0.1:{providers.http_port}/metrics") as page:
        metrics = page.read().decode()
    (line,) = [
        line
        for line in metrics.splitlines()
        if line.startswith("reminders_provider_evaluations_total{")
        and 'provider="token_pressure"' in line
    ]
    assert 'reason="fired"' in line and line.endswith(" 1.0")
    assert "s-budget" not in metrics and "rt-1" not in metrics


async def test_back_to_back_readings_fire_a_threshold_once_and_a_higher_one_again(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    services.start("providers")
    client = ReminderClient(nc)
    readings = [172_000, 174_000, 176_000, 192_000, 100_000, 150_000]
    for n, used in enumerate(readings, start=1):
        await client.publish_runtime_event(
            "s-b2b",
            "budget",
            {"used_tokens": used, "context_window": 200_000},
            turn=n,
            event_id=f"b2b-{n}",
        )
    events = await wait_evaluated(nc, provisioned, "s-b2b", {f"b2b-{n}" for n in range(1, 7)})
    pressure = [(rt, r) for rt, p, _, r in trail(events) if p == "token_pressure"]
    assert pressure == [
        ("b2b-1", "fired"),
        ("b2b-2", "threshold_already_reported"),
        ("b2b-3", "threshold_already_reported"),
        ("b2b-4", "fired"),  # 0.96 ≥ 0.95: a higher threshold fires again
        ("b2b-5", "below_threshold"),  # a lower reading re-arms
        ("b2b-6", "fired"),  # 0.75 ≥ 0.70 again
    ]


async def test_a_redelivered_runtime_event_has_no_second_effect(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    providers = services.start("providers")
    client = ReminderClient(nc)
    payload = {
        "tool_name": "bash",
        "truncated": True,
        "original_bytes": 90_000,
        "shown_bytes": 8_000,
    }
    await client.publish_runtime_event("s-redo", "tool_result", payload, turn=1, event_id="t-1")
    before = await wait_evaluated(nc, provisioned, "s-redo", {"t-1"})
    assert [e.kind for e in before] == ["injected", "provider_evaluated", "provider_evaluated"]
    # The same runtime event again under another message id (past JetStream's dedupe) ...
    event = {
        "schema": "reminder-ledger.agent-event/v1",
        "event_id": "t-1",
        "kind": "tool_result",
        "session_id": "s-redo",
        "turn": 1,
        "occurred_at": "2026-11-29T15:04:05.123Z",
        "payload": payload,
    }
    await nc.jetstream().publish(
        "agent.events.tool_result.s-redo", orjson.dumps(event), headers={"Nats-Msg-Id": "again"}
    )
    # ... and the whole stream once more, as a crashed service's consumer would redeliver it.
    services.kill(providers)
    await nc.jetstream().delete_consumer(provisioned.agent_events_stream, "providers")
    await provision_all(nc, provisioned)
    services.start("providers")
    await client.publish_runtime_event(
        "s-redo", "session_idle", {"idle_seconds": 5}, turn=1, event_id="marker"
    )
    after = await wait_evaluated(nc, provisioned, "s-redo", {"marker"})
    assert after[: len(before)] == before
    assert [e.kind for e in after[len(before) :]] == ["provider_evaluated"]  # the marker only
    assert trail(after)[-1] == ("marker", "idle_nudge", False, "below_threshold")


async def test_a_poison_runtime_event_goes_to_the_dlq_and_never_stalls_the_consumer(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("providers")
    js = nc.jetstream()
    await js.publish("agent.events.budget.s-poison", b"{not json")
    await js.publish(
        "agent.events.budget.s-poison",
        orjson.dumps(
            {"schema": "reminder-ledger.agent-event/v1", "event_id": "x", "kind": "budget"}
        ),
    )
    client = ReminderClient(nc)
    await client.publish_runtime_event(
        "s-poison",
        "post_compact",
        {"archived_count": 12, "summary": "We fixed the parser."},
        turn=4,
        event_id="good",
    )
    events = await wait_evaluated(nc, provisioned, "s-poison", {"good"})
    assert trail(events) == [("good", "post_compact_recap", True, "fired")]
    codes = []
    for _ in range(100):
        info = await js.stream_info(provisioned.dlq_stream)
        if info.state.messages >= 2:
            break
        await asyncio.sleep(0.1)
    for seq in (1, 2):
        message = await js.get_msg(provisioned.dlq_stream, seq)
        assert message.headers is not None
        assert message.headers["Reminders-Service"] == "providers"
        codes.append(message.headers["Reminders-Error-Code"])
    assert codes == ["undecodable", "invalid_runtime_event"]


def wait_exit(service: object, timeout_s: float = 20.0) -> int:
    process = service.process  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            return int(code)
        time.sleep(0.1)
    raise AssertionError("the providers service did not exit")


async def test_more_than_eight_enabled_rules_refuse_to_start_with_harn_rmd_007(
    provisioned: Settings, services: ServiceRunner, tmp_path: Path
) -> None:
    # SPEC §9.4: rules and plug-ins count, built-ins do not; nine rules are one too many.
    config = tmp_path / "providers.toml"
    config.write_text(
        "\n".join(
            f'[[rules]]\nid = "r{n}"\nwhen = {{ every_n_turns = {n + 1} }}\n'
            f'reminder = {{ body = "rule {n}", ttl_turns = 1 }}\n'
            for n in range(9)
        ),
        encoding="utf-8",
    )
    service = services.start(
        "providers", wait=False, extra_env={"REMINDERS_PROVIDERS_CONFIG": str(config)}
    )
    assert wait_exit(service) != 0
    assert "HARN-RMD-007" in service.log()


async def test_a_plugin_registered_as_an_entry_point_runs_in_the_service(
    nc: Client, provisioned: Settings, services: ServiceRunner, tmp_path: Path
) -> None:
    site = write_plugin_dist(tmp_path / "site")
    config = tmp_path / "providers.toml"
    config.write_text(
        'providers = ["shout", "-idle_nudge", "-grounded_review"]\n'
        '[config.shout]\nword = "careful"\n',
        encoding="utf-8",
    )
    services.start("gateway")
    services.start("projector")
    services.start(
        "providers",
        extra_env={"REMINDERS_PROVIDERS_CONFIG": str(config), "PYTHONPATH": str(site)},
    )
    client = ReminderClient(nc)
    await client.publish_runtime_event(
        "s-plugin", "user_turn", {"text": "please delete everything"}, turn=2, event_id="u-1"
    )
    await client.publish_runtime_event(
        "s-plugin", "worker_lifecycle", {"phase": "started"}, turn=2, event_id="w-1"
    )
    events = await wait_evaluated(nc, provisioned, "s-plugin", {"u-1", "w-1"})
    assert trail(events) == [
        ("u-1", "shout", True, "fired"),
        ("w-1", "shout", False, "malformed_spec"),
    ]
    injected = next(e for e in events if e.kind == "injected")
    body = injected.payload.reminder.body  # type: ignore[union-attr]
    assert body == "careful: the user asked to delete something"
    last = events[-1].payload
    assert isinstance(last, ProviderEvaluated) and (last.error or "").startswith("HARN-RMD-008")
